//! `kubectl inpool` (the `kubectl-inpool` binary) against the real control plane, with inpool
//! running: pools, claims with their queue places, who holds an address, why a claim waits; the
//! same data as JSON and as YAML; `--version`.

use std::process::Command;

use inpool::api::{Cluster, IPAddressClaim, InClusterIPPool};
use inpool_testenv::{common, support};
use kube::api::Api;
use serde_json::Value;

use common::*;

/// Runs the plugin with this binary's control plane; its stdout, or a panic with its stderr.
fn plugin(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_kubectl-inpool"))
        .arg("--kubeconfig")
        .arg(support::env().kubeconfig())
        .args(args)
        .output()
        .expect("running kubectl-inpool");
    assert!(
        output.status.success(),
        "kubectl-inpool {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn json(args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    serde_json::from_str(&plugin(&args)).unwrap()
}

/// `-o yaml` prints the data `-o json` prints (a YAML writer that left a string such as `True`
/// or `10.0.0.1` unquoted, or dropped a field, reads back differently).
fn assert_yaml_is_json(args: &[&str]) {
    let mut yaml_args = args.to_vec();
    yaml_args.extend(["-o", "yaml"]);
    let text = plugin(&yaml_args);
    // JSON is YAML too: block style shows it is not JSON printed under another name.
    assert!(
        !text.trim_start().starts_with(['[', '{']),
        "{yaml_args:?} printed flow style:\n{text}"
    );
    let yaml: Value = serde_saphyr::from_str(&text)
        .unwrap_or_else(|e| panic!("kubectl-inpool {yaml_args:?} printed no YAML ({e}):\n{text}"));
    assert_eq!(yaml, json(args), "{args:?} as YAML:\n{text}");
}

/// `--version` (and `-V`) print the crate's version as `kubectl-inpool VERSION`, without a
/// kubeconfig or a subcommand, and exit 0, as the krew manifest's release expects.
#[test]
fn version_prints_the_crate_version() {
    for flag in ["--version", "-V"] {
        let output = Command::new(env!("CARGO_BIN_EXE_kubectl-inpool"))
            .arg(flag)
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .expect("running kubectl-inpool");
        assert!(output.status.success(), "{flag}: {output:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            format!("kubectl-inpool {}\n", env!("CARGO_PKG_VERSION")),
            "{flag}"
        );
    }
}

#[tokio::test]
async fn pools_claims_who_has_and_why_answer_from_the_api() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("small", &["10.47.0.10-10.47.0.11"], 24, None)).await;
    // Created one after the other, a second apart (creation times have whole seconds; the queue
    // orders ties by name), so that the queue order is the creation order.
    for name in ["first", "second", "third", "fourth"] {
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        create(&claims, &claim(name, "small")).await;
        wait_for(
            "a Ready condition",
            std::time::Duration::from_secs(30),
            || async { ready_of(&claims.get(name).await.ok()?).map(|_| ()) },
        )
        .await;
    }
    create(&claims, &claim("lost", "no-such-pool")).await;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    create(&clusters, &cluster("frozen", true)).await;
    create(
        &claims,
        &of_cluster(claim("frozen-claim", "small"), "frozen"),
    )
    .await;
    wait_reason(&claims, "lost", "PoolNotReady").await;
    wait_counts(&claims, 2, 2).await;
    let held = addresses_by_claim(&client, &ns).await;

    // pools: the table and the JSON agree with the pool's status.
    wait_for(
        "the pool's status",
        std::time::Duration::from_secs(30),
        || async {
            let rows = json(&["pools", "-n", &ns]);
            let row = rows
                .as_array()?
                .iter()
                .find(|p| p["name"] == "small")?
                .clone();
            (row["used"] == 2 && row["countsFrom"] == "status").then_some(row)
        },
    )
    .await;
    let rows = json(&["pools", "-n", &ns]);
    let small = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "small")
        .unwrap();
    assert_eq!(small["total"], 2);
    assert_eq!(small["free"], 0);
    assert_eq!(small["waiting"], 2);
    assert_eq!(small["family"], "IPv4");
    let table = plugin(&["pools", "-n", &ns]);
    assert!(table.starts_with("KIND"), "{table}");
    let line = table
        .lines()
        .find(|l| l.contains(" small "))
        .unwrap_or_else(|| panic!("no row for the pool:\n{table}"));
    for cell in ["InClusterIPPool", &ns, "IPv4", "status", "Ready=True"] {
        assert!(line.contains(cell), "{cell:?} missing in {line:?}");
    }

    // claims --waiting: the two waiting claims, in queue order, with their messages.
    // Flags go before or after the subcommand, as kubectl's do.
    let waiting = json(&["-n", &ns, "claims", "--waiting"]);
    let waiting: Vec<(String, u64)> = waiting
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["reason"], "PoolExhausted");
            assert!(c["message"].as_str().unwrap().contains("small"), "{c}");
            (
                c["name"].as_str().unwrap().to_string(),
                c["position"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        waiting,
        [("fourth".to_string(), 2), ("third".to_string(), 1)]
    );
    let all = plugin(&["claims", "-n", &ns]);
    assert!(all.contains("POSITION") && all.contains("MESSAGE"), "{all}");
    assert!(all.contains(&held["first"]), "{all}");

    // who-has: the claim, its IPAddress and its reservation.
    let address = &held["first"];
    let holders = json(&["who-has", address]);
    let holders = holders.as_array().unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0]["claim"], "first");
    assert_eq!(holders[0]["namespace"], ns.as_str());
    assert_eq!(holders[0]["ipAddress"], "first");
    assert_eq!(holders[0]["pool"], "InClusterIPPool/small");
    assert!(holders[0]["reservation"].is_string(), "{holders:?}");
    assert!(plugin(&["who-has", "10.47.9.9"]).contains("nobody holds 10.47.9.9"));

    // why: the queue place, a missing pool, a paused Cluster, a realised claim.
    let third = plugin(&["why", "third", "-n", &ns]);
    assert!(
        third.contains("this claim is number 1 in the queue"),
        "{third}"
    );
    let lost = json(&["why", "lost", "-n", &ns]);
    assert!(
        lost["findings"][0]
            .as_str()
            .unwrap()
            .contains("its pool InClusterIPPool no-such-pool does not exist"),
        "{lost}"
    );
    let frozen = plugin(&["why", "frozen-claim", "-n", &ns]);
    assert!(frozen.contains("its Cluster frozen is paused"), "{frozen}");
    let first = plugin(&["why", "first", "-n", &ns]);
    assert!(first.contains("nothing: the claim holds"), "{first}");

    // -o yaml: the same data as -o json, for each view.
    assert_yaml_is_json(&["pools", "-n", &ns]);
    assert_yaml_is_json(&["claims", "-n", &ns]);
    assert_yaml_is_json(&["who-has", address]);
    assert_yaml_is_json(&["why", "frozen-claim", "-n", &ns]);
}

