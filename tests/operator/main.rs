//! inpool installed the way platforms that run cluster-api-operator install providers: the real
//! operator (v0.25.0, `inpool_testenv::operator`) on a control plane of its own, since the
//! operator and Cluster API core act cluster-wide.
//!
//! The operator installs an IPAM provider only once a `CoreProvider` is ready, so Cluster API
//! core is installed through it first, from a ConfigMap holding CAPI core's components
//! rendered by kustomize from the Cluster API module's own `core/config/default`. Then inpool,
//! through an `IPAMProvider` whose `fetchConfig.selector` finds a ConfigMap holding
//! `config/clusterctl/ipam-components.yaml` and `config/clusterctl/metadata.yaml` as they are in
//! the checkout, and whose `manager` settings make the operator render every flag it knows.
//!
//! The test control plane has no kubelet and no deployment controller, so the Deployments the
//! operator creates get no pods. The test plays both for each: it runs the Deployment's program
//! (CAPI core's manager, with loopback ports and its webhooks pointed at it as in
//! `tests/capi/`; inpool with exactly the container's args and env), and once the program is
//! ready reports the Deployment available through its status, from which the operator's health
//! check derives the provider's `Ready`.

use std::collections::BTreeMap;
use std::time::Duration;

use inpool::api::{IPAddress, IPAddressClaim, InClusterIPPool};
use inpool_testenv::common::*;
use inpool_testenv::{capi, operator, repo_root, support};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, PropagationPolicy};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// How long the operator may take to install a provider (it requeues on its own schedule).
const INSTALL: Duration = Duration::from_secs(180);

/// The namespace of inpool's `IPAMProvider`, and so of everything the operator installs for it.
const PROVIDER_NAMESPACE: &str = "inpool-system";

/// The only namespace whose claims inpool serves (`manager.cacheNamespace`).
const CLAIMS_NAMESPACE: &str = "operator-claims";

/// The Lease named by `manager.leaderElection`.
const LEASE: &str = "inpool-operator-test";

#[tokio::test(flavor = "multi_thread")]
async fn inpool_installed_by_cluster_api_operator_serves_a_claim_and_goes_with_its_provider() {
    let data_dir = std::env::temp_dir().join(format!("inpool-operator-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let crds = operator::crd_files().expect("the operator's CRDs");
    let plane = tokio::task::spawn_blocking(move || {
        support::ControlPlane::start_with_crds(&data_dir, true, &crds)
    })
    .await
    .unwrap()
    .expect("control plane");
    let client = plane.client().await;
    let operator = operator::Operator::start(&plane)
        .await
        .expect("cluster-api-operator starts and serves its webhooks");

    let _capi = install_cluster_api_core(&client, &plane, &operator).await;
    let installed = install_inpool(&client, &operator).await;
    let deployment = installed.deployment;
    let container = manager_container(&deployment);
    let args = container.args.clone().unwrap_or_default();
    for expected in &installed.rendered_flags {
        assert_eq!(
            args.iter().filter(|arg| *arg == expected).count(),
            1,
            "the operator should render {expected} once; the manager's args: {args:?}"
        );
    }

    // inpool as its pod would run it, with the ServiceAccount's permissions.
    let kubeconfig = service_account_kubeconfig_of(
        &plane.kubeconfig,
        PROVIDER_NAMESPACE,
        deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.service_account_name.as_deref())
            .expect("the Deployment names its ServiceAccount"),
    );
    let mut env = container_env(&container, &deployment);
    env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    inpool_testenv::say(&format!(
        "starting inpool as the operator's Deployment runs it: args {args:?}, env {env:?}"
    ));
    let mut inpool = Inpool::start_as_deployed(
        env!("CARGO_BIN_EXE_inpool"),
        "deployed by the operator",
        &args,
        &env,
    );
    wait_explained(
        "inpool to be ready",
        Duration::from_secs(30),
        || async {
            let ready = inpool.get("/readyz").await?;
            (ready.status == 200).then_some(())
        },
        || format!("; its log:\n{}", inpool.logs()),
    )
    .await;
    operator::report_available(&client, PROVIDER_NAMESPACE, &deployment.name_any())
        .await
        .unwrap();
    wait_for_condition(
        &client,
        "IPAMProvider",
        PROVIDER_NAMESPACE,
        "inpool",
        "Ready",
        &operator,
    )
    .await;

    serves_a_claim(&client, &inpool).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), PROVIDER_NAMESPACE);
    let lease = leases.get(LEASE).await.unwrap_or_else(|e| {
        panic!(
            "inpool should hold Lease {PROVIDER_NAMESPACE}/{LEASE} named by \
             --leader-election-id: {e}\n{}",
            inpool.logs()
        )
    });
    assert!(
        lease
            .spec
            .and_then(|s| s.holder_identity)
            .is_some_and(|holder| !holder.is_empty()),
        "the Lease has a holder"
    );
    inpool.assert_healthy();
    inpool.assert_nothing_forbidden();
    assert_eq!(
        inpool.terminate(),
        Some(0),
        "inpool stops cleanly on SIGTERM; its log:\n{}",
        inpool.logs()
    );

    let pods = DeploymentStandIn::start(
        &client,
        &plane.kubeconfig,
        std::path::Path::new(env!("CARGO_BIN_EXE_inpool")),
    );
    version_bumped_under_a_burst(&client, &operator, &pods).await;
    removed_with_its_provider(&client, &operator, &installed.objects).await;
    wait_for(
        "the stand-in to stop the provider of the deleted Deployment",
        Duration::from_secs(30),
        || async { pods.runs().last()?.stopped },
    )
    .await;
}

