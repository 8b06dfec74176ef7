//! Renders `config/default` (kustomize) into `config/clusterctl/ipam-components.yaml`, the file
//! `clusterctl init --ipam inpool` installs, without needing kustomize.
//!
//! ```text
//! cargo run --bin render-config              # (re)write config/clusterctl/ipam-components.yaml
//! cargo run --bin render-config -- --check   # exit 1 if the committed file differs
//! cargo run --bin render-config -- --print   # print the rendering to stdout
//! ```
//!
//! It understands the subset of kustomize that `config/` uses, and refuses anything else, so
//! that it cannot silently diverge from `kubectl kustomize --load-restrictor
//! LoadRestrictionsNone config/default`:
//!
//! - `resources:` files (one or more YAML documents) and directories with a
//!   `kustomization.yaml`, recursively, paths relative to the kustomization (files outside it
//!   are allowed, as with `--load-restrictor LoadRestrictionsNone`);
//! - `namespace:` set on every namespaced object;
//! - `labels:` entries with `pairs:` only, added to every object's `metadata.labels` (neither
//!   selectors nor templates, as kustomize does without `includeSelectors`/`includeTemplates`);
//! - `images:` entries (`name`, `newName`, `newTag`, `digest`) applied to pod-template and pod
//!   containers.
//!
//! Objects come out in kustomize's default ("legacy") order. Paths are relative to the crate
//! root (`CARGO_MANIFEST_DIR`), whatever the working directory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Map, Value};

const ENTRY: &str = "config/default";
const OUTPUT: &str = "config/clusterctl/ipam-components.yaml";
const HEADER: &str = "\
# inpool's clusterctl components (provider type IPAMProvider, name inpool).
# Generated from config/default by `cargo run --bin render-config`: the same objects as
# `kubectl kustomize --load-restrictor LoadRestrictionsNone config/default`.
# Do not edit: change config/ (or the CRD types) and regenerate; `-- --check` fails when stale.
";

fn main() -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => Mode::Write,
        ["--check"] => Mode::Check,
        ["--print"] => Mode::Print,
        _ => {
            eprintln!("usage: render-config [--check | --print]");
            return ExitCode::from(2);
        }
    };
    let rendered = match render(&root.join(ENTRY)) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("render-config: {e}");
            return ExitCode::FAILURE;
        }
    };
    let output = root.join(OUTPUT);
    match mode {
        Mode::Print => {
            print!("{rendered}");
            ExitCode::SUCCESS
        }
        Mode::Check => {
            if std::fs::read_to_string(&output).ok().as_deref() == Some(rendered.as_str()) {
                println!("render-config: {OUTPUT} is up to date");
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "render-config: {OUTPUT} differs from the rendering of {ENTRY}; \
                     run `cargo run --bin render-config` and commit the result"
                );
                ExitCode::FAILURE
            }
        }
        Mode::Write => {
            if std::fs::read_to_string(&output).ok().as_deref() == Some(rendered.as_str()) {
                println!("unchanged {OUTPUT}");
            } else if let Err(e) = std::fs::write(&output, &rendered) {
                eprintln!("render-config: cannot write {}: {e}", output.display());
                return ExitCode::FAILURE;
            } else {
                println!("wrote {OUTPUT}");
            }
            ExitCode::SUCCESS
        }
    }
}

enum Mode {
    Write,
    Check,
    Print,
}

