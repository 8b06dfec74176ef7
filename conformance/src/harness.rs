//! What the checks are built from: the suite's view of the cluster (dynamic APIs for claims,
//! addresses, Clusters and the provider's pool kind), a scenario that remembers every object it
//! made and removes them afterwards, waits that keep what they saw as evidence, and the record of
//! one check.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::config::{Block, ProviderConfig, render};
use crate::profiles::{self, Profile};
use crate::report::{CheckReport, Evidence, Outcome, round};

pub const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";
pub const IPAM_VERSION: &str = "ipam.cluster.x-k8s.io/v1beta2";
pub const PAUSED: &str = "cluster.x-k8s.io/paused";
const FIELD_MANAGER: &str = "ipam-conformance";
const POLL: Duration = Duration::from_millis(200);

/// A failed step: what went wrong, said for a person.
pub type Failed = String;

/// The suite's view of the cluster for one run.
pub struct Suite {
    pub config: ProviderConfig,
    pub claims: Api<DynamicObject>,
    pub addresses: Api<DynamicObject>,
    pub clusters: Api<DynamicObject>,
    pools: Api<DynamicObject>,
    pool_resource: ApiResource,
    /// A short tag in every object name of this run, so that runs never collide.
    run: String,
    next_unit: AtomicU32,
}

/// A pool the suite made: its name, uid and units.
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub uid: String,
    pub block: Block,
}

impl Suite {
    pub async fn new(client: Client, config: ProviderConfig) -> anyhow::Result<Suite> {
        use anyhow::Context as _;
        let ns = config.namespace.clone();
        let api_version = config.pool_api_version();
        let version = api_version.split('/').nth(1).unwrap_or_default();
        let gvk = GroupVersionKind::gvk(&config.pool.group, version, &config.pool.kind);
        let (pool_resource, capabilities) = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .with_context(|| format!("the API server does not serve {api_version} {}", gvk.kind))?;
        let pools = match capabilities.scope {
            kube::discovery::Scope::Namespaced => {
                Api::namespaced_with(client.clone(), &ns, &pool_resource)
            }
            kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &pool_resource),
        };
        let ipam = |kind: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(IPAM_GROUP, "v1beta2", kind),
                plural,
            )
        };
        let cluster = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
            "clusters",
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Ok(Suite {
            claims: Api::namespaced_with(
                client.clone(),
                &ns,
                &ipam("IPAddressClaim", "ipaddressclaims"),
            ),
            addresses: Api::namespaced_with(client.clone(), &ns, &ipam("IPAddress", "ipaddresses")),
            clusters: Api::namespaced_with(client.clone(), &ns, &cluster),
            pools,
            pool_resource,
            run: base36(now.as_millis() as u64 % 36u64.pow(5)),
            next_unit: AtomicU32::new(0),
            config,
        })
    }

    pub fn act(&self) -> Duration {
        self.config.timeouts.act()
    }

    pub fn quiet(&self) -> Duration {
        self.config.timeouts.quiet()
    }

    /// A fresh scenario for `profile`: its objects are named `cf-<run>-<profile>-…`.
    pub fn scenario(&self, profile: Profile) -> Scenario<'_> {
        let short = match profile {
            Profile::Core => "core",
            Profile::ReadyCondition => "ready",
            Profile::Lifecycle => "life",
            Profile::Move => "move",
            Profile::Concurrency => "conc",
        };
        Scenario {
            suite: self,
            prefix: format!("cf-{}-{short}", self.run),
            made: Mutex::new(Made::default()),
        }
    }

    fn next_block(&self, size: u32, capacity: u32) -> Result<Block, Failed> {
        let offset = self.next_unit.fetch_add(capacity, Ordering::SeqCst);
        let span = self.config.pool.units.span;
        if offset + capacity > span {
            return Err(format!(
                "the run needs more than pool.units.span ({span}) units from {}",
                self.config.pool.units.first
            ));
        }
        Ok(self.config.pool.units.block(offset, size, capacity))
    }
}

