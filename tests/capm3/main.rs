//! inpool meets Metal3: Cluster API Provider Metal3 (CAPM3) v1.13.2 renders a bare-metal host's
//! network data from addresses in inpool's pools (`support::capm3_env`: CAPI core v1.14.2 and
//! CAPM3's manager run beside the control plane; an inpool controller runs in the test).
//!
//! What a Metal3 user writes: a `Metal3DataTemplate` whose `networks.ipv4[]` / `networks.ipv6[]`
//! take their address from `fromPoolRef` and whose routes take their gateway from
//! `gateway.fromPoolRef`, each naming an inpool pool by `apiGroup: ipam.cluster.x-k8s.io`. For
//! such a reference CAPM3 creates a CAPI `IPAddressClaim` named `<Metal3Data>-<pool>`, owned by
//! the `Metal3Data` and holding CAPM3's finalizer, reads the `IPAddress` inpool binds to it, and
//! writes the `<Metal3Machine>-networkdata` Secret that the `BareMetalHost`'s `spec.networkData`
//! then names.
//!
//! No baremetal-operator and no Ironic run: the test plays baremetal-operator's part by setting
//! each `BareMetalHost`'s status to what CAPM3's host selection looks for
//! (`baremetal/metal3machine_manager.go`, `chooseHost`: `status.provisioning.state` `available`
//! or `ready`, an empty `status.errorMessage`, no consumer, not paused). The host stays
//! `available`, so CAPM3 never waits for a deprovisioning when its machine goes.
//!
//! Everything a test asserts is read from what CAPM3 itself wrote: the claims it creates, the
//! network data Secret it renders, the host spec it sets, the conditions of its `Metal3Machine`
//! and the status of its `Metal3Data`.

use std::time::{Duration, Instant};

use inpool::api::{IPAddressClaim, InClusterIPPool};
use inpool_testenv::capm3::{self, GROUP as INFRASTRUCTURE};
use inpool_testenv::{common, support};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use common::*;

/// CAPM3, as the shared part of a [`Site`] knows it; its finalizer on the claims it creates is
/// `infrav1.DataFinalizer`.
static CAPM3: Consumer = Consumer {
    name: "CAPM3",
    env: support::capm3_env,
    claim_owner: "Metal3Data",
    claim_finalizer: "metal3data.infrastructure.cluster.x-k8s.io",
};

/// The label each test's `BareMetalHost` carries, which its `Metal3Machine`'s `hostSelector`
/// matches: CAPM3 picks a random host among those available, and the tests want to know which.
const HOST_LABEL: &str = "inpool.test/host";

/// One CAPI Cluster on bare metal, in a test's namespace: what CAPM3's tests add to the shared
/// [`ConsumerSite`].
struct Site(ConsumerSite);

impl std::ops::Deref for Site {
    type Target = ConsumerSite;

    fn deref(&self) -> &ConsumerSite {
        &self.0
    }
}

/// One network of a `Metal3DataTemplate`: its address and its default route's gateway from the
/// pool `(kind, name)` of API group `api_group` (inpool's, unless a test says otherwise).
struct Network<'a> {
    ipv6: bool,
    api_group: &'a str,
    pool: (&'a str, &'a str),
}

impl<'a> Network<'a> {
    fn v4(kind: &'a str, name: &'a str) -> Network<'a> {
        Network {
            ipv6: false,
            api_group: GROUP,
            pool: (kind, name),
        }
    }

    fn v6(kind: &'a str, name: &'a str) -> Network<'a> {
        Network {
            ipv6: true,
            ..Network::v4(kind, name)
        }
    }
}

