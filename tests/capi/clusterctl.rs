//! Real `clusterctl` v1.14.2 (built from the Go module proxy with CAPI core, see
//! `inpool_testenv::capi`) against inpool's packaging and controllers, on two control planes of
//! this test binary's own:
//!
//! - `clusterctl init --ipam inpool` from a local repository holding
//!   `config/clusterctl/ipam-components.yaml` and `metadata.yaml`, with and without clusterctl's
//!   variables `CAPI_DIAGNOSTICS_ADDRESS` and `CAPI_INSECURE_DIAGNOSTICS`, and `clusterctl upgrade
//!   plan`;
//! - `clusterctl move` of a Cluster with its pool, claims and `IPAddress`es, inpool running on
//!   both sides.
//!
//! No pods run here, so what needs one is stood in for, and nothing else: cert-manager's Issuer
//! and Certificate CRDs (clusterctl init decides that cert-manager is installed by creating one of
//! each), CAPI core's components (only its CRDs and namespace: clusterctl always reads the core
//! provider's repository), and the Cluster's provisioned status (move refuses a Cluster that is
//! still provisioning; CAPI's controllers would set it with a real infrastructure).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use inpool::api::{Cluster, GlobalInClusterIPPool, IPAddress, IPAddressClaim, InClusterIPPool};
use inpool_testenv::capi;
use inpool_testenv::{common, support};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use common::*;

/// What clusterctl checks for cert-manager, and nothing more.
const CERT_MANAGER_STUBS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: issuers.cert-manager.io}
spec:
  group: cert-manager.io
  names: {kind: Issuer, listKind: IssuerList, plural: issuers, singular: issuer}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true,
     schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: certificates.cert-manager.io}
spec:
  group: cert-manager.io
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true,
     schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
"#;

/// inpool's release as clusterctl sees it (`metadata.yaml` maps 0.1 to the v1beta2 contract).
pub(crate) fn inpool_version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// A clusterctl with its own configuration: a local repository with inpool's packaging as
/// committed, and CAPI core's CRDs standing in for its components.
pub(crate) struct Clusterctl {
    binary: PathBuf,
    dir: PathBuf,
}

impl Clusterctl {
    pub(crate) fn new(dir: &Path) -> Clusterctl {
        let binary = capi::binaries().expect("clusterctl").clusterctl;
        let repo = dir.join("repository");
        let inpool = repo.join("ipam-inpool").join(inpool_version());
        let core = repo.join("cluster-api").join(capi::version());
        for d in [&inpool, &core] {
            std::fs::create_dir_all(d).unwrap();
        }
        let packaging = support::repo_root().join("config").join("clusterctl");
        for file in ["ipam-components.yaml", "metadata.yaml"] {
            std::fs::copy(packaging.join(file), inpool.join(file)).unwrap();
        }
        let module = capi::module_dir().unwrap();
        std::fs::copy(module.join("metadata.yaml"), core.join("metadata.yaml")).unwrap();
        let mut components =
            String::from("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: capi-system\n");
        for crd in capi::all_crd_files().unwrap() {
            components.push_str("---\n");
            components.push_str(
                std::fs::read_to_string(crd)
                    .unwrap()
                    .trim_start_matches("---\n"),
            );
        }
        std::fs::write(core.join("core-components.yaml"), components).unwrap();
        let config = format!(
            "providers:\n\
             - name: cluster-api\n  type: CoreProvider\n  url: file://{}\n\
             - name: inpool\n  type: IPAMProvider\n  url: file://{}\n",
            core.join("core-components.yaml").display(),
            inpool.join("ipam-components.yaml").display(),
        );
        std::fs::write(dir.join("clusterctl.yaml"), config).unwrap();
        Clusterctl {
            binary,
            dir: dir.to_path_buf(),
        }
    }

    /// Runs clusterctl with this configuration: everything it said, or a panic with it.
    pub(crate) async fn run(&self, args: &[&str]) -> String {
        self.run_with(args, &[]).await
    }