/// `who-has` and `why` say when an address is pre-allocated: before its claim exists (a row
/// with no `IPAddress`), once it holds it, and when its entry changed under it.
#[tokio::test]
async fn who_has_and_why_say_when_an_address_is_pre_allocated() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let mut named = pool("named", &["10.48.0.10-10.48.0.20"], 24, None);
    named.spec.pre_allocations = Some(vec![inpool::api::PreAllocation::new("vm", "10.48.0.15")]);
    create(&pools, &named).await;

    let before = json(&["who-has", "10.48.0.15"]);
    let rows = before.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{before}");
    assert_eq!(rows[0]["claim"], "vm");
    assert_eq!(rows[0]["preAllocated"], true);
    assert!(rows[0]["ipAddress"].is_null(), "{before}");

    create(&claims, &claim("vm", "named")).await;
    wait_reason(&claims, "vm", "AddressAllocated").await;
    let held = json(&["who-has", "10.48.0.15"]);
    assert_eq!(held[0]["ipAddress"], "vm", "{held}");
    assert_eq!(held[0]["preAllocated"], true, "{held}");
    assert!(plugin(&["who-has", "10.48.0.15"]).contains("PRE-ALLOCATED"));
    let why = plugin(&["why", "vm", "-n", &ns]);
    assert!(
        why.contains("as its pool's spec.preAllocations names"),
        "{why}"
    );

    named.spec.pre_allocations = Some(vec![inpool::api::PreAllocation::new("vm", "10.48.0.16")]);
    pools
        .patch(
            "named",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                &serde_json::json!({"spec": {"preAllocations": named.spec.pre_allocations}}),
            ),
        )
        .await
        .unwrap();
    let why = json(&["why", "vm", "-n", &ns]);
    assert_eq!(why["preAllocated"], "10.48.0.16", "{why}");
    assert!(
        why["findings"][0]
            .as_str()
            .unwrap()
            .contains("names 10.48.0.16 for it, but it holds 10.48.0.15"),
        "{why}"
    );
    assert_yaml_is_json(&["who-has", "10.48.0.16"]);
}