impl Site {
    /// A `Metal3DataTemplate` with one ethernet link and, on it, `networks`: each takes its
    /// address from `fromPoolRef` and its default route's gateway from `gateway.fromPoolRef`.
    async fn data_template(&self, name: &str, networks: &[Network<'_>]) {
        let (mut ipv4, mut ipv6) = (Vec::new(), Vec::new());
        for (i, network) in networks.iter().enumerate() {
            let (kind, pool) = network.pool;
            let pool_ref = json!({"apiGroup": network.api_group, "kind": kind, "name": pool});
            let default_route = if network.ipv6 { "::" } else { "0.0.0.0" };
            let entry = json!({
                "id": format!("net{i}"), "link": "eth0", "fromPoolRef": pool_ref,
                "routes": [{"network": default_route, "prefix": 0,
                            "gateway": {"fromPoolRef": pool_ref}}],
            });
            if network.ipv6 { &mut ipv6 } else { &mut ipv4 }.push(entry);
        }
        // CAPM3's schema refuses an empty list of networks of a family: leave it out.
        let mut networks = json!({});
        if !ipv4.is_empty() {
            networks["ipv4"] = json!(ipv4);
        }
        if !ipv6.is_empty() {
            networks["ipv6"] = json!(ipv6);
        }
        self.apply(json!({
            "apiVersion": format!("{INFRASTRUCTURE}/v1beta2"), "kind": "Metal3DataTemplate",
            "metadata": {"name": name, "labels": self.labels()},
            "spec": {
                "clusterName": self.cluster,
                "networkData": {
                    "links": {"ethernets": [{"type": "phy", "id": "eth0",
                                             "macAddress": {"string": "00:5a:91:3f:9a:01"}}]},
                    "networks": networks,
                },
            },
        }))
        .await;
    }

    /// A `BareMetalHost` whose status says what baremetal-operator would say of a host that was
    /// registered, inspected and is ready for a consumer.
    async fn host(&self, name: &str) {
        // The BMC credentials a host names: CAPM3 labels the Secret with the cluster name when
        // it takes the host, and fails the association when the Secret is missing.
        self.apply(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-bmc")},
            "stringData": {"username": "admin", "password": "password"},
        }))
        .await;
        self.apply(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "labels": {HOST_LABEL: name}},
            "spec": {"online": false, "bootMACAddress": "00:5a:91:3f:9a:01",
                     "bmc": {"address": format!("redfish://192.168.111.1:8000/{name}"),
                             "credentialsName": format!("{name}-bmc")}},
        }))
        .await;
        self.hosts()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "operationalStatus": "OK", "errorMessage": "", "errorCount": 0,
                    "hardwareProfile": "unknown", "poweredOn": false,
                    "provisioning": {"state": "available", "ID": format!("{name}-ironic-id")},
                }})),
            )
            .await
            .unwrap_or_else(|e| panic!("setting BareMetalHost {name}'s status: {e}"));
    }

    /// A Machine on a `Metal3Machine` on host `host` rendering its data from the template
    /// `template`.
    async fn machine(&self, name: &str, template: &str, host: &str) {
        self.0
            .machine(
                name,
                json!({
                    "apiVersion": format!("{INFRASTRUCTURE}/v1beta2"), "kind": "Metal3Machine",
                    "spec": {
                        "image": {"url": "http://192.168.111.1/images/node.qcow2",
                                  "checksum": "http://192.168.111.1/images/node.qcow2.sha256sum",
                                  "checksumType": "sha256", "diskFormat": "qcow2"},
                        "dataTemplate": {"name": template},
                        "hostSelector": {"matchLabels": {HOST_LABEL: host}},
                    },
                }),
            )
            .await;
    }

    fn capm3(&self, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &capm3::resource(kind))
    }

    fn hosts(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &capm3::bare_metal_host())
    }

    /// Waits until CAPM3 has created the claim `<data>-<pool>` for the `Metal3Data` `data` and
    /// returns it, after checking that it is CAPM3's ([`ConsumerSite::claim_created`]), that the
    /// `Metal3Data` is its controller, and that it names inpool's pool.
    async fn claim_created_by_capm3(&self, data: &str, pool: (&str, &str)) -> IPAddressClaim {
        self.claim_in_group_created_by_capm3(data, GROUP, pool)
            .await
    }

    /// [`Site::claim_created_by_capm3`] for a pool of API group `api_group`.
    async fn claim_in_group_created_by_capm3(
        &self,
        data: &str,
        api_group: &str,
        pool: (&str, &str),
    ) -> IPAddressClaim {
        let name = format!("{data}-{}", pool.1);
        let claim = self.claim_created(&name, data).await;
        let owner = claim
            .owner_references()
            .iter()
            .find(|o| o.kind == "Metal3Data");
        assert_eq!(
            owner.and_then(|o| o.controller),
            Some(true),
            "claim {name}'s owner"
        );
        assert_eq!(
            (
                claim.spec.pool_ref.api_group.as_str(),
                claim.spec.pool_ref.kind.as_str(),
                claim.spec.pool_ref.name.as_str()
            ),
            (api_group, pool.0, pool.1),
            "claim {name}'s pool"
        );
        claim
    }

    /// Waits until CAPM3 has created the claim `<data>-<pool>` and inpool has realised it
    /// (`Ready=True`, reason `AddressAllocated`); returns it.
    async fn claim_realised(&self, data: &str, pool: (&str, &str)) -> IPAddressClaim {
        let claim = self.claim_created_by_capm3(data, pool).await;
        let realised = wait_reason(&self.claims(), &claim.name_any(), "AddressAllocated").await;
        assert_eq!(
            ready_of(&realised).map(|(status, _, _)| status).as_deref(),
            Some("True")
        );
        realised
    }

    /// Waits until `Metal3Machine` `machine`'s condition `Metal3DataReady` has `status`; returns
    /// the condition. CAPM3 patches the host before its own `Metal3Machine`'s status, so the
    /// condition may trail what the host shows.
    async fn metal3_data_ready(&self, machine: &str, status: &str) -> Value {
        let machines = self.capm3("Metal3Machine");
        self.eventually(
            &format!("Metal3Machine {machine} to have Metal3DataReady={status}"),
            PROVISIONING,
            || async {
                let object = machines.get(machine).await.ok()?;
                let ready = condition_at(&object, "/status/conditions", "Metal3DataReady")?;
                (ready["status"] == status).then(|| ready.clone())
            },
        )
        .await
    }

    /// Asserts that CAPM3 has written no network data for `machine`: a host without its address
    /// must not get any.
    async fn assert_no_network_data(&self, machine: &str) {
        let name = format!("{machine}-networkdata");
        let secret = self.secrets().get_opt(&name).await.unwrap();
        assert!(secret.is_none(), "unexpected Secret {name}: {secret:?}");
    }

    /// Waits until CAPM3 has written the network data Secret of `Metal3Machine` `machine` and
    /// returns what it holds, parsed (OpenStack's network_data.json layout, as YAML).
    async fn network_data(&self, machine: &str) -> Value {
        let name = format!("{machine}-networkdata");
        let secrets = self.secrets();
        let secret = self
            .eventually(
                &format!("CAPM3 to write Secret {}/{name}", self.ns),
                PROVISIONING,
                || async { secrets.get_opt(&name).await.unwrap() },
            )
            .await;
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get("networkData"))
            .unwrap_or_else(|| panic!("Secret {name} has no networkData: {secret:?}"));
        let text = String::from_utf8_lossy(&bytes.0);
        serde_saphyr::from_str(&text)
            .unwrap_or_else(|e| panic!("Secret {name}'s networkData is not YAML: {e}"))
    }

    /// Waits until CAPM3 has set host `host`'s `spec.networkData` to the Secret of `machine`.
    async fn host_points_at_network_data(&self, host: &str, machine: &str) {
        let hosts = self.hosts();
        let secret = format!("{machine}-networkdata");
        self.eventually(
            &format!("BareMetalHost {host}'s spec.networkData to name Secret {secret}"),
            PROVISIONING,
            || async {
                let object = hosts.get(host).await.ok()?;
                let spec = &object.data["spec"];
                (spec["networkData"]["name"] == secret.as_str()
                    && spec["consumerRef"]["name"] == machine
                    && spec["image"]["url"].is_string())
                .then_some(())
            },
        )
        .await;
    }

    /// The name of the `Metal3Data` CAPM3 renders for `Metal3Machine` `machine`, once it has.
    async fn data_of(&self, machine: &str) -> String {
        let machines = self.capm3("Metal3Machine");
        self.eventually(
            &format!("Metal3Machine {machine} to name its Metal3Data"),
            PROVISIONING,
            || async {
                let object = machines.get(machine).await.ok()?;
                object.data["status"]["renderedData"]["name"]
                    .as_str()
                    .map(str::to_string)
            },
        )
        .await
    }

    /// Deletes the Machine `name` and waits until CAPM3 has released everything it held for it:
    /// its claims (gone with their finalizers) and with them inpool's addresses, its
    /// `Metal3Machine`, `Metal3Data` and network data Secret, and its hold on host `host` (no
    /// consumer, no image). CAPM3 v1.13.2 leaves the host's `spec.networkData` naming the deleted
    /// Secret: its `DissociateM3Metadata` forgets the `Metal3Machine`'s `status.networkData`
    /// before `Delete` looks at it to decide whether to clear the host's. The next consumer of
    /// the host overwrites it, which the first test shows.
    async fn delete_machine(&self, name: &str, host: &str, claims: &[&str]) {
        let data = self.data_of(name).await;
        self.delete_machine_and_claims(name, claims).await;
        wait_gone(&self.capm3("Metal3Machine"), name, PROVISIONING).await;
        wait_gone(&self.capm3("Metal3Data"), &data, PROVISIONING).await;
        wait_gone(
            &self.secrets(),
            &format!("{name}-networkdata"),
            PROVISIONING,
        )
        .await;
        let hosts = self.hosts();
        let last_spec = std::sync::Mutex::new(Value::Null);
        wait_explained(
            &format!("CAPM3 to let go of BareMetalHost {host}"),
            PROVISIONING,
            || async {
                let spec = hosts.get(host).await.ok()?.data["spec"].clone();
                *last_spec.lock().unwrap() = spec.clone();
                (spec["consumerRef"].is_null() && spec["image"].is_null()).then_some(())
            },
            || format!("; its spec: {}", last_spec.lock().unwrap()),
        )
        .await;
    }
}

