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

use crate::config::{Block, ProviderConfig, SubPrefixGateway, carved_values, render};
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
    /// The parent pools' API, when the suite's pools are carved from one.
    parents: Option<Api<DynamicObject>>,
    /// A short tag in every object name of this run, so that runs never collide.
    run: String,
    next_unit: AtomicU32,
}

/// A pool the suite made: its name, uid and where its addresses come from.
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub uid: String,
    space: Space,
}

/// Where a pool's addresses come from, and so what its `IPAddress`es must say.
#[derive(Clone, Debug)]
enum Space {
    /// The units of a block: the first address of each, with the declared prefix and gateway.
    Units(Block),
    /// `size` sub-prefixes of the parent `parent`, as the pool got them: any address of one but
    /// its network address and its gateway, the sub-prefix's length as prefix.
    Carved {
        parent: String,
        size: u32,
        gateway: SubPrefixGateway,
        sub_prefixes: Vec<(IpAddr, u8)>,
    },
}

/// The API of `kind` in `group` at `api_version`, found by discovery: namespaced in `ns`, or
/// cluster-wide for a cluster-scoped kind.
async fn api_of_kind(
    client: &Client,
    group: &str,
    api_version: &str,
    kind: &str,
    ns: &str,
) -> anyhow::Result<(Api<DynamicObject>, ApiResource)> {
    use anyhow::Context as _;
    let version = api_version.split('/').nth(1).unwrap_or_default();
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("the API server does not serve {api_version} {kind}"))?;
    let api = match capabilities.scope {
        kube::discovery::Scope::Namespaced => Api::namespaced_with(client.clone(), ns, &resource),
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    Ok((api, resource))
}

impl Suite {
    pub async fn new(client: Client, config: ProviderConfig) -> anyhow::Result<Suite> {
        let ns = config.namespace.clone();
        let p = &config.pool;
        let (pools, pool_resource) =
            api_of_kind(&client, &p.group, &config.pool_api_version(), &p.kind, &ns).await?;
        let parents = match &p.parent {
            Some(parent) => {
                let api_version = config.parent_api_version();
                let (api, _) =
                    api_of_kind(&client, &parent.group, &api_version, &parent.kind, &ns).await?;
                Some(api)
            }
            None => None,
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
            parents,
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
            parent: tokio::sync::OnceCell::new(),
        }
    }

