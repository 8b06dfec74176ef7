//! The CRD files generated from the Rust types (written and checked by `src/bin/crdgen.rs`).
//!
//! - `crds/`: inpool's pool CRDs (IP pools and prefix pools) and its reservation CRD, installed
//!   with inpool.
//! - `config/local-capi/`: CRDs for CAPI's `IPAddressClaim`, `IPAddress` (v1beta2 only) and the
//!   part of `Cluster` inpool reads, derived from inpool's own types of those kinds, **for local
//!   use only** (a demo without CAPI). CAPI core installs the real ones; never install these
//!   next to CAPI.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::kinds::WithPoolType;
use super::{Cluster, IPAddress, IPAddressClaim, IPPool, PoolKind};

/// The command that regenerates the files (named in their header).
pub const GENERATE_COMMAND: &str = "cargo run --bin crdgen";
/// Annotation marking the local CAPI CRDs.
pub const LOCAL_USE_ONLY_ANNOTATION: &str = "inpool.dev/local-use-only";

/// One generated file: its path relative to the repository root and its full text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedFile {
    pub path: String,
    pub content: String,
}

/// The IP pool CRDs (as installed), in the order of [`PoolKind::ALL`].
pub fn pool_crds() -> Vec<CustomResourceDefinition> {
    pool_kind_crds(|kind| !kind.is_prefix())
}

/// The CRDs of the pool kinds `which` picks, in the order of [`PoolKind::ALL`].
fn pool_kind_crds(which: impl Fn(&PoolKind) -> bool) -> Vec<CustomResourceDefinition> {
    PoolKind::ALL
        .into_iter()
        .filter(which)
        .map(|kind| kind.with_type(PoolCrd))
        .collect()
}

/// One pool kind's CRD, as installed.
struct PoolCrd;

impl WithPoolType for PoolCrd {
    type Output = CustomResourceDefinition;

    fn with<P: IPPool>(self) -> CustomResourceDefinition {
        with_claim_namespace_rules(tidy(P::crd()), P::KIND)
    }
}

/// Adds the rules that differ between the namespaced and the global kind (they share one spec
/// type, so one schema): on `spec.parentPool`'s `claimNamespace`, and on each
/// `spec.preAllocations` entry's (IP pools only).
fn with_claim_namespace_rules(
    crd: CustomResourceDefinition,
    kind: PoolKind,
) -> CustomResourceDefinition {
    let mut value = serde_json::to_value(&crd).expect("CRD serialises");
    let versions = value
        .pointer_mut("/spec/versions")
        .and_then(|v| v.as_array_mut())
        .expect("a CRD has versions");
    let mut per_kind = vec![(
        "parentPool",
        super::pool::rules::parent_claim_namespace(kind),
    )];
    if !kind.is_prefix() {
        per_kind.push((
            "preAllocations/items",
            super::pool::rules::pre_allocation_namespace(kind.is_namespaced()),
        ));
    }
    for version in versions {
        for (field, rule) in &per_kind {
            let rules = version
                .pointer_mut(&format!(
                    "/schema/openAPIV3Schema/properties/spec/properties/{field}"
                ))
                .and_then(|v| v.as_object_mut())
                .unwrap_or_else(|| panic!("the pool schema has spec.{field}"))
                .entry("x-kubernetes-validations")
                .or_insert_with(|| serde_json::Value::Array(Vec::new()));
            if let Some(rules) = rules.as_array_mut() {
                rules.push(rule.clone());
            }
        }
    }
    serde_json::from_value(value).expect("CRD deserialises")
}

/// The prefix pool CRDs (as installed), in the order of [`PoolKind::ALL`].
pub fn prefix_pool_crds() -> Vec<CustomResourceDefinition> {
    pool_kind_crds(|kind| kind.is_prefix())
}

/// Removes what schemars adds and controller-gen does not: `nullable: true` on optional fields
/// (an explicit `null` is then pruned by the API server, as for the upstream CRDs, instead of
/// being stored) and the root `title`.
fn tidy(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                map.remove("nullable");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(&crd).expect("CRD serialises");
    if let Some(versions) = value
        .pointer_mut("/spec/versions")
        .and_then(|v| v.as_array_mut())
    {
        for version in versions {
            if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
                strip(schema);
                if let Some(map) = schema.as_object_mut() {
                    map.remove("title");
                }
            }
        }
    }
    serde_json::from_value(value).expect("CRD deserialises")
}