/// The network `id` of rendered network data, as `[type, ip_address, netmask, gateway of its
/// first route]`.
fn rendered(network_data: &Value, id: &str) -> [String; 4] {
    let network = network_data["networks"]
        .as_array()
        .and_then(|networks| networks.iter().find(|n| n["id"] == id))
        .unwrap_or_else(|| panic!("no network {id} in the network data: {network_data}"));
    [
        &network["type"],
        &network["ip_address"],
        &network["netmask"],
        &network["routes"][0]["gateway"],
    ]
    .map(|v| v.as_str().unwrap_or_default().to_string())
}

/// One test's bed ([`Consumer::bed`]) whose site is a `Metal3Cluster`.
async fn bed(pools: &[InClusterIPPool]) -> (RunningController, Api<InClusterIPPool>, Site) {
    let (inpool, api, site) = CAPM3
        .bed(
            pools,
            json!({
                "apiVersion": format!("{INFRASTRUCTURE}/v1beta2"), "kind": "Metal3Cluster",
                "spec": {"controlPlaneEndpoint": {"host": "192.168.111.249", "port": 6443},
                         "cloudProviderEnabled": false},
            }),
        )
        .await;
    (inpool, api, Site(site))
}

#[tokio::test]
async fn capm3_renders_network_data_from_an_inclusterippool_and_deleting_the_machine_releases_it() {
    let (_inpool, pools, site) = bed(&[pool(
        "provisioning",
        &["192.168.111.100-192.168.111.120"],
        24,
        Some("192.168.111.1"),
    )])
    .await;
    let network = Network::v4("InClusterIPPool", "provisioning");
    site.data_template("workers", &[network]).await;
    site.host("node-0").await;
    site.machine("worker-a", "workers", "node-0").await;

    // The first Metal3Data of template `workers`; its claim is `<Metal3Data>-<pool>`.
    let data = site.data_of("worker-a").await;
    assert_eq!(data, "workers-0");
    site.claim_realised(&data, ("InClusterIPPool", "provisioning"))
        .await;
    let address = site
        .addresses()
        .get("workers-0-provisioning")
        .await
        .unwrap();
    assert_eq!(
        (cidr_of(&address), address.spec.gateway.as_deref()),
        ("192.168.111.100/24".to_string(), Some("192.168.111.1"))
    );

    // CAPM3 rendered inpool's address, prefix (as a netmask) and gateway, and pointed the host
    // at the Secret.
    let network_data = site.network_data("worker-a").await;
    assert_eq!(
        rendered(&network_data, "net0"),
        ["ipv4", "192.168.111.100", "255.255.255.0", "192.168.111.1"],
        "{network_data}"
    );
    site.host_points_at_network_data("node-0", "worker-a").await;
    inpool_testenv::say(&format!(
        "Secret worker-a-networkdata, networkData:\n{}",
        serde_json::to_string_pretty(&network_data).unwrap_or_default()
    ));
    site.metal3_data_ready("worker-a", "True").await;
    site.show_kubectl_get();

    // Deleting the Machine releases the claim, the address and the host; the next machine on
    // the host gets the same address again.
    site.delete_machine("worker-a", "node-0", &["workers-0-provisioning"])
        .await;
    wait_pool_used(&pools, "provisioning", 0).await;
    site.machine("worker-b", "workers", "node-0").await;
    let data = site.data_of("worker-b").await;
    site.claim_realised(&data, ("InClusterIPPool", "provisioning"))
        .await;
    let network_data = site.network_data("worker-b").await;
    assert_eq!(
        rendered(&network_data, "net0")[1],
        "192.168.111.100",
        "{network_data}"
    );
    site.host_points_at_network_data("node-0", "worker-b").await;
    let claim = format!("{data}-provisioning");
    site.delete_machine("worker-b", "node-0", &[&claim]).await;
    wait_pool_used(&pools, "provisioning", 0).await;
}