    /// A block of `size` units (room for `capacity`) from the declared units; `None` when the
    /// pools are carved from a parent instead.
    fn next_block(&self, size: u32, capacity: u32) -> Result<Option<Block>, Failed> {
        let Some(units) = &self.config.pool.units else {
            return Ok(None);
        };
        let offset = self.next_unit.fetch_add(capacity, Ordering::SeqCst);
        if offset + capacity > units.span {
            return Err(format!(
                "the run needs more than pool.units.span ({}) units from {}",
                units.span, units.first
            ));
        }
        Ok(Some(units.block(offset, size, capacity)))
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
    parents: Vec<String>,
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
    /// The name of the scenario's parent pool, once it is created.
    parent: tokio::sync::OnceCell<String>,
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

    /// Creates a pool `key` of `size` units (room for `capacity`) from the provider's template;
    /// a pool carved from a parent asks for `size` sub-prefixes, and is returned once it has them.
    pub async fn pool(&self, key: &str, size: u32, capacity: u32) -> Result<Pool, Failed> {
        let block = self.suite.next_block(size, capacity)?;
        let name = self.name(key);
        remember(&self.made, |m| m.pools.push(name.clone()));
        let space = match block {
            Some(block) => Space::Units(block),
            None => self.carved_space(size).await?,
        };
        self.apply_pool(&name, space).await
    }

    /// Grows (or shrinks) `pool` to `size` units by applying the template again.
    pub async fn resize(&self, pool: &Pool, size: u32) -> Result<Pool, Failed> {
        let space = match &pool.space {
            Space::Units(block) => Space::Units(block.resized(size)),
            Space::Carved { .. } => self.carved_space(size).await?,
        };
        self.apply_pool(&pool.name, space).await
    }

    /// A carved pool's space of `size` sub-prefixes, before it has any; creates the scenario's
    /// parent pool first if it does not exist yet.
    async fn carved_space(&self, size: u32) -> Result<Space, Failed> {
        let s = self.suite;
        let (Some(config), Some(parents)) = (&s.config.pool.parent, &s.parents) else {
            return Err("the provider config declares neither units nor a parent".into());
        };
        let parent = self
            .parent
            .get_or_try_init(|| async {
                let name = self.name("parent");
                let body = render(&config.template, &[], &name, &s.config.namespace)
                    .map_err(|e| format!("{e:#}"))?;
                remember(&self.made, |m| m.parents.push(name.clone()));
                self.apply(parents, &name, body, "parent pool").await?;
                Ok::<_, Failed>(name)
            })
            .await?;
        Ok(Space::Carved {
            parent: parent.clone(),
            size,
            gateway: config.gateway,
            sub_prefixes: Vec::new(),
        })
    }

    async fn apply_pool(&self, name: &str, space: Space) -> Result<Pool, Failed> {
        let s = self.suite;
        let values = match &space {
            Space::Units(block) => block.values(),
            Space::Carved { parent, size, .. } => carved_values(*size, parent),
        };
        let body = render(&s.config.pool.template, &values, name, &s.config.namespace)
            .map_err(|e| format!("{e:#}"))?;
        let pool = self.apply(&s.pools, name, body, "pool").await?;
        let mut pool = Pool {
            name: name.to_string(),
            uid: pool.uid().unwrap_or_default(),
            space,
        };
        if let Space::Carved { .. } = pool.space {
            self.wait_carved(&mut pool).await?;
        }
        Ok(pool)
    }

    /// Server-side applies `body` through `api` (without a namespace for a cluster-scoped kind).
    async fn apply(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        mut body: Value,
        what: &str,
    ) -> Result<DynamicObject, Failed> {
        let cluster_scoped = api.resource_url().split('/').all(|p| p != "namespaces");
        if cluster_scoped && let Some(meta) = body["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(name, &params, &Patch::Apply(&body))
            .await
            .map_err(|e| format!("applying {what} {name} from the template: {e}"))
    }

    /// Waits until the carved `pool` holds the sub-prefixes it asks for, and records them: the
    /// `IPAddress`es of the realised claims on its parent that it owns, not being deleted. The
    /// profile starts from a pool that is ready to serve every address it declares.
    async fn wait_carved(&self, pool: &mut Pool) -> Result<(), Failed> {
        let Space::Carved {
            parent,
            size,
            sub_prefixes,
            ..
        } = &mut pool.space
        else {
            return Ok(());
        };
        let started = Instant::now();
        let mut seen = Vec::new();
        while started.elapsed() < self.suite.act() {
            seen = self.sub_prefixes_of(&pool.uid, parent).await?;
            if seen.len() == *size as usize {
                *sub_prefixes = seen;
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
        Err(format!(
            "pool {} did not get its {size} sub-prefixes of {parent} within {}s: it held {:?}",
            pool.name,
            self.suite.act().as_secs(),
            seen.iter()
                .map(|(ip, len)| format!("{ip}/{len}"))
                .collect::<Vec<_>>()
        ))
    }

    /// The sub-prefixes the pool of uid `owner` holds of `parent`, lowest first.
    async fn sub_prefixes_of(
        &self,
        owner: &str,
        parent: &str,
    ) -> Result<Vec<(IpAddr, u8)>, Failed> {
        let parent_ref = self.parent_ref(parent);
        let addresses = self.all_addresses().await?;
        let mut held = Vec::new();
        for claim in self.all_claims().await? {
            let owned = claim.owner_references().iter().any(|o| o.uid == owner);
            if !owned
                || claim.data["spec"]["poolRef"] != parent_ref
                || claim.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let Some(address) = address_ref(&claim)
                .and_then(|name| addresses.iter().find(|a| a.name_any() == name))
            else {
                continue;
            };
            let prefix = address.data["spec"]["prefix"].as_u64();
            // A prefix that cannot be the address's (longer than the family allows) names no
            // sub-prefix; the pool is then short of one, and the wait says so.
            let Some((ip, len)) = ip_of(address).zip(prefix.and_then(|p| u8::try_from(p).ok()))
            else {
                continue;
            };
            if len <= max_len(ip) {
                held.push((network_of(ip, len), len));
            }
        }
        held.sort();
        Ok(held)
    }

    /// The `spec.poolRef` of a claim on the scenario's parent `parent`.
    fn parent_ref(&self, parent: &str) -> Value {
        match &self.suite.config.pool.parent {
            Some(p) => json!({"apiGroup": p.group, "kind": p.kind, "name": parent}),
            None => Value::Null,
        }
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
    /// it holds, then `IPAddress`es, pools, the parent pool and Clusters. The claims and
    /// `IPAddress`es on the parent are the provider's: they must go once the pools that hold
    /// them are gone (by owner reference or by the provider); the suite only waits for them.
    /// What does not go within the act timeout is deleted and loses its finalizers (the provider
    /// did not let it go); every such object is named in the result.
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
        let pool_kind = s.pool_resource.kind.as_str();
        self.remove(&s.claims, &claims, "IPAddressClaim", true, &mut left)
            .await;
        self.remove(&s.addresses, &addresses, "IPAddress", true, &mut left)
            .await;
        self.remove(&s.pools, &made.pools, pool_kind, true, &mut left)
            .await;
        if let Some(parents) = &s.parents {
            let on_parents = |object: &DynamicObject| {
                made.parents
                    .iter()
                    .any(|p| object.data["spec"]["poolRef"] == self.parent_ref(p))
            };
            let names = |objects: Vec<DynamicObject>| -> Vec<String> {
                objects
                    .iter()
                    .filter(|o| on_parents(o))
                    .map(|o| o.name_any())
                    .collect()
            };
            let claims = names(self.all_claims().await.unwrap_or_default());
            let addresses = names(self.all_addresses().await.unwrap_or_default());
            let what = "IPAddressClaim on the parent";
            self.remove(&s.claims, &claims, what, false, &mut left)
                .await;
            let what = "IPAddress on the parent";
            self.remove(&s.addresses, &addresses, what, false, &mut left)
                .await;
            self.remove(parents, &made.parents, "parent pool", true, &mut left)
                .await;
        }
        self.remove(&s.clusters, &made.clusters, "Cluster", true, &mut left)
            .await;
        left
    }

    /// Deletes the objects `names` of `api` (or, without `delete`, lets them go by themselves)
    /// and waits up to the act timeout; deletes what is left and strips its finalizers, naming
    /// it in `left`.
    async fn remove(
        &self,
        api: &Api<DynamicObject>,
        names: &[String],
        kind: &str,
        delete: bool,
        left: &mut Vec<String>,
    ) {
        let s = self.suite;
        if delete {
            for name in names {
                let _ = self.delete(api, name).await;
            }
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
            let _ = self.delete(api, name).await;
            let strip = json!({"metadata": {"finalizers": null}});
            let _ = api
                .patch(name, &PatchParams::default(), &Patch::Merge(&strip))
                .await;
            let asked = if delete {
                "after its deletion"
            } else {
                "after its pool's"
            };
            left.push(format!(
                "{kind} {name} was not gone {}s {asked}: the suite removed its finalizers",
                s.act().as_secs()
            ));
        }
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

impl Pool {
    /// The pool's units in use, or its sub-prefixes, as CIDRs (for messages).
    pub fn cidrs(&self) -> Vec<String> {
        match &self.space {
            Space::Units(block) => block.cidrs(),
            Space::Carved { sub_prefixes, .. } => sub_prefixes
                .iter()
                .map(|(ip, len)| format!("{ip}/{len}"))
                .collect(),
        }
    }

    /// The highest address the pool hands out: its last unit's, or the address before the
    /// broadcast address of its last sub-prefix (the sub-prefix's one address, when it has one).
    pub fn last_address(&self) -> Result<IpAddr, Failed> {
        let last = match &self.space {
            Space::Units(block) => block.size.checked_sub(1).map(|i| block.unit(i)),
            Space::Carved { sub_prefixes, .. } => {
                sub_prefixes.last().and_then(|&(network, len)| {
                    let host_bits = u32::from(max_len(network).checked_sub(len)?);
                    let offset = 1u128.checked_shl(host_bits)?.checked_sub(2)?;
                    Some(offset_by(network, offset))
                })
            }
        };
        last.ok_or_else(|| format!("pool {} has no address to hand out", self.name))
    }

    /// The `spec.prefix` and `spec.gateway` an `IPAddress` holding `ip` must carry; `Err` when
    /// `ip` is not the pool's to hand out.
    pub fn expected(&self, ip: IpAddr) -> Result<(u8, Option<IpAddr>), Failed> {
        match &self.space {
            Space::Units(block) if block.addresses().contains(&ip) => {
                Ok((block.prefix(), block.gateway()))
            }
            Space::Carved {
                sub_prefixes,
                gateway,
                ..
            } => {
                let &(network, len) = sub_prefixes
                    .iter()
                    .find(|&&(network, len)| network_of(ip, len) == network)
                    .ok_or_else(|| self.not_ours(ip))?;
                let gateway = match gateway {
                    SubPrefixGateway::First => Some(offset_by(network, 1)),
                    SubPrefixGateway::None => None,
                };
                if ip == network || Some(ip) == gateway {
                    return Err(format!(
                        "{ip} is the network address or the gateway of {network}/{len}, one of \
                         pool {}'s sub-prefixes",
                        self.name
                    ));
                }
                Ok((len, gateway))
            }
            Space::Units(_) => Err(self.not_ours(ip)),
        }
    }

    /// What the `spec` of an `IPAddress` holding the pool's `ip` says: `address`, `prefix` and,
    /// when the pool has one, `gateway`.
    pub fn address_spec(&self, ip: IpAddr) -> Result<Value, Failed> {
        let (prefix, gateway) = self.expected(ip)?;
        let mut spec = json!({"address": ip.to_string(), "prefix": prefix});
        if let Some(gateway) = gateway {
            spec["gateway"] = gateway.to_string().into();
        }
        Ok(spec)
    }

    fn not_ours(&self, ip: IpAddr) -> Failed {
        format!(
            "{ip} is not one of pool {}'s addresses {:?}",
            self.name,
            self.cidrs()
        )
    }
}

fn max_len(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

/// The network address of `ip`'s prefix of length `len`.
pub fn network_of(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(len.min(32)))
                .unwrap_or(0);
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(len.min(128)))
                .unwrap_or(0);
            IpAddr::V6((u128::from(a) & mask).into())
        }
    }
}

fn offset_by(ip: IpAddr, n: u128) -> IpAddr {
    match ip {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a).wrapping_add(n as u32)).into()),
        IpAddr::V6(a) => IpAddr::V6(u128::from(a).wrapping_add(n).into()),
    }
}