/// The release the version bump moves to: the committed components with another image tag (no
/// second release exists).
const NEXT: &str = "v0.1.1";

/// The `IPAMProvider`'s `spec.version` moved to [`NEXT`] while claims arrive (one every 100 ms),
/// its Deployment's provider run by `pods` as a kubelet would: the operator runs clusterctl's
/// upgrader (scale to zero, delete, install), so the old provider exits 0 before the new one
/// starts; the claims realised before keep their addresses, those created while no provider ran
/// are served after, every invariant holds, and the operator reports the new version installed
/// and the provider `Ready`. Prints the time without a provider.
async fn version_bumped_under_a_burst(
    client: &Client,
    operator: &operator::Operator,
    pods: &DeploymentStandIn,
) {
    // The claim of `serves_a_claim` is realised too.
    let range = ("bump", "10.43.0.10-10.43.0.99");
    let before = realised_before_upgrade(client, pods, CLAIMS_NAMESPACE, range, "b", 1).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), CLAIMS_NAMESPACE);

    let current = format!("ghcr.io/inpool-dev/inpool:v{}", env!("CARGO_PKG_VERSION"));
    let clusterctl = repo_root().join("config").join("clusterctl");
    let read = |file: &str| std::fs::read_to_string(clusterctl.join(file)).unwrap();
    let components = read("ipam-components.yaml");
    assert!(
        components.contains(&current),
        "the components name {current}"
    );
    // The operator allows one ConfigMap per selector: the next release's has a label of its own,
    // which the IPAMProvider's fetchConfig names together with the new version.
    let selector = BTreeMap::from([("provider-components".to_string(), "inpool-next".into())]);
    let config_map = operator::components_config_map(
        "inpool-components-next",
        PROVIDER_NAMESPACE,
        &selector,
        NEXT,
        &read("metadata.yaml"),
        &components.replace(&current, &format!("ghcr.io/inpool-dev/inpool:{NEXT}")),
    )
    .unwrap();
    create(
        &Api::<ConfigMap>::namespaced(client.clone(), PROVIDER_NAMESPACE),
        &config_map,
    )
    .await;

    let burst = claims_arriving(&claims, "bump", "b", 10..50);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let providers: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        PROVIDER_NAMESPACE,
        &operator::resource("IPAMProvider"),
    );
    providers
        .patch(
            "inpool",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"version": NEXT,
                "fetchConfig": {"selector": {"matchLabels": selector}}}})),
        )
        .await
        .unwrap();
    let created = burst.await.unwrap();
    wait_explained(
        "the operator to report the new version installed",
        INSTALL,
        || async {
            let provider = providers.get("inpool").await.ok()?;
            (provider.data["status"]["installedVersion"] == NEXT).then_some(())
        },
        || format!("; the operator's log ends:\n{}", operator.log_tail()),
    )
    .await;
    wait_counts(&claims, 51, 0).await;
    // Ready again for the new generation: the condition from before the bump does not count.
    wait_explained(
        "the IPAMProvider Ready for the bumped generation",
        INSTALL,
        || async {
            let provider = providers.get("inpool").await.ok()?;
            let generation = provider.metadata.generation?;
            provider.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| {
                    c["type"] == "Ready"
                        && c["status"] == "True"
                        && c["observedGeneration"].as_i64() == Some(generation)
                })
                .then_some(())
        },
        || format!("; the operator's log ends:\n{}", operator.log_tail()),
    )
    .await;

    let new = format!("ghcr.io/inpool-dev/inpool:{NEXT}");
    let (gap, during_gap) = replaced_once(
        pods,
        [&current, &new],
        &created,
        client,
        CLAIMS_NAMESPACE,
        &before,
    )
    .await;
    println!(
        "UPGRADE cluster-api-operator IPAMProvider spec.version v{} -> {NEXT} under a burst (a \
         claim every 100 ms): no provider for {:.1} s (the old one's exit to the new one's \
         readiness); {during_gap} claims created meanwhile, all served after it; the 11 claims \
         realised before kept their addresses",
        env!("CARGO_PKG_VERSION"),
        gap.as_secs_f64(),
    );
}