#[tokio::test]
async fn capm3_waits_on_an_exhausted_pool_and_renders_once_it_grows_or_an_address_is_released() {
    let (_inpool, pools, site) = bed(&[pool("one", &["10.20.0.10"], 24, Some("10.20.0.1"))]).await;
    site.data_template("full", &[Network::v4("InClusterIPPool", "one")])
        .await;
    site.host("full-0").await;
    site.host("full-1").await;
    site.host("full-2").await;
    site.machine("full-a", "full", "full-0").await;
    let data_a = site.data_of("full-a").await;
    site.claim_realised(&data_a, ("InClusterIPPool", "one"))
        .await;
    site.network_data("full-a").await;

    site.machine("full-b", "full", "full-1").await;
    let data_b = site.data_of("full-b").await;
    let claim_b = format!("{data_b}-one");
    site.claim_created_by_capm3(&data_b, ("InClusterIPPool", "one"))
        .await;
    let waiting = wait_reason(&site.claims(), &claim_b, "PoolExhausted").await;
    assert_eq!(
        ready_of(&waiting).map(|(status, _, _)| status).as_deref(),
        Some("False")
    );

    // What CAPM3 shows meanwhile: its Metal3Data is not ready, the Metal3Machine waits on it,
    // and no network data is rendered. CAPM3 does not copy the claim's reason anywhere.
    let data_ready = site.metal3_data_ready("full-b", "False").await;
    let data_status = site.capm3("Metal3Data").get(&data_b).await.unwrap().data["status"].clone();
    assert_eq!(data_status["ready"], false, "{data_status}");
    site.assert_no_network_data("full-b").await;
    inpool_testenv::say(&format!(
        "while pool `one` is exhausted: claim {claim_b}: {}\nMetal3Data {data_b} status: \
         {data_status}\nMetal3Machine full-b Metal3DataReady: {data_ready}",
        ready_message(&waiting),
    ));
    site.show_kubectl_get();

    // Growing the pool is all it takes: nothing is done to CAPM3's objects.
    let grown = Instant::now();
    merge_patch(
        &pools,
        "one",
        json!({"spec": {"addresses": ["10.20.0.10-10.20.0.11"]}}),
    )
    .await;
    wait_reason(&site.claims(), &claim_b, "AddressAllocated").await;
    let network_data = site.network_data("full-b").await;
    inpool_testenv::say(&format!(
        "CAPM3 rendered full-b's network data {:.1} s after the pool grew",
        grown.elapsed().as_secs_f64()
    ));
    assert_eq!(
        rendered(&network_data, "net0"),
        ["ipv4", "10.20.0.11", "255.255.255.0", "10.20.0.1"],
        "{network_data}"
    );
    site.host_points_at_network_data("full-1", "full-b").await;

    // Full again: a third machine waits until the first machine's deletion releases its address.
    site.machine("full-c", "full", "full-2").await;
    let data_c = site.data_of("full-c").await;
    let claim_c = format!("{data_c}-one");
    site.claim_created_by_capm3(&data_c, ("InClusterIPPool", "one"))
        .await;
    wait_reason(&site.claims(), &claim_c, "PoolExhausted").await;
    site.metal3_data_ready("full-c", "False").await;
    site.assert_no_network_data("full-c").await;
    // The deletion and what follows it, timed side by side: when inpool realises the waiting
    // claim, and when CAPM3 renders from it.
    let asked = Instant::now();
    let claim_a = format!("{data_a}-one");
    let claims_a = [claim_a.as_str()];
    let ((), released, (realised, network_data, rendered_after)) = tokio::join!(
        site.delete_machine("full-a", "full-0", &claims_a),
        async {
            wait_gone(&site.claims(), &claim_a, PROVISIONING).await;
            asked.elapsed()
        },
        async {
            wait_reason(&site.claims(), &claim_c, "AddressAllocated").await;
            let realised = asked.elapsed();
            let network_data = site.network_data("full-c").await;
            (realised, network_data, asked.elapsed())
        },
    );
    inpool_testenv::say(&format!(
        "Machine full-a's deletion asked for: CAPM3 deleted claim {claim_a} {:.1} s later, \
         inpool realised {claim_c} {:.1} s later, CAPM3 rendered full-c's network data {:.1} s \
         later",
        released.as_secs_f64(),
        realised.as_secs_f64(),
        rendered_after.as_secs_f64(),
    ));
    assert_eq!(
        rendered(&network_data, "net0"),
        ["ipv4", "10.20.0.10", "255.255.255.0", "10.20.0.1"],
        "{network_data}"
    );
    site.host_points_at_network_data("full-2", "full-c").await;

    site.delete_machine("full-b", "full-1", &[&claim_b]).await;
    site.delete_machine("full-c", "full-2", &[&claim_c]).await;
    wait_pool_used(&pools, "one", 0).await;
}