/// Whether `address` holds an address of `pool` with the prefix and gateway the pool gives it;
/// `Err` says what differs.
pub fn in_pool(pool: &Pool, address: &DynamicObject) -> Result<IpAddr, Failed> {
    let name = address.name_any();
    let ip = ip_of(address).ok_or_else(|| {
        format!(
            "IPAddress {name}: spec.address {} is not an IP address",
            address.data["spec"]["address"]
        )
    })?;
    let (want_prefix, want_gateway) = pool
        .expected(ip)
        .map_err(|e| format!("IPAddress {name}: {e}"))?;
    let prefix = address.data["spec"]["prefix"].as_u64();
    if prefix != Some(want_prefix as u64) {
        return Err(format!(
            "IPAddress {name}: spec.prefix is {prefix:?}, the pool's is {want_prefix}"
        ));
    }
    let gateway = address.data["spec"]["gateway"]
        .as_str()
        .map(|g| g.parse::<IpAddr>().map_err(|_| g.to_string()));
    match (gateway, want_gateway) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn carved(sub_prefixes: &[(&str, u8)], gateway: SubPrefixGateway) -> Pool {
        Pool {
            name: "p".into(),
            uid: "u".into(),
            space: Space::Carved {
                parent: "parent".into(),
                size: sub_prefixes.len() as u32,
                gateway,
                sub_prefixes: sub_prefixes
                    .iter()
                    .map(|(ip, len)| (ip.parse().unwrap(), *len))
                    .collect(),
            },
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_carved_pool_expects_its_sub_prefixes_length_and_first_address_as_gateway() {
        let pool = carved(
            &[("10.90.0.0", 30), ("10.90.0.8", 30)],
            SubPrefixGateway::First,
        );
        assert_eq!(
            pool.expected(ip("10.90.0.10")),
            Ok((30, Some(ip("10.90.0.9"))))
        );
        assert_eq!(
            pool.expected(ip("10.90.0.2")),
            Ok((30, Some(ip("10.90.0.1"))))
        );
        // The network address and the gateway are never handed out; 10.90.0.6 is not the pool's.
        for other in ["10.90.0.8", "10.90.0.9", "10.90.0.6"] {
            assert!(pool.expected(ip(other)).is_err(), "{other}");
        }
        assert_eq!(pool.last_address(), Ok(ip("10.90.0.10")));
        assert_eq!(
            pool.address_spec(ip("10.90.0.10")).unwrap(),
            json!({"address": "10.90.0.10", "prefix": 30, "gateway": "10.90.0.9"})
        );
        let none = carved(&[("fd00::", 126)], SubPrefixGateway::None);
        assert_eq!(none.expected(ip("fd00::1")), Ok((126, None)));
        assert_eq!(none.last_address(), Ok(ip("fd00::2")));
        assert!(carved(&[], SubPrefixGateway::None).last_address().is_err());
    }

    #[test]
    fn network_of_masks_the_host_bits() {
        assert_eq!(network_of(ip("10.90.0.6"), 30), ip("10.90.0.4"));
        assert_eq!(network_of(ip("10.90.0.6"), 0), ip("0.0.0.0"));
        assert_eq!(network_of(ip("fd00::1:2"), 112), ip("fd00::1:0"));
    }
}
