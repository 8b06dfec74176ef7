//! The profiles and the checks of each, with the contract text each check tests.

use serde::{Deserialize, Serialize};

/// A group of checks a provider declares it supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    Core,
    ReadyCondition,
    Lifecycle,
    Move,
    Concurrency,
}

impl Profile {
    pub const ALL: [Profile; 5] = [
        Profile::Core,
        Profile::ReadyCondition,
        Profile::Lifecycle,
        Profile::Move,
        Profile::Concurrency,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Profile::Core => "core",
            Profile::ReadyCondition => "ready-condition",
            Profile::Lifecycle => "lifecycle",
            Profile::Move => "move",
            Profile::Concurrency => "concurrency",
        }
    }

    pub fn checks(self) -> impl Iterator<Item = &'static CheckSpec> {
        CHECKS.iter().filter(move |c| c.profile == self)
    }
}

/// How binding the tested text is: the contract's MUST or SHOULD, or a rule that CAPI's types,
/// issues or tools set without the contract page saying it.
#[derive(Clone, Copy, Debug, Serialize)]
pub enum Level {
    #[serde(rename = "MUST")]
    Must,
    #[serde(rename = "SHOULD")]
    Should,
}

/// One check: its id (stable, used in the report and JUnit), what it asserts, and the contract
/// text it tests.
#[derive(Debug)]
pub struct CheckSpec {
    pub id: &'static str,
    pub profile: Profile,
    pub title: &'static str,
    pub level: Level,
    /// The contract sentence or CAPI section tested (quoted where the source has a sentence).
    pub source: &'static str,
    pub url: &'static str,
}

const BOOK: &str = "https://github.com/kubernetes-sigs/cluster-api/blob/v1.14.2/docs/book/src/developer/providers/contracts/ipam.md";
const BOOK_NORMAL: &str = "https://github.com/kubernetes-sigs/cluster-api/blob/v1.14.2/docs/book/src/developer/providers/contracts/ipam.md#normal-ipaddressclaim";
const BOOK_DELETED: &str = "https://github.com/kubernetes-sigs/cluster-api/blob/v1.14.2/docs/book/src/developer/providers/contracts/ipam.md#deleted-ipaddressclaim";
const BOOK_CONSUMER: &str = "https://github.com/kubernetes-sigs/cluster-api/blob/v1.14.2/docs/book/src/developer/providers/contracts/ipam.md#infrastructure-provider";
const PROPOSAL: &str = "https://github.com/kubernetes-sigs/cluster-api/blob/v1.14.2/docs/proposals/20220125-ipam-integration.md";
const CLAIM_TYPES: &str = "https://github.com/kubernetes-sigs/cluster-api/blob/v1.14.2/api/ipam/v1beta2/ipaddressclaim_types.go";
const ISSUE_8424: &str = "https://github.com/kubernetes-sigs/cluster-api/issues/8424";
const PR_10660: &str = "https://github.com/kubernetes-sigs/cluster-api/pull/10660";
const PR_10108: &str = "https://github.com/kubernetes-sigs/cluster-api/pull/10108";
const PAUSED_HELPER: &str =
    "https://github.com/kubernetes-sigs/cluster-api/blob/v1.14.2/util/annotations/helpers.go";
const MOVER: &str = "https://github.com/kubernetes-sigs/cluster-api/blob/v1.14.2/cmd/clusterctl/client/cluster/mover.go";
const IN_CLUSTER_179: &str =
    "https://github.com/kubernetes-sigs/cluster-api-ipam-provider-in-cluster/issues/179";

