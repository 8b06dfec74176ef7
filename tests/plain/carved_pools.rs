//! Pools carved from a parent (`spec.parentPool`) on the real API server, served by an in-process
//! controller: an `InClusterIPPool` names an `InClusterPrefixPool` and a number of sub-prefixes,
//! inpool claims them on the parent, and each one realised becomes a subnet of the pool. Fifty
//! children of uneven sizes at once, a parent too small and then grown, a child grown, a child
//! deleted with addresses out, and a claim on the parent deleted by hand while the child still
//! uses its sub-prefix; and the CRD's rules for the new fields. A parent's status counts are
//! awaited only where few pools change at once: with many, status writes are paced (see
//! `controllers::pools::pacing`). Every test ends with the audit's drift guard
//! (`common::RunningController`).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use inpool::api::reservation::IPAddressReservation;
use inpool::api::{
    CarvedPrefix, IPAddress, IPAddressClaim, IPPool, InClusterIPPool, InClusterPrefixPool,
};
use inpool_testenv::common::{
    carved_pool as child, carved_spec as child_spec, parent_prefix_pool as parent, *,
};
use inpool_testenv::support;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

/// A prefix pool carved from `parent`, handing out sub-prefixes of `length`.
fn prefix_child(name: &str, parent: &str, length: i64) -> InClusterPrefixPool {
    let mut spec = child_spec(parent, 1);
    spec["allocationPrefixLength"] = json!(length);
    typed(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterPrefixPool",
        "metadata": {"name": name}, "spec": spec,
    }))
}

fn ready<P: IPPool>(pool: &P) -> Option<(String, String)> {
    pool.pool_status()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.message.clone()))
}

/// Waits until child `name` lists `n` carved sub-prefixes and is `Ready`; returns them.
async fn carved<P: IPPool>(pools: &Api<P>, name: &str, n: usize) -> Vec<CarvedPrefix> {
    let seen = std::sync::Mutex::new(None);
    wait_explained(
        &format!("pool {name} to carve {n} sub-prefixes and be Ready"),
        Duration::from_secs(90),
        || async {
            let pool = pools.get(name).await.ok()?;
            *seen.lock().unwrap() = pool.pool_status().cloned();
            let carved = pool.pool_status()?.carved_prefixes.clone()?;
            let ready = ready(&pool).is_some_and(|(status, _)| status == "True");
            (carved.len() == n && ready).then_some(carved)
        },
        || format!(": its status was {:?}", seen.lock().unwrap()),
    )
    .await
}

/// Creates child `name` of `parent` with `n` sub-prefixes and waits until it has them.
async fn carve_child(
    pools: &Api<InClusterIPPool>,
    name: &str,
    parent: &str,
    n: usize,
) -> Vec<CarvedPrefix> {
    create(pools, &child(name, parent, n as i64)).await;
    carved(pools, name, n).await
}

/// Waits until child `name`'s Ready condition is False with a message containing `text`.
async fn not_ready_with<P: IPPool>(pools: &Api<P>, name: &str, text: &str) -> String {
    wait_for(
        &format!("pool {name} to be not Ready: {text}"),
        Duration::from_secs(60),
        || async {
            let (status, message) = ready(&pools.get(name).await.ok()?)?;
            (status == "False" && message.contains(text)).then_some(message)
        },
    )
    .await
}

async fn used(parents: &Api<InClusterPrefixPool>, name: &str) -> Option<i64> {
    Some(parents.get(name).await.ok()?.status?.ip_addresses?.used)
}

async fn wait_used(parents: &Api<InClusterPrefixPool>, name: &str, want: i64) {
    let seen = std::sync::Mutex::new(None);
    wait_explained(
        &format!("parent {name} to count {want} sub-prefixes used"),
        Duration::from_secs(60),
        || async {
            let used = used(parents, name).await;
            *seen.lock().unwrap() = used;
            (used == Some(want)).then_some(())
        },
        || format!("its status counted {:?}", seen.lock().unwrap()),
    )
    .await;
}

