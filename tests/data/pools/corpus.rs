//! The pool corpora under `tests/data/pools/` (shared by `api_schema` and `api_server`).

use std::path::{Path, PathBuf};

use serde_json::Value;

pub fn pools_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/pools")
}

/// One corpus object.
#[derive(Clone, Debug)]
pub struct Case {
    /// File name without `.yaml`.
    pub name: String,
    /// The object, as JSON.
    pub object: Value,
    /// `# expect:` lines (invalid corpus only).
    pub expect: Vec<String>,
}

impl Case {
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }

    pub fn object_name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }
}

fn load_dir(dir: &Path) -> Vec<Case> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let object: Value = serde_saphyr::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
            let expect = text
                .lines()
                .filter_map(|l| l.strip_prefix("# expect:"))
                .map(|s| s.trim().to_string())
                .collect();
            Case {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                object,
                expect,
            }
        })
        .collect()
}

/// Pools that the reference provider accepts.
pub fn valid() -> Vec<Case> {
    load_dir(&pools_dir().join("valid"))
}

/// Pools that inpool's CRD must refuse, each with its expected message(s).
pub fn invalid() -> Vec<Case> {
    load_dir(&pools_dir().join("invalid"))
}
