//! Pools carved from a parent under real faults, at every step of their life: four IP pools and
//! a prefix pool carve /28s out of one prefix pool while the provider is SIGKILLed; claims arrive
//! on all of them while
//! it is killed twice more; one pool grows by a second sub-prefix while the control plane
//! restarts; one is deleted with its addresses out, its claims released around another SIGKILL.
//! After each step the suite's invariant checker runs, extended to carved pools
//! (`common::invariants`): an address inside a sub-prefix held for a pool is that pool's (or of a
//! pool carved from it in turn), never another's; a carved pool hands out nothing outside what it
//! holds now; no sub-prefix stays held for a pool that is gone; and the checks of every other
//! test (no address twice, none lost, no stray reservation, counts, no drift, no panic).

use std::collections::BTreeSet;

use common::{
    carved_pool, carved_spec, merge_patch, parent_prefix_pool, prefix_claim, typed, wait_gone,
};
use inpool::api::InClusterPrefixPool;

use super::*;

/// The pools carved from the parent, `c0`…, each with `CLAIMS` claims `m<i>-0000`….
const CHILDREN: usize = 4;
const CLAIMS: usize = 10;

#[tokio::test]
async fn carved_pools_lose_and_duplicate_nothing_under_sigkills_and_a_restart_at_every_step() {
    let mut scenario = Scenario::start().await;
    let (kubeconfig, ns) = (scenario.kubeconfig.clone(), scenario.ns.clone());
    let (client, pools, claims) = (
        scenario.client.clone(),
        scenario.pools.clone(),
        scenario.claims.clone(),
    );
    let moments = &mut scenario.moments;
    let parents: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), &ns);
    // Sixteen /28s of 13 addresses each (less the network, broadcast and gateway addresses).
    create(
        &parents,
        &parent_prefix_pool("parent", &["10.12.0.0/24"], 28),
    )
    .await;
    let mut provider = start_provider(&kubeconfig, &ns, "p0");
    let mut kills = 0;
    let mut kill = |provider: &mut Inpool| {
        provider.kill();
        kills += 1;
        *provider = start_provider(&kubeconfig, &ns, &format!("p{kills}"));
    };

    // 1. The pools carve their sub-prefixes, and so does a prefix pool `d` that splits its /28
    // into /30s; the provider is killed meanwhile.
    for i in 0..CHILDREN {
        create(&pools, &carved_pool(&format!("c{i}"), "parent", 1)).await;
    }
    let mut prefix_child: InClusterPrefixPool = typed(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterPrefixPool",
        "metadata": {"name": "d"}, "spec": carved_spec("parent", 1),
    }));
    prefix_child.spec.allocation_prefix_length = Some(30);
    create(&parents, &prefix_child).await;
    tokio::time::sleep(moments.millis(50, 600)).await;
    kill(&mut provider);

    // 2. Claims on every pool at once; killed twice mid-burst.
    let bursts: Vec<_> = (0..CHILDREN)
        .map(|i| {
            create_claims_in_background(&claims, &format!("c{i}"), &format!("m{i}"), 0..CLAIMS)
        })
        .collect();
    for _ in 0..2 {
        tokio::time::sleep(moments.millis(200, 1200)).await;
        kill(&mut provider);
    }
    // `d` hands out 3 of its 4 /30s: never the one that starts its /28.
    for i in 0..3 {
        create(&claims, &prefix_claim(&format!("s-{i}"), "d")).await;
    }
    for burst in bursts {
        burst.await.unwrap();
    }
    // The namespace's claims count the pools' claims on the parent too.
    wait_realised(&claims, CHILDREN * CLAIMS + 3 + CHILDREN + 1, 0).await;
    assert_invariants(&client, &ns, &mut [&mut provider]).await;
    let carved_d = parents
        .get("d")
        .await
        .unwrap()
        .status
        .unwrap()
        .carved_prefixes;
    let start = carved_d.as_deref().unwrap()[0]
        .prefix
        .split('/')
        .next()
        .unwrap()
        .to_string();
    for i in 0..3 {
        let held = Api::<IPAddress>::namespaced(client.clone(), &ns)
            .get(&format!("s-{i}"))
            .await
            .unwrap();
        assert_eq!(held.spec.prefix, 30);
        assert_ne!(held.spec.address, start, "the /30 that starts d's /28");
    }

    // 3. c0 grows by a second sub-prefix and takes 5 claims more than its first holds; the
    // control plane restarts meanwhile.
    merge_patch(&pools, "c0", json!({"spec": carved_spec("parent", 2)})).await;
    let more = create_claims_in_background(&claims, "c0", "n0", 0..5);
    tokio::time::sleep(moments.millis(100, 800)).await;
    restart_plane().await;
    more.await.unwrap();
    // After a restart the old client's connections are gone: a new client.
    let client = self::client(&kubeconfig).await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    wait_realised(&claims, CHILDREN * CLAIMS + 5 + 3 + CHILDREN + 2, 0).await;
    assert_invariants(&client, &ns, &mut [&mut provider]).await;

    // 4. c3 is deleted with its addresses out; its claims are released around a SIGKILL. It goes,
    // and its sub-prefix with it.
    pools.delete("c3", &DeleteParams::default()).await.unwrap();
    let names = (0..CLAIMS).map(|i| format!("m3-{i:04}")).collect();
    let releases = delete_claims_in_background(&claims, names);
    tokio::time::sleep(moments.millis(100, 400)).await;
    kill(&mut provider);
    let fault_ended = Instant::now();
    releases.await.unwrap();
    wait_gone(&pools, "c3", Duration::from_secs(60)).await;
    wait_gone(&claims, "icipp-c3-0", Duration::from_secs(60)).await;
    let recovered = assert_invariants(&client, &ns, &mut [&mut provider]).await - fault_ended;
    let parent_holds: BTreeSet<String> = Api::<IPAddress>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|a| a.spec.pool_ref.name == "parent")
        .map(|a| a.name_any())
        .collect();
    assert_eq!(
        parent_holds,
        [
            "icipp-c0-0",
            "icipp-c0-1",
            "icipp-c1-0",
            "icipp-c2-0",
            "icpp-d-0"
        ]
        .map(String::from)
        .into(),
        "the parent holds the sub-prefixes of the pools that live, and no other"
    );
    println!(
        "FAULTS carved: {} pools carved from one parent, {} claims, a pool grown and one deleted, {kills} SIGKILLs and 1 control-plane restart; every invariant held {:.1}s after the last fault",
        CHILDREN + 1,
        CHILDREN * CLAIMS + 5 + 3,
        recovered.as_secs_f64()
    );
}