    /// [`Clusterctl::run`] with clusterctl variables in the environment.
    async fn run_with(&self, args: &[&str], variables: &[(&str, &str)]) -> String {
        let output = tokio::process::Command::new(&self.binary)
            .args(args)
            .envs(variables.iter().copied())
            .arg("--config")
            .arg(self.dir.join("clusterctl.yaml"))
            // Offline: no check for a newer clusterctl, no state in the user's home.
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .env("XDG_CONFIG_HOME", self.dir.join("xdg"))
            .output()
            .await
            .expect("running clusterctl");
        // Tables go to stdout, progress lines ("Installing provider=…") to stderr.
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            output.status.success(),
            "clusterctl {args:?} failed ({}):\n{said}",
            output.status
        );
        said
    }

    /// Adds release `version` of inpool to the local repository: the committed components with
    /// the image tag `version`, as a release of the same series would publish them (no second
    /// release exists to take them from).
    pub(crate) fn add_release(&self, version: &str) {
        let packaging = support::repo_root().join("config").join("clusterctl");
        let release = self
            .dir
            .join("repository")
            .join("ipam-inpool")
            .join(version);
        std::fs::create_dir_all(&release).unwrap();
        let components = std::fs::read_to_string(packaging.join("ipam-components.yaml")).unwrap();
        let image = format!("ghcr.io/inpool-dev/inpool:{}", inpool_version());
        assert!(components.contains(&image), "the components name {image}");
        std::fs::write(
            release.join("ipam-components.yaml"),
            components.replace(&image, &format!("ghcr.io/inpool-dev/inpool:{version}")),
        )
        .unwrap();
        std::fs::copy(
            packaging.join("metadata.yaml"),
            release.join("metadata.yaml"),
        )
        .unwrap();
    }

    pub(crate) async fn init(&self, kubeconfig: &Path, variables: &[(&str, &str)]) -> String {
        let kubeconfig = kubeconfig.to_str().unwrap();
        #[rustfmt::skip]
        let args = [
            "init", "--kubeconfig", kubeconfig,
            "--core", "cluster-api", "--bootstrap", "-", "--control-plane", "-",
            "--ipam", "inpool",
        ];
        self.run_with(&args, variables).await
    }
}

/// inpool's entry in clusterctl's inventory (`ipam-inpool`).
pub(crate) async fn inventory_of_inpool(client: &Client) -> DynamicObject {
    let gvk = GroupVersionKind::gvk("clusterctl.cluster.x-k8s.io", "v1alpha3", "Provider");
    let inventory = Api::<DynamicObject>::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
        .list(&ListParams::default())
        .await
        .unwrap();
    inventory
        .items
        .iter()
        .find(|p| p.name_any() == "ipam-inpool")
        .cloned()
        .unwrap_or_else(|| panic!("no ipam-inpool in the inventory: {:?}", inventory.items))
}

/// Starts a control plane for this test with every CAPI CRD, inpool's CRDs and the cert-manager
/// stand-ins.
pub(crate) fn control_plane(name: &str) -> support::ControlPlane {
    let data_dir =
        std::env::temp_dir().join(format!("inpool-clusterctl-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    std::fs::create_dir_all(&data_dir).unwrap();
    let stubs = data_dir.join("cert-manager-stubs.yaml");
    std::fs::write(&stubs, CERT_MANAGER_STUBS).unwrap();
    let mut crds = capi::all_crd_files().unwrap();
    crds.extend(inpool_testenv::yaml_files(
        &support::repo_root().join("crds"),
    ));
    crds.push(stubs);
    support::ControlPlane::start_with_crds(&data_dir, true, &crds)
        .unwrap_or_else(|e| panic!("control plane {name}: {e}"))
}

pub(crate) async fn create_namespace(client: &Client, name: &str) {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    create(&Api::<Namespace>::all(client.clone()), &namespace).await;
}

/// Names of the objects of a kind in `ns`, with those that are stuck deleting marked.
async fn names<K>(client: &Client, ns: &str) -> Vec<String>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| match o.meta().deletion_timestamp {
            Some(_) => format!(
                "{} (deleting, finalizers {:?})",
                o.name_any(),
                o.finalizers()
            ),
            None => o.name_any(),
        })
        .collect()
}