/// Renders the kustomization in `dir` into one multi-document YAML text.
fn render(dir: &Path) -> Result<String, String> {
    let mut objects = build(dir)?;
    objects.sort_by_key(sort_key);
    let mut out = String::from(HEADER);
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let yaml = serde_saphyr::to_string(object).map_err(|e| format!("serialising: {e}"))?;
        out.push_str(&yaml);
        if !yaml.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Loads and transforms one kustomization directory.
fn build(dir: &Path) -> Result<Vec<Value>, String> {
    let file = dir.join("kustomization.yaml");
    let text =
        std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let kustomization: Value =
        serde_saphyr::from_str(&text).map_err(|e| format!("parsing {}: {e}", file.display()))?;
    let map = kustomization
        .as_object()
        .ok_or_else(|| format!("{} is not a mapping", file.display()))?;
    for key in map.keys() {
        if ![
            "apiVersion",
            "kind",
            "resources",
            "namespace",
            "labels",
            "images",
        ]
        .contains(&key.as_str())
        {
            return Err(format!(
                "{}: `{key}` is not supported by render-config (see src/bin/render-config.rs)",
                file.display()
            ));
        }
    }

    let mut objects = Vec::new();
    for entry in strings(map.get("resources"), &file, "resources")? {
        let path = normalise(&dir.join(&entry));
        if path.is_dir() {
            objects.extend(build(&path)?);
        } else {
            objects.extend(read_objects(&path)?);
        }
    }

    if let Some(namespace) = map.get("namespace") {
        let namespace = namespace
            .as_str()
            .ok_or_else(|| format!("{}: namespace must be a string", file.display()))?;
        for object in &mut objects {
            if !cluster_scoped(kind(object)) {
                metadata(object).insert("namespace".into(), namespace.into());
            }
        }
    }

    if let Some(labels) = map.get("labels") {
        let entries = labels
            .as_array()
            .ok_or_else(|| format!("{}: labels must be a list", file.display()))?;
        for entry in entries {
            let entry = entry
                .as_object()
                .ok_or_else(|| format!("{}: a labels entry must be a mapping", file.display()))?;
            if entry.keys().any(|k| k != "pairs") {
                return Err(format!(
                    "{}: only `pairs` is supported in labels entries",
                    file.display()
                ));
            }
            let pairs = entry
                .get("pairs")
                .and_then(Value::as_object)
                .ok_or_else(|| format!("{}: labels pairs must be a mapping", file.display()))?;
            for object in &mut objects {
                let labels = metadata(object)
                    .entry("labels")
                    .or_insert_with(|| Value::Object(Map::new()));
                let labels = labels
                    .as_object_mut()
                    .ok_or("metadata.labels is not a mapping")?;
                for (k, v) in pairs {
                    labels.insert(k.clone(), v.clone());
                }
            }
        }
    }

    if let Some(images) = map.get("images") {
        let entries = images
            .as_array()
            .ok_or_else(|| format!("{}: images must be a list", file.display()))?;
        for entry in entries {
            let image = ImageOverride::parse(entry)
                .map_err(|e| format!("{}: images: {e}", file.display()))?;
            for object in &mut objects {
                image.apply(object);
            }
        }
    }
    Ok(objects)
}

/// The objects of one YAML file (empty documents skipped).
fn read_objects(path: &Path) -> Result<Vec<Value>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
        .map_err(|e| format!("parsing {}: {e}", path.display()))?;
    let mut objects = Vec::new();
    for document in documents {
        if document.is_null() {
            continue;
        }
        if !document.is_object() || document.get("kind").is_none() {
            return Err(format!(
                "{}: a document is not a Kubernetes object",
                path.display()
            ));
        }
        objects.push(document);
    }
    Ok(objects)
}

fn strings(value: Option<&Value>, file: &Path, key: &str) -> Result<Vec<String>, String> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    value
        .as_array()
        .ok_or_else(|| format!("{}: {key} must be a list", file.display()))?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{}: {key} entries must be strings", file.display()))
        })
        .collect()
}

/// Removes `.` and `..` components without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn kind(object: &Value) -> &str {
    object.get("kind").and_then(Value::as_str).unwrap_or("")
}

fn name(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn metadata(object: &mut Value) -> &mut Map<String, Value> {
    let map = object.as_object_mut().expect("objects are mappings");
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    metadata.as_object_mut().expect("just made a mapping")
}

/// Kinds kustomize's namespace transformer leaves alone (the cluster-scoped kinds config/ may
/// contain).
fn cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "Namespace"
            | "CustomResourceDefinition"
            | "ClusterRole"
            | "ClusterRoleBinding"
            | "PersistentVolume"
            | "StorageClass"
            | "PriorityClass"
            | "MutatingWebhookConfiguration"
            | "ValidatingWebhookConfiguration"
            | "APIService"
    )
}

