//! The optional kustomize components of `config/components/` and the overlay `config/monitoring`,
//! built by the real kustomize (v5.8.0) on `config/default` as a user's overlay builds them:
//! each builds, and its objects fit the base they are added to (the ServiceMonitor selects the
//! metrics Service and its port with the metrics reader's token, the certificate names the
//! Service and is mounted where `--diagnostics-cert-dir` points, the NetworkPolicy and the
//! PodDisruptionBudget select the manager's pods). The components' CRDs (ServiceMonitor,
//! Certificate) are installed nowhere: what is checked is the rendered objects.

use std::path::{Path, PathBuf};

use inpool_testenv::common::packaging::{kind, name, parse_documents};
use inpool_testenv::{kustomize, repo_root};
use serde_json::{Value, json};

/// Builds an overlay of `config/default` (written under `target/`) with `components` (names of
/// `config/components/`) and `extra` lines of kustomization; returns its objects.
fn build_overlay(overlay: &str, components: &[&str], extra: &str) -> Vec<Value> {
    let dir = repo_root()
        .join("target")
        .join("kustomize-overlays")
        .join(overlay);
    std::fs::create_dir_all(&dir).unwrap();
    let config = Path::new("../../../config");
    let mut text = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\n",
        config.join("default").display()
    );
    if !components.is_empty() {
        text.push_str("components:\n");
        for component in components {
            text.push_str(&format!(
                "  - {}\n",
                config.join("components").join(component).display()
            ));
        }
    }
    text.push_str(extra);
    std::fs::write(dir.join("kustomization.yaml"), text).unwrap();
    build(&dir)
}

fn build(dir: &Path) -> Vec<Value> {
    parse_documents(&kustomize::build(dir).unwrap_or_else(|e| panic!("{e}")))
}

fn find<'a>(objects: &'a [Value], wanted_kind: &str, wanted_name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| kind(o) == wanted_kind && name(o) == wanted_name)
        .unwrap_or_else(|| panic!("no {wanted_kind} {wanted_name} in the build"))
}

fn all_of<'a>(objects: &'a [Value], wanted_kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| kind(o) == wanted_kind).collect()
}

fn only<'a>(objects: &'a [Value], wanted_kind: &str) -> &'a Value {
    let found = all_of(objects, wanted_kind);
    assert_eq!(found.len(), 1, "one {wanted_kind} expected: {found:?}");
    found[0]
}

fn namespace(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// Every label of `selector` is on `labels` with the same value (and the selector is not empty).
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().expect("matchLabels");
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn the_service(objects: &[Value]) -> &Value {
    only(objects, "Service")
}

fn the_deployment(objects: &[Value]) -> &Value {
    only(objects, "Deployment")
}

fn manager(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    containers
        .iter()
        .find(|c| c["name"] == "manager")
        .expect("container manager")
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap()).collect())
        .unwrap_or_default()
}

