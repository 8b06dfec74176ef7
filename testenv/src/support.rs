//! Test support: a real Kubernetes control plane (etcd + kube-apiserver + the garbage-collector
//! and namespace controllers) built from `testenv/` and shared by all tests of one test binary.
//!
//! - [`env`] starts the shared control plane on first use with CAPI's Cluster, IPAddressClaim and
//!   IPAddress CRDs (from the Cluster API Go module, see [`crate::capi`]) and inpool's
//!   own CRDs installed and established.
//! - [`capi_env`] instead starts it with every CAPI CRD and CAPI core's manager running: its
//!   validating, mutating and conversion webhooks are in the path of every request.
//! - [`capv_env`] adds Cluster API Provider vSphere's manager and a vCenter simulator to that
//!   (see [`crate::capv`]).
//! - [`peers_env`] is [`capi_env`] with two peers in place of inpool: the reference provider (its
//!   CRDs instead of inpool's, see [`crate::reference`]) and Metal3's IPAM (its own CRDs, see
//!   [`crate::metal3_ipam`]), both managers running.
//! - [`capm3_env`] adds Metal3's Cluster API Provider (CAPM3) instead, with its CRDs and the
//!   `BareMetalHost` CRD (see [`crate::capm3`]); no baremetal-operator: the tests play its part.
//! - [`TestEnv::namespace`] gives each test a fresh namespace and an admin client.
//! - [`ControlPlane`] runs an extra, separately controlled instance (restart and fault tests).
//!
//! The control plane process watches its standard input: when the test binary exits, however it
//! exits, the pipe closes and the control plane shuts down and deletes its data directory.
//!
//! Building and running the control plane lives in the crate root (the demo uses it too); this
//! module keeps the tests' API on top of it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate as testenv;
use crate::{capi, capm3, capv, metal3_ipam, reference};
pub use crate::{check_go_toolchain, repo_root, testenv_binary};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// `../shared` beside the project: the upstream CRD fixtures.
pub fn shared_dir() -> PathBuf {
    repo_root().join("..").join("shared")
}

/// Whether `tool` runs (`tool --version`). If not, `test` cannot run: under CI (`CI` set) that
/// is a failure naming `package`, elsewhere a `NOT RUN` line past libtest's capture saying how to
/// install it; returns false.
pub fn tool_or_not_run(tool: &str, package: &str, test: &str) -> bool {
    if std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok()
    {
        return true;
    }
    not_run(
        test,
        &format!(
            "{tool} is not on PATH: install {package} \
             (`apt-get install -y --no-install-recommends prometheus`; .ci/run does)"
        ),
    );
    false
}

/// `test` cannot run, for the reason `why`: under CI (`CI` set) that is a failure, elsewhere a
/// `NOT RUN` line past libtest's capture.
pub fn not_run(test: &str, why: &str) {
    assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
    testenv::say(&format!("NOT RUN: {test}: {why}"));
}

/// One running control plane process ([`crate::ControlPlane`], whose fields it
/// dereferences to), with a client that panics instead of returning errors.
pub struct ControlPlane(testenv::ControlPlane);

impl ControlPlane {
    /// Starts a control plane on `data_dir` (created if needed, kept after it stops unless
    /// `ephemeral`).
    pub fn start(data_dir: &Path, ephemeral: bool) -> Result<ControlPlane, String> {
        testenv::ControlPlane::start(data_dir, ephemeral).map(ControlPlane)
    }

    /// Starts a control plane that installs `crds` before its controllers start, so that the
    /// garbage collector watches them from the beginning.
    pub fn start_with_crds(
        data_dir: &Path,
        ephemeral: bool,
        crds: &[PathBuf],
    ) -> Result<ControlPlane, String> {
        testenv::ControlPlane::start_with_crds(data_dir, ephemeral, crds).map(ControlPlane)
    }

    /// Starts a control plane as `options` say.
    pub fn start_with(
        data_dir: &Path,
        options: &testenv::StartOptions,
    ) -> Result<ControlPlane, String> {
        testenv::ControlPlane::start_with(data_dir, options).map(ControlPlane)
    }

    pub async fn client(&self) -> Client {
        client_from_kubeconfig(&self.0.kubeconfig, None).await
    }

    pub fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// Sends SIGTERM and waits for a clean exit; returns the exit status code.
    pub fn terminate(self) -> Option<i32> {
        self.0.terminate()
    }
}

impl std::ops::Deref for ControlPlane {
    type Target = testenv::ControlPlane;
    fn deref(&self) -> &testenv::ControlPlane {
        &self.0
    }
}