/// Installs Cluster API core through a `CoreProvider`, runs its manager with its webhooks
/// pointed at it, reports its Deployment available and waits until the `CoreProvider` is ready.
async fn install_cluster_api_core(
    client: &Client,
    plane: &support::ControlPlane,
    operator: &operator::Operator,
) -> capi::Manager {
    let namespace = "capi-system";
    create_namespace(client, namespace).await;
    let components = operator::capi_core_components().expect("CAPI core's components");
    let metadata = operator::capi_metadata().expect("CAPI's metadata.yaml");
    let selector = BTreeMap::from([("provider-components".to_string(), "cluster-api".into())]);
    let config_map = operator::components_config_map(
        "cluster-api-components",
        namespace,
        &selector,
        capi::version(),
        &metadata,
        &components,
    )
    .unwrap();
    create(
        &Api::<ConfigMap>::namespaced(client.clone(), namespace),
        &config_map,
    )
    .await;
    create_provider(
        client,
        "CoreProvider",
        namespace,
        "cluster-api",
        json!({"version": capi::version(), "fetchConfig": {"selector": {"matchLabels": selector}}}),
    )
    .await;
    wait_for_condition(
        client,
        "CoreProvider",
        namespace,
        "cluster-api",
        "ProviderInstalled",
        operator,
    )
    .await;
    let manager = capi::Manager::start(plane)
        .await
        .expect("CAPI core's manager serves the webhooks the operator installed");
    operator::report_available(client, namespace, "capi-controller-manager")
        .await
        .unwrap();
    wait_for_condition(
        client,
        "CoreProvider",
        namespace,
        "cluster-api",
        "Ready",
        operator,
    )
    .await;
    manager
}

/// What the operator installed for inpool, and the flags its `manager` settings ask for.
struct Installed {
    deployment: Deployment,
    /// (apiVersion, kind, namespace, name) of every object of the components file the operator
    /// created.
    objects: Vec<ComponentObject>,
    rendered_flags: Vec<String>,
}

/// One object of inpool's components file, in the namespace the operator installs it to.
#[derive(Debug)]
struct ComponentObject {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
}

