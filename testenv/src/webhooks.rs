//! Registering a provider's admission webhooks as its kustomize overlays do in a cluster, with a
//! URL on 127.0.0.1 in place of the webhook Service.

use std::path::Path;

use anyhow::{Context as _, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
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