/// In a pool that spans subnets, `who-has` and `why` name the subnet an address comes from, and
/// `why` gives each subnet's count for a claim waiting on the exhausted pool.
#[tokio::test]
async fn who_has_and_why_name_the_subnet_of_a_pool_of_two_subnets() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let mut spans = pool("spans", &["10.49.0.10"], 24, Some("10.49.0.1"));
    spans.spec.additional_subnets = Some(vec![inpool::api::AdditionalSubnet::new(
        ["10.49.8.10-10.49.8.11"],
        26,
        Some("10.49.8.1"),
    )]);
    spans.spec.pre_allocations = Some(vec![inpool::api::PreAllocation::new("later", "10.49.8.11")]);
    create(&pools, &spans).await;
    // One after the other: `own` takes the first subnet's only address, `second` the second
    // subnet's first (its other one is pre-allocated), and `waits` finds the pool exhausted.
    for (name, reason) in [
        ("own", "AddressAllocated"),
        ("second", "AddressAllocated"),
        ("waits", "PoolExhausted"),
    ] {
        create(&claims, &claim(name, "spans")).await;
        wait_reason(&claims, name, reason).await;
    }
    let own_subnet = "spec.addresses (10.49.0.0/24, gateway 10.49.0.1)";
    let second_subnet = "spec.additionalSubnets[0] (10.49.8.0/26, gateway 10.49.8.1)";

    let held = json(&["who-has", "10.49.8.10"]);
    assert_eq!(held[0]["claim"], "second", "{held}");
    assert_eq!(held[0]["prefix"], 26, "{held}");
    assert_eq!(held[0]["subnet"], second_subnet, "{held}");
    let own = json(&["who-has", "10.49.0.10"]);
    assert_eq!(own[0]["subnet"], own_subnet, "{own}");
    // The pre-allocated address no claim holds yet: the prefix and gateway it will carry.
    let kept = json(&["who-has", "10.49.8.11"]);
    assert_eq!(kept[0]["claim"], "later", "{kept}");
    assert!(kept[0]["ipAddress"].is_null(), "{kept}");
    assert_eq!(
        (&kept[0]["prefix"], &kept[0]["gateway"], &kept[0]["subnet"]),
        (
            &Value::from(26),
            &Value::from("10.49.8.1"),
            &Value::from(second_subnet)
        ),
        "{kept}"
    );
    let table = plugin(&["who-has", "10.49.8.10"]);
    assert!(
        table.contains("SUBNET") && table.contains(second_subnet),
        "{table}"
    );

    let second = plugin(&["why", "second", "-n", &ns]);
    assert!(
        second.contains(&format!(
            "nothing: the claim holds 10.49.8.10/26 from its pool's subnet {second_subnet}"
        )) && second.contains(&format!("subnet: {second_subnet}")),
        "{second}"
    );
    let waits = json(&["why", "waits", "-n", &ns]);
    let findings: Vec<&str> = waits["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        findings.contains(
            &format!(
                "its pool's subnets: {own_subnet}: 1 of 1 in use; {second_subnet}: 2 of 2 in use"
            )
            .as_str()
        ),
        "{waits}"
    );
    assert_yaml_is_json(&["who-has", "10.49.8.11"]);
    assert_yaml_is_json(&["why", "waits", "-n", &ns]);
}
