//! The provider config: what a provider declares about itself (`--provider-config`), and the
//! pool template it is rendered from.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use serde::Deserialize;

use crate::profiles::Profile;

/// What the provider under test declares. See docs/conformance.md for every field.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// Who made the provider and which build is tested: copied into the report.
    #[serde(default)]
    pub implementation: Implementation,
    /// The namespace the suite creates its pools, claims and Clusters in.
    pub namespace: String,
    pub pool: PoolConfig,
    /// The profiles the provider supports; the checks of every other profile are skipped.
    pub profiles: Vec<Profile>,
    #[serde(default)]
    pub timeouts: Timeouts,
    /// The Cluster the lifecycle and move profiles pause and delete, with placeholders
    /// `{{name}}` and `{{namespace}}`; the suite sets `spec.paused` and the paused annotation.
    /// CAPI's Cluster controller must be able to delete it: the default names a
    /// `ConformanceCluster` infrastructure (conformance/crds/).
    #[serde(default = "default_cluster_template")]
    pub cluster_template: String,
    /// How many claims the burst check creates at once (a pool of that many addresses).
    #[serde(default = "default_burst")]
    pub burst: usize,
    /// Free-form facts about the environment (the Cluster API version, say): copied into the
    /// report beside the Kubernetes version the suite reads from the API server.
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
}

fn default_cluster_template() -> String {
    "apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
spec:
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: ConformanceCluster
    name: \"{{name}}\"
"
    .to_string()
}

fn default_burst() -> usize {
    20
}

#[derive(Clone, Debug, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Implementation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contact: Vec<String>,
}

/// The pool kind under test and how to make a pool of N units: from `units`, or carved from a
/// `parent` (exactly one of the two).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolConfig {
    /// The pool's API group, as claims name it in `spec.poolRef.apiGroup`.
    pub group: String,
    /// The pool's kind, as claims name it in `spec.poolRef.kind`.
    pub kind: String,
    /// A pool manifest with placeholders (see [`render`]).
    pub template: String,
    /// The address space the suite hands to its pools, and what every `IPAddress` must say.
    #[serde(default)]
    pub units: Option<Units>,
    /// The pool the suite's pools are carved from, when they take their addresses from a parent.
    #[serde(default)]
    pub parent: Option<ParentConfig>,
}

/// A parent pool: one per profile, created before the profile's first pool and deleted after its
/// last. Each pool of the profile names it (`{{parent}}`) and asks for `{{size}}` sub-prefixes;
/// the suite reads which ones it got from the contract's objects: the claims on the parent that
/// the pool owns, and their `IPAddress`es (address and prefix: the sub-prefix).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParentConfig {
    /// The parent's API group.
    pub group: String,
    /// The parent's kind.
    pub kind: String,
    /// The parent's manifest, with placeholders `{{name}}` and `{{namespace}}`.
    pub template: String,
    /// The `spec.gateway` every `IPAddress` from a sub-prefix must carry.
    pub gateway: SubPrefixGateway,
}

/// The gateway of the addresses of a carved sub-prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SubPrefixGateway {
    /// The sub-prefix's first address after its network address (`10.0.0.1` in `10.0.0.0/30`).
    First,
    /// None.
    None,
}

/// The address space the suite's pools are made from: consecutive units (addresses, or
/// sub-prefixes of `unitPrefix`) from `first`. Each pool gets a block of its own, so that no two
/// pools of one run overlap.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Units {
    /// The first unit's (first) address.
    pub first: IpAddr,
    /// The length of one unit: 32 (IPv4) or 128 (IPv6) for single addresses, shorter for a pool
    /// that hands out sub-prefixes. Defaults to a single address.
    #[serde(default)]
    pub unit_prefix: Option<u8>,
    /// The `spec.prefix` every `IPAddress` of the pool must carry.
    pub prefix: u8,
    /// The `spec.gateway` every `IPAddress` of the pool must carry; none when absent.
    #[serde(default)]
    pub gateway: Option<IpAddr>,
    /// How many units the run may use from `first` (the suite stops before it would go
    /// further). Defaults to 256.
    #[serde(default = "default_span")]
    pub span: u32,
}