/// Installs inpool through an `IPAMProvider` whose `manager` settings cover every flag the
/// operator renders, and waits until the operator reports it installed.
async fn install_inpool(client: &Client, operator: &operator::Operator) -> Installed {
    create_namespace(client, PROVIDER_NAMESPACE).await;
    create_namespace(client, CLAIMS_NAMESPACE).await;
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let clusterctl = repo_root().join("config").join("clusterctl");
    let read = |file: &str| std::fs::read_to_string(clusterctl.join(file)).unwrap();
    let components = read("ipam-components.yaml");
    let selector = BTreeMap::from([("provider-components".to_string(), "inpool".into())]);
    let config_map = operator::components_config_map(
        "inpool-components",
        PROVIDER_NAMESPACE,
        &selector,
        &version,
        &read("metadata.yaml"),
        &components,
    )
    .unwrap();
    create(
        &Api::<ConfigMap>::namespaced(client.clone(), PROVIDER_NAMESPACE),
        &config_map,
    )
    .await;

    // Ports inpool must bind are free; the others it only has to accept.
    let [health, metrics, diagnostics, webhook, profiler] =
        inpool_testenv::tethered::free_ports().unwrap();
    let manager = json!({
        "maxConcurrentReconciles": 4,
        "controller": {"groupKindConcurrency": {"IPAddressClaim": 3}},
        "cacheNamespace": CLAIMS_NAMESPACE,
        "health": {"healthProbeBindAddress": format!("127.0.0.1:{health}")},
        "leaderElection": {
            "leaderElect": true, "resourceLock": "leases",
            "resourceName": LEASE, "resourceNamespace": PROVIDER_NAMESPACE,
            "leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s",
        },
        "metrics": {
            "bindAddress": format!("127.0.0.1:{metrics}"),
            "diagnosticsAddress": format!("127.0.0.1:{diagnostics}"),
            "insecureDiagnostics": true,
        },
        "webhook": {"host": "127.0.0.1", "port": webhook, "certDir": "/tmp/k8s-webhook-server/serving-certs"},
        "syncPeriod": "10m",
        "profilerAddress": format!("127.0.0.1:{profiler}"),
        "verbosity": 2,
        "featureGates": {"InpoolOperatorTest": true},
    });
    let rendered_flags = [
        "--max-concurrent-reconciles=4".to_string(),
        "--ipaddressclaim-concurrency=3".into(),
        format!("--namespace={CLAIMS_NAMESPACE}"),
        format!("--health-addr=127.0.0.1:{health}"),
        "--leader-elect=true".into(),
        format!("--leader-election-id={PROVIDER_NAMESPACE}/{LEASE}"),
        "--leader-elect-lease-duration=15s".into(),
        "--leader-elect-renew-deadline=10s".into(),
        "--leader-elect-retry-period=2s".into(),
        format!("--metrics-bind-addr=127.0.0.1:{metrics}"),
        format!("--diagnostics-address=127.0.0.1:{diagnostics}"),
        "--insecure-diagnostics=true".into(),
        "--webhook-host=127.0.0.1".into(),
        format!("--webhook-port={webhook}"),
        "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs".into(),
        "--sync-period=600s".into(),
        format!("--profiler-address=127.0.0.1:{profiler}"),
        "--v=2".into(),
        "--feature-gates=InpoolOperatorTest=true".into(),
    ]
    .to_vec();
    create_provider(
        client,
        "IPAMProvider",
        PROVIDER_NAMESPACE,
        "inpool",
        json!({
            "version": version,
            "fetchConfig": {"selector": {"matchLabels": selector}},
            "manager": manager,
        }),
    )
    .await;
    wait_for_condition(
        client,
        "IPAMProvider",
        PROVIDER_NAMESPACE,
        "inpool",
        "ProviderInstalled",
        operator,
    )
    .await;

    let objects = component_objects(&components);
    let mut deployment = None;
    for object in &objects {
        let found = get_object(client, object).await;
        assert!(
            found.is_some(),
            "the operator should have installed {object:?}"
        );
        if object.kind == "Deployment" {
            deployment = found;
        }
    }
    let deployment: Deployment =
        serde_json::from_value(serde_json::to_value(deployment.expect("a Deployment")).unwrap())
            .unwrap();
    Installed {
        deployment,
        objects,
        rendered_flags,
    }
}

/// A pool and a claim in the namespace inpool serves: the claim gets an address.
async fn serves_a_claim(client: &Client, inpool: &Inpool) {
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), CLAIMS_NAMESPACE);
    create(
        &pools,
        &pool("operator-pool", &["10.42.0.10-10.42.0.20"], 24, None),
    )
    .await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), CLAIMS_NAMESPACE);
    create(&claims, &claim("operator-claim", "operator-pool")).await;
    let address_name = wait_explained(
        "the claim to get an address",
        Duration::from_secs(60),
        || async {
            let claim = claims.get("operator-claim").await.ok()?;
            match ready_of(&claim)? {
                (status, _, Some(address)) if status == "True" => Some(address),
                _ => None,
            }
        },
        || format!("; inpool's log:\n{}", inpool.logs()),
    )
    .await;
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), CLAIMS_NAMESPACE);
    let address = addresses.get(&address_name).await.unwrap();
    assert_eq!(address.spec.address, "10.42.0.10");
}