/// A client for the given kubeconfig, optionally impersonating `(user, groups)`.
pub async fn client_from_kubeconfig(path: &Path, impersonate: Option<(&str, &[&str])>) -> Client {
    testenv::client_from_kubeconfig(path, impersonate)
        .await
        .expect("client from kubeconfig")
}

/// The control plane shared by the tests of one test binary, with all CRDs installed.
pub struct TestEnv {
    // Declared first: the providers stop before the control plane, CAPV, CAPM3 and the peers
    // before CAPI core.
    capv: Option<(capv::Manager, capv::Simulator)>,
    capm3: Option<testenv::RunningManager>,
    reference: Option<testenv::RunningManager>,
    metal3: Option<testenv::RunningManager>,
    capi: Option<capi::Manager>,
    plane: ControlPlane,
}

/// Starts (once per test binary) and returns the shared control plane.
pub fn env() -> &'static TestEnv {
    static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| TestEnv::start(Stack::Contract));
    match env {
        Ok(env) => env,
        Err(e) => panic!("test control plane unavailable: {e}"),
    }
}

/// Starts (once per test binary) and returns the shared control plane with CAPI core's manager
/// running and its webhooks registered. A test binary uses either this or [`env`].
pub fn capi_env() -> &'static TestEnv {
    static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| TestEnv::start(Stack::Capi));
    match env {
        Ok(env) => env,
        Err(e) => panic!("test control plane with Cluster API unavailable: {e}"),
    }
}

/// Starts (once per test binary) and returns the shared control plane with CAPI core's manager,
/// a vCenter simulator and CAPV's manager running. A test binary uses one of the three.
pub fn capv_env() -> &'static TestEnv {
    static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| TestEnv::start(Stack::Capv));
    match env {
        Ok(env) => env,
        Err(e) => panic!("test control plane with CAPI and CAPV unavailable: {e}"),
    }
}

/// Starts (once per test binary) and returns the shared control plane with CAPI core's manager
/// and CAPM3's manager running, CAPM3's CRDs and the `BareMetalHost` CRD installed. A test binary
/// uses one of the five.
pub fn capm3_env() -> &'static TestEnv {
    static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| TestEnv::start(Stack::Capm3));
    match env {
        Ok(env) => env,
        Err(e) => panic!("test control plane with CAPI and CAPM3 unavailable: {e}"),
    }
}

/// Starts (once per test binary) and returns the shared control plane with CAPI core's manager
/// and two peers' managers running: the reference provider's (its CRDs installed, inpool's not:
/// they define the same kinds) and Metal3's IPAM's (its `ipam.metal3.io` CRDs). The two do not
/// meet: each serves claims on its own pool kind, and each test has a namespace of its own. A test
/// binary uses one of the five.
pub fn peers_env() -> &'static TestEnv {
    static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| TestEnv::start(Stack::Peers));
    match env {
        Ok(env) => env,
        Err(e) => panic!("test control plane with the peer providers unavailable: {e}"),
    }
}

/// Starts (once per test binary) and returns the shared control plane with CAPI core's manager
/// and the reference provider v1.0.3's (its CRDs installed, not inpool's or v1.1.0's: they define
/// the same kinds, so v1.0.3 needs a control plane of its own). A test binary uses one of the
/// five.
pub fn reference_v1_0_3_env() -> &'static TestEnv {
    static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| TestEnv::start(Stack::ReferenceV1_0_3));
    match env {
        Ok(env) => env,
        Err(e) => panic!("test control plane with the reference provider v1.0.3 unavailable: {e}"),
    }
}

/// Starts (once per test binary) and returns the shared control plane with CAPI core's manager
/// running and the reference provider's CRDs installed, inpool's not, and no IPAM provider
/// running: the test starts and stops the reference ([`TestEnv::start_reference`]) and inpool
/// itself, as a migration between them does.
pub fn reference_crds_env() -> &'static TestEnv {
    static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(|| TestEnv::start(Stack::ReferenceCrds));
    match env {
        Ok(env) => env,
        Err(e) => panic!("test control plane with the reference's CRDs unavailable: {e}"),
    }
}

/// What runs beside the control plane.
#[derive(Clone, Copy, PartialEq)]
enum Stack {
    /// Nothing: CAPI's contract CRDs and inpool's.
    Contract,
    /// CAPI core's manager, with every CAPI CRD.
    Capi,
    /// CAPI core, the vCenter simulator and CAPV's manager, with CAPV's CRDs too.
    Capv,
    /// CAPI core and CAPM3's manager, with CAPM3's CRDs and the `BareMetalHost` CRD too.
    Capm3,
    /// CAPI core, the reference provider's manager and Metal3's IPAM's, with the reference's
    /// CRDs in place of inpool's (they define the same kinds) and Metal3's.
    Peers,
    /// CAPI core and the reference provider v1.0.3's manager, with its CRDs in place of inpool's.
    ReferenceV1_0_3,
    /// CAPI core and the reference's CRDs, no IPAM provider.
    ReferenceCrds,
}