fn base36(mut n: u64) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(digits[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[derive(Default)]
struct Made {
    pools: Vec<String>,
    claims: Vec<String>,
    addresses: Vec<String>,
    clusters: Vec<String>,
    /// Claims seen with an `addressRef` naming an `IPAddress` that did not exist.
    early: BTreeSet<String>,
}

/// The objects of one profile's run: made through it, removed by [`Scenario::cleanup`].
pub struct Scenario<'a> {
    pub suite: &'a Suite,
    prefix: String,
    made: Mutex<Made>,
}

fn remember(made: &Mutex<Made>, f: impl FnOnce(&mut Made)) {
    let mut made = made.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut made);
}

impl Scenario<'_> {
    /// The full name of this scenario's object `key`.
    pub fn name(&self, key: &str) -> String {
        format!("{}-{key}", self.prefix)
    }

    /// Creates a pool `key` of `size` units (room for `capacity`) from the provider's template.
    pub async fn pool(&self, key: &str, size: u32, capacity: u32) -> Result<Pool, Failed> {
        let block = self.suite.next_block(size, capacity)?;
        let name = self.name(key);
        remember(&self.made, |m| m.pools.push(name.clone()));
        self.apply_pool(&name, block).await
    }

    /// Grows (or shrinks) `pool` to `size` units by applying the template again.
    pub async fn resize(&self, pool: &Pool, size: u32) -> Result<Pool, Failed> {
        self.apply_pool(&pool.name, pool.block.resized(size)).await
    }

    async fn apply_pool(&self, name: &str, block: Block) -> Result<Pool, Failed> {
        let s = self.suite;
        let mut body = render(&s.config.pool.template, &block, name, &s.config.namespace)
            .map_err(|e| format!("{e:#}"))?;
        if self.pool_is_cluster_scoped()
            && let Some(meta) = body["metadata"].as_object_mut()
        {
            meta.remove("namespace");
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let pool = s
            .pools
            .patch(name, &params, &Patch::Apply(&body))
            .await
            .map_err(|e| format!("applying pool {name} from the template: {e}"))?;
        Ok(Pool {
            name: name.to_string(),
            uid: pool.uid().unwrap_or_default(),
            block,
        })
    }

    fn pool_is_cluster_scoped(&self) -> bool {
        self.suite
            .pools
            .resource_url()
            .split('/')
            .all(|p| p != "namespaces")
    }

    /// The `spec.poolRef` of a claim on the provider's pool `pool`.
    pub fn pool_ref(&self, pool: &str) -> Value {
        let p = &self.suite.config.pool;
        json!({"apiGroup": p.group, "kind": p.kind, "name": pool})
    }

    /// Creates claim `key` with `spec.poolRef` = `pool_ref`, of Cluster `cluster` if any, with
    /// `annotations`.
    pub async fn claim_with(
        &self,
        key: &str,
        pool_ref: Value,
        cluster: Option<&str>,
        annotations: &[(&str, &str)],
    ) -> Result<DynamicObject, Failed> {
        let name = self.name(key);
        let mut spec = json!({"poolRef": pool_ref});
        if let Some(cluster) = cluster {
            spec["clusterName"] = cluster.into();
        }
        let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let body = json!({
            "apiVersion": IPAM_VERSION, "kind": "IPAddressClaim",
            "metadata": {"name": name, "annotations": annotations},
            "spec": spec,
        });
        remember(&self.made, |m| m.claims.push(name.clone()));
        create(&self.suite.claims, &body)
            .await
            .map_err(|e| format!("creating claim {name}: {e}"))
    }

    /// Creates claim `key` on the provider's pool `pool`.
    pub async fn claim(&self, key: &str, pool: &str) -> Result<DynamicObject, Failed> {
        self.claim_with(key, self.pool_ref(pool), None, &[]).await
    }

    /// Creates Cluster `key`, paused through `spec.paused` and/or the annotation.
    pub async fn cluster(
        &self,
        key: &str,
        spec_paused: bool,
        annotated: bool,
    ) -> Result<DynamicObject, Failed> {
        let name = self.name(key);
        let mut body = self
            .suite
            .config
            .cluster(&name)
            .map_err(|e| format!("{e:#}"))?;
        body["spec"]["paused"] = spec_paused.into();
        if annotated {
            body["metadata"]["annotations"][PAUSED] = "".into();
        }
        remember(&self.made, |m| m.clusters.push(name.clone()));
        create(&self.suite.clusters, &body)
            .await
            .map_err(|e| format!("creating Cluster {name}: {e}"))
    }

    /// Creates an `IPAddress` as a tool other than the provider does (clusterctl move, a
    /// conflicting writer).
    pub async fn address(&self, body: Value) -> Result<DynamicObject, Failed> {
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        remember(&self.made, |m| m.addresses.push(name.clone()));
        create(&self.suite.addresses, &body)
            .await
            .map_err(|e| format!("creating IPAddress {name}: {e}"))
    }

    pub async fn merge(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        patch: Value,
    ) -> Result<DynamicObject, Failed> {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("patching {name}: {e}"))
    }

    pub async fn delete(&self, api: &Api<DynamicObject>, name: &str) -> Result<(), Failed> {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(format!("deleting {name}: {e}")),
        }
    }

    pub async fn get(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
    ) -> Result<Option<DynamicObject>, Failed> {
        api.get_opt(name)
            .await
            .map_err(|e| format!("reading {name}: {e}"))
    }

    /// The `IPAddress`es whose `spec.claimRef.name` is `claim`.
    pub async fn addresses_of(&self, claim: &str) -> Result<Vec<DynamicObject>, Failed> {
        Ok(self
            .all_addresses()
            .await?
            .into_iter()
            .filter(|a| a.data["spec"]["claimRef"]["name"].as_str() == Some(claim))
            .collect())
    }

    pub async fn all_claims(&self) -> Result<Vec<DynamicObject>, Failed> {
        self.suite
            .claims
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| format!("listing claims: {e}"))
    }

    pub async fn all_addresses(&self) -> Result<Vec<DynamicObject>, Failed> {
        self.suite
            .addresses
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| format!("listing IPAddresses: {e}"))
    }

    /// Waits until claim `name` is realised: `status.addressRef` names an `IPAddress` that
    /// exists. Returns both. An `addressRef` seen before its `IPAddress` exists is a violation
    /// of the contract, recorded in `early` (it fails `core-address-ref-only-when-allocated`).
    pub async fn realised(
        &self,
        name: &str,
        check: &mut Check,
    ) -> Result<(DynamicObject, DynamicObject), Failed> {
        let started = Instant::now();
        let mut last = None;
        while started.elapsed() < self.suite.act() {
            if let Some(claim) = self.get(&self.suite.claims, name).await? {
                if let Some(address_ref) = address_ref(&claim) {
                    match self.get(&self.suite.addresses, &address_ref).await? {
                        Some(address) => return Ok((claim, address)),
                        None => {
                            check.saw(
                                &format!(
                                    "status.addressRef names IPAddress {address_ref}, which does \
                                     not exist"
                                ),
                                &claim,
                            );
                            remember_early(&self.made, name);
                        }
                    }
                }
                last = Some(claim);
            }
            tokio::time::sleep(POLL).await;
        }
        let then = match &last {
            Some(claim) => {
                check.saw("the claim when the suite stopped waiting", claim);
                claim_state(claim)
            }
            None => "it did not exist".to_string(),
        };
        for address in self.addresses_of(name).await.unwrap_or_default() {
            check.saw("an IPAddress for the claim", &address);
        }
        Err(format!(
            "claim {name} was not realised within {}s (no status.addressRef naming an existing \
             IPAddress); then: {then}",
            self.suite.act().as_secs()
        ))
    }

    /// Waits until claim `name` satisfies `done`; on timeout the last version seen is evidence.
    pub async fn wait_claim(
        &self,
        name: &str,
        what: &str,
        check: &mut Check,
        done: impl Fn(&DynamicObject) -> bool,
    ) -> Result<DynamicObject, Failed> {
        let started = Instant::now();
        let mut last = None;
        while started.elapsed() < self.suite.act() {
            if let Some(claim) = self.get(&self.suite.claims, name).await? {
                if done(&claim) {
                    return Ok(claim);
                }
                last = Some(claim);
            }
            tokio::time::sleep(POLL).await;
        }
        let then = match &last {
            Some(claim) => {
                check.saw("the claim when the suite stopped waiting", claim);
                claim_state(claim)
            }
            None => {
                check.note(&format!("claim {name} does not exist"));
                "it did not exist".to_string()
            }
        };
        Err(format!(
            "claim {name}: {what} did not happen within {}s; then: {then}",
            self.suite.act().as_secs()
        ))
    }

    /// Waits until the object `name` of `api` is gone; on timeout it is evidence.
    pub async fn gone(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        check: &mut Check,
    ) -> Result<(), Failed> {
        let started = Instant::now();
        while started.elapsed() < self.suite.act() {
            if self.get(api, name).await?.is_none() {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
        if let Some(object) = self.get(api, name).await? {
            check.saw("still there when the suite stopped waiting", &object);
        }
        Err(format!(
            "{name} was still there {}s after it was deleted",
            self.suite.act().as_secs()
        ))
    }

    /// Watches claim `name` for the quiet period: the first version `violation` objects to,
    /// or an `IPAddress` for it, fails the step (with that version and the claim's
    /// `IPAddress`es as evidence).
    pub async fn stays(
        &self,
        name: &str,
        check: &mut Check,
        violation: impl Fn(&DynamicObject) -> Option<String>,
    ) -> Result<DynamicObject, Failed> {
        self.watch_quietly(name, check, |claim, addresses| {
            violation(claim).or_else(|| {
                (!addresses.is_empty()).then(|| "an IPAddress was created for it".to_string())
            })
        })
        .await
    }

    /// Watches the deleted claim `name` for the quiet period: it must keep existing, and keep
    /// its `IPAddress`.
    pub async fn stays_deleting(
        &self,
        name: &str,
        check: &mut Check,
    ) -> Result<DynamicObject, Failed> {
        self.watch_quietly(name, check, |_, addresses| {
            addresses
                .is_empty()
                .then(|| "its IPAddress was deleted".to_string())
        })
        .await
    }

    async fn watch_quietly(
        &self,
        name: &str,
        check: &mut Check,
        violation: impl Fn(&DynamicObject, &[DynamicObject]) -> Option<String>,
    ) -> Result<DynamicObject, Failed> {
        let started = Instant::now();
        loop {
            let claim = self
                .get(&self.suite.claims, name)
                .await?
                .ok_or_else(|| format!("claim {name} disappeared"))?;
            let addresses = self.addresses_of(name).await?;
            if let Some(why) = violation(&claim, &addresses) {
                check.saw(&format!("claim {name}: {why}"), &claim);
                for address in &addresses {
                    check.saw("its IPAddress", address);
                }
                return Err(format!(
                    "claim {name}: {why} (after {:.1}s)",
                    started.elapsed().as_secs_f64()
                ));
            }
            if started.elapsed() >= self.suite.quiet() {
                return Ok(claim);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Whether realising claim `name` ever showed an `addressRef` before its `IPAddress`.
    pub fn was_early(&self, name: &str) -> bool {
        let made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        made.early.contains(name)
    }

    /// Deletes everything the scenario made, claims first so that the provider releases what
    /// it holds. What does not go within the act timeout loses its finalizers (the provider did
    /// not let it go); every such object is named in the result.
    pub async fn cleanup(&self) -> Vec<String> {
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|p| p.into_inner()));
        let s = self.suite;
        let mut left = Vec::new();
        let claims: Vec<String> = made.claims.clone();
        let mut addresses: BTreeSet<String> = made.addresses.iter().cloned().collect();
        for address in self.all_addresses().await.unwrap_or_default() {
            if let Some(claim) = address.data["spec"]["claimRef"]["name"].as_str()
                && claims.iter().any(|c| c == claim)
            {
                addresses.insert(address.name_any());
            }
        }
        let addresses: Vec<String> = addresses.into_iter().collect();
        // Paused Clusters would hold their claims' deletion.
        for cluster in &made.clusters {
            let unpause = json!({"metadata": {"annotations": {PAUSED: null}},
                                 "spec": {"paused": false}});
            let _ = s
                .clusters
                .patch(cluster, &PatchParams::default(), &Patch::Merge(&unpause))
                .await;
        }
        for (api, names, kind) in [
            (&s.claims, &claims, "IPAddressClaim"),
            (&s.addresses, &addresses, "IPAddress"),
            (&s.pools, &made.pools, s.pool_resource.kind.as_str()),
            (&s.clusters, &made.clusters, "Cluster"),
        ] {
            for name in names {
                let _ = self.delete(api, name).await;
            }
            let started = Instant::now();
            let mut remaining: Vec<&String> = names.iter().collect();
            while !remaining.is_empty() && started.elapsed() < s.act() {
                let mut still = Vec::new();
                for name in remaining {
                    if matches!(api.get_opt(name).await, Ok(Some(_))) {
                        still.push(name);
                    }
                }
                remaining = still;
                if !remaining.is_empty() {
                    tokio::time::sleep(POLL).await;
                }
            }
            for name in remaining {
                let strip = json!({"metadata": {"finalizers": null}});
                let _ = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&strip))
                    .await;
                left.push(format!(
                    "{kind} {name} was not gone {}s after its deletion: the suite removed its \
                     finalizers",
                    s.act().as_secs()
                ));
            }
        }
        left
    }
}

