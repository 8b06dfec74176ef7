//! inpool's kustomize base, built by a real kustomize (v5.8.0, from the Go module proxy) with its
//! default load restrictions, as `kubectl apply -k`, GitOps tools and remote bases build it: it
//! builds, and into exactly the components file a release attaches
//! (`config/clusterctl/ipam-components.yaml`). The image is named once, with the crate's version.

use std::collections::BTreeSet;

use inpool_testenv::{kustomize, repo_root};

const COMPONENTS: &str = "config/clusterctl/ipam-components.yaml";

#[test]
fn the_base_builds_into_exactly_the_components_file() {
    let built =
        kustomize::build(&repo_root().join("config/default")).unwrap_or_else(|e| panic!("{e}"));
    let committed = std::fs::read_to_string(repo_root().join(COMPONENTS)).unwrap();
    assert!(
        built == committed,
        "{COMPONENTS} is not `kustomize build config/default`; regenerate it with\n  \
         target/kustomize/kustomize build config/default > {COMPONENTS}\n(kustomize {} is \
         built by this test)",
        kustomize::VERSION
    );
}

#[test]
fn the_crds_kustomization_lists_every_crd() {
    let text = std::fs::read_to_string(repo_root().join("crds/kustomization.yaml")).unwrap();
    let kustomization: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(repo_root().join("crds"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml") && f != "kustomization.yaml")
        .collect();
    assert_eq!(
        listed, on_disk,
        "crds/kustomization.yaml must list every CRD of crds/"
    );
}

/// Every file under `config/` (and the Dockerfile, README and docs), for text checks.
fn manifests_and_docs() -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut files = vec![
        repo_root().join("Dockerfile"),
        repo_root().join("README.md"),
    ];
    walk(&repo_root().join("config"), &mut files);
    walk(&repo_root().join("docs"), &mut files);
    files
}

#[test]
fn the_image_is_named_once_with_the_crates_version() {
    let text =
        std::fs::read_to_string(repo_root().join("config/default/kustomization.yaml")).unwrap();
    let kustomization: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let images = kustomization["images"].as_array().expect("images");
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0]["name"], "controller");
    assert_eq!(images[0]["newName"], "ghcr.io/inpool-dev/inpool");
    assert_eq!(
        images[0]["newTag"],
        format!("v{}", env!("CARGO_PKG_VERSION")),
        "the image tag is v + the version in Cargo.toml"
    );
    let components = std::fs::read_to_string(repo_root().join(COMPONENTS)).unwrap();
    let images: Vec<&str> = components
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .collect();
    assert_eq!(
        images,
        [format!(
            "ghcr.io/inpool-dev/inpool:v{}",
            env!("CARGO_PKG_VERSION")
        )]
    );
    // No manifest or document names the official-images namespace, which no project can push to.
    for file in manifests_and_docs() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            !text.contains("docker.io/library/"),
            "{} names docker.io/library/",
            file.display()
        );
    }
}
