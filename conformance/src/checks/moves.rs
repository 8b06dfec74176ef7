//! The move profile: what `clusterctl move` leaves on the target cluster, played in the
//! namespace. clusterctl pauses the Cluster, recreates the pool, the claim (without status) and
//! the claim's `IPAddress` (its owner references rewritten to the new objects' UIDs) with POST,
//! then unpauses the Cluster. The provider has never allocated that address: it must adopt the
//! `IPAddress`, not allocate another.

use kube::ResourceExt;
use serde_json::json;

use crate::harness::*;
use crate::profiles::Profile;
use crate::report::CheckReport;

pub async fn run(sc: &Scenario<'_>) -> Vec<CheckReport> {
    let mut out = Checks::new(Profile::Move);
    let stopped = steps(sc, &mut out).await.err();
    out.finish(stopped.as_deref())
}

async fn steps(sc: &Scenario<'_>, out: &mut Checks) -> Result<(), Failed> {
    let s = sc.suite;
    let mut check = Check::new("move-adoption");
    let pool = sc.pool("moved", 3, 3).await?;
    let cluster = sc.cluster("moved", true, false).await?.name_any();
    let claim = sc
        .claim_with("x", sc.pool_ref(&pool.name), Some(&cluster), &[])
        .await?;
    let name = claim.name_any();
    // The moved address is the pool's last, not the one a fresh allocation would pick first.
    let moved_ip = pool.last_address()?;
    let mut spec = pool.address_spec(moved_ip)?;
    spec["claimRef"] = json!({"name": name});
    spec["poolRef"] = claim.data["spec"]["poolRef"].clone();
    let body = json!({
        "apiVersion": IPAM_VERSION, "kind": "IPAddress",
        "metadata": {
            "name": name,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
            "ownerReferences": [
                {"apiVersion": IPAM_VERSION, "kind": "IPAddressClaim", "name": name,
                 "uid": claim.uid(), "controller": true, "blockOwnerDeletion": true},
                {"apiVersion": s.config.pool_api_version(), "kind": s.config.pool.kind,
                 "name": pool.name, "uid": pool.uid, "controller": false,
                 "blockOwnerDeletion": true},
            ],
        },
        "spec": spec,
    });
    let moved = sc.address(body).await?;
    check.saw("the IPAddress as clusterctl move recreates it", &moved);
    sc.merge(&s.clusters, &cluster, json!({"spec": {"paused": false}}))
        .await?;
    let started = std::time::Instant::now();
    let result = async {
        let (claim, address) = sc.realised(&name, &mut check).await?;
        check.timing("adoptedSeconds", started.elapsed());
        check.saw("the claim after the unpause", &claim);
        check.saw("its IPAddress", &address);
        if address.uid() != moved.uid() {
            return Err(format!(
                "the claim's addressRef names IPAddress {} (uid {:?}), not the moved one (uid {:?})",
                address.name_any(),
                address.uid(),
                moved.uid()
            ));
        }
        if ip_of(&address) != Some(moved_ip) {
            return Err(format!(
                "the IPAddress now holds {:?}, the moved one held {moved_ip}",
                ip_of(&address)
            ));
        }
        let others: Vec<String> = sc
            .addresses_of(&name)
            .await?
            .iter()
            .filter(|a| a.uid() != moved.uid())
            .map(|a| a.name_any())
            .collect();
        if !others.is_empty() {
            return Err(format!("another IPAddress was allocated for the claim: {others:?}"));
        }
        Ok(format!(
            "the moved IPAddress ({moved_ip}) adopted {:.1}s after the unpause, unchanged",
            started.elapsed().as_secs_f64()
        ))
    }
    .await;
    let adopted = result.is_ok();
    out.end(check, result);
    if !adopted {
        return Err("move-adoption failed".into());
    }

    // The two other addresses serve two claims; a third finds the pool full.
    let mut check = Check::new("move-address-stays-held");
    let result = async {
        let mut ips = Vec::new();
        for key in ["y1", "y2"] {
            sc.claim(key, &pool.name).await?;
            let (_, address) = sc.realised(&sc.name(key), &mut check).await?;
            check.saw("a new claim's IPAddress", &address);
            ips.push(in_pool(&pool, &address)?);
        }
        if ips.contains(&moved_ip) || ips[0] == ips[1] {
            return Err(format!(
                "the new claims got {ips:?}; the moved claim holds {moved_ip}"
            ));
        }
        sc.claim("y3", &pool.name).await?;
        let waiting = sc
            .stays(&sc.name("y3"), &mut check, |c| {
                address_ref(c).map(|r| format!("status.addressRef is {r} on a full pool"))
            })
            .await?;
        check.saw("the third new claim, on a full pool", &waiting);
        Ok(format!(
            "new claims got {ips:?}; a third got nothing while {moved_ip} stays the moved claim's"
        ))
    }
    .await;
    out.end(check, result);
    Ok(())
}