fn remember_early(made: &Mutex<Made>, claim: &str) {
    remember(made, |m| {
        m.early.insert(claim.to_string());
    });
}

async fn create(api: &Api<DynamicObject>, body: &Value) -> Result<DynamicObject, kube::Error> {
    let object: DynamicObject =
        serde_json::from_value(body.clone()).map_err(kube::Error::SerdeError)?;
    api.create(&PostParams::default(), &object).await
}

/// `status.addressRef.name`, when set.
pub fn address_ref(claim: &DynamicObject) -> Option<String> {
    claim.data["status"]["addressRef"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

/// What a claim shows when the suite stops waiting on it, for a failure's message: so a failed
/// check says what the provider did instead (its `addressRef`, its `Ready` condition with reason
/// and message, its finalizers), not only what did not happen.
pub fn claim_state(claim: &DynamicObject) -> String {
    let address = match address_ref(claim) {
        Some(name) => format!("addressRef {name}"),
        None => "no addressRef".to_string(),
    };
    let ready = match ready(claim) {
        Some(r) => format!(
            "Ready={} {} {:?}",
            r["status"].as_str().unwrap_or("?"),
            r["reason"].as_str().unwrap_or("(no reason)"),
            r["message"].as_str().unwrap_or_default()
        ),
        None => "no Ready condition".to_string(),
    };
    format!("{address}, {ready}, finalizers {:?}", claim.finalizers())
}

/// The claim's `Ready` condition (v1beta2 `status.conditions`).
pub fn ready(claim: &DynamicObject) -> Option<&Value> {
    condition(&claim.data["status"]["conditions"], "Ready")
}

/// The claim's `Ready` condition in the v1beta1 mirror (`status.deprecated.v1beta1.conditions`).
pub fn legacy_ready(claim: &DynamicObject) -> Option<&Value> {
    condition(
        &claim.data["status"]["deprecated"]["v1beta1"]["conditions"],
        "Ready",
    )
}

fn condition<'v>(list: &'v Value, type_: &str) -> Option<&'v Value> {
    list.as_array()?
        .iter()
        .find(|c| c["type"].as_str() == Some(type_))
}

