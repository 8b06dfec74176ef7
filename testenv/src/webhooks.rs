//! Installing a provider as its kustomize overlays do in a cluster: its CRDs with the labels the
//! overlays add, and its admission and conversion webhooks registered with a URL on 127.0.0.1 in
//! place of the webhook Service.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The documents of a YAML file, empty ones left out.
pub fn yaml_documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
        .with_context(|| format!("parsing {}", path.display()))?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

/// The CRDs in the YAML files of `bases`, each with `labels` added (what a provider's
/// kustomization adds: CAPI refuses an infrastructure kind without a contract label), written to
/// `out` as `<CRD name>.yaml` (JSON, which is YAML: the control plane reads it as it reads the
/// bases); returns the files written.
pub fn write_labelled_crds(
    bases: &Path,
    out: &Path,
    labels: &[(&str, &str)],
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let mut files = Vec::new();
    for base in crate::yaml_files(bases) {
        for mut crd in yaml_documents(&base).map_err(|e| format!("{e:#}"))? {
            for (key, value) in labels {
                crd["metadata"]["labels"][*key] = json!(value);
            }
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or("crd")
                .to_string();
            let file = out.join(format!("{name}.yaml"));
            let text = serde_json::to_string_pretty(&crd).map_err(|e| e.to_string())?;
            std::fs::write(&file, text).map_err(|e| format!("writing {}: {e}", file.display()))?;
            files.push(file);
        }
    }
    if files.is_empty() {
        return Err(format!("no CRDs in {}", bases.display()));
    }
    Ok(files)
}

/// Registers a controller-gen `manifests.yaml` (webhook configurations named
/// `mutating-webhook-configuration` / `validating-webhook-configuration`), each named
/// `<prefix>-<name>` and each `clientConfig.service` replaced by `base` + its path, trusting
/// `ca_bundle`. A configuration of that name that exists already (a provider's kustomize
/// `namePrefix` gives the same name, installed with a Service reference) is overwritten by a
/// merge patch, which replaces its `webhooks` list whole: a webhook may name a URL or a Service,
/// never both.
pub async fn register_admission(
    client: &Client,
    manifests: &Path,
    prefix: &str,
    base: &str,
    ca_bundle: &[u8],
) -> anyhow::Result<()> {
    for mut document in yaml_documents(manifests)? {
        let name = format!(
            "{prefix}-{}",
            document["metadata"]["name"].as_str().unwrap_or("webhooks")
        );
        document["metadata"] = json!({ "name": name });
        for webhook in document["webhooks"].as_array_mut().into_iter().flatten() {
            let path = webhook["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            webhook["clientConfig"] = json!({
                "url": format!("{base}{path}"),
                "caBundle": ByteString(ca_bundle.to_vec()),
            });
        }
        match document["kind"].as_str() {
            Some("ValidatingWebhookConfiguration") => {
                let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
                create_or_merge(&api, &name, document).await
            }
            Some("MutatingWebhookConfiguration") => {
                let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
                create_or_merge(&api, &name, document).await
            }
            other => bail!("unexpected {other:?} in {}", manifests.display()),
        }
        .with_context(|| format!("registering {name}"))?;
    }
    Ok(())
}

/// Creates `document` as `name`, or merge-patches an existing object of that name with it.
async fn create_or_merge<K>(api: &Api<K>, name: &str, document: Value) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(document.clone()).map_err(kube::Error::SerdeError)?;
    match api.create(&PostParams::default(), &object).await {
        Err(kube::Error::Api(status)) if status.code == 409 => api
            .patch(name, &PatchParams::default(), &Patch::Merge(&document))
            .await
            .map(drop),
        outcome => outcome.map(drop),
    }
}

/// What a provider's `config/crd/patches/webhook_in_*.yaml` (in `patches`) do, with a URL for the
/// Service: each CRD they name converts through `base` + the patch's path, trusting `ca_bundle`.
pub async fn register_conversion(
    client: &Client,
    patches: &Path,
    base: &str,
    ca_bundle: &[u8],
) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut patched = 0;
    for file in crate::yaml_files(patches) {
        for patch in yaml_documents(&file)? {
            let Some(name) = patch["metadata"]["name"].as_str() else {
                continue;
            };
            let webhook = &patch["spec"]["conversion"]["webhook"];
            if webhook.is_null() {
                // The same directory holds other patches (CA injection and the like).
                continue;
            }
            let path = webhook["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or("/convert");
            let conversion = json!({"spec": {"conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": webhook["conversionReviewVersions"],
                    // A CRD installed from a provider's components names the webhook Service,
                    // which a URL must replace (a client config names one of the two).
                    "clientConfig": {
                        "url": format!("{base}{path}"),
                        "caBundle": ByteString(ca_bundle.to_vec()),
                        "service": null,
                    },
                },
            }}});
            crds.patch(name, &PatchParams::default(), &Patch::Merge(&conversion))
                .await
                .with_context(|| format!("pointing the conversion of CRD {name} at {base}"))?;
            patched += 1;
        }
    }
    if patched == 0 {
        bail!("no conversion patches in {}", patches.display());
    }
    Ok(())
}
