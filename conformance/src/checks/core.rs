//! The core profile: a claim is realised with a contract-correct `IPAddress`, and released.

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::json;

use crate::harness::*;
use crate::profiles::Profile;
use crate::report::CheckReport;

pub async fn run(sc: &Scenario<'_>) -> Vec<CheckReport> {
    let mut out = Checks::new(Profile::Core);
    let stopped = steps(sc, &mut out).await.err();
    out.finish(stopped.as_deref())
}

async fn steps(sc: &Scenario<'_>, out: &mut Checks) -> Result<(), Failed> {
    let s = sc.suite;
    // A pool of two: claims a and b are realised, c finds it full.
    let pool = sc.pool("pool", 2, 2).await?;
    let mut check = Check::new("core-realised");
    let started = std::time::Instant::now();
    sc.claim("a", &pool.name).await?;
    let a_name = sc.name("a");
    let realised = sc.realised(&a_name, &mut check).await;
    check.timing("realisedSeconds", started.elapsed());
    let (claim_a, address_a) = match realised {
        Ok(pair) => pair,
        Err(e) => {
            out.end(check, Err(e.clone()));
            return Err(format!("core-realised: {e}"));
        }
    };
    check.saw("the realised claim", &claim_a);
    check.saw("its IPAddress", &address_a);
    let message = format!(
        "claim {a_name} realised in {:.1}s with IPAddress {} ({})",
        started.elapsed().as_secs_f64(),
        address_a.name_any(),
        address_a.data["spec"]["address"]
    );
    out.end(check, Ok(message));

    out.end_with("core-address-name", &[&claim_a, &address_a], |_| {
        if address_a.name_any() == a_name && address_a.namespace() == claim_a.namespace() {
            Ok(format!("IPAddress {a_name} in the claim's namespace"))
        } else {
            Err(format!(
                "the IPAddress is {}/{}, the claim {}/{a_name}",
                address_a.namespace().unwrap_or_default(),
                address_a.name_any(),
                claim_a.namespace().unwrap_or_default()
            ))
        }
    });

    out.end_with("core-owner-references", &[&claim_a, &address_a], |_| {
        owners_are_right(sc, &pool, &claim_a, &address_a)
    });

    out.end_with("core-references", &[&claim_a, &address_a], |_| {
        let claim_ref = address_a.data["spec"]["claimRef"]["name"].as_str();
        let pool_ref = &address_a.data["spec"]["poolRef"];
        if claim_ref != Some(a_name.as_str()) {
            return Err(format!("spec.claimRef.name is {claim_ref:?}, not {a_name}"));
        }
        if pool_ref != &claim_a.data["spec"]["poolRef"] {
            return Err(format!(
                "spec.poolRef is {pool_ref}, the claim's is {}",
                claim_a.data["spec"]["poolRef"]
            ));
        }
        Ok(format!("claimRef {a_name}, poolRef {pool_ref}"))
    });

    out.end_with("core-finalizers", &[&claim_a, &address_a], |_| {
        match (claim_a.finalizers(), address_a.finalizers()) {
            ([], _) => Err("the realised claim carries no finalizer".into()),
            (_, []) => Err("the IPAddress carries no finalizer".into()),
            (c, a) => Ok(format!("claim {c:?}, IPAddress {a:?}")),
        }
    });

    // b takes the pool's second address; both must be the pool's.
    let mut check = Check::new("core-address-in-pool");
    let b_name = sc.name("b");
    sc.claim("b", &pool.name).await?;
    let (claim_b, address_b) = match sc.realised(&b_name, &mut check).await {
        Ok(pair) => pair,
        Err(e) => {
            out.end(check, Err(e.clone()));
            return Err(format!("core-address-in-pool: {e}"));
        }
    };
    check.saw("claim a's IPAddress", &address_a);
    check.saw("claim b's IPAddress", &address_b);
    let result = match (in_pool(&pool, &address_a), in_pool(&pool, &address_b)) {
        (Ok(x), Ok(y)) if x != y => pool.expected(x).map(|(prefix, gateway)| {
            format!(
                "{x} and {y}, prefix {prefix}, gateway {}, of pool {:?}",
                gateway.map_or("none".to_string(), |g| g.to_string()),
                pool.cidrs()
            )
        }),
        (Ok(x), Ok(_)) => Err(format!("claims a and b both hold {x}")),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    out.end(check, result);
    let _ = claim_b;

    // c finds the pool full; a claim on another provider's kind must stay untouched. Both are
    // watched through one quiet period.
    let mut check = Check::new("core-address-ref-only-when-allocated");
    let mut foreign = Check::new("core-foreign-claims-untouched");
    let c_name = sc.name("c");
    let f_name = sc.name("foreign");
    sc.claim("c", &pool.name).await?;
    sc.claim_with(
        "foreign",
        json!({"apiGroup": "conformance.example.com", "kind": "ConformanceForeignPool",
               "name": pool.name}),
        None,
        &[],
    )
    .await?;
    let (waiting, untouched) = tokio::join!(
        sc.stays(&c_name, &mut check, |claim| address_ref(claim).map(
            |r| format!("status.addressRef is {r} on a pool with no free address")
        )),
        sc.stays(&f_name, &mut foreign, touched),
    );
    let early: Vec<String> = [&a_name, &b_name]
        .into_iter()
        .filter(|n| sc.was_early(n))
        .cloned()
        .collect();
    let result = match waiting {
        Ok(claim) if early.is_empty() => {
            check.saw("the claim that found the pool full", &claim);
            Ok(format!(
                "claims a and b showed addressRef only once their IPAddress existed; claim c \
                 (pool full) had none for {}s",
                s.quiet().as_secs()
            ))
        }
        Ok(_) => Err(format!(
            "claims {early:?} showed an addressRef naming an IPAddress that did not exist"
        )),
        Err(e) => Err(e),
    };
    out.end(check, result);
    out.end(
        foreign,
        untouched.map(|claim| {
            let mut note = format!(
                "claim on ConformanceForeignPool.conformance.example.com untouched for {}s",
                s.quiet().as_secs()
            );
            if claim.finalizers().is_empty() {
                note += " (no finalizer, no status, no IPAddress)";
            }
            note
        }),
    );

    // Deleting a's IPAddress must neither free nor change a's address: c, still waiting, must
    // not get it.
    let mut check = Check::new("core-address-protected");
    sc.delete(&s.addresses, &address_a.name_any()).await?;
    let waited = sc
        .stays(&c_name, &mut check, |claim| {
            address_ref(claim).map(|r| format!("got addressRef {r}: a's address was freed"))
        })
        .await;
    let result = match waited {
        Err(e) => Err(e),
        Ok(_) => match (
            sc.get(&s.addresses, &address_a.name_any()).await?,
            sc.get(&s.claims, &a_name).await?,
        ) {
            (Some(now), Some(claim)) => {
                check.saw("claim a's IPAddress after its deletion was asked", &now);
                check.saw("claim a", &claim);
                if ip_of(&now) != ip_of(&address_a) {
                    Err(format!(
                        "the IPAddress now holds {:?}, it held {:?}",
                        ip_of(&now),
                        ip_of(&address_a)
                    ))
                } else if address_ref(&claim).as_deref() != Some(&address_a.name_any()) {
                    Err(format!("claim a's addressRef is {:?}", address_ref(&claim)))
                } else if now.uid() == address_a.uid() {
                    Ok(format!(
                        "the IPAddress stays, terminating (deletionTimestamp {}), held by \
                         finalizers {:?}",
                        now.metadata
                            .deletion_timestamp
                            .as_ref()
                            .map(|t| t.0.to_string())
                            .unwrap_or_else(|| "unset".into()),
                        now.finalizers()
                    ))
                } else {
                    Ok("the IPAddress was recreated with the same address".into())
                }
            }
            (None, _) => Err(format!(
                "IPAddress {} is gone {}s after its deletion while claim a lives",
                address_a.name_any(),
                s.quiet().as_secs()
            )),
            (_, None) => Err("claim a disappeared".into()),
        },
    };
    out.end(check, result);

    // Deletion: c (never realised), a and b go, with their IPAddresses; then a new claim is
    // realised on the pool, so the addresses were freed.
    let mut check = Check::new("core-deletion-releases");
    let started = std::time::Instant::now();
    for name in [&c_name, &a_name, &b_name] {
        sc.delete(&s.claims, name).await?;
    }
    let result = async {
        for name in [&c_name, &a_name, &b_name] {
            sc.gone(&s.claims, name, &mut check).await?;
        }
        for name in [&a_name, &b_name] {
            for address in sc.addresses_of(name).await? {
                sc.gone(&s.addresses, &address.name_any(), &mut check)
                    .await?;
            }
        }
        check.timing("releasedSeconds", started.elapsed());
        sc.claim("d", &pool.name).await?;
        let (_, address) = sc.realised(&sc.name("d"), &mut check).await?;
        check.saw("the next claim's IPAddress", &address);
        let ip = in_pool(&pool, &address)?;
        Ok(format!(
            "claims and IPAddresses gone in {:.1}s; the next claim got {ip}",
            started.elapsed().as_secs_f64()
        ))
    }
    .await;
    out.end(check, result);
    Ok(())
}

fn owners_are_right(
    sc: &Scenario<'_>,
    pool: &Pool,
    claim: &DynamicObject,
    address: &DynamicObject,
) -> Result<String, Failed> {
    let owners = address.owner_references();
    let by_claim = owners
        .iter()
        .find(|o| o.kind == "IPAddressClaim" && o.name == claim.name_any())
        .ok_or("no owner reference to the claim")?;
    if by_claim.uid != claim.uid().unwrap_or_default()
        || !by_claim.api_version.starts_with(IPAM_GROUP)
    {
        return Err(format!(
            "the claim's owner reference has uid {} ({}), the claim's is {:?}",
            by_claim.uid,
            by_claim.api_version,
            claim.uid()
        ));
    }
    if by_claim.controller != Some(true) || by_claim.block_owner_deletion != Some(true) {
        return Err(format!(
            "the claim's owner reference has controller {:?}, blockOwnerDeletion {:?}; both \
             must be true",
            by_claim.controller, by_claim.block_owner_deletion
        ));
    }
    let kind = &sc.suite.config.pool.kind;
    let by_pool = owners
        .iter()
        .find(|o| &o.kind == kind && o.name == pool.name)
        .ok_or_else(|| format!("no owner reference to the {kind} {}", pool.name))?;
    if by_pool.uid != pool.uid {
        return Err(format!(
            "the pool's owner reference has uid {}, the pool's is {}",
            by_pool.uid, pool.uid
        ));
    }
    if by_pool.controller == Some(true) || by_pool.block_owner_deletion != Some(true) {
        return Err(format!(
            "the pool's owner reference has controller {:?}, blockOwnerDeletion {:?}; they must \
             be false and true",
            by_pool.controller, by_pool.block_owner_deletion
        ));
    }
    Ok("claim: controller, blockOwnerDeletion; pool: not controller, blockOwnerDeletion".into())
}