/// Deletes the `IPAMProvider` and checks that the operator removed what it installed, as
/// clusterctl deletes a provider without `--include-crd` and `--include-namespace`: every object
/// of the provider's namespace goes; the CRDs (with the pools of their kinds) and the namespace
/// stay, and so do cluster-wide objects (ClusterRoles, ClusterRoleBindings) unless named with the
/// namespace as prefix (`<namespace>-…`). The deletion orphans dependents, so the garbage collector removes none of them
/// through their owner references to the provider: whatever goes, the operator deleted.
async fn removed_with_its_provider(
    client: &Client,
    operator: &operator::Operator,
    objects: &[ComponentObject],
) {
    let providers: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        PROVIDER_NAMESPACE,
        &operator::resource("IPAMProvider"),
    );
    let orphan = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    providers.delete("inpool", &orphan).await.unwrap();
    wait_explained(
        "the IPAMProvider to be gone",
        INSTALL,
        || async {
            providers
                .get_opt("inpool")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
        || format!("; the operator's log ends:\n{}", operator.log_tail()),
    )
    .await;
    for object in objects {
        let present = get_object(client, object).await.is_some();
        match (object.kind.as_str(), &object.namespace) {
            ("CustomResourceDefinition" | "Namespace", _) => {
                assert!(present, "{object:?} stays, as clusterctl's delete keeps it")
            }
            (_, Some(_)) => assert!(!present, "the operator should have deleted {object:?}"),
            (_, None) => assert_eq!(
                present,
                !object.name.starts_with(&format!("{PROVIDER_NAMESPACE}-")),
                "clusterctl's delete takes a cluster-wide object only when its name starts with \
                 the provider's namespace: {object:?}"
            ),
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(
        crds.get_opt("inclusterippools.ipam.cluster.x-k8s.io")
            .await
            .unwrap()
            .is_some()
    );
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), CLAIMS_NAMESPACE);
    assert!(pools.get_opt("operator-pool").await.unwrap().is_some());
}

/// The objects of a components file, each in the namespace the operator installs it to (a
/// namespaced object goes to the provider's namespace).
fn component_objects(components: &str) -> Vec<ComponentObject> {
    parse_documents(components)
        .iter()
        .map(|object| ComponentObject {
            api_version: object["apiVersion"].as_str().unwrap().to_string(),
            kind: kind(object).to_string(),
            namespace: object["metadata"]["namespace"]
                .as_str()
                .map(|_| PROVIDER_NAMESPACE.to_string()),
            name: if kind(object) == "Namespace" {
                PROVIDER_NAMESPACE.to_string()
            } else {
                name(object).to_string()
            },
        })
        .collect()
}

/// The object as the API server has it, if it exists.
async fn get_object(client: &Client, object: &ComponentObject) -> Option<DynamicObject> {
    let value = json!({"apiVersion": object.api_version, "kind": object.kind,
                       "metadata": {"name": object.name, "namespace": object.namespace}});
    let api = api_of(
        client,
        &value,
        object.namespace.as_deref().unwrap_or_default(),
    )
    .await;
    api.get_opt(&object.name).await.unwrap()
}

/// The container the operator customises (named `manager`).
fn manager_container(deployment: &Deployment) -> Container {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.iter().find(|c| c.name == "manager"))
        .cloned()
        .expect("a container named manager")
}

async fn create_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = typed(json!({"metadata": {"name": name}}));
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

async fn create_provider(client: &Client, kind: &str, namespace: &str, name: &str, spec: Value) {
    let providers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &operator::resource(kind));
    let provider: DynamicObject = typed(json!({
        "apiVersion": format!("{}/v1alpha2", operator::GROUP), "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }));
    create(&providers, &provider).await;
}

/// Waits until provider `kind` `namespace/name` has `condition` True; on time-out, says its
/// conditions and the end of the operator's log.
async fn wait_for_condition(
    client: &Client,
    kind: &str,
    namespace: &str,
    name: &str,
    condition: &str,
    operator: &operator::Operator,
) {
    let providers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &operator::resource(kind));
    let conditions = || async {
        providers
            .get(name)
            .await
            .map(|p| p.data["status"]["conditions"].clone())
            .unwrap_or(Value::Null)
    };
    let is_true = |conditions: &Value| {
        conditions
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == condition && c["status"] == "True")
    };
    let deadline = tokio::time::Instant::now() + INSTALL;
    loop {
        let now = conditions().await;
        if is_true(&now) {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "{kind} {namespace}/{name} was not {condition} within {INSTALL:?}; its \
                 conditions: {now}\nthe operator's log ({}) ends:\n{}",
                operator.log().display(),
                operator.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