#[tokio::test]
async fn clusterctl_init_installs_inpool_and_move_keeps_every_address() {
    let dir = std::env::temp_dir().join(format!("inpool-clusterctl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let clusterctl = Clusterctl::new(&dir);
    let source = control_plane("source");
    let target = control_plane("target");
    let (src, dst) = (source.client().await, target.client().await);

    // clusterctl init, as a user would install inpool (move needs the inventory on both sides):
    // on the source without clusterctl's variables, on the target with them; the Deployment's
    // args take their defaults or their values, as CAPI core's do.
    let variables = [
        ("CAPI_DIAGNOSTICS_ADDRESS", ":8080"),
        ("CAPI_INSECURE_DIAGNOSTICS", "true"),
    ];
    for (plane, variables, diagnostics) in [
        (&source, &[][..], [":8443", "false"]),
        (&target, &variables[..], [":8080", "true"]),
    ] {
        let said = clusterctl.init(&plane.kubeconfig, variables).await;
        assert!(
            said.contains("Installing provider=\"ipam-inpool\""),
            "{said}"
        );
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(plane.client().await, "inpool-system");
        let deployment = deployments.get("inpool-controller-manager").await.unwrap();
        let args = deployment.spec.unwrap().template.spec.unwrap().containers[0]
            .args
            .clone()
            .unwrap();
        assert_eq!(
            args,
            [
                "--leader-elect".to_string(),
                "--log-format=json".into(),
                format!("--diagnostics-address={}", diagnostics[0]),
                format!("--insecure-diagnostics={}", diagnostics[1]),
            ]
        );
    }
    let inpool = inventory_of_inpool(&src).await;
    assert_eq!(inpool.namespace().as_deref(), Some("inpool-system"));
    assert_eq!(inpool.data["type"], "IPAMProvider");
    assert_eq!(inpool.data["providerName"], "inpool");
    assert_eq!(inpool.data["version"], inpool_version().as_str());
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(src.clone(), "inpool-system");
    assert!(
        deployments
            .get_opt("inpool-controller-manager")
            .await
            .unwrap()
            .is_some(),
        "init applied inpool's Deployment"
    );
    let plan = clusterctl
        .run(&[
            "upgrade",
            "plan",
            "--kubeconfig",
            source.kubeconfig.to_str().unwrap(),
        ])
        .await;
    let row = plan
        .lines()
        .find(|l| l.starts_with("ipam-inpool"))
        .unwrap_or_else(|| panic!("no ipam-inpool row in the upgrade plan:\n{plan}"));
    for cell in [
        "inpool-system",
        "IPAMProvider",
        &inpool_version(),
        "Already up to date",
    ] {
        assert!(
            row.contains(cell),
            "upgrade plan row {row:?} lacks {cell:?}"
        );
    }

    // A Cluster whose claims belong to it by owner reference (as an infrastructure machine's
    // would, through the Machine), realised by inpool on the source.
    let ns = "moved";
    create_namespace(&src, ns).await;
    let source_inpool = start_controller(&src, ns);
    let target_inpool = start_controller(&dst, ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(src.clone(), ns);
    create(
        &pools,
        &pool("pool", &["10.10.0.10-10.10.0.19"], 24, Some("10.10.0.1")),
    )
    .await;
    let clusters: Api<Cluster> = Api::namespaced(src.clone(), ns);
    let cluster = create(&clusters, &common::cluster("c1", false)).await;
    let owner = OwnerReference {
        api_version: Cluster::api_version(&()).into_owned(),
        kind: Cluster::kind(&()).into_owned(),
        name: cluster.name_any(),
        uid: cluster.uid().unwrap(),
        ..Default::default()
    };
    // A global pool is cluster-scoped: clusterctl copies it to the target and leaves it on the
    // source (other clusters may draw from it), with the address of the moved claim.
    let global = global_pool("shared", &["10.20.0.10-10.20.0.19"], 24);
    create(&Api::<GlobalInClusterIPPool>::all(src.clone()), &global).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(src.clone(), ns);
    for c in [
        claim("machine-0", "pool"),
        claim("machine-1", "pool"),
        claim("machine-2", "pool"),
        global_claim("machine-g", "shared"),
    ] {
        let mut c = of_cluster(c, "c1");
        c.metadata.owner_references = Some(vec![owner.clone()]);
        create(&claims, &c).await;
    }
    wait_counts(&claims, 4, 0).await;
    let before = addresses_by_claim(&src, ns).await;
    assert_eq!(before.len(), 4);
    assert_eq!(reservations_of(&src, ns).await.len(), 4);

    // What CAPI's controllers would report once the infrastructure and control plane are up.
    let provisioned = json!({"status": {
        "initialization": {"infrastructureProvisioned": true},
        "conditions": [{"type": "ControlPlaneInitialized", "status": "True", "reason": "Initialized",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }});
    clusters
        .patch_status("c1", &PatchParams::default(), &Patch::Merge(&provisioned))
        .await
        .unwrap();

    let said = clusterctl
        .run(&[
            "move",
            "--kubeconfig",
            source.kubeconfig.to_str().unwrap(),
            "--to-kubeconfig",
            target.kubeconfig.to_str().unwrap(),
            "--namespace",
            ns,
        ])
        .await;
    assert!(said.contains("Moving Cluster API objects"), "{said}");

    // The target: inpool adopts every moved address (moved objects arrive without status), no
    // second allocation, a reservation for each.
    let moved: Api<IPAddressClaim> = Api::namespaced(dst.clone(), ns);
    wait_counts(&moved, 4, 0).await;
    assert_eq!(
        addresses_by_claim(&dst, ns).await,
        before,
        "the same addresses"
    );
    let held: BTreeMap<String, String> = before
        .iter()
        .map(|(claim, address)| (address.clone(), claim.clone()))
        .collect();
    wait_for(
        "the target's reservations",
        Duration::from_secs(30),
        || async { (reservations_of(&dst, ns).await == held).then_some(()) },
    )
    .await;
    assert_eq!(names::<InClusterIPPool>(&dst, ns).await, ["pool"]);
    // clusterctl recreates each object with its managedFields: the moved addresses are still
    // inpool's writes, not another writer's (see `sources::writers`), and the target's pool
    // reports no foreign address.
    for moved in Api::<IPAddress>::namespaced(dst.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        let managers: Vec<_> = moved
            .managed_fields()
            .iter()
            .map(|f| f.manager.clone().unwrap_or_default())
            .collect();
        assert_eq!(managers, ["inpool"], "{}", moved.name_any());
    }
    wait_for(
        "the target's pool to report no foreign address",
        Duration::from_secs(30),
        || async {
            let pool = Api::<InClusterIPPool>::namespaced(dst.clone(), ns)
                .get("pool")
                .await
                .ok()?;
            let conditions = pool.status?.conditions?;
            conditions
                .iter()
                .any(|c| c.type_ == "ForeignAddresses" && c.status == "False")
                .then_some(())
        },
    )
    .await;
    let global_pools: Api<GlobalInClusterIPPool> = Api::all(dst.clone());
    assert!(global_pools.get_opt("shared").await.unwrap().is_some());
    assert_eq!(names::<Cluster>(&dst, ns).await, ["c1"]);

    // The source: emptied, nothing left on a finalizer, but for one object. The global pool
    // stays (clusterctl never deletes global objects), and with it the IPAddress of the claim
    // that moved away from it: the moved machine still uses that address, so the source keeps it
    // held (and its reservation) rather than hand it out a second time.
    wait_for(
        "the source to be emptied",
        Duration::from_secs(60),
        || async {
            let left = [
                names::<IPAddressClaim>(&src, ns).await,
                names::<IPAddress>(&src, ns).await,
                names::<InClusterIPPool>(&src, ns).await,
                names::<Cluster>(&src, ns).await,
            ]
            .concat();
            (left == ["machine-g"]).then_some(())
        },
    )
    .await;
    let address_g = before["machine-g"].clone();
    let kept = BTreeMap::from([(address_g.clone(), "machine-g".to_string())]);
    wait_for(
        "the source's reservations of the moved claims to be collected",
        Duration::from_secs(60),
        || async { (reservations_of(&src, ns).await == kept).then_some(()) },
    )
    .await;
    let shared: Api<GlobalInClusterIPPool> = Api::all(src.clone());
    let used_on_source = || async {
        shared
            .get("shared")
            .await
            .ok()?
            .status?
            .ip_addresses
            .map(|a| a.used)
    };
    // The pool's status is written paced (at most once a second, when it changes): it is read
    // until it counts the address, not once. One run read `used: 0` here right after the
    // reservations settled; what the source counted at that moment is not yet explained.
    wait_for(
        "the source's global pool to count the moved claim's address as used",
        Duration::from_secs(30),
        || async { (used_on_source().await == Some(1)).then_some(()) },
    )
    .await;

    // Once the address is free in the network, the operator deletes the leftover: inpool lets
    // go of it (its claim is gone, so no claim's release will), and of its reservation.
    Api::<IPAddress>::namespaced(src.clone(), ns)
        .delete("machine-g", &Default::default())
        .await
        .unwrap();
    wait_for(
        "the source's global pool to have every address free",
        Duration::from_secs(60),
        || async { (used_on_source().await == Some(0)).then_some(()) },
    )
    .await;
    wait_for(
        "the leftover and its reservation to go",
        Duration::from_secs(60),
        || async {
            (names::<IPAddress>(&src, ns).await.is_empty()
                && reservations_of(&src, ns).await.is_empty())
            .then_some(())
        },
    )
    .await;
    for client in [&src, &dst] {
        let stuck: Vec<String> = [
            names::<IPAddressClaim>(client, ns).await,
            names::<IPAddress>(client, ns).await,
        ]
        .concat()
        .into_iter()
        .filter(|n| n.contains("deleting"))
        .collect();
        assert!(stuck.is_empty(), "stuck on a finalizer: {stuck:?}");
    }
    drop((source_inpool, target_inpool));
}