/// A pool whose own subnet holds one address, pre-allocated to the claim CAPM3 will create for
/// the first `Metal3Data` of template `pre` (`pre-0-spanning`), and a second subnet with another
/// prefix and gateway. The pre-allocated address counts as used, so the other machine's claim
/// lands in the second subnet whatever the order the claims come in.
#[tokio::test]
async fn capm3_renders_a_pre_allocated_address_and_the_second_subnets_prefix_and_gateway() {
    let (_inpool, pools, site) = bed(&[spanning_pool("pre-0-spanning")]).await;
    let network = || Network::v4("InClusterIPPool", "spanning");
    site.data_template("pre", &[network()]).await;
    site.data_template("span", &[network()]).await;
    site.host("pre-host").await;
    site.host("span-host").await;

    // The machine without an entry comes first and is served first: the pre-allocated address is
    // kept from it, so it gets the second subnet's first.
    site.machine("span-m", "span", "span-host").await;
    let span_data = site.data_of("span-m").await;
    site.claim_realised(&span_data, ("InClusterIPPool", "spanning"))
        .await;
    site.machine("pre-m", "pre", "pre-host").await;
    let pre_data = site.data_of("pre-m").await;
    assert_eq!(pre_data, "pre-0", "the claim name the pre-allocation names");
    let realised = site
        .claim_realised(&pre_data, ("InClusterIPPool", "spanning"))
        .await;
    let message = ready_message(&realised);
    assert!(
        message.contains("pre-allocated to the claim by the pool's spec.preAllocations"),
        "{message}"
    );

    // What CAPM3 rendered for each host.
    let pre = site.network_data("pre-m").await;
    assert_eq!(
        rendered(&pre, "net0"),
        ["ipv4", "10.40.0.10", "255.255.255.0", "10.40.0.1"],
        "{pre}"
    );
    let spilled = site.network_data("span-m").await;
    assert_eq!(
        rendered(&spilled, "net0"),
        ["ipv4", "10.41.0.10", "255.255.255.192", "10.41.0.1"],
        "{spilled}"
    );
    site.host_points_at_network_data("pre-host", "pre-m").await;
    site.host_points_at_network_data("span-host", "span-m")
        .await;
    site.show_kubectl_get();

    // Released, the pre-allocated address is kept for its claim: it still counts as used.
    site.delete_machine("pre-m", "pre-host", &["pre-0-spanning"])
        .await;
    site.delete_machine("span-m", "span-host", &[&format!("{span_data}-spanning")])
        .await;
    wait_pool_used(&pools, "spanning", 1).await;
}

