//! The lifecycle profile: waiting claims are served when space appears, pools that appear later
//! serve their claims, the three ways of pausing, and the Cluster's deletion.

use kube::ResourceExt;
use serde_json::json;

use crate::harness::*;
use crate::profiles::Profile;
use crate::report::CheckReport;

pub async fn run(sc: &Scenario<'_>) -> Vec<CheckReport> {
    let mut out = Checks::new(Profile::Lifecycle);
    let stopped = steps(sc, &mut out).await.err();
    out.finish(stopped.as_deref())
}

fn unrealised(claim: &kube::api::DynamicObject) -> Option<String> {
    address_ref(claim).map(|r| format!("status.addressRef is {r}"))
}

async fn steps(sc: &Scenario<'_>, out: &mut Checks) -> Result<(), Failed> {
    let s = sc.suite;

    // Growth: a holds the pool's one address, b waits; the pool grows to two.
    let mut check = Check::new("lifecycle-growth-serves-waiting");
    let result = async {
        let pool = sc.pool("grow", 1, 2).await?;
        sc.claim("grow-a", &pool.name).await?;
        sc.realised(&sc.name("grow-a"), &mut check).await?;
        sc.claim("grow-b", &pool.name).await?;
        let waiting = sc.stays(&sc.name("grow-b"), &mut check, unrealised).await?;
        check.saw("the claim waiting on the full pool", &waiting);
        let grown = sc.resize(&pool, 2).await?;
        let started = std::time::Instant::now();
        let (_, address) = sc.realised(&sc.name("grow-b"), &mut check).await?;
        check.timing("realisedAfterGrowthSeconds", started.elapsed());
        check.saw("its IPAddress after the pool grew", &address);
        let ip = in_pool(&grown, &address)?;
        Ok(format!(
            "the waiting claim got {ip} {:.1}s after the pool grew",
            started.elapsed().as_secs_f64()
        ))
    }
    .await;
    out.end(check, result);

    // Release: a holds the one address, b waits; a is deleted.
    let mut check = Check::new("lifecycle-release-serves-waiting");
    let result = async {
        let pool = sc.pool("release", 1, 1).await?;
        sc.claim("rel-a", &pool.name).await?;
        let (_, held) = sc.realised(&sc.name("rel-a"), &mut check).await?;
        sc.claim("rel-b", &pool.name).await?;
        sc.stays(&sc.name("rel-b"), &mut check, unrealised).await?;
        sc.delete(&s.claims, &sc.name("rel-a")).await?;
        let started = std::time::Instant::now();
        let (_, address) = sc.realised(&sc.name("rel-b"), &mut check).await?;
        check.timing("realisedAfterReleaseSeconds", started.elapsed());
        check.saw("the waiting claim's IPAddress after the release", &address);
        if ip_of(&address) != ip_of(&held) {
            return Err(format!(
                "the waiting claim got {:?}, the released address was {:?}",
                ip_of(&address),
                ip_of(&held)
            ));
        }
        Ok(format!(
            "the waiting claim got the released {} {:.1}s after the deletion",
            address.data["spec"]["address"].as_str().unwrap_or_default(),
            started.elapsed().as_secs_f64()
        ))
    }
    .await;
    out.end(check, result);

    // A claim on a pool that is created after it.
    let mut check = Check::new("lifecycle-pool-created-later");
    let result = async {
        let later = sc.name("later");
        sc.claim("later-a", &later).await?;
        sc.stays(&sc.name("later-a"), &mut check, unrealised)
            .await?;
        let pool = sc.pool("later", 1, 1).await?;
        let started = std::time::Instant::now();
        let (_, address) = sc.realised(&sc.name("later-a"), &mut check).await?;
        check.timing("realisedAfterPoolSeconds", started.elapsed());
        check.saw("its IPAddress", &address);
        let ip = in_pool(&pool, &address)?;
        Ok(format!(
            "realised with {ip} {:.1}s after the pool was created",
            started.elapsed().as_secs_f64()
        ))
    }
    .await;
    out.end(check, result);

    // The pauses share a pool with room for every claim.
    let pool = sc.pool("pause", 4, 4).await?;

    let mut check = Check::new("lifecycle-pause-cluster-annotation");
    let result = async {
        let cluster = sc.cluster("annotated", false, true).await?;
        let claim = sc.name("ann-a");
        sc.claim_with(
            "ann-a",
            sc.pool_ref(&pool.name),
            Some(&cluster.name_any()),
            &[],
        )
        .await?;
        let frozen = sc.stays(&claim, &mut check, touched).await?;
        check.saw("the claim while its Cluster is annotated paused", &frozen);
        sc.merge(
            &s.clusters,
            &cluster.name_any(),
            json!({"metadata": {"annotations": {PAUSED: null}}}),
        )
        .await?;
        let started = std::time::Instant::now();
        sc.realised(&claim, &mut check).await?;
        check.timing("realisedAfterUnpauseSeconds", started.elapsed());
        Ok(format!(
            "untouched for {}s while paused; realised {:.1}s after the annotation was removed",
            s.quiet().as_secs(),
            started.elapsed().as_secs_f64()
        ))
    }
    .await;
    out.end(check, result);

    let mut check = Check::new("lifecycle-pause-cluster-spec");
    let result = async {
        let cluster = sc.cluster("paused", true, false).await?;
        let cluster = cluster.name_any();
        let claim = sc.name("spec-a");
        sc.claim_with("spec-a", sc.pool_ref(&pool.name), Some(&cluster), &[])
            .await?;
        sc.stays(&claim, &mut check, touched).await?;
        let unpause = json!({"spec": {"paused": false}});
        sc.merge(&s.clusters, &cluster, unpause.clone()).await?;
        let (_, address) = sc.realised(&claim, &mut check).await?;
        // Paused again, the claim's deletion must wait for the unpause.
        sc.merge(&s.clusters, &cluster, json!({"spec": {"paused": true}}))
            .await?;
        sc.delete(&s.claims, &claim).await?;
        let deleting = sc.stays_deleting(&claim, &mut check).await?;
        check.saw("the deleted claim while its Cluster is paused", &deleting);
        sc.merge(&s.clusters, &cluster, unpause).await?;
        let started = std::time::Instant::now();
        sc.gone(&s.claims, &claim, &mut check).await?;
        sc.gone(&s.addresses, &address.name_any(), &mut check)
            .await?;
        check.timing("releasedAfterUnpauseSeconds", started.elapsed());
        Ok(format!(
            "untouched while paused, realised once unpaused; deleted while paused again, it kept \
             its IPAddress for {}s and was released {:.1}s after the unpause",
            s.quiet().as_secs(),
            started.elapsed().as_secs_f64()
        ))
    }
    .await;
    out.end(check, result);

    let mut check = Check::new("lifecycle-pause-claim-annotation");
    let result = async {
        let claim = sc.name("self-a");
        sc.claim_with("self-a", sc.pool_ref(&pool.name), None, &[(PAUSED, "")])
            .await?;
        let frozen = sc.stays(&claim, &mut check, touched).await?;
        check.saw("the annotated claim", &frozen);
        sc.merge(
            &s.claims,
            &claim,
            json!({"metadata": {"annotations": {PAUSED: null}}}),
        )
        .await?;
        let started = std::time::Instant::now();
        sc.realised(&claim, &mut check).await?;
        Ok(format!(
            "untouched for {}s while annotated; realised {:.1}s after the annotation was removed",
            s.quiet().as_secs(),
            started.elapsed().as_secs_f64()
        ))
    }
    .await;
    out.end(check, result);

    let mut check = Check::new("lifecycle-cluster-deleted");
    let result = async {
        let cluster = sc.cluster("doomed", false, false).await?.name_any();
        let claim = sc.name("doomed-a");
        sc.claim_with("doomed-a", sc.pool_ref(&pool.name), Some(&cluster), &[])
            .await?;
        let (_, address) = sc.realised(&claim, &mut check).await?;
        sc.delete(&s.clusters, &cluster).await?;
        sc.gone(&s.clusters, &cluster, &mut check)
            .await
            .map_err(|e| format!("the Cluster could not be deleted: {e}"))?;
        sc.delete(&s.claims, &claim).await?;
        let started = std::time::Instant::now();
        sc.gone(&s.claims, &claim, &mut check).await?;
        sc.gone(&s.addresses, &address.name_any(), &mut check)
            .await?;
        Ok(format!(
            "with its Cluster gone, the claim and its IPAddress went {:.1}s after the claim's \
             deletion",
            started.elapsed().as_secs_f64()
        ))
    }
    .await;
    out.end(check, result);
    Ok(())
}