/// Whether the claim's `Ready` has `status` (and `reason`, when given).
pub fn ready_is(claim: &DynamicObject, status: &str, reason: Option<&str>) -> bool {
    ready(claim).is_some_and(|r| {
        r["status"].as_str() == Some(status)
            && reason.is_none_or(|reason| r["reason"].as_str() == Some(reason))
    })
}

/// Something the provider wrote on a claim it must leave alone: a finalizer, a status.
pub fn touched(claim: &DynamicObject) -> Option<String> {
    if !claim.finalizers().is_empty() {
        return Some(format!("finalizers {:?} were added", claim.finalizers()));
    }
    match claim.data.get("status") {
        Some(status) if !status.is_null() && status != &json!({}) => {
            Some("its status was written".into())
        }
        _ => None,
    }
}

/// The address an `IPAddress` holds, parsed.
pub fn ip_of(address: &DynamicObject) -> Option<IpAddr> {
    address.data["spec"]["address"].as_str()?.parse().ok()
}

/// The record of one check while it runs.
pub struct Check {
    report: CheckReport,
    started: Instant,
}

impl Check {
    pub fn new(id: &str) -> Check {
        Check {
            report: CheckReport::new(profiles::spec(id)),
            started: Instant::now(),
        }
    }

    /// Keeps `object` (without its managed fields) as evidence, with a note.
    pub fn saw(&mut self, note: &str, object: &DynamicObject) {
        let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
        if let Some(meta) = value["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        self.report.evidence.push(Evidence {
            note: note.to_string(),
            object: Some(value),
        });
    }

    pub fn note(&mut self, note: &str) {
        self.report.evidence.push(Evidence {
            note: note.to_string(),
            object: None,
        });
    }

    pub fn timing(&mut self, what: &str, took: Duration) {
        self.report
            .timings
            .insert(what.to_string(), round(took.as_secs_f64()));
    }

    /// Ends the check: passed with `Ok(what it established)`, failed with `Err(why)`.
    pub fn end(mut self, result: Result<String, Failed>) -> CheckReport {
        let (outcome, message) = match result {
            Ok(message) => (Outcome::Pass, message),
            Err(message) => (Outcome::Fail, message),
        };
        self.report.result = outcome;
        self.report.message = message;
        self.report.duration_seconds = round(self.started.elapsed().as_secs_f64());
        self.report
    }
}