fn default_span() -> u32 {
    256
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Timeouts {
    /// How long a provider may take to do what a check waits for (realise, release, set a
    /// condition).
    #[serde(default = "default_act")]
    pub act_seconds: u64,
    /// How long the suite watches that nothing happens (a paused claim, a claim of another
    /// provider, a claim that cannot be served).
    #[serde(default = "default_quiet")]
    pub quiet_seconds: u64,
}

fn default_act() -> u64 {
    60
}

fn default_quiet() -> u64 {
    5
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            act_seconds: default_act(),
            quiet_seconds: default_quiet(),
        }
    }
}

impl Timeouts {
    pub fn act(&self) -> Duration {
        Duration::from_secs(self.act_seconds)
    }
    pub fn quiet(&self) -> Duration {
        Duration::from_secs(self.quiet_seconds)
    }
}

impl ProviderConfig {
    pub fn from_yaml(text: &str) -> anyhow::Result<ProviderConfig> {
        let config: ProviderConfig =
            serde_saphyr::from_str(text).context("parsing the provider config")?;
        config.validate()?;
        Ok(config)
    }

    pub fn from_file(path: &std::path::Path) -> anyhow::Result<ProviderConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the provider config {}", path.display()))?;
        Self::from_yaml(&text).with_context(|| format!("in {}", path.display()))
    }

    fn validate(&self) -> anyhow::Result<()> {
        match (&self.pool.units, &self.pool.parent) {
            (Some(units), None) => units.validate()?,
            (None, Some(parent)) => {
                let rendered =
                    render(&parent.template, &[], "p", "ns").context("in pool.parent.template")?;
                ensure_kind(
                    &rendered,
                    &parent.group,
                    &parent.kind,
                    "pool.parent.template",
                )?;
            }
            _ => bail!("pool: give either units or parent, not both or neither"),
        }
        ensure!(self.burst >= 2, "burst must be at least 2");
        self.cluster("c")?;
        // The template must render to a manifest of the declared kind.
        let pool = render(&self.pool.template, &self.sample_values(), "p", "ns")?;
        ensure_kind(&pool, &self.pool.group, &self.pool.kind, "pool.template")
    }

    /// The placeholders' values of a pool of one unit, for checking the template.
    fn sample_values(&self) -> Vec<(&'static str, String)> {
        match &self.pool.units {
            Some(units) => units.block(0, 1, 1).values(),
            None => carved_values(1, "parent"),
        }
    }

    /// The Cluster `name`, from the cluster template.
    pub fn cluster(&self, name: &str) -> anyhow::Result<serde_json::Value> {
        let text = self
            .cluster_template
            .replace("{{name}}", name)
            .replace("{{ name }}", name)
            .replace("{{namespace}}", &self.namespace)
            .replace("{{ namespace }}", &self.namespace);
        let mut cluster: serde_json::Value =
            serde_saphyr::from_str(&text).context("the rendered clusterTemplate is not YAML")?;
        ensure!(
            cluster["kind"] == "Cluster",
            "clusterTemplate must render a Cluster"
        );
        cluster["metadata"]["name"] = name.into();
        cluster["metadata"]["namespace"] = self.namespace.as_str().into();
        Ok(cluster)
    }

    /// The pool's API version (`group/version`), from the template.
    pub fn pool_api_version(&self) -> String {
        api_version_of(render(&self.pool.template, &self.sample_values(), "p", "ns").ok())
    }

    /// The parent's API version, from its template; empty without a parent.
    pub fn parent_api_version(&self) -> String {
        let parent = self.pool.parent.as_ref();
        api_version_of(parent.and_then(|p| render(&p.template, &[], "p", "ns").ok()))
    }
}

