//! inpool meets a real consumer: Cluster API Provider vSphere (CAPV) v1.14.0 provisions machines on
//! govmomi's vCenter simulator with addresses from inpool's pools (`support::capv_env`: CAPI core
//! v1.14.2, the simulator and CAPV's manager run beside the control plane; an inpool controller
//! runs in the test).
//!
//! The pool features consumers ask for are exercised through CAPV too: a pre-allocation naming the
//! claim CAPV will create, a pool spanning two subnets whose second subnet's prefix and gateway
//! reach the VM, and a pool carved from a prefix pool whose sub-prefix's prefix and gateway do.
//!
//! Everything a test asserts is read from what CAPV itself wrote: the `IPAddressClaim`s it
//! creates for a `VSphereMachine`'s `addressesFromPools`, the network configuration it writes into
//! the cloned VM (which the simulator's guest applies and prints), the `VSphereVM`'s
//! `status.addresses` (reported back by the guest) and its conditions: `IPAddressClaimed`
//! (v1beta1) and `IPAddressClaimsFulfilled` (v1beta2), which CAPV aggregates from the claims'
//! `Ready` conditions as it reads them through CAPI's v1beta1 API.

use inpool::api::{InClusterIPPool, InClusterPrefixPool};
use inpool_testenv::capv::{self, GROUP as INFRASTRUCTURE};
use inpool_testenv::{common, support};
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use common::*;

/// CAPV, as the shared part of a [`Site`] knows it.
static CAPV: Consumer = Consumer {
    name: "CAPV",
    env: support::capv_env,
    claim_owner: "VSphereVM",
    claim_finalizer: "vspherevm.infrastructure.cluster.x-k8s.io/ip-claim-protection",
};

/// One CAPI Cluster on the simulator, in a test's namespace: what CAPV's tests add to the
/// shared [`ConsumerSite`].
struct Site(ConsumerSite);

impl std::ops::Deref for Site {
    type Target = ConsumerSite;

    fn deref(&self) -> &ConsumerSite {
        &self.0
    }
}

/// One test's bed ([`Consumer::bed`]) whose site is a `VSphereCluster` on the simulator (CAPV's
/// default credentials, no thumbprint: CAPV then skips certificate checks).
async fn bed(pools: &[InClusterIPPool]) -> (RunningController, Api<InClusterIPPool>, Site) {
    let simulator = support::capv_env().simulator().expect("the simulator runs");
    let (inpool, api, site) = CAPV
        .bed(
            pools,
            json!({
                "apiVersion": format!("{INFRASTRUCTURE}/v1beta1"), "kind": "VSphereCluster",
                "spec": {"server": simulator.server,
                         "controlPlaneEndpoint": {"host": "10.99.0.5", "port": 6443}},
            }),
        )
        .await;
    (inpool, api, Site(site))
}

impl Site {
    /// A Machine on a `VSphereMachine` cloning the simulator's template, whose one network
    /// device takes one address from each of `pools` (`(kind, name)`). VM names are global in
    /// the simulator, so every machine of the test binary needs a name of its own.
    async fn machine(&self, name: &str, pools: &[(&str, &str)]) {
        let from_pools: Vec<Value> = pools
            .iter()
            .map(|(kind, pool)| json!({"apiGroup": GROUP, "kind": kind, "name": pool}))
            .collect();
        self.0
            .machine(
                name,
                json!({
                    "apiVersion": format!("{INFRASTRUCTURE}/v1beta1"), "kind": "VSphereMachine",
                    "spec": {
                        // The simulator's VPX model: its template disk is 10 GiB, and CAPV
                        // refuses to shrink a disk; its datacenter has two compute resources, so
                        // name the pool.
                        "template": "DC0_H0_VM0", "datacenter": "DC0", "datastore": "LocalDS_0",
                        "resourcePool": "/DC0/host/DC0_C0/Resources", "folder": "/DC0/vm",
                        "cloneMode": "fullClone", "numCPUs": 1, "memoryMiB": 512, "diskGiB": 10,
                        "network": {"devices": [
                            {"networkName": "VM Network", "addressesFromPools": from_pools},
                        ]},
                    },
                }),
            )
            .await;
    }