fn component_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("config/components"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn every_component_builds_on_the_default_base_and_only_adds_to_it() {
    let base = build(&repo_root().join("config/default"));
    let key = |o: &Value| format!("{}/{}/{}", kind(o), namespace(o), name(o));
    let base_keys: Vec<String> = base.iter().map(key).collect();
    let dirs = component_dirs();
    assert!(dirs.len() >= 4, "{dirs:?}");
    for dir in dirs {
        let component = dir.file_name().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
        let kustomization: Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(kustomization["kind"], "Component", "{component}");
        let built = build_overlay(&format!("only-{component}"), &[component], "");
        let keys: Vec<String> = built.iter().map(key).collect();
        for base_key in &base_keys {
            assert!(
                keys.contains(base_key),
                "{component} drops {base_key} of config/default"
            );
        }
        assert!(
            keys.len() > base_keys.len(),
            "{component} adds no object to config/default"
        );
        for object in &built {
            let labels = &object["metadata"]["labels"];
            assert_eq!(
                labels["cluster.x-k8s.io/provider"],
                "ipam-inpool",
                "{component}: {} carries the provider label, as config/default's objects do",
                key(object)
            );
        }
    }
}

#[test]
fn the_service_monitor_scrapes_the_metrics_service_with_the_metrics_reader_token() {
    let objects = build_overlay("servicemonitor", &["servicemonitor"], "");
    let service = the_service(&objects);
    let monitor = only(&objects, "ServiceMonitor");
    // A ServiceMonitor without namespaceSelector looks for Services of its own namespace.
    assert!(monitor["spec"]["namespaceSelector"].is_null());
    assert_eq!(namespace(monitor), namespace(service));
    assert!(
        selects(
            &monitor["spec"]["selector"]["matchLabels"],
            &service["metadata"]["labels"]
        ),
        "the ServiceMonitor's selector {} does not match the Service's labels {}",
        monitor["spec"]["selector"],
        service["metadata"]["labels"]
    );
    let endpoints = monitor["spec"]["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    let endpoint = &endpoints[0];
    let port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == endpoint["port"])
        .unwrap_or_else(|| panic!("the Service has no port {}", endpoint["port"]));
    assert_eq!(port["appProtocol"], "https");
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["path"], "/metrics");
    // The port serves the diagnostics address of the manager's args.
    let container = manager(the_deployment(&objects));
    let container_port = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == port["targetPort"])
        .expect("the Service's targetPort names a container port");
    assert_eq!(container_port["containerPort"], 8443);
    assert!(
        strings(&container["args"])
            .contains(&"--diagnostics-address=${CAPI_DIAGNOSTICS_ADDRESS:=:8443}"),
        "{}",
        container["args"]
    );

    // The token: a ServiceAccount token Secret beside the ServiceMonitor (prometheus-operator
    // reads Secrets from the ServiceMonitor's namespace), of a ServiceAccount bound to the
    // ClusterRole that allows get /metrics.
    assert!(
        endpoint["bearerTokenFile"].is_null() && endpoint["bearerTokenSecret"].is_null(),
        "deprecated token fields: {endpoint}"
    );
    let authorization = &endpoint["authorization"];
    assert_eq!(authorization["type"], "Bearer");
    assert_eq!(authorization["credentials"]["key"], "token");
    let secret = find(
        &objects,
        "Secret",
        authorization["credentials"]["name"].as_str().unwrap(),
    );
    assert_eq!(namespace(secret), namespace(monitor));
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    let account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
        .as_str()
        .expect("the Secret names its ServiceAccount");
    assert_eq!(account, "inpool-metrics-reader");
    let service_account = find(&objects, "ServiceAccount", account);
    assert_eq!(namespace(service_account), namespace(secret));
    // Kubernetes' token controller deletes a token Secret whose ServiceAccount it cannot find,
    // so the ServiceAccount is applied first (`kubectl apply` follows the build's order).
    let position = |o: &Value| objects.iter().position(|x| x == o).unwrap();
    assert!(
        position(service_account) < position(secret),
        "the ServiceAccount {account} comes after its token Secret"
    );
    let reader = find(&objects, "ClusterRole", "inpool-metrics-reader");
    assert_eq!(
        reader["rules"],
        json!([{ "nonResourceURLs": ["/metrics"], "verbs": ["get"] }])
    );
    let bindings = all_of(&objects, "ClusterRoleBinding");
    let binding = bindings
        .iter()
        .find(|b| b["roleRef"]["name"] == "inpool-metrics-reader")
        .expect("a binding of inpool-metrics-reader");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(
        binding["subjects"],
        json!([{ "kind": "ServiceAccount", "name": account, "namespace": namespace(secret) }])
    );
    // The self-signed certificate cannot be verified; the cert-manager component changes this.
    assert_eq!(endpoint["tlsConfig"], json!({ "insecureSkipVerify": true }));
}