/// `claim`, created and realised: its `IPAddress`.
async fn realise(client: &kube::Client, ns: &str, claim: IPAddressClaim) -> IPAddress {
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    create(&claims, &claim).await;
    let name = claim.metadata.name.as_deref().unwrap();
    wait_reason(&claims, name, "AddressAllocated").await;
    Api::<IPAddress>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
}

fn inside(address: &IPAddress, carved: &CarvedPrefix) -> bool {
    let ip: IpAddr = address.spec.address.parse().unwrap();
    let subnet: inpool::allocator::Subnet =
        inpool::allocator::parse_network(&carved.prefix).unwrap();
    subnet.contains(ip) && address.spec.prefix == i32::from(subnet.prefix())
}

/// A namespace served by an in-process controller, with a parent `InClusterPrefixPool` `name`
/// of `prefixes` split by `length`. Returns the client, the namespace, the APIs of its prefix
/// pools, IP pools and claims, and the controller (which serves while it is kept).
async fn bed(
    name: &str,
    prefixes: &[&str],
    length: i64,
) -> (
    kube::Client,
    String,
    Api<InClusterPrefixPool>,
    Api<InClusterIPPool>,
    Api<IPAddressClaim>,
    RunningController,
) {
    let (client, ns) = support::env().namespace().await;
    let controller = start_controller(&client, &ns);
    let parents: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), &ns);
    create(&parents, &parent(name, prefixes, length)).await;
    let pools = Api::namespaced(client.clone(), &ns);
    let claims = Api::namespaced(client.clone(), &ns);
    (client, ns, parents, pools, claims, controller)
}

#[tokio::test]
async fn fifty_children_of_uneven_sizes_are_carved_disjoint_and_ready() {
    let (client, ns, _, pools, _, _controller) = bed("nodes", &["10.20.0.0/16"], 26).await;
    let size = |i: usize| 1 + i % 3;
    for i in 0..50 {
        create(&pools, &child(&format!("c{i:02}"), "nodes", size(i) as i64)).await;
    }
    let mut all = BTreeSet::new();
    for i in 0..50 {
        let name = format!("c{i:02}");
        for carved in carved(&pools, &name, size(i)).await {
            assert!(carved.prefix.starts_with("10.20.") && carved.prefix.ends_with("/26"));
            assert!(
                all.insert(carved.prefix.clone()),
                "{} carved twice",
                carved.prefix
            );
        }
    }
    let total: usize = (0..50).map(size).sum();
    assert_eq!(all.len(), total);
    // The parent holds exactly those: one IPAddress each. (Its status count is not awaited: with
    // fifty pools changing at once, status writes are paced and may lag by minutes.)
    let held: BTreeSet<String> = Api::<IPAddress>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.spec.pool_ref.name == "nodes")
        .map(|a| format!("{}/{}", a.spec.address, a.spec.prefix))
        .collect();
    assert_eq!(held, all);

    // A claim on a child gets an address of its sub-prefix, with its length and the stated
    // gateway: the first address after the network address.
    let first = carved(&pools, "c00", 1).await.remove(0);
    // Its Ready condition names its parent and sub-prefix.
    let (_, message) = ready(&pools.get("c00").await.unwrap()).unwrap();
    assert!(
        message.ends_with(&format!(
            "; carved from InClusterPrefixPool {ns}/nodes: {}",
            first.prefix
        )),
        "{message}"
    );
    let address = realise(&client, &ns, claim("m0", "c00")).await;
    assert!(inside(&address, &first), "{address:?} in {first:?}");
    let network = first.prefix.split('/').next().unwrap();
    let gateway: std::net::Ipv4Addr = network.parse().unwrap();
    let gateway = std::net::Ipv4Addr::from(u32::from(gateway) + 1).to_string();
    assert_eq!(address.spec.gateway.as_deref(), Some(gateway.as_str()));
    let handed_out = address.spec.address.as_str();
    assert!(
        ![network, gateway.as_str()].contains(&handed_out),
        "neither the network nor the gateway address is handed out: {handed_out}"
    );
}