impl TestEnv {
    fn start(stack: Stack) -> Result<TestEnv, String> {
        let data_dir = std::env::temp_dir().join(format!(
            "inpool-testenv-{}-{}",
            std::process::id(),
            test_binary_name()
        ));
        let _ = std::fs::remove_dir_all(&data_dir);
        let mut crds = match stack {
            Stack::Contract => capi::contract_crd_files()?,
            Stack::Capi => capi::all_crd_files()?,
            Stack::Capv => [capi::all_crd_files()?, capv::crd_files()?].concat(),
            Stack::Capm3 => [capi::all_crd_files()?, capm3::crd_files()?].concat(),
            Stack::Peers => [
                capi::all_crd_files()?,
                reference::PROGRAM.crd_files()?,
                metal3_ipam::PROGRAM.crd_files()?,
            ]
            .concat(),
            Stack::ReferenceCrds => {
                [capi::all_crd_files()?, reference::PROGRAM.crd_files()?].concat()
            }
            Stack::ReferenceV1_0_3 => [
                capi::all_crd_files()?,
                reference::PROGRAM_V1_0_3.crd_files()?,
            ]
            .concat(),
        };
        if !matches!(
            stack,
            Stack::Peers | Stack::ReferenceV1_0_3 | Stack::ReferenceCrds
        ) {
            crds.extend(yaml_files(&repo_root().join("crds")));
        }
        let plane = ControlPlane::start_with_crds(&data_dir, true, &crds)?;
        let capi = match stack {
            Stack::Contract => None,
            Stack::Capi
            | Stack::Capv
            | Stack::Capm3
            | Stack::Peers
            | Stack::ReferenceV1_0_3
            | Stack::ReferenceCrds => Some(on_own_runtime(capi::Manager::start(&plane))?),
        };
        let capv = match stack {
            Stack::Capv => Some(on_own_runtime(async {
                let simulator = capv::Simulator::start(&plane.data_dir).await?;
                let manager = capv::Manager::start(&plane, &simulator).await?;
                Ok((manager, simulator))
            })?),
            Stack::Contract
            | Stack::Capi
            | Stack::Capm3
            | Stack::Peers
            | Stack::ReferenceV1_0_3
            | Stack::ReferenceCrds => None,
        };
        let capm3 = match stack {
            Stack::Capm3 => Some(on_own_runtime(capm3::start_manager(&plane))?),
            _ => None,
        };
        let (reference, metal3) = match stack {
            Stack::Peers => (
                Some(on_own_runtime(reference::start(&plane))?),
                Some(on_own_runtime(metal3_ipam::start(&plane))?),
            ),
            Stack::ReferenceV1_0_3 => {
                (Some(on_own_runtime(reference::start_v1_0_3(&plane))?), None)
            }
            Stack::Contract | Stack::Capi | Stack::Capv | Stack::Capm3 | Stack::ReferenceCrds => {
                (None, None)
            }
        };
        Ok(TestEnv {
            capv,
            capm3,
            reference,
            metal3,
            capi,
            plane,
        })
    }

    /// CAPI core's manager, when started by any bed but [`env`]'s.
    pub fn capi(&self) -> Option<&capi::Manager> {
        self.capi.as_ref()
    }

    /// CAPV's manager, when started by [`capv_env`].
    pub fn capv(&self) -> Option<&capv::Manager> {
        self.capv.as_ref().map(|(manager, _)| manager)
    }

    /// CAPM3's manager, when started by [`capm3_env`].
    pub fn capm3(&self) -> Option<&testenv::RunningManager> {
        self.capm3.as_ref()
    }

    /// The reference provider's manager, when started by [`peers_env`] (v1.1.0) or
    /// [`reference_v1_0_3_env`] (v1.0.3).
    pub fn reference(&self) -> Option<&testenv::RunningManager> {
        self.reference.as_ref()
    }

    /// Starts a reference provider's manager on this control plane (see [`reference_crds_env`]);
    /// it stops when dropped.
    pub async fn start_reference(&self) -> anyhow::Result<testenv::RunningManager> {
        reference::start(&self.plane).await
    }

    /// Starts the reference provider v1.0.3's manager on this control plane, as
    /// [`TestEnv::start_reference`] starts v1.1.0's (its CRDs must be v1.0.3's:
    /// [`reference::PROGRAM_V1_0_3`]).
    pub async fn start_reference_v1_0_3(&self) -> anyhow::Result<testenv::RunningManager> {
        reference::start_v1_0_3(&self.plane).await
    }

