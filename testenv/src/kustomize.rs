//! kustomize v5.8.0, built from the Go module proxy (`testenv/kustomize/go.mod`, a module of its
//! own), for the tests that build inpool's kustomize base as users do: `config/default` must
//! build, with kustomize's default load restrictions, into exactly the released components file;
//! and that render Cluster API core's components from the Cluster API module's own
//! `core/config/default` (`tests/operator/`). Not used by the `inpool` binary.
//!
//! kustomize refuses an absolute path as a resource (`new root … cannot be absolute`), so an
//! overlay that builds on a directory of the Go module cache names it relative to itself
//! ([`relative_to`]).
//!
//! The build takes about 40 seconds on 2 cores the first time (kustomize and kyaml share no
//! packages with the other Go programs of the tests), then Go's build cache makes it a no-op.

use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::{go_build, repo_root};

/// The kustomize release the tests build (`testenv/kustomize/go.mod` pins the same).
pub const VERSION: &str = "v5.8.0";

/// Builds `target/kustomize/kustomize` once per process (see [`go_build`]).
pub fn binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let out = repo_root()
                .join("target")
                .join("kustomize")
                .join("kustomize");
            go_build(
                &repo_root().join("testenv").join("kustomize"),
                "sigs.k8s.io/kustomize/kustomize/v5",
                "",
                &out,
                &format!(
                    "building kustomize {VERSION} (testenv/kustomize/, once): under a minute on 2 \
                     cores"
                ),
            )?;
            Ok(out)
        })
        .clone()
}

/// `kustomize build DIR`: the rendered objects as YAML, or kustomize's error.
pub fn build(dir: &Path) -> Result<String, String> {
    let output = Command::new(binary()?)
        .arg("build")
        .arg(dir)
        .output()
        .map_err(|e| format!("running kustomize: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "kustomize build {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("kustomize's output: {e}"))
}

/// `target` as a path relative to the directory `from` (both absolute), the form kustomize
/// accepts for a resource outside the kustomization.
pub fn relative_to(target: &Path, from: &Path) -> PathBuf {
    let normal = |path: &Path| -> Vec<PathBuf> {
        path.components()
            .filter_map(|c| match c {
                Component::Normal(part) => Some(PathBuf::from(part)),
                _ => None,
            })
            .collect()
    };
    let (target, from) = (normal(target), normal(from));
    let shared = target.iter().zip(&from).take_while(|(a, b)| a == b).count();
    let mut relative = PathBuf::new();
    for _ in shared..from.len() {
        relative.push("..");
    }
    for part in &target[shared..] {
        relative.push(part);
    }
    relative
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_to_the_shared_ancestor() {
        assert_eq!(
            relative_to(
                Path::new("/root/go/pkg/mod/x"),
                Path::new("/work/repo/target/o")
            ),
            PathBuf::from("../../../../root/go/pkg/mod/x")
        );
        assert_eq!(
            relative_to(Path::new("/work/a/b"), Path::new("/work/c")),
            PathBuf::from("../a/b")
        );
    }
}