/// The Certificate for the metrics Service and what consumes it, checked in `objects`.
fn check_certificate(objects: &[Value], with_monitor: bool) {
    let service = the_service(objects);
    let (service_name, ns) = (name(service), namespace(service));
    let certificates = all_of(objects, "Certificate");
    let serving = certificates
        .iter()
        .find(|c| c["spec"]["isCA"] != true)
        .expect("a serving Certificate");
    assert_eq!(namespace(serving), ns);
    assert_eq!(
        strings(&serving["spec"]["dnsNames"]),
        [
            format!("{service_name}.{ns}.svc"),
            format!("{service_name}.{ns}.svc.cluster.local")
        ]
    );
    assert!(strings(&serving["spec"]["usages"]).contains(&"server auth"));
    let secret_name = serving["spec"]["secretName"].as_str().unwrap();

    // Its issuer signs with a CA certificate of this build, made by a self-signed Issuer.
    assert_eq!(serving["spec"]["issuerRef"]["kind"], "Issuer");
    let issuer = find(
        objects,
        "Issuer",
        serving["spec"]["issuerRef"]["name"].as_str().unwrap(),
    );
    assert_eq!(namespace(issuer), ns);
    let ca = certificates
        .iter()
        .find(|c| c["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"])
        .expect("the CA Issuer's Secret is a Certificate of this build");
    assert_eq!(ca["spec"]["isCA"], true);
    let root = find(
        objects,
        "Issuer",
        ca["spec"]["issuerRef"]["name"].as_str().unwrap(),
    );
    assert_eq!(root["spec"]["selfSigned"], json!({}));

    // Mounted in the manager container where --diagnostics-cert-dir points, the default args kept.
    let deployment = the_deployment(objects);
    let container = manager(deployment);
    let args = strings(&container["args"]);
    let base = build(&repo_root().join("config/default"));
    let base_args = strings(&manager(the_deployment(&base))["args"]);
    assert_eq!(
        args[..base_args.len()],
        base_args[..],
        "the base's args kept"
    );
    let dirs: Vec<&str> = args
        .iter()
        .filter_map(|a| a.strip_prefix("--diagnostics-cert-dir="))
        .collect();
    assert_eq!(dirs.len(), 1, "{args:?}");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["mountPath"] == dirs[0])
        .unwrap_or_else(|| panic!("nothing is mounted at {}", dirs[0]));
    assert_eq!(mount["readOnly"], true);
    let volume = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    assert_eq!(volume["secret"]["secretName"], secret_name);

    // Prometheus verifies it: the CA from the Certificate's Secret, one of its names.
    let monitors = all_of(objects, "ServiceMonitor");
    if !with_monitor {
        assert!(monitors.is_empty());
        return;
    }
    let tls = &monitors[0]["spec"]["endpoints"][0]["tlsConfig"];
    assert!(tls["insecureSkipVerify"].is_null(), "{tls}");
    assert_eq!(
        tls["ca"],
        json!({ "secret": { "name": secret_name, "key": "ca.crt" } })
    );
    assert_eq!(tls["serverName"], format!("{service_name}.{ns}.svc"));
}

#[test]
fn the_cert_manager_certificate_names_the_service_and_is_mounted_where_inpool_reads_it() {
    check_certificate(
        &build_overlay("cert-manager", &["servicemonitor", "cert-manager"], ""),
        true,
    );
    // Without the ServiceMonitor, and in another namespace: the names follow the Service.
    check_certificate(
        &build_overlay("cert-manager-alone", &["cert-manager"], ""),
        false,
    );
    let moved = build_overlay(
        "cert-manager-elsewhere",
        &["servicemonitor", "cert-manager"],
        "namespace: ipam-elsewhere\n",
    );
    assert_eq!(namespace(the_service(&moved)), "ipam-elsewhere");
    check_certificate(&moved, true);
}