fn api_version_of(object: Option<serde_json::Value>) -> String {
    object
        .and_then(|o| o["apiVersion"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Fails unless `object` is a `kind` of API group `group`.
fn ensure_kind(
    object: &serde_json::Value,
    group: &str,
    kind: &str,
    what: &str,
) -> anyhow::Result<()> {
    let rendered_kind = object["kind"].as_str().unwrap_or_default();
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    if rendered_kind != kind || api_version.split('/').next() != Some(group) {
        bail!("{what} renders {api_version} {rendered_kind}, not a {kind} of group {group}");
    }
    Ok(())
}

/// The placeholders' values of a pool carved from the parent `parent`: `{{size}}` sub-prefixes.
pub fn carved_values(size: u32, parent: &str) -> Vec<(&'static str, String)> {
    vec![("size", size.to_string()), ("parent", parent.to_string())]
}

impl Units {
    fn validate(&self) -> anyhow::Result<()> {
        let units = self;
        let max = units.max_len();
        let unit = units.unit_len();
        ensure!(
            unit <= max && units.prefix <= max,
            "pool.units: unitPrefix ({unit}) and prefix ({}) must be at most {max} for {}",
            units.prefix,
            units.first
        );
        if let Some(gateway) = units.gateway {
            ensure!(
                gateway.is_ipv4() == units.first.is_ipv4(),
                "pool.units.gateway {gateway} is not of the family of {}",
                units.first
            );
        }
        Ok(())
    }

    fn max_len(&self) -> u8 {
        if self.first.is_ipv4() { 32 } else { 128 }
    }

    fn unit_len(&self) -> u8 {
        self.unit_prefix.unwrap_or(self.max_len())
    }

    /// The block of `size` units (of `capacity` reserved) starting `offset` units from `first`.
    pub fn block(&self, offset: u32, size: u32, capacity: u32) -> Block {
        Block {
            units: self.clone(),
            offset,
            size,
            capacity,
        }
    }

    fn nth(&self, n: u32) -> IpAddr {
        let step: u128 = 1u128 << (self.max_len() - self.unit_len());
        match self.first {
            IpAddr::V4(a) => {
                let value = u32::from(a) as u128 + step * n as u128;
                IpAddr::V4(std::net::Ipv4Addr::from(value as u32))
            }
            IpAddr::V6(a) => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(a).wrapping_add(step * n as u128),
            )),
        }
    }
}

/// A pool's units: `size` of them in use now, `capacity` reserved for it (it may grow).
#[derive(Clone, Debug)]
pub struct Block {
    units: Units,
    offset: u32,
    pub size: u32,
    pub capacity: u32,
}

impl Block {
    /// The first address of unit `i` of this block.
    pub fn unit(&self, i: u32) -> IpAddr {
        self.units.nth(self.offset + i)
    }

    /// The first addresses of the units in use.
    pub fn addresses(&self) -> Vec<IpAddr> {
        (0..self.size).map(|i| self.unit(i)).collect()
    }

    /// The units in use as CIDRs (`10.0.0.5/32`, `fd00:0:0:5::/64`).
    pub fn cidrs(&self) -> Vec<String> {
        let len = self.units.unit_len();
        self.addresses()
            .iter()
            .map(|a| format!("{a}/{len}"))
            .collect()
    }

    /// The same block with `size` units in use.
    pub fn resized(&self, size: u32) -> Block {
        Block {
            size,
            ..self.clone()
        }
    }

    pub fn prefix(&self) -> u8 {
        self.units.prefix
    }

    pub fn gateway(&self) -> Option<IpAddr> {
        self.units.gateway
    }
}

impl Block {
    /// The placeholders' values of this block (see [`render`]).
    pub fn values(&self) -> Vec<(&'static str, String)> {
        let flow = |items: Vec<String>| {
            let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
            format!("[{}]", quoted.join(", "))
        };
        let last = self.unit(self.size.saturating_sub(1));
        vec![
            ("size", self.size.to_string()),
            ("first", self.unit(0).to_string()),
            ("last", last.to_string()),
            ("unitCidrs", flow(self.cidrs())),
            (
                "unitAddresses",
                flow(self.addresses().iter().map(IpAddr::to_string).collect()),
            ),
            ("prefix", self.units.prefix.to_string()),
            ("unitPrefix", self.units.unit_len().to_string()),
            (
                "gateway",
                self.units
                    .gateway
                    .map(|g| g.to_string())
                    .unwrap_or_default(),
            ),
        ]
    }
}

/// Renders a template with `values` (from [`Block::values`] or [`carved_values`]) and `{{name}}`
/// and `{{namespace}}`. A pool made of units has placeholders `{{size}}` (units in use),
/// `{{first}}` and `{{last}}` (the first addresses of the first and last unit), `{{unitCidrs}}` and
/// `{{unitAddresses}}` (flow lists of every unit as a CIDR, or as its first address),
/// `{{prefix}}`, `{{unitPrefix}}` and `{{gateway}}`; a pool carved from a parent has `{{size}}`
/// (sub-prefixes) and `{{parent}}` (the parent's name); a parent has only the name and namespace.
/// Any other placeholder is refused. The result's name and namespace are set by the suite
/// whatever the template says.
pub fn render(
    template: &str,
    values: &[(&'static str, String)],
    name: &str,
    namespace: &str,
) -> anyhow::Result<serde_json::Value> {
    let named = [
        ("name", name.to_string()),
        ("namespace", namespace.to_string()),
    ];
    let mut text = template.to_string();
    for (key, value) in named.iter().chain(values) {
        text = text.replace(&format!("{{{{{key}}}}}"), value);
        text = text.replace(&format!("{{{{ {key} }}}}"), value);
    }
    if let Some(start) = text.find("{{") {
        let rest: String = text[start..].chars().take(30).collect();
        bail!("the template has an unknown placeholder at {rest:?}");
    }
    let mut pool: serde_json::Value =
        serde_saphyr::from_str(&text).context("the rendered template is not YAML")?;
    ensure!(pool.is_object(), "the template must render one object");
    pool["metadata"]["name"] = name.into();
    pool["metadata"]["namespace"] = namespace.into();
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip_units() -> Units {
        Units {
            first: "10.0.0.250".parse().unwrap(),
            unit_prefix: None,
            prefix: 16,
            gateway: Some("10.0.0.1".parse().unwrap()),
            span: 256,
        }
    }

    #[test]
    fn blocks_step_by_units_and_carry_into_the_next_octet() {
        let block = ip_units().block(4, 3, 5);
        assert_eq!(
            block.cidrs(),
            ["10.0.0.254/32", "10.0.0.255/32", "10.0.1.0/32"]
        );
        let v6 = Units {
            first: "fd00:0:0:10::".parse().unwrap(),
            unit_prefix: Some(64),
            prefix: 64,
            gateway: None,
            span: 256,
        };
        assert_eq!(
            v6.block(1, 2, 2).cidrs(),
            ["fd00:0:0:11::/64", "fd00:0:0:12::/64"]
        );
    }

    #[test]
    fn templates_render_every_placeholder_and_refuse_unknown_ones() {
        let block = ip_units().block(0, 2, 2);
        let pool = render(
            "apiVersion: g/v1\nkind: K\nspec:\n  a: [\"{{first}}-{{ last }}\"]\n  b: {{unitCidrs}}\n  size: {{size}}\n  gw: \"{{gateway}}\"",
            &block.values(),
            "n",
            "ns",
        )
        .unwrap();
        assert_eq!(pool["spec"]["a"][0], "10.0.0.250-10.0.0.251");
        assert_eq!(pool["spec"]["b"][1], "10.0.0.251/32");
        assert_eq!(pool["spec"]["size"], 2);
        assert_eq!(pool["spec"]["gw"], "10.0.0.1");
        assert_eq!(pool["metadata"]["name"], "n");
        assert!(render("kind: {{nope}}", &block.values(), "n", "ns").is_err());
        // A carved pool's template has no units to render.
        let carved = carved_values(2, "par");
        assert!(render("kind: {{first}}", &carved, "n", "ns").is_err());
        let pool = render(
            "kind: K\nspec: {p: \"{{parent}}\", n: {{size}}}",
            &carved,
            "n",
            "ns",
        );
        assert_eq!(
            pool.unwrap()["spec"],
            serde_json::json!({"p": "par", "n": 2})
        );
    }

    #[test]
    fn a_pool_is_made_of_units_or_carved_from_a_parent_never_both() {
        let parent = "  parent:\n    group: g\n    kind: P\n    gateway: first\n    template: |\n      apiVersion: g/v1\n      kind: P\n";
        let units = "  units: {first: 10.0.0.1, prefix: 24}\n";
        let config = |pool_fields: &str| {
            ProviderConfig::from_yaml(&format!(
                "namespace: ns\nprofiles: [core]\npool:\n  group: g\n  kind: K\n  template: \"{{apiVersion: g/v1, kind: K, spec: {{n: {{{{size}}}}}}}}\"\n{pool_fields}"
            ))
        };
        assert!(config(units).is_ok());
        assert!(config(parent).is_ok());
        for wrong in [String::new(), format!("{units}{parent}")] {
            let error = format!("{:#}", config(&wrong).unwrap_err());
            assert!(error.contains("either units or parent"), "{error}");
        }
    }

    #[test]
    fn the_committed_provider_configs_parse_and_render() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("providers");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            ProviderConfig::from_file(&path).unwrap_or_else(|e| panic!("{e:#}"));
            seen += 1;
        }
        assert!(
            seen >= 4,
            "inpool's two configs, the reference's and metal3's"
        );
    }
}