#[tokio::test]
async fn a_parent_too_small_serves_the_children_that_fit_and_the_rest_once_it_grows() {
    let (client, ns, parents, pools, claims, _controller) =
        bed("small", &["10.21.0.0/24"], 26).await;
    carve_child(&pools, "a", "small", 2).await;
    carve_child(&pools, "b", "small", 2).await;
    create(&pools, &child("c", "small", 1)).await;
    let message = not_ready_with(&pools, "c", "has no free sub-prefix").await;
    assert!(
        message.starts_with(&format!(
            "InClusterIPPool {ns}/c has no subnet yet: it waits for a sub-prefix of InClusterPrefixPool {ns}/small:"
        )),
        "{message}"
    );
    // A claim on the child waits, and says for what.
    create(&claims, &claim("early", "c")).await;
    let waiting = wait_reason(&claims, "early", "PoolNotReady").await;
    assert!(
        ready_message(&waiting).contains("has no subnet yet"),
        "{}",
        ready_message(&waiting)
    );
    // The parent grows: the last child gets its sub-prefix, and its claim is served.
    merge_patch(
        &parents,
        "small",
        json!({"spec": {"prefixes": ["10.21.0.0/23"]}}),
    )
    .await;
    let last = carved(&pools, "c", 1).await.remove(0);
    wait_reason(&claims, "early", "AddressAllocated").await;
    let address = Api::<IPAddress>::namespaced(client.clone(), &ns)
        .get("early")
        .await
        .unwrap();
    assert!(inside(&address, &last));
}

#[tokio::test]
async fn a_child_grows_by_a_second_sub_prefix_and_keeps_its_addresses() {
    let (client, ns, parents, pools, claims, _controller) =
        bed("rack", &["10.22.0.0/24"], 28).await;
    let first = carve_child(&pools, "g", "rack", 1).await.remove(0);
    // A /28 hands out 13 addresses: 16 less the network, broadcast and gateway addresses.
    create_claims(&claims, "g", 14).await;
    // The namespace's claims count the pool's own claim on the parent too.
    wait_counts(&claims, 13 + 1, 1).await;
    let before = addresses_by_claim(&client, &ns).await;
    merge_patch(&pools, "g", json!({"spec": child_spec("rack", 2)})).await;
    let grown = carved(&pools, "g", 2).await;
    assert_eq!(grown[0], first, "the first sub-prefix stays");
    wait_counts(&claims, 14 + 2, 0).await;
    let after = addresses_by_claim(&client, &ns).await;
    for (claim, address) in &before {
        assert_eq!(after.get(claim), Some(address), "{claim} keeps its address");
    }
    // `kubectl inpool pools` shows the tree: the child names its parent, the parent counts its
    // sub-prefixes (once its status says so).
    wait_used(&parents, "rack", 2).await;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-inpool"))
        .arg("--kubeconfig")
        .arg(support::env().kubeconfig())
        .args(["pools", "-n", &ns, "-o", "json"])
        .output()
        .expect("running kubectl-inpool");
    let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
    let row = |name: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no row for {name}: {rows}"))
    };
    assert_eq!(row("g")["parent"], "InClusterPrefixPool/rack");
    assert_eq!(row("g")["family"], "IPv4 (2 subnets)");
    assert_eq!(row("rack")["family"], "IPv4/28");
    assert_eq!(row("rack")["used"], 2);
    let second = inpool::allocator::parse_network(&grown[1].prefix).unwrap();
    let new: Vec<&String> = after
        .iter()
        .filter(|(c, _)| !before.contains_key(*c) && !c.starts_with("icipp-"))
        .map(|(_, a)| a)
        .collect();
    assert_eq!(new.len(), 1);
    assert!(
        second.contains(new[0].parse().unwrap()),
        "{new:?} in {second}"
    );
    // `explain` and `who-has` name the carved subnet an address lies in, and `who-has` the
    // parent's claim that holds the whole subnet.
    let (new_claim, new_address) = after
        .iter()
        .find(|(c, a)| !before.contains_key(*c) && a == &new[0])
        .unwrap();
    let carved_second = format!("status.carvedPrefixes[1] ({second}, gateway ");
    let why = inpool::inspect::why(&client, &ns, new_claim).await.unwrap();
    assert!(
        why.subnet
            .as_deref()
            .is_some_and(|s| s.starts_with(&carved_second)),
        "{why:?}"
    );
    let holders = inpool::inspect::who_has(&client, new_address.parse().unwrap())
        .await
        .unwrap();
    let holder = |claim: &str| holders.iter().find(|h| h.claim == claim);
    assert!(
        holder(new_claim)
            .and_then(|h| h.subnet.as_deref())
            .is_some_and(|s| s.starts_with(&carved_second)),
        "{holders:?}"
    );
    assert!(holder("icipp-g-1").is_some(), "{holders:?}");
}

