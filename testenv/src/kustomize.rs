//! kustomize v5.8.0, built from the Go module proxy (`testenv/kustomize/go.mod`, a module of its
//! own whose `tool` directive names `sigs.k8s.io/kustomize/kustomize/v5`), for the tests that
//! render upstream kustomizations as their projects do. Not used by the `inpool` binary.
//!
//! kustomize refuses an absolute path as a resource (`new root … cannot be absolute`), so an
//! overlay that builds on a directory of the Go module cache names it relative to the overlay
//! ([`relative_to`]).

use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::{go_build, repo_root};

/// The kustomize release `testenv/kustomize/go.mod` pins.
pub const VERSION: &str = "v5.8.0";

/// Builds `target/kustomize/kustomize` once per process (see [`go_build`]).
pub fn kustomize() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let binary = repo_root()
                .join("target")
                .join("kustomize")
                .join("kustomize");
            go_build(
                &repo_root().join("testenv").join("kustomize"),
                "sigs.k8s.io/kustomize/kustomize/v5",
                "",
                &binary,
                &format!("building kustomize {VERSION} (testenv/kustomize/, once): under a minute"),
            )?;
            Ok(binary)
        })
        .clone()
}

/// `kustomize build DIR`: the rendered YAML.
pub fn build(dir: &Path) -> Result<String, String> {
    let output = Command::new(kustomize()?)
        .arg("build")
        .arg(dir)
        .output()
        .map_err(|e| format!("running kustomize build {}: {e}", dir.display()))?;
    if !output.status.success() {
        return Err(format!(
            "kustomize build {} failed ({}): {}",
            dir.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("kustomize printed no UTF-8: {e}"))
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