/// The checks of one profile as they end; [`Checks::finish`] fails every check the profile did
/// not reach, naming the step that stopped it.
pub struct Checks {
    profile: Profile,
    done: Vec<CheckReport>,
}

impl Checks {
    pub fn new(profile: Profile) -> Checks {
        Checks {
            profile,
            done: Vec::new(),
        }
    }

    pub fn push(&mut self, report: CheckReport) {
        self.done.push(report);
    }

    /// Ends check `check` with `result` and records it.
    pub fn end(&mut self, check: Check, result: Result<String, Failed>) {
        self.push(check.end(result));
    }

    /// Ends check `id`, decided by `decide` on objects already seen, which are its evidence.
    pub fn end_with(
        &mut self,
        id: &str,
        evidence: &[&DynamicObject],
        decide: impl FnOnce(&mut Check) -> Result<String, Failed>,
    ) {
        let mut check = Check::new(id);
        for object in evidence {
            let kind = object
                .types
                .as_ref()
                .map(|t| t.kind.as_str())
                .unwrap_or("object");
            check.saw(&format!("{kind} {}", object.name_any()), object);
        }
        let result = decide(&mut check);
        self.end(check, result);
    }

    /// The profile's reports in catalogue order; checks not reached fail with `stopped`.
    pub fn finish(mut self, stopped: Option<&str>) -> Vec<CheckReport> {
        let mut out = Vec::new();
        for spec in self.profile.checks() {
            match self.done.iter().position(|c| c.id == spec.id) {
                Some(i) => out.push(self.done.remove(i)),
                None => {
                    let mut report = CheckReport::new(spec);
                    report.result = Outcome::Fail;
                    report.message = format!(
                        "not reached: {}",
                        stopped.unwrap_or("the profile ended before this check")
                    );
                    out.push(report);
                }
            }
        }
        out
    }
}

