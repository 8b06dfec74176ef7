//! Scale out: when one process is not enough, claims are split between `inpool`
//! processes with disjoint `--namespace` or `--watch-filter` settings, all on one pool set. Two
//! processes run as the ServiceAccount on one `GlobalInClusterIPPool` (the pool kind two scopes
//! can share) and one namespaced pool each: every claim is realised by the process whose share
//! it is and by no other, no address is ever held twice, the shared pool's status counts both
//! shares, and each process's claim cache (`inpool_claims_watched`, what its memory grows with)
//! holds its share and nothing of the other's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use inpool::api::{
    GlobalInClusterIPPool, IPAddress, IPAddressClaim, InClusterIPPool, WATCH_FILTER_LABEL,
};
use inpool_testenv::{common, support};
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use common::{
    Inpool, claim, claim_states, create, ensure_applied, global_claim, global_pool,
    one_inpool_test_at_a_time, pool, ready_message, service_account_kubeconfig, unique, wait_for,
};

/// One process's share: its flags, where its claims are and how many.
struct Share {
    name: &'static str,
    flags: Vec<String>,
    namespace: String,
    /// The watch-filter label its claims carry, if the split is by label.
    label: Option<&'static str>,
    /// Claims on the shared global pool.
    global_claims: usize,
    /// Claims on the namespace's own pool (namespace splits only).
    local_claims: usize,
}

impl Share {
    fn claims(&self) -> usize {
        self.global_claims + self.local_claims
    }
}

fn start(share: &Share) -> Inpool {
    let kubeconfig = service_account_kubeconfig(support::env().kubeconfig());
    let flags: Vec<&str> = share.flags.iter().map(String::as_str).collect();
    Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        share.name,
        &kubeconfig,
        &flags,
    )
}

/// Creates a share's claims, 8 at a time: `g-NNNN` on the global pool, `l-NNNN` on the
/// namespace's pool `local`.
async fn create_share(client: &Client, share: &Share, global: &str) {
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &share.namespace);
    let prefix = share.label.unwrap_or("c");
    let objects = (0..share.global_claims)
        .map(|i| global_claim(&format!("{prefix}-g-{i:04}"), global))
        .chain((0..share.local_claims).map(|i| claim(&format!("{prefix}-l-{i:04}"), "local")))
        .map(|mut claim| {
            if let Some(label) = share.label {
                claim
                    .labels_mut()
                    .insert(WATCH_FILTER_LABEL.into(), label.into());
            }
            claim
        });
    futures::stream::iter(objects)
        .for_each_concurrent(8, |claim| {
            let claims = claims.clone();
            async move {
                create(&claims, &claim).await;
            }
        })
        .await;
}

/// Resident memory of a process, MiB (from `/proc`, printed for the record, not asserted).
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// Runs the two processes of `shares` on the global pool `global` (sized for all their claims)
/// and checks what the module docs say.
async fn split(client: &Client, global: &str, shares: [Share; 2]) {
    let mut processes = shares.each_ref().map(start);
    for process in &processes {
        wait_for(
            &format!("inpool {} /readyz 200", process.name),
            Duration::from_secs(60),
            || async { process.get("/readyz").await.filter(|r| r.status == 200) },
        )
        .await;
    }
    let base: Vec<Option<f64>> = processes.iter().map(|p| rss_mib(p.pid())).collect();
    for share in &shares {
        create_share(client, share, global).await;
    }

    for share in &shares {
        let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &share.namespace);
        let mine = |name: &str| share.label.is_none_or(|l| name.starts_with(l));
        wait_for(
            &format!("the {} claims of {} Ready", share.claims(), share.name),
            Duration::from_secs(180),
            || async {
                let states = claim_states(&claims).await;
                let ready = states
                    .iter()
                    .filter(|(name, (status, _))| mine(name) && status == "True")
                    .count();
                (ready == share.claims()).then_some(())
            },
        )
        .await;
    }

    // No address held twice, in the shared pool or anywhere: every live IPAddress of the two
    // namespaces, by pool, distinct; one per claim.
    let mut held: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut total = 0;
    let namespaces: BTreeSet<&String> = shares.iter().map(|s| &s.namespace).collect();
    for namespace in namespaces {
        let addresses: Api<IPAddress> = Api::namespaced(client.clone(), namespace);
        for address in addresses.list(&ListParams::default()).await.unwrap() {
            let pool = (
                address.spec.pool_ref.kind.clone(),
                match address.spec.pool_ref.kind.as_str() {
                    "GlobalInClusterIPPool" => address.spec.pool_ref.name.clone(),
                    _ => format!("{namespace}/{}", address.spec.pool_ref.name),
                },
            );
            assert!(
                held.entry(pool.clone())
                    .or_default()
                    .insert(address.spec.address.clone()),
                "{} is held twice in pool {pool:?} (IPAddress {}/{})",
                address.spec.address,
                namespace,
                address.name_any()
            );
            total += 1;
        }
    }
    let claims: usize = shares.iter().map(Share::claims).sum();
    assert_eq!(total, claims, "one IPAddress per claim: {held:?}");

    // The shared pool's status counts both shares, whichever process wrote it last.
    let globals: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    let on_global: usize = shares.iter().map(|s| s.global_claims).sum();
    wait_for(
        &format!("{global} status.ipAddresses.used = {on_global}"),
        Duration::from_secs(60),
        || async {
            let pool = globals.get(global).await.ok()?;
            let used = pool.status?.ip_addresses?.used;
            (used == on_global as i64).then_some(())
        },
    )
    .await;

    let global_labels =
        format!(r#"{{pool_kind="GlobalInClusterIPPool",pool_namespace="",pool_name="{global}"}}"#);
    for (process, share) in processes.iter_mut().zip(&shares) {
        // Each process realised its share of the shared pool, and nothing of the other's.
        let allocated = process
            .sample(&format!("inpool_allocations_total{global_labels}"))
            .await
            .unwrap_or(0.0);
        assert_eq!(
            allocated, share.global_claims as f64,
            "inpool {} allocated {allocated} addresses of the shared pool; its share is {}",
            share.name, share.global_claims
        );
        // Its claim cache holds its share: what its memory grows with (docs/performance.md).
        let watched = process.sample("inpool_claims_watched").await;
        assert_eq!(
            watched,
            Some(share.claims() as f64),
            "inpool {}'s claim cache",
            share.name
        );
        process.assert_nothing_forbidden();
        process.assert_healthy();
    }
    for ((process, share), base) in processes.iter().zip(&shares).zip(base) {
        inpool_testenv::say(&format!(
            "scale out: inpool {} ({}): {} claims, RSS {:.1} MiB before them, {:.1} MiB after",
            share.name,
            share.flags.join(" "),
            share.claims(),
            base.unwrap_or(f64::NAN),
            rss_mib(process.pid()).unwrap_or(f64::NAN),
        ));
    }
}