#[tokio::test]
async fn a_child_deleted_with_addresses_out_waits_then_frees_its_sub_prefix() {
    let (client, ns, parents, pools, claims, _controller) =
        bed("zone", &["10.23.0.0/24"], 26).await;
    carve_child(&pools, "d", "zone", 1).await;
    realise(&client, &ns, claim("held", "d")).await;
    wait_used(&parents, "zone", 1).await;

    pools.delete("d", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let deleting = pools
        .get("d")
        .await
        .expect("held by ProtectPool while an address is out");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(
        used(&parents, "zone").await,
        Some(1),
        "the sub-prefix stays held"
    );

    claims.delete("held", &Default::default()).await.unwrap();
    wait_gone(&pools, "d", Duration::from_secs(60)).await;
    wait_gone(&claims, "icipp-d-0", Duration::from_secs(60)).await;
    wait_used(&parents, "zone", 0).await;
}

#[tokio::test]
async fn a_claim_on_the_parent_deleted_by_hand_holds_its_sub_prefix_while_the_child_uses_it() {
    let (client, ns, parents, pools, claims, _controller) = bed("row", &["10.24.0.0/24"], 26).await;
    let first = carve_child(&pools, "h", "row", 1).await.remove(0);
    realise(&client, &ns, claim("in-use", "h")).await;

    claims
        .delete("icipp-h-0", &DeleteParams::default())
        .await
        .unwrap();
    // The child stops handing out the sub-prefix at once ...
    not_ready_with(&pools, "h", "has no subnet yet").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // ... but the claim on the parent, and so the sub-prefix, stay while an address is out.
    let kept = claims
        .get("icipp-h-0")
        .await
        .expect("kept while the child uses it");
    assert!(kept.metadata.deletion_timestamp.is_some());
    assert_eq!(used(&parents, "row").await, Some(1));

    claims
        .delete("in-use", &DeleteParams::default())
        .await
        .unwrap();
    // Released, and carved again by a new claim of the same name.
    let again = carved(&pools, "h", 1).await.remove(0);
    assert_eq!(again.claim_name, first.claim_name);
    wait_used(&parents, "row", 1).await;
}

#[tokio::test]
async fn an_ipv6_chain_carves_a_56_from_a_48_then_a_64_from_the_56() {
    let (client, ns, parents, pools, claims, _controller) =
        bed("region", &["fd00:10::/48"], 56).await;
    // A prefix pool carved from the /48: a /56, split into /64s.
    create(&parents, &prefix_child("site", "region", 64)).await;
    let site = carved(&parents, "site", 1).await.remove(0);
    let site_net = inpool::allocator::parse_network(&site.prefix).unwrap();
    assert_eq!(site_net.prefix(), 56);
    assert!(
        inpool::allocator::parse_network("fd00:10::/48")
            .unwrap()
            .range()
            .contains_range(site_net.range()),
        "{site:?}"
    );
    assert_eq!(site.claim_name, "icpp-site-0");
    // An IP pool carved from the /56: a /64, with the stated gateway. Neither pool hands out
    // what starts its carved sub-prefix, whose address names the parent's hold: the /56's first
    // /64 is never handed out, nor the /64's first address, not even with
    // allocateReservedIPAddresses.
    let mut rack = child("rack", "site", 1);
    rack.spec.allocate_reserved_ip_addresses = Some(true);
    create(&pools, &rack).await;
    let rack = carved(&pools, "rack", 1).await.remove(0);
    let rack_net = inpool::allocator::parse_network(&rack.prefix).unwrap();
    assert_eq!(rack_net.prefix(), 64);
    assert!(
        site_net.contains(rack_net.network()) && rack_net.network() != site_net.network(),
        "{rack:?}: the second /64 of {site:?}"
    );
    let host = realise(&client, &ns, claim("host", "rack")).await;
    assert!(inside(&host, &rack), "{host:?} in {rack:?}");
    let gateway = inpool::controllers::carved_gateway(rack_net).unwrap();
    assert_eq!(host.spec.gateway, Some(gateway.to_string()));
    assert!(
        ![rack_net.network().to_string(), gateway.to_string()].contains(&host.spec.address),
        "{host:?}"
    );
    // Every hold of the chain has its own address, so its own reservation.
    let reserved: Vec<String> = Api::<IPAddressReservation>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.spec.claim_namespace == ns)
        .map(|r| r.spec.address)
        .collect();
    let distinct: BTreeSet<&String> = reserved.iter().collect();
    assert_eq!(reserved.len(), 3, "{reserved:?}");
    assert_eq!(distinct.len(), 3, "{reserved:?}");
    // A claim on the middle pool gets a /64 of its /56, never the one the IP pool holds.
    let delegated = realise(&client, &ns, prefix_claim("delegated", "site")).await;
    assert!(
        site_net.contains(delegated.spec.address.parse().unwrap()),
        "{delegated:?} in {site:?}"
    );
    assert_eq!(delegated.spec.prefix, 64);
    assert_ne!(
        delegated.spec.address,
        rack_net.network().to_string(),
        "the /64 carved for rack is not handed out again"
    );

    // A pool whose sub-prefixes would be shorter than what its parent carves says so.
    create(&parents, &prefix_child("wide", "region", 52)).await;
    let message = not_ready_with(
        &parents,
        "wide",
        "longer than spec.allocationPrefixLength (52)",
    )
    .await;
    assert!(message.contains("status.carvedPrefixes[0]"), "{message}");

    // Releasing goes up the chain: the IP pool's address, then its /64, then the /56.
    pools
        .delete("rack", &DeleteParams::default())
        .await
        .unwrap();
    delete_and_wait_gone(&claims, "host").await;
    wait_gone(&pools, "rack", Duration::from_secs(60)).await;
    wait_gone(&claims, "icipp-rack-0", Duration::from_secs(60)).await;
    delete_and_wait_gone(&claims, "delegated").await;
    delete_and_wait_gone(&parents, "site").await;
    wait_gone(&claims, "icpp-site-0", Duration::from_secs(60)).await;
}