/// Whether `pool`'s in-use units include the address of `address`, with the declared prefix
/// and gateway; `Err` says what differs.
pub fn in_pool(pool: &Pool, address: &DynamicObject) -> Result<IpAddr, Failed> {
    let name = address.name_any();
    let ip = ip_of(address).ok_or_else(|| {
        format!(
            "IPAddress {name}: spec.address {} is not an IP address",
            address.data["spec"]["address"]
        )
    })?;
    if !pool.block.addresses().contains(&ip) {
        return Err(format!(
            "IPAddress {name}: {ip} is not one of pool {}'s addresses {:?}",
            pool.name,
            pool.block.cidrs()
        ));
    }
    let prefix = address.data["spec"]["prefix"].as_u64();
    if prefix != Some(pool.block.prefix() as u64) {
        return Err(format!(
            "IPAddress {name}: spec.prefix is {:?}, the pool's is {}",
            prefix,
            pool.block.prefix()
        ));
    }
    let gateway = address.data["spec"]["gateway"]
        .as_str()
        .map(|g| g.parse::<IpAddr>().map_err(|_| g.to_string()));
    match (gateway, pool.block.gateway()) {
        (None, None) => {}
        (Some(Ok(got)), Some(want)) if got == want => {}
        (got, want) => {
            return Err(format!(
                "IPAddress {name}: spec.gateway is {got:?}, the pool's is {want:?}"
            ));
        }
    }
    Ok(ip)
}