/// The local-use-only CAPI CRDs.
pub fn local_capi_crds() -> Vec<CustomResourceDefinition> {
    [IPAddressClaim::crd(), IPAddress::crd(), Cluster::crd()]
        .into_iter()
        .map(tidy)
        .map(|mut crd| {
            crd.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(LOCAL_USE_ONLY_ANNOTATION.into(), "true".into());
            crd
        })
        .collect()
}

/// The file of `crd` in `dir`, named as controller-gen names it (`<group>_<plural>.yaml`).
fn crd_file(dir: &str, header: &str, crd: &CustomResourceDefinition) -> GeneratedFile {
    GeneratedFile {
        path: format!("{dir}/{}_{}.yaml", crd.spec.group, crd.spec.names.plural),
        content: format!("{header}---\n{}", to_yaml(crd)),
    }
}

fn to_yaml(crd: &CustomResourceDefinition) -> String {
    serde_saphyr::to_string(crd).expect("CRD serialises to YAML")
}

/// Every generated file, in a fixed order.
pub fn generated_files() -> Vec<GeneratedFile> {
    let pool_header = format!(
        "# Generated from the Rust types in src/api/pool/ by `{GENERATE_COMMAND}`. Do not edit:\n\
         # change the types and regenerate (`{GENERATE_COMMAND} -- --check` fails when this file is stale).\n"
    );
    let local_header = format!(
        "# LOCAL USE ONLY. Generated from inpool's Rust types in src/api/capi.rs by `{GENERATE_COMMAND}`.\n\
         # A stand-in for CAPI's CRD so that inpool can run without Cluster API (demo, local tests).\n\
         # Cluster API core installs the real CRD: never apply this file to a cluster with CAPI.\n\
         # Do not edit: change the types and regenerate.\n"
    );
    let prefix_header = pool_header.replace("src/api/pool/", "src/api/prefix_pool.rs");
    let mut files: Vec<GeneratedFile> = pool_crds()
        .iter()
        .map(|crd| crd_file("crds", &pool_header, crd))
        .chain(
            prefix_pool_crds()
                .iter()
                .map(|crd| crd_file("crds", &prefix_header, crd)),
        )
        .collect();
    files.extend(
        local_capi_crds()
            .iter()
            .map(|crd| crd_file("config/local-capi", &local_header, crd)),
    );
    let reservation_header = format!(
        "# Generated from the Rust types in src/api/reservation.rs by `{GENERATE_COMMAND}`. Do not edit.\n"
    );
    files.push(crd_file(
        "crds",
        &reservation_header,
        &tidy(super::reservation::IPAddressReservation::crd()),
    ));
    files.push(crd_kustomization(&files));
    files
}

/// `crds/kustomization.yaml`: the CRDs of `crds/` as a kustomization of their own, so that
/// `config/default` includes the directory (kustomize loads files only from inside a
/// kustomization's own directory, but may include another kustomization directory).
fn crd_kustomization(files: &[GeneratedFile]) -> GeneratedFile {
    let mut content = format!(
        "# Generated by `{GENERATE_COMMAND}`: every CRD of this directory. Do not edit.\n\
         apiVersion: kustomize.config.k8s.io/v1beta1\n\
         kind: Kustomization\n\
         resources:\n"
    );
    let mut crds: Vec<&str> = files
        .iter()
        .filter_map(|f| f.path.strip_prefix("crds/"))
        .collect();
    crds.sort_unstable();
    for crd in crds {
        content.push_str(&format!("  - {crd}\n"));
    }
    GeneratedFile {
        path: "crds/kustomization.yaml".into(),
        content,
    }
}

/// Paths (relative to `root`) of generated files whose content on disk differs from what the
/// types generate, or that are missing.
pub fn stale_files(root: &std::path::Path) -> Vec<String> {
    generated_files()
        .into_iter()
        .filter(|f| {
            std::fs::read_to_string(root.join(&f.path)).ok().as_deref() != Some(f.content.as_str())
        })
        .map(|f| f.path)
        .collect()
}