/// One host with two networks: IPv4 from a `GlobalInClusterIPPool` and IPv6 from an
/// `InClusterIPPool`, each with its gateway; CAPM3 creates one claim per pool.
#[tokio::test]
async fn capm3_renders_ipv4_from_a_global_pool_and_ipv6_from_a_namespaced_pool_on_one_host() {
    let (_inpool, pools, site) = bed(&[v6_pool()]).await;
    let (global_pools, global_name) = site.create_global_pool().await;
    site.data_template(
        "dual",
        &[
            Network::v4("GlobalInClusterIPPool", &global_name),
            Network::v6("InClusterIPPool", "v6"),
        ],
    )
    .await;
    site.host("dual-0").await;
    site.machine("dual-m", "dual", "dual-0").await;

    let data = site.data_of("dual-m").await;
    site.claim_realised(&data, ("GlobalInClusterIPPool", &global_name))
        .await;
    site.claim_realised(&data, ("InClusterIPPool", "v6")).await;
    let global_claim = format!("{data}-{global_name}");
    let v6_claim = format!("{data}-v6");
    assert_eq!(
        cidr_of(&site.addresses().get(&global_claim).await.unwrap()),
        "10.30.0.10/24"
    );
    assert_eq!(
        cidr_of(&site.addresses().get(&v6_claim).await.unwrap()),
        "fd00:10::10/64"
    );

    let network_data = site.network_data("dual-m").await;
    assert_eq!(
        rendered(&network_data, "net0"),
        ["ipv4", "10.30.0.10", "255.255.255.0", "10.30.0.1"],
        "{network_data}"
    );
    assert_eq!(
        rendered(&network_data, "net1"),
        ["ipv6", "fd00:10::10", "ffff:ffff:ffff:ffff::", "fd00:10::1"],
        "{network_data}"
    );
    site.host_points_at_network_data("dual-0", "dual-m").await;

    site.delete_machine("dual-m", "dual-0", &[&global_claim, &v6_claim])
        .await;
    wait_pool_used(&pools, "v6", 0).await;
    site.delete_global_pool(&global_pools, &global_name).await;
}