#[test]
fn the_network_policy_admits_the_metrics_port_from_the_monitoring_namespace_only() {
    let objects = build_overlay("networkpolicy", &["networkpolicy"], "");
    let deployment = the_deployment(&objects);
    let policy = only(&objects, "NetworkPolicy");
    assert_eq!(namespace(policy), namespace(deployment));
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert!(selects(
        &policy["spec"]["podSelector"]["matchLabels"],
        &deployment["spec"]["template"]["metadata"]["labels"]
    ));
    // Ingress only: inpool's own connections to the API server stay open.
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    let rules = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        rules[0]["from"],
        json!([{ "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "monitoring" } } }])
    );
    assert_eq!(
        rules[0]["ports"],
        json!([{ "port": "metrics", "protocol": "TCP" }])
    );
    // `metrics` is the container port the Service sends to; the probes' port has no rule
    // (a pod's own node is never blocked).
    let container = manager(deployment);
    let ports = container["ports"].as_array().unwrap();
    assert!(ports.iter().any(|p| p["name"] == "metrics"));
    assert_eq!(
        the_service(&objects)["spec"]["ports"][0]["targetPort"],
        "metrics"
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "health");

    // The namespace is configurable with the patch the component's kustomization shows.
    let patched = build_overlay(
        "networkpolicy-patched",
        &["networkpolicy"],
        "patches:\n  - target: { kind: NetworkPolicy, name: inpool-controller-manager }\n    \
         patch: |-\n      - op: replace\n        path: \
         /spec/ingress/0/from/0/namespaceSelector/matchLabels\n        value: { \
         kubernetes.io/metadata.name: prometheus }\n",
    );
    assert_eq!(
        only(&patched, "NetworkPolicy")["spec"]["ingress"][0]["from"],
        json!([{ "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "prometheus" } } }])
    );
    let documented = std::fs::read_to_string(
        repo_root().join("config/components/networkpolicy/kustomization.yaml"),
    )
    .unwrap();
    assert!(
        documented.contains("path: /spec/ingress/0/from/0/namespaceSelector/matchLabels"),
        "the component documents the patch this test applies"
    );
}

#[test]
fn high_availability_runs_two_replicas_with_a_disruption_budget() {
    let objects = build_overlay("high-availability", &["high-availability"], "");
    let deployment = the_deployment(&objects);
    assert_eq!(deployment["spec"]["replicas"], 2);
    let budget = only(&objects, "PodDisruptionBudget");
    assert_eq!(namespace(budget), namespace(deployment));
    assert_eq!(budget["spec"]["minAvailable"], 1);
    assert!(budget["spec"]["maxUnavailable"].is_null());
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert!(selects(
        &budget["spec"]["selector"]["matchLabels"],
        pod_labels
    ));
    let spread = &deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        [0]["podAffinityTerm"];
    assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
    assert!(selects(&spread["labelSelector"]["matchLabels"], pod_labels));
    let zones = &deployment["spec"]["template"]["spec"]["topologySpreadConstraints"][0];
    assert_eq!(zones["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(
        zones["whenUnsatisfiable"], "ScheduleAnyway",
        "a cluster of one zone must still run both replicas"
    );
    assert!(selects(&zones["labelSelector"]["matchLabels"], pod_labels));
    // The base runs one replica: the budget comes only with the second.
    let base = build(&repo_root().join("config/default"));
    assert_eq!(the_deployment(&base)["spec"]["replicas"], 1);
    assert!(all_of(&base, "PodDisruptionBudget").is_empty());
}

#[test]
fn the_monitoring_overlay_is_the_base_with_rules_service_monitor_certificate_and_policy() {
    let objects = build(&repo_root().join("config/monitoring"));
    let base = build(&repo_root().join("config/default"));
    for object in &base {
        assert!(
            objects
                .iter()
                .any(|o| kind(o) == kind(object) && name(o) == name(object)),
            "config/monitoring lacks {} {}",
            kind(object),
            name(object)
        );
    }
    let rule = only(&objects, "PrometheusRule");
    assert_eq!(namespace(rule), "inpool-system");
    only(&objects, "NetworkPolicy");
    check_certificate(&objects, true);
    // Nothing of high-availability: the replica count stays the base's.
    assert_eq!(the_deployment(&objects)["spec"]["replicas"], 1);
}

/// The manager's pods carry the provider label clusterctl's contract asks of every object (so
/// `kubectl get pods -l cluster.x-k8s.io/provider=ipam-inpool` finds them), without it entering
/// the Deployment's selector, which cannot change on an upgrade; and they tolerate the
/// control-plane taints, as Cluster API's managers do, so that a management cluster of
/// control-plane nodes only can run them.
#[test]
fn the_managers_pods_carry_the_provider_label_and_tolerate_control_plane_nodes() {
    let objects = build(&repo_root().join("config/default"));
    let deployment = the_deployment(&objects);
    let provider = "cluster.x-k8s.io/provider";
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["labels"][provider],
        "ipam-inpool"
    );
    assert!(
        deployment["spec"]["selector"]["matchLabels"]
            .get(provider)
            .is_none(),
        "the selector is immutable: a label added to it would break every upgrade"
    );
    let tolerations = deployment["spec"]["template"]["spec"]["tolerations"]
        .as_array()
        .expect("tolerations");
    for taint in [
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
    ] {
        assert!(
            tolerations
                .iter()
                .any(|t| t["key"] == taint && t["effect"] == "NoSchedule"),
            "no toleration of {taint}: {tolerations:?}"
        );
    }
}