/// Creates the namespaced pool `local` of `ns` with `size` addresses of `10.<octet>.0.0/16`.
async fn local_pool(client: &Client, ns: &str, octet: u8, size: usize) {
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), ns);
    let last = format!("10.{octet}.{}.{}", size / 250, size % 250 + 1);
    let range = format!("10.{octet}.0.1-{last}");
    create(&pools, &pool("local", &[&range], 16, None)).await;
}

/// Two processes, `--namespace=A` and `--namespace=B`, three quarters of the claims in A: each
/// realises its namespace's claims on the shared global pool and on its namespace's pool.
#[tokio::test]
async fn two_processes_split_by_namespace_share_one_global_pool_without_sharing_an_address() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let (client, first) = support::env().namespace().await;
    let (_, second) = support::env().namespace().await;
    let global = unique("split-ns");
    let globals: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    create(&globals, &global_pool(&global, &["10.93.0.0/23"], 23)).await;
    local_pool(&client, &first, 91, 100).await;
    local_pool(&client, &second, 92, 100).await;
    let share = |name, namespace: &String, global_claims, local_claims| Share {
        name,
        flags: vec![format!("--namespace={namespace}")],
        namespace: namespace.clone(),
        label: None,
        global_claims,
        local_claims,
    };
    split(
        &client,
        &global,
        [
            share("first", &first, 180, 60),
            share("second", &second, 60, 20),
        ],
    )
    .await;
}

/// Two processes on one namespace, `--watch-filter=blue` and `--watch-filter=green`: each
/// realises the claims labelled for it; a claim with neither label is left to a third process
/// (here: none), untouched.
#[tokio::test]
async fn two_processes_split_by_watch_filter_share_one_global_pool_without_sharing_an_address() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let (client, ns) = support::env().namespace().await;
    let global = unique("split-label");
    let globals: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    create(&globals, &global_pool(&global, &["10.94.0.0/24"], 24)).await;
    let share = |name, label| Share {
        name,
        flags: vec![format!("--watch-filter={label}")],
        namespace: ns.clone(),
        label: Some(label),
        global_claims: if label == "blue" { 120 } else { 40 },
        local_claims: 0,
    };
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&claims, &global_claim("unlabelled", &global)).await;
    split(
        &client,
        &global,
        [share("blue", "blue"), share("green", "green")],
    )
    .await;

    let unlabelled = claims.get("unlabelled").await.unwrap();
    assert!(
        unlabelled.status.is_none() && unlabelled.finalizers().is_empty(),
        "a claim outside both filters was touched: {}",
        ready_message(&unlabelled)
    );
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let none: Vec<IPAddress> = addresses
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.spec.claim_ref.name == "unlabelled")
        .collect();
    assert!(none.is_empty(), "{none:?}");
}