    /// [`TestEnv::start_reference`] with the reference's leader election on, its Lease in
    /// `namespace` ([`reference::start_leader_elected`]).
    pub async fn start_leader_elected_reference(
        &self,
        namespace: &str,
    ) -> anyhow::Result<testenv::RunningManager> {
        reference::start_leader_elected(&self.plane, namespace).await
    }

    /// Metal3's IPAM manager, when started by [`peers_env`].
    pub fn metal3(&self) -> Option<&testenv::RunningManager> {
        self.metal3.as_ref()
    }

    /// The vCenter simulator, when started by [`capv_env`].
    pub fn simulator(&self) -> Option<&capv::Simulator> {
        self.capv.as_ref().map(|(_, simulator)| simulator)
    }

    /// The ends of the logs of the infrastructure provider, CAPI core and the simulator, those
    /// of them this bed runs, each headed by whose it is: what a test of a provider explains a
    /// wait that timed out with.
    pub fn log_tails(&self) -> String {
        let tails = [
            ("CAPV's", self.capv().map(capv::Manager::log_tail)),
            (
                "CAPM3's",
                self.capm3().map(testenv::RunningManager::log_tail),
            ),
            ("CAPI core's", self.capi().map(capi::Manager::log_tail)),
            (
                "the simulator's",
                self.simulator().map(capv::Simulator::log_tail),
            ),
        ];
        tails
            .into_iter()
            .filter_map(|(whose, tail)| Some(format!("\n--- {whose} log ends:\n{}", tail?)))
            .collect()
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.plane.kubeconfig
    }

    pub fn startup_seconds(&self) -> f64 {
        self.plane.startup_seconds
    }

    /// An admin client (member of `system:masters`).
    pub async fn client(&self) -> Client {
        self.plane.client().await
    }

    /// A client that impersonates `user` in `groups`: subject to RBAC like a real user.
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> Client {
        client_from_kubeconfig(&self.plane.kubeconfig, Some((user, groups))).await
    }

    /// A fresh namespace for one test, and an admin client.
    pub async fn namespace(&self) -> (Client, String) {
        let client = self.client().await;
        let name = new_namespace(&client, "t-").await;
        (client, name)
    }
}

/// Creates a namespace named `prefix` and a generated suffix; returns its name.
pub async fn new_namespace(client: &Client, prefix: &str) -> String {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            generate_name: Some(prefix.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create test namespace");
    created.metadata.name.expect("generated name")
}

fn test_binary_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "tests".into())
}

/// CAPI's Cluster, IPAddressClaim and IPAddress CRDs and every CRD inpool generates into
/// `crds/`.
pub fn crd_files() -> Vec<PathBuf> {
    let mut files = capi::contract_crd_files().expect("CAPI's CRDs from its Go module");
    files.extend(yaml_files(&repo_root().join("crds")));
    files
}

/// Installs the conformance suite's `ConformanceCluster` CRD (`conformance/crds/`) and waits
/// until it is established: the suite's Clusters name that infrastructure kind, which CAPI's
/// Cluster controller must be able to look up to finish deleting them.
pub async fn install_conformance_cluster_kind(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::runtime::wait::{await_condition, conditions};
    let path = repo_root().join("conformance/crds/conformanceclusters.yaml");
    let text = std::fs::read_to_string(&path).expect("the ConformanceCluster CRD");
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).expect("a CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("installing {}: {e}", path.display()),
    }
    let name = crd.metadata.name.clone().unwrap_or_default();
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await
    .expect("the ConformanceCluster CRD is established in time")
    .expect("watching the CRD");
}

/// Runs `start` (a provider's start-up) on a thread and runtime of its own: the shared
/// environment is created inside whichever test's runtime asks first, and cannot block that
/// runtime.
fn on_own_runtime<T: Send>(
    start: impl std::future::Future<Output = anyhow::Result<T>> + Send,
) -> Result<T, String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?
                    .block_on(start)
                    .map_err(|e| format!("{e:#}"))
            })
            .join()
            .unwrap_or_else(|_| Err("starting a provider panicked".into()))
    })
}

/// The reference provider's own CRDs, `config/crd/bases/` of its Go module v1.1.0 in the Go module
/// cache (downloaded when missing): its four pool kinds, before the conversion webhook and labels
/// its kustomize adds.
pub fn reference_crd_dir() -> PathBuf {
    let dir = reference::PROGRAM
        .module_dir()
        .unwrap_or_else(|e| panic!("the reference provider's Go module: {e}"))
        .join("config")
        .join("crd")
        .join("bases");
    assert!(dir.is_dir(), "no CRDs in {}", dir.display());
    dir
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    testenv::yaml_files(dir)
}