    fn vsphere_vms(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &capv::resource("VSphereVM"))
    }

    /// Waits until the `VSphereVM` `vm` passes `check`, and returns it; `what` says what is
    /// waited for.
    async fn vm_when(
        &self,
        vm: &str,
        what: &str,
        check: impl Fn(&DynamicObject) -> Option<bool>,
    ) -> DynamicObject {
        let vms = self.vsphere_vms();
        self.eventually(what, PROVISIONING, || async {
            let object = vms.get_opt(vm).await.unwrap()?;
            check(&object)?.then_some(object)
        })
        .await
    }

    /// Waits until `vm`'s v1beta1 condition `IPAddressClaimed` has `status` and a reason that
    /// starts with `reason` (CAPV reports `IPAddressClaimsBeingCreated` until every claim has a
    /// `Ready` condition, then aggregates the claims' reasons), and returns the `VSphereVM`.
    async fn vm_with_claimed(&self, vm: &str, status: &str, reason: &str) -> DynamicObject {
        let what = format!("VSphereVM {vm} to have IPAddressClaimed={status} ({reason}…)");
        self.vm_when(vm, &what, |object| {
            let claimed = condition_at(object, "/status/conditions", "IPAddressClaimed")?;
            let reason_matches = claimed["reason"]
                .as_str()
                .unwrap_or_default()
                .starts_with(reason);
            Some(claimed["status"] == status && reason_matches)
        })
        .await
    }

    /// Waits until the guest of `vm` reports `address` and CAPV has copied it into the
    /// `VSphereVM`'s `status.addresses`.
    async fn vm_reports(&self, vm: &str, address: &str) -> DynamicObject {
        let what = format!("VSphereVM {vm} to report address {address}");
        self.vm_when(vm, &what, |object| {
            let addresses = object.data["status"]["addresses"].as_array()?;
            Some(addresses.iter().any(|a| a == address))
        })
        .await
    }

    /// What the simulated guest of `vm` configured from the metadata CAPV wrote into the VM.
    async fn guest_network(&self, vm: &str) -> String {
        let simulator = support::capv_env().simulator().expect("the simulator runs");
        self.eventually(
            &format!("the guest of VM {vm} to configure its network"),
            PROVISIONING,
            || async { simulator.guest_network(vm) },
        )
        .await
    }

    /// Waits until the machine `vm`, of one network device with one pool entry, is provisioned
    /// with an address: CAPV has created its claim (`<VSphereVM>-<device>-<pool entry>`), inpool
    /// has realised it as `cidr`, CAPV wrote the address into the VM and the guest configured
    /// `guest` (as the simulator prints it), and CAPV reports the address and
    /// `IPAddressClaimed=True` on the `VSphereVM`, which is returned.
    async fn provisioned(&self, vm: &str, cidr: &str, guest: &str) -> DynamicObject {
        let claim = format!("{vm}-0-0");
        self.claim_created(&claim, vm).await;
        wait_reason(&self.claims(), &claim, "AddressAllocated").await;
        let address = self.addresses().get(&claim).await.unwrap();
        assert_eq!(cidr_of(&address), cidr);
        assert_eq!(self.guest_network(vm).await, guest);
        self.vm_reports(vm, &address.spec.address).await;
        self.vm_with_claimed(vm, "True", "").await
    }

    /// Deletes the Machine `name` and waits until CAPV has deleted its VM and the garbage
    /// collector its claims, and inpool has released their addresses.
    async fn delete_machine(&self, name: &str, claims: &[&str]) {
        self.delete_machine_and_claims(name, claims).await;
        wait_gone(&self.vsphere_vms(), name, PROVISIONING).await;
    }
}

#[tokio::test]
async fn capv_provisions_a_machine_from_an_inclusterippool_and_deleting_it_releases_the_address() {
    let (_inpool, pools, site) = bed(&[pool(
        "vm-pool",
        &["10.10.0.10-10.10.0.20"],
        24,
        Some("10.10.0.1"),
    )])
    .await;
    site.machine("v4-m1", &[("InClusterIPPool", "vm-pool")])
        .await;

    // CAPV wrote inpool's address and gateway into the VM, the guest applied them, and CAPV
    // reports the address on the VSphereVM.
    let vm = site
        .provisioned(
            "v4-m1",
            "10.10.0.10/24",
            "addresses=[10.10.0.10/24] gateway4=10.10.0.1 gateway6=",
        )
        .await;
    let fulfilled = condition_at(
        &vm,
        "/status/v1beta2/conditions",
        "IPAddressClaimsFulfilled",
    )
    .unwrap_or_else(|| panic!("no IPAddressClaimsFulfilled on VSphereVM v4-m1: {vm:?}"));
    assert_eq!(fulfilled["status"], "True", "{fulfilled}");

    // The Machine is provisioned: CAPI copied the provider ID from the VSphereMachine.
    let machines = site.machines();
    site.eventually("Machine v4-m1 to be Provisioned", PROVISIONING, || async {
        let machine = machines.get("v4-m1").await.ok()?;
        (machine.data["status"]["phase"] == "Provisioned").then_some(())
    })
    .await;
    site.show_kubectl_get();

    site.delete_machine("v4-m1", &["v4-m1-0-0"]).await;
    wait_pool_used(&pools, "vm-pool", 0).await;
}