/// Every check, in the order they run and are reported.
pub static CHECKS: &[CheckSpec] = &[
    CheckSpec {
        id: "core-realised",
        profile: Profile::Core,
        title: "A claim on the provider's pool is realised: status.addressRef names an IPAddress that exists",
        level: Level::Must,
        source: "Behaviour: \"IPAM providers must handle any IPAddressClaim resources that reference IP address pools that are managed by the provider and create an IPAddress resource for it.\" Normal IPAddressClaim 6: \"Set the status.addressRef on the IPAddressClaim to the created IPAddress\"",
        url: BOOK_NORMAL,
    },
    CheckSpec {
        id: "core-address-name",
        profile: Profile::Core,
        title: "The IPAddress has the claim's name and namespace",
        level: Level::Should,
        source: "Normal IPAddressClaim 5.1: \"It should have the same name as the claim.\"",
        url: BOOK_NORMAL,
    },
    CheckSpec {
        id: "core-owner-references",
        profile: Profile::Core,
        title: "The IPAddress is owned by the claim (controller, blockOwnerDeletion) and by the pool (not controller, blockOwnerDeletion)",
        level: Level::Must,
        source: "Normal IPAddressClaim 5.2: \"It must have a owner reference with controller: true and blockOwnerDeletion: true to the Claim\"; 5.3: \"It must have a owner reference with controller: false and blockOwnerDeletion: true to the referenced Pool\"",
        url: BOOK_NORMAL,
    },
    CheckSpec {
        id: "core-references",
        profile: Profile::Core,
        title: "spec.claimRef names the claim; spec.poolRef is the claim's spec.poolRef, field for field",
        level: Level::Must,
        source: "CAPI's IPAddress validating webhook (core/webhooks/admission/ipaddress_webhook.go): the poolRef must equal the claim's; proposal, IPAddress: \"ClaimRef ... PoolRef\"",
        url: PROPOSAL,
    },
    CheckSpec {
        id: "core-finalizers",
        profile: Profile::Core,
        title: "The claim carries the provider's finalizer and the IPAddress a finalizer against accidental deletion",
        level: Level::Should,
        source: "Normal IPAddressClaim 3: \"Add any required provider-specific finalizers (you probably need one)\"; 5.4: \"It should have a Finalizer that prevents accidental deletion\"",
        url: BOOK_NORMAL,
    },
    CheckSpec {
        id: "core-address-in-pool",
        profile: Profile::Core,
        title: "The address is one of the pool's, with the pool's prefix and gateway",
        level: Level::Must,
        source: "Normal IPAddressClaim 4: \"Allocate an IP address for the claim\" (from the referenced pool); IPAddress spec: address, prefix, gateway",
        url: BOOK_NORMAL,
    },
    CheckSpec {
        id: "core-address-ref-only-when-allocated",
        profile: Profile::Core,
        title: "status.addressRef is unset until the IPAddress exists, and stays unset on a claim that gets no address",
        level: Level::Must,
        source: "Infrastructure Provider 2: \"Wait until an IP is allocated, ideally by watching the IPAddressClaim and waiting for status.addressRef to be set\"; 3: \"Fetch the IPAddress resource\"",
        url: BOOK_CONSUMER,
    },
    CheckSpec {
        id: "core-address-protected",
        profile: Profile::Core,
        title: "Deleting the IPAddress of a live claim neither frees nor changes its address",
        level: Level::Must,
        source: "Proposal, IPAddress: deletion while the claim lives must keep the address the claim's (a finalizer blocks it, or it is recreated with identical values); contract 5.4: a finalizer \"that prevents accidental deletion\"",
        url: PROPOSAL,
    },
    CheckSpec {
        id: "core-deletion-releases",
        profile: Profile::Core,
        title: "Deleting a claim deletes its IPAddress, lets the claim go, and frees the address for the next claim",
        level: Level::Must,
        source: "Deleted IPAddressClaim: \"2. Deallocate the IP address 3. Delete the IPAddress object 4. Remove the Finalizer from the claim\"",
        url: BOOK_DELETED,
    },
    CheckSpec {
        id: "core-foreign-claims-untouched",
        profile: Profile::Core,
        title: "A claim on another provider's pool kind gets no finalizer, status or IPAddress",
        level: Level::Must,
        source: "Normal IPAddressClaim 1: \"If the IPAddressClaim does not reference a pool managed by the provider in it's spec.poolRef, abort the reconciliation.\"",
        url: BOOK_NORMAL,
    },
    CheckSpec {
        id: "ready-true",
        profile: Profile::ReadyCondition,
        title: "A realised claim has Ready=True",
        level: Level::Should,
        source: "IPAddressClaimReadyCondition \"Ready\" (api/ipam/v1beta2) and issue #8424: a summary condition consumers react to; Ready=True once the address is allocated",
        url: CLAIM_TYPES,
    },
    CheckSpec {
        id: "ready-pool-exhausted",
        profile: Profile::ReadyCondition,
        title: "A claim on a full pool has Ready=False, reason PoolExhausted",
        level: Level::Should,
        source: "IPAddressClaimReadyPoolExhaustedReason \"PoolExhausted\" (#10660): \"the pool has no free address\"; proposal: \"set Ready=False using these reasons where applicable\"",
        url: PR_10660,
    },
    CheckSpec {
        id: "ready-pool-not-ready",
        profile: Profile::ReadyCondition,
        title: "A claim on a pool that does not exist has Ready=False, reason PoolNotReady",
        level: Level::Should,
        source: "IPAddressClaimReadyPoolNotReadyReason \"PoolNotReady\" (#10660): the referenced pool is not ready (a missing pool is the one every provider can be shown)",
        url: PR_10660,
    },
    CheckSpec {
        id: "ready-allocation-failed",
        profile: Profile::ReadyCondition,
        title: "A claim whose IPAddress cannot be created (its name is taken for another pool) has Ready=False, reason AllocationFailed",
        level: Level::Should,
        source: "IPAddressClaimReadyAllocationFailedReason \"AllocationFailed\" (#10660): any other failure, with the detail in the message",
        url: PR_10660,
    },
    CheckSpec {
        id: "ready-observed-generation",
        profile: Profile::ReadyCondition,
        title: "Every Ready condition seen carries observedGeneration equal to the claim's generation",
        level: Level::Should,
        source: "metav1.Condition observedGeneration, as CAPI's v1beta2 conditions set it (#11971, #12091; the v1beta2 condition rules)",
        url: ISSUE_8424,
    },
    CheckSpec {
        id: "ready-v1beta1-mirror",
        profile: Profile::ReadyCondition,
        title: "Ready is mirrored into status.deprecated.v1beta1.conditions (what v1beta1 consumers such as CAPV read), with the same status and reason",
        level: Level::Should,
        source: "IPAddressClaimDeprecatedStatus / v1beta1 conversion: v1beta2 status.deprecated.v1beta1.conditions is v1beta1's status.conditions; CAPV aggregates the claims' v1beta1 Ready",
        url: CLAIM_TYPES,
    },
    CheckSpec {
        id: "ready-messages",
        profile: Profile::ReadyCondition,
        title: "Every Ready=False condition has a message that says why",
        level: Level::Should,
        source: "#10660: AllocationFailed \"with the detail in the message\"; proposal: \"errors must be visible\" in the claim's conditions",
        url: PR_10660,
    },
    CheckSpec {
        id: "lifecycle-growth-serves-waiting",
        profile: Profile::Lifecycle,
        title: "A claim waiting on a full pool is realised when the pool grows",
        level: Level::Should,
        source: "Behaviour: the provider \"must watch for new, updated and deleted IPAddressClaims\"; a waiting claim is served once space appears (in-cluster #179: exhausted claims never retried)",
        url: IN_CLUSTER_179,
    },
    CheckSpec {
        id: "lifecycle-release-serves-waiting",
        profile: Profile::Lifecycle,
        title: "A claim waiting on a full pool is realised when another claim releases its address",
        level: Level::Should,
        source: "As above: a released address serves the waiting claim without the user touching it (in-cluster #179)",
        url: IN_CLUSTER_179,
    },
    CheckSpec {
        id: "lifecycle-pool-created-later",
        profile: Profile::Lifecycle,
        title: "A claim on a pool that does not exist yet is realised once the pool is created",
        level: Level::Should,
        source: "Behaviour: \"IPAM providers must handle any IPAddressClaim resources that reference IP address pools that are managed by the provider\" (whenever the pool appears)",
        url: BOOK,
    },
    CheckSpec {
        id: "lifecycle-pause-cluster-annotation",
        profile: Profile::Lifecycle,
        title: "A claim of a Cluster annotated cluster.x-k8s.io/paused is left alone until the annotation goes",
        level: Level::Must,
        source: "Normal IPAddressClaim 2.4: \"If the referenced cluster has spec.paused set or a cluster.x-k8s.io/paused annotation, skip reconciliation\"",
        url: BOOK_NORMAL,
    },
    CheckSpec {
        id: "lifecycle-pause-cluster-spec",
        profile: Profile::Lifecycle,
        title: "A claim of a Cluster with spec.paused is left alone, realised or deleted, until it is unpaused",
        level: Level::Must,
        source: "Normal IPAddressClaim 2.4 (as above); Deleted IPAddressClaim 1: \"If the related Cluster is paused, abort reconciliation\"",
        url: BOOK_DELETED,
    },
    CheckSpec {
        id: "lifecycle-pause-claim-annotation",
        profile: Profile::Lifecycle,
        title: "A claim annotated cluster.x-k8s.io/paused is left alone until the annotation goes",
        level: Level::Should,
        source: "CAPI util/annotations.IsPaused(cluster, o): an object is paused when its Cluster is, or when it carries cluster.x-k8s.io/paused itself",
        url: PAUSED_HELPER,
    },
    CheckSpec {
        id: "lifecycle-cluster-deleted",
        profile: Profile::Lifecycle,
        title: "A claim deleted after its Cluster is gone is still released (no deadlock)",
        level: Level::Should,
        source: "#10108 review: \"cluster not found => abort\" deadlocks claims whose Cluster is deleted first; the reference provider releases them (in-cluster #289, #329)",
        url: PR_10108,
    },
    CheckSpec {
        id: "move-adoption",
        profile: Profile::Move,
        title: "After clusterctl move (claim and IPAddress recreated without status, Cluster unpaused), the claim is realised with the existing IPAddress, not a new address",
        level: Level::Must,
        source: "clusterctl move recreates objects with POST (status lost) under a paused Cluster, then unpauses it; the proposal's claim-to-address binding is 1:1 and immutable for the claim's lifetime",
        url: MOVER,
    },
    CheckSpec {
        id: "move-address-stays-held",
        profile: Profile::Move,
        title: "The adopted address is not handed to another claim",
        level: Level::Must,
        source: "Proposal: an IPAM provider never hands out the same address of a pool twice",
        url: PROPOSAL,
    },
    CheckSpec {
        id: "concurrency-burst",
        profile: Profile::Concurrency,
        title: "A burst of N claims created at once on a pool of N gets N distinct addresses of the pool",
        level: Level::Must,
        source: "Proposal: uniqueness of addresses within a pool is the provider's job (CAPI validates none)",
        url: PROPOSAL,
    },
    CheckSpec {
        id: "concurrency-churn",
        profile: Profile::Concurrency,
        title: "Claims created and deleted concurrently never share an address, and every claim that fits is realised",
        level: Level::Must,
        source: "Proposal: uniqueness of addresses within a pool, under any order of claim creation and deletion",
        url: PROPOSAL,
    },
];

/// The spec of check `id`.
pub fn spec(id: &str) -> &'static CheckSpec {
    CHECKS
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no check {id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_number_every_check_in_the_order_they_run() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/conformance.md");
        let text = std::fs::read_to_string(&docs).expect("docs/conformance.md");
        for (i, check) in CHECKS.iter().enumerate() {
            let line = format!("{}. `{}` (", i + 1, check.id);
            assert!(
                text.contains(&line),
                "docs/conformance.md has no line starting {line:?}"
            );
        }
        let profiles: Vec<Profile> = CHECKS.iter().map(|c| c.profile).collect();
        let mut sorted = profiles.clone();
        sorted.sort();
        assert_eq!(
            profiles, sorted,
            "checks are grouped by profile, in run order"
        );
    }
}