/// The pitfall of `metal3-io/cluster-api-provider-metal3` PR #2810: a `fromPoolRef` that names an
/// inpool kind under Metal3's API group. CAPM3 creates a Cluster API claim for it (the kind is
/// not Metal3's `IPPool`), which names a pool no provider serves: inpool leaves it alone, though
/// a pool of that kind and name exists and serves the same reference under inpool's group, and
/// the host gets no network data. Deleting the machine still releases the claim.
#[tokio::test]
async fn capm3_claims_for_a_pool_ref_in_metal3s_group_wait_unserved_by_inpool() {
    let (_inpool, pools, site) = bed(&[pool(
        "provisioning",
        &["10.50.0.10-10.50.0.20"],
        24,
        Some("10.50.0.1"),
    )])
    .await;
    let mut stray = Network::v4("InClusterIPPool", "provisioning");
    stray.api_group = "ipam.metal3.io";
    site.data_template("stray", &[stray]).await;
    site.data_template("right", &[Network::v4("InClusterIPPool", "provisioning")])
        .await;
    site.host("stray-0").await;
    site.host("right-0").await;
    site.machine("stray-m", "stray", "stray-0").await;
    let data = site.data_of("stray-m").await;
    let claim = site
        .claim_in_group_created_by_capm3(
            &data,
            "ipam.metal3.io",
            ("InClusterIPPool", "provisioning"),
        )
        .await;

    // The same reference under inpool's group, created after it, is served: inpool has seen
    // both claims by then. A few seconds more for good measure.
    site.machine("right-m", "right", "right-0").await;
    let right = site.data_of("right-m").await;
    site.claim_realised(&right, ("InClusterIPPool", "provisioning"))
        .await;
    assert_eq!(
        rendered(&site.network_data("right-m").await, "net0")[1],
        "10.50.0.10"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let unserved = site.claims().get(&claim.name_any()).await.unwrap();
    assert_eq!(ready_of(&unserved), None, "{unserved:?}");
    assert!(
        site.addresses()
            .get_opt(&claim.name_any())
            .await
            .unwrap()
            .is_none(),
        "inpool must not bind an address to a claim of another API group"
    );
    wait_pool_used(&pools, "provisioning", 1).await;
    site.assert_no_network_data("stray-m").await;
    site.metal3_data_ready("stray-m", "False").await;

    site.delete_machine("stray-m", "stray-0", &[&claim.name_any()])
        .await;
    site.delete_machine("right-m", "right-0", &[&format!("{right}-provisioning")])
        .await;
    wait_pool_used(&pools, "provisioning", 0).await;
}