#[tokio::test]
async fn capv_shows_pool_exhausted_from_inpool_and_proceeds_when_the_pool_grows() {
    let (_inpool, pools, site) = bed(&[pool("one", &["10.20.0.10"], 24, Some("10.20.0.1"))]).await;
    site.machine("full-a", &[("InClusterIPPool", "one")]).await;
    site.claim_created("full-a-0-0", "full-a").await;
    wait_reason(&site.claims(), "full-a-0-0", "AddressAllocated").await;
    site.machine("full-b", &[("InClusterIPPool", "one")]).await;
    site.claim_created("full-b-0-0", "full-b").await;
    let waiting = wait_reason(&site.claims(), "full-b-0-0", "PoolExhausted").await;
    let inpool_message = ready_message(&waiting);

    // CAPV summarises inpool's condition on its own object: reason and severity in v1beta1,
    // inpool's message in v1beta2.
    let vm = site
        .vm_with_claimed("full-b", "False", "PoolExhausted")
        .await;
    let claimed = condition_at(&vm, "/status/conditions", "IPAddressClaimed").unwrap();
    assert_eq!(claimed["severity"], "Warning", "{claimed}");
    let fulfilled = condition_at(
        &vm,
        "/status/v1beta2/conditions",
        "IPAddressClaimsFulfilled",
    )
    .unwrap();
    assert_eq!(fulfilled["status"], "False", "{fulfilled}");
    assert!(
        fulfilled["message"]
            .as_str()
            .is_some_and(|m| m.contains(&inpool_message)),
        "IPAddressClaimsFulfilled on VSphereVM full-b should carry inpool's message \
         {inpool_message:?}: {fulfilled}"
    );
    inpool_testenv::say(&format!(
        "VSphereVM full-b: IPAddressClaimed {claimed}\nIPAddressClaimsFulfilled {fulfilled}"
    ));
    site.show_kubectl_get();
    assert!(
        site.vsphere_vms().get("full-b").await.unwrap().data["status"]["addresses"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "a VM without its address must not report one"
    );

    // Growing the pool is all it takes: nothing is done to CAPV's objects.
    merge_patch(
        &pools,
        "one",
        json!({"spec": {"addresses": ["10.20.0.10-10.20.0.11"]}}),
    )
    .await;
    wait_reason(&site.claims(), "full-b-0-0", "AddressAllocated").await;
    assert_eq!(
        site.guest_network("full-b").await,
        "addresses=[10.20.0.11/24] gateway4=10.20.0.1 gateway6="
    );
    site.vm_reports("full-b", "10.20.0.11").await;
    site.vm_with_claimed("full-b", "True", "").await;

    site.delete_machine("full-a", &["full-a-0-0"]).await;
    site.delete_machine("full-b", &["full-b-0-0"]).await;
    wait_pool_used(&pools, "one", 0).await;
}

#[tokio::test]
async fn capv_takes_addresses_from_an_ipv6_pool_and_a_global_pool_the_same_way() {
    let (_inpool, pools, site) = bed(&[v6_pool()]).await;
    let (global_pools, global_name) = site.create_global_pool().await;
    site.machine("v6-m1", &[("InClusterIPPool", "v6")]).await;
    site.machine("global-m1", &[("GlobalInClusterIPPool", &global_name)])
        .await;

    let guest = "addresses=[fd00:10::10/64] gateway4= gateway6=fd00:10::1";
    site.provisioned("v6-m1", "fd00:10::10/64", guest).await;
    let guest = "addresses=[10.30.0.10/24] gateway4=10.30.0.1 gateway6=";
    site.provisioned("global-m1", "10.30.0.10/24", guest).await;

    site.delete_machine("v6-m1", &["v6-m1-0-0"]).await;
    site.delete_machine("global-m1", &["global-m1-0-0"]).await;
    wait_pool_used(&pools, "v6", 0).await;
    site.delete_global_pool(&global_pools, &global_name).await;
}

/// A pool whose own subnet holds one address, pre-allocated to the claim CAPV creates for machine
/// `pre-m1` (CAPV names it `<VSphereVM>-<device>-<pool entry>`), and a second subnet with another
/// prefix and gateway. The pre-allocated address counts as used, so any other claim lands in the
/// second subnet whatever the order the claims come in: the setup is deterministic without
/// exhausting anything by hand.
#[tokio::test]
async fn capv_gives_a_vm_its_pre_allocated_address_and_another_vm_the_second_subnets_gateway() {
    let (_inpool, pools, site) = bed(&[spanning_pool("pre-m1-0-0")]).await;

    // The machine without an entry comes first and is served first: the pre-allocated address,
    // the lowest of the pool's first subnet, is kept from it, so it gets the second subnet's first.
    site.machine("span-m2", &[("InClusterIPPool", "spanning")])
        .await;
    site.claim_created("span-m2-0-0", "span-m2").await;
    wait_reason(&site.claims(), "span-m2-0-0", "AddressAllocated").await;
    site.machine("pre-m1", &[("InClusterIPPool", "spanning")])
        .await;
    site.claim_created("pre-m1-0-0", "pre-m1").await;
    let realised = wait_reason(&site.claims(), "pre-m1-0-0", "AddressAllocated").await;
    let message = ready_message(&realised);
    assert!(
        message.contains("pre-allocated to the claim by the pool's spec.preAllocations"),
        "{message}"
    );

    let pre = site.addresses().get("pre-m1-0-0").await.unwrap();
    assert_eq!(
        (cidr_of(&pre), pre.spec.gateway.as_deref()),
        ("10.40.0.10/24".to_string(), Some("10.40.0.1"))
    );
    let spilled = site.addresses().get("span-m2-0-0").await.unwrap();
    assert_eq!(
        (cidr_of(&spilled), spilled.spec.gateway.as_deref()),
        ("10.41.0.10/26".to_string(), Some("10.41.0.1"))
    );

    // What CAPV wrote into each VM, as its guest applied it, and what CAPV reports back.
    assert_eq!(
        site.guest_network("pre-m1").await,
        "addresses=[10.40.0.10/24] gateway4=10.40.0.1 gateway6="
    );
    assert_eq!(
        site.guest_network("span-m2").await,
        "addresses=[10.41.0.10/26] gateway4=10.41.0.1 gateway6="
    );
    site.vm_reports("pre-m1", "10.40.0.10").await;
    site.vm_reports("span-m2", "10.41.0.10").await;
    site.vm_with_claimed("pre-m1", "True", "").await;
    site.vm_with_claimed("span-m2", "True", "").await;
    site.show_kubectl_get();

    // Released, the pre-allocated address is kept for its claim: it still counts as used.
    site.delete_machine("pre-m1", &["pre-m1-0-0"]).await;
    site.delete_machine("span-m2", &["span-m2-0-0"]).await;
    wait_pool_used(&pools, "spanning", 1).await;
}

/// A pool with no addresses of its own, carved from a prefix pool created after it: it waits,
/// then inpool claims the parent's lowest /28 for it, and CAPV's claim on the pool gets the
/// sub-prefix's first address that is neither its network address nor its gateway (the first
/// address after the network address), with the sub-prefix's length.
#[tokio::test]
async fn capv_takes_an_address_from_a_pool_carved_from_a_prefix_pool() {
    let (_inpool, pools, site) = bed(&[carved_pool("carved", "node-networks", 1)]).await;
    let parents: Api<InClusterPrefixPool> = Api::namespaced(site.client.clone(), &site.ns);
    let parent = parent_prefix_pool("node-networks", &["10.50.0.0/24"], 28);
    create(&parents, &parent).await;
    let carved = site
        .eventually("pool carved to hold a sub-prefix", PROVISIONING, || async {
            let status = pools.get("carved").await.ok()?.status?;
            let carved = status.carved_prefixes.filter(|c| !c.is_empty())?;
            Some(carved.iter().map(|c| c.prefix.clone()).collect::<Vec<_>>())
        })
        .await;
    assert_eq!(carved, ["10.50.0.0/28"]);

    site.machine("carved-m1", &[("InClusterIPPool", "carved")])
        .await;
    let guest = "addresses=[10.50.0.2/28] gateway4=10.50.0.1 gateway6=";
    site.provisioned("carved-m1", "10.50.0.2/28", guest).await;
    site.show_kubectl_get();

    site.delete_machine("carved-m1", &["carved-m1-0-0"]).await;
    wait_pool_used(&pools, "carved", 0).await;
}