/// kustomize's legacy output order: these kinds first, in this order; webhooks last; other
/// kinds in between by name; then namespace and name.
fn sort_key(object: &Value) -> (usize, String, String, String) {
    const FIRST: [&str; 22] = [
        "Namespace",
        "ResourceQuota",
        "StorageClass",
        "CustomResourceDefinition",
        "ServiceAccount",
        "PodSecurityPolicy",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
        "ConfigMap",
        "Secret",
        "Endpoints",
        "Service",
        "LimitRange",
        "PriorityClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "Deployment",
        "StatefulSet",
        "CronJob",
        "PodDisruptionBudget",
    ];
    const LAST: [&str; 2] = [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ];
    let kind = kind(object);
    let rank = FIRST
        .iter()
        .position(|k| *k == kind)
        .or_else(|| LAST.iter().position(|k| *k == kind).map(|i| 1000 + i))
        .unwrap_or(500);
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    (
        rank,
        if rank == 500 {
            kind.to_string()
        } else {
            String::new()
        },
        namespace.to_string(),
        name(object).to_string(),
    )
}

struct ImageOverride {
    name: String,
    new_name: Option<String>,
    new_tag: Option<String>,
    digest: Option<String>,
}

impl ImageOverride {
    fn parse(entry: &Value) -> Result<ImageOverride, String> {
        let map = entry.as_object().ok_or("an entry must be a mapping")?;
        let field = |key: &str| -> Result<Option<String>, String> {
            match map.get(key) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("`{key}` must be a string")),
            }
        };
        for key in map.keys() {
            if !["name", "newName", "newTag", "digest"].contains(&key.as_str()) {
                return Err(format!("`{key}` is not supported"));
            }
        }
        Ok(ImageOverride {
            name: field("name")?.ok_or("`name` is required")?,
            new_name: field("newName")?,
            new_tag: field("newTag")?,
            digest: field("digest")?,
        })
    }

    fn apply(&self, object: &mut Value) {
        for pointer in [
            "/spec/template/spec/containers",
            "/spec/template/spec/initContainers",
            "/spec/containers",
            "/spec/initContainers",
            "/spec/jobTemplate/spec/template/spec/containers",
        ] {
            let Some(containers) = object.pointer_mut(pointer).and_then(Value::as_array_mut) else {
                continue;
            };
            for container in containers {
                let Some(image) = container.get_mut("image") else {
                    continue;
                };
                if let Some(current) = image.as_str()
                    && let Some(new) = self.rewrite(current)
                {
                    *image = Value::String(new);
                }
            }
        }
    }

    /// The new reference for `image` if its name matches.
    fn rewrite(&self, image: &str) -> Option<String> {
        let (name, tag, digest) = split_image(image);
        if name != self.name {
            return None;
        }
        let name = self.new_name.as_deref().unwrap_or(name);
        Some(match (&self.digest, &self.new_tag, tag, digest) {
            (Some(d), _, _, _) => format!("{name}@{d}"),
            (None, Some(t), _, _) => format!("{name}:{t}"),
            (None, None, Some(t), _) => format!("{name}:{t}"),
            (None, None, None, Some(d)) => format!("{name}@{d}"),
            (None, None, None, None) => name.to_string(),
        })
    }
}

/// Splits `registry:5000/repo/name:tag@digest` into name, tag and digest.
fn split_image(image: &str) -> (&str, Option<&str>, Option<&str>) {
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (image, None),
    };
    let slash = rest.rfind('/').map_or(0, |i| i + 1);
    match rest[slash..].rfind(':') {
        Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..]), digest),
        None => (rest, None, digest),
    }
}
