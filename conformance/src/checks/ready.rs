//! The ready-condition profile (CAPI #8424, #10660): `Ready` on every claim, with the standard
//! reasons, `observedGeneration`, the v1beta1 mirror and messages.

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::json;

use crate::harness::*;
use crate::profiles::Profile;
use crate::report::CheckReport;

pub async fn run(sc: &Scenario<'_>) -> Vec<CheckReport> {
    let mut out = Checks::new(Profile::ReadyCondition);
    let stopped = steps(sc, &mut out).await.err();
    out.finish(stopped.as_deref())
}

async fn steps(sc: &Scenario<'_>, out: &mut Checks) -> Result<(), Failed> {
    let mut seen: Vec<DynamicObject> = Vec::new();

    // One address: a takes it (True), b finds the pool full (PoolExhausted).
    let pool = sc.pool("one", 1, 1).await?;
    let mut check = Check::new("ready-true");
    let started = std::time::Instant::now();
    sc.claim("a", &pool.name).await?;
    let a = sc
        .wait_claim(&sc.name("a"), "Ready=True", &mut check, |c| {
            ready_is(c, "True", None) && address_ref(c).is_some()
        })
        .await;
    check.timing("readySeconds", started.elapsed());
    let result = a.map(|claim| {
        check.saw("the realised claim", &claim);
        let message = format!(
            "Ready=True, reason {} ({:.1}s)",
            ready(&claim)
                .and_then(|r| r["reason"].as_str())
                .unwrap_or_default(),
            started.elapsed().as_secs_f64()
        );
        seen.push(claim);
        message
    });
    out.end(check, result);

    out.push(
        failure_reason(
            sc,
            "ready-pool-exhausted",
            "b",
            &pool.name,
            "PoolExhausted",
            &mut seen,
        )
        .await,
    );
    let missing = sc.name("missing");
    out.push(
        failure_reason(
            sc,
            "ready-pool-not-ready",
            "m",
            &missing,
            "PoolNotReady",
            &mut seen,
        )
        .await,
    );

    // An IPAddress with the claim's name already holds an address for another pool: the
    // provider cannot create the claim's.
    let mut check = Check::new("ready-allocation-failed");
    let free = sc.pool("free", 1, 1).await?;
    let elsewhere = sc.pool("elsewhere", 1, 1).await?;
    let x = sc.name("x");
    let mut spec = elsewhere.address_spec(elsewhere.last_address()?)?;
    spec["claimRef"] = json!({"name": x});
    spec["poolRef"] = sc.pool_ref(&elsewhere.name);
    let body = json!({
        "apiVersion": IPAM_VERSION, "kind": "IPAddress",
        "metadata": {"name": x},
        "spec": spec,
    });
    let taken = sc.address(body).await?;
    check.saw(
        "the IPAddress that holds the claim's name, for another pool",
        &taken,
    );
    out.push(failure_reason_seen(sc, check, "x", &free.name, "AllocationFailed", &mut seen).await);

    // The rules every Ready condition seen above must follow.
    let refs: Vec<&DynamicObject> = seen.iter().collect();
    out.end_with("ready-observed-generation", &refs, |_| {
        every(
            &seen,
            "observedGeneration equals metadata.generation",
            |claim| {
                let observed = ready(claim).and_then(|r| r["observedGeneration"].as_i64());
                (observed == claim.metadata.generation)
                    .then_some(())
                    .ok_or_else(|| {
                        format!(
                            "observedGeneration {observed:?}, generation {:?}",
                            claim.metadata.generation
                        )
                    })
            },
        )
    });
    out.end_with("ready-v1beta1-mirror", &refs, |_| {
        every(
            &seen,
            "the v1beta1 mirror has Ready with the same status and reason",
            |claim| {
                let (Some(now), Some(legacy)) = (ready(claim), legacy_ready(claim)) else {
                    return Err("no Ready in status.deprecated.v1beta1.conditions".to_string());
                };
                if now["status"] != legacy["status"] {
                    return Err(format!(
                        "Ready is {} but the mirror says {}",
                        now["status"], legacy["status"]
                    ));
                }
                if now["status"] == "False" && now["reason"] != legacy["reason"] {
                    return Err(format!(
                        "reason {} but the mirror says {}",
                        now["reason"], legacy["reason"]
                    ));
                }
                Ok(())
            },
        )
    });
    out.end_with("ready-messages", &refs, |_| {
        every(
            &seen,
            "every Ready=False has a message",
            |claim| match ready(claim) {
                Some(r) if r["status"] == "False" && message_of(claim).trim().is_empty() => {
                    Err(format!("Ready=False {} has no message", r["reason"]))
                }
                _ => Ok(()),
            },
        )
    });
    if seen.len() < 4 {
        return Err("an earlier ready-condition check failed".into());
    }
    Ok(())
}

/// Creates claim `key` on `pool` and checks `id`: it gets Ready=False with `reason`, and no
/// addressRef. The claim joins `seen`.
async fn failure_reason(
    sc: &Scenario<'_>,
    id: &str,
    key: &str,
    pool: &str,
    reason: &str,
    seen: &mut Vec<DynamicObject>,
) -> CheckReport {
    failure_reason_seen(sc, Check::new(id), key, pool, reason, seen).await
}

/// [`failure_reason`] for a check that already holds evidence.
async fn failure_reason_seen(
    sc: &Scenario<'_>,
    mut check: Check,
    key: &str,
    pool: &str,
    reason: &str,
    seen: &mut Vec<DynamicObject>,
) -> CheckReport {
    let result = async {
        sc.claim(key, pool).await?;
        let started = std::time::Instant::now();
        let claim = sc
            .wait_claim(
                &sc.name(key),
                &format!("Ready=False with reason {reason}"),
                &mut check,
                |c| ready_is(c, "False", Some(reason)),
            )
            .await?;
        check.timing("conditionSeconds", started.elapsed());
        check.saw(&format!("the claim on {pool}"), &claim);
        if let Some(r) = address_ref(&claim) {
            return Err(format!("Ready is False but status.addressRef is {r}"));
        }
        let message = format!("Ready=False {reason}: {}", message_of(&claim));
        seen.push(claim);
        Ok(message)
    }
    .await;
    check.end(result)
}

fn message_of(claim: &DynamicObject) -> String {
    ready(claim)
        .and_then(|r| r["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Passes when `rule` holds for each claim; says which claims break it.
fn every(
    claims: &[DynamicObject],
    what: &str,
    rule: impl Fn(&DynamicObject) -> Result<(), String>,
) -> Result<String, Failed> {
    if claims.is_empty() {
        return Err("no claim with a Ready condition was seen".into());
    }
    let broken: Vec<String> = claims
        .iter()
        .filter_map(|c| rule(c).err().map(|e| format!("{}: {e}", c.name_any())))
        .collect();
    if broken.is_empty() {
        Ok(format!(
            "{what} on {} claims: {}",
            claims.len(),
            claims
                .iter()
                .map(|c| format!(
                    "{} Ready={} {}",
                    c.name_any(),
                    ready(c)
                        .map(|r| r["status"].to_string())
                        .unwrap_or_default(),
                    ready(c)
                        .map(|r| r["reason"].to_string())
                        .unwrap_or_default()
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ))
    } else {
        Err(broken.join("; "))
    }
}