#[tokio::test]
async fn the_crd_takes_a_parent_instead_of_addresses_and_refuses_what_cannot_work() {
    let (client, ns) = support::env().namespace().await;
    let untyped = |kind: &str| {
        let resource = ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "ipam.cluster.x-k8s.io",
            "v1alpha2",
            kind,
        ));
        (resource, kind.to_string())
    };
    let (namespaced, _) = untyped("InClusterIPPool");
    let pools: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &namespaced);
    let object = |name: &str, kind: &str, spec: Value| -> DynamicObject {
        typed(json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": kind,
            "metadata": {"name": name}, "spec": spec,
        }))
    };
    let accepted = pools
        .create(
            &PostParams::default(),
            &object("ok", "InClusterIPPool", child_spec("p", 3)),
        )
        .await
        .expect("a pool with a parent and no addresses");
    assert_eq!(accepted.data["spec"]["parentPool"]["subPrefixes"], 3);
    let defaulted = pools
        .create(
            &PostParams::default(),
            &object("one", "InClusterIPPool", json!({"parentPool": {"poolRef": {
                "apiGroup": "ipam.cluster.x-k8s.io", "kind": "GlobalInClusterPrefixPool", "name": "p"}}})),
        )
        .await
        .unwrap();
    assert_eq!(defaulted.data["spec"]["parentPool"]["subPrefixes"], 1);

    let mut with_namespace = child_spec("p", 1);
    with_namespace["parentPool"]["claimNamespace"] = json!("elsewhere");
    let mut gateway_alone = child_spec("p", 1);
    gateway_alone["gateway"] = json!("10.0.0.1");
    let mut not_a_prefix_pool = child_spec("p", 1);
    not_a_prefix_pool["parentPool"]["poolRef"]["kind"] = json!("InClusterIPPool");
    let refused = [
        (
            json!({"prefix": 24}),
            "spec.addresses: Required value: required unless spec.parentPool is set",
        ),
        (
            json!({"addresses": ["10.0.0.1"]}),
            "spec.prefix: Required value: required unless spec.parentPool is set",
        ),
        (gateway_alone, "spec.gateway: Invalid value"),
        (with_namespace, "claimNamespace elsewhere is set"),
        (
            not_a_prefix_pool,
            "spec.parentPool.poolRef.kind: Unsupported value",
        ),
        (child_spec("p", 17), "spec.parentPool.subPrefixes"),
    ];
    for (i, (spec, message)) in refused.into_iter().enumerate() {
        let error = pools
            .create(
                &PostParams::default(),
                &object(&format!("bad-{i}"), "InClusterIPPool", spec.clone()),
            )
            .await
            .expect_err(&format!("{spec} must be refused"));
        assert!(
            refusal(&error).contains(&refusal(&message)),
            "{spec}: wanted {message:?} in {error}"
        );
    }
    // A prefix pool takes a parent instead of prefixes, and needs one or the other.
    let (prefix_kind, _) = untyped("InClusterPrefixPool");
    let prefix_pools: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &prefix_kind);
    prefix_pools
        .create(
            &PostParams::default(),
            &object("carved", "InClusterPrefixPool", child_spec("p", 2)),
        )
        .await
        .expect("a prefix pool with a parent and no prefixes");
    let error = prefix_pools
        .create(
            &PostParams::default(),
            &object(
                "neither",
                "InClusterPrefixPool",
                json!({"allocationPrefixLength": 64}),
            ),
        )
        .await
        .expect_err("a prefix pool with neither prefixes nor a parent");
    let wanted = "spec.prefixes: Required value: required unless spec.parentPool is set";
    assert!(refusal(&error).contains(&refusal(&wanted)), "{error}");
    // A global pool of either shape names the namespace of its claims on the parent.
    for kind in ["GlobalInClusterIPPool", "GlobalInClusterPrefixPool"] {
        let (global, _) = untyped(kind);
        let globals: Api<DynamicObject> = Api::all_with(client.clone(), &global);
        let error = globals
            .create(
                &PostParams::default(),
                &object(&unique("carved"), kind, child_spec("p", 1)),
            )
            .await
            .expect_err("a global pool without claimNamespace");
        assert!(
            error
                .to_string()
                .contains(&format!("claimNamespace is required on a {kind}")),
            "{error}"
        );
    }
}
