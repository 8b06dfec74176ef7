//! The release, checked without publishing one: the workflows under `.github/workflows/` pass
//! actionlint (v1.7.12, built from the Go module proxy), which runs shellcheck on their `run:`
//! blocks, as committed and as copies whose actions are named by tag, whose inputs actionlint
//! knows; the release workflow publishes what docs/install.md promises (a tag-triggered
//! release, images for linux/amd64 and linux/arm64, kubectl-inpool for linux and darwin on both,
//! the components rendered by kustomize for the tag); its kustomize steps (v5.8.0) change the
//! components' image and nothing else; and a kubectl-inpool archive made by
//! `hack/plugin-archive.sh`, with the manifest `hack/krew-manifest.sh` writes, installs with krew
//! (v0.4.4, from the Go module proxy) and runs.
//!
//! shellcheck comes from Debian's package, which `.ci/run` installs; without it actionlint skips
//! the shell checks, which fails under CI (`CI` set) and elsewhere says NOT RUN.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use inpool_testenv::{kustomize, release, support};
use serde_json::Value;

fn repo(path: &str) -> PathBuf {
    support::repo_root().join(path)
}

/// A fresh directory under Cargo's temporary directory for integration tests.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn workflows() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo(".github/workflows"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

/// actionlint on `files`, run in `root`, with shellcheck when it is installed.
fn actionlint(root: &Path, files: &[PathBuf], test: &str) -> Output {
    let actionlint = release::actionlint().unwrap_or_else(|e| panic!("{e}"));
    let mut command = Command::new(actionlint);
    command.args(["-no-color", "-oneline"]);
    if Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_err()
    {
        support::not_run(
            &format!("{test} (shellcheck on run: blocks)"),
            "shellcheck is not on PATH (Debian's shellcheck package; .ci/run installs it)",
        );
        command.arg("-shellcheck=");
    }
    command
        .args(files)
        .current_dir(root)
        .output()
        .expect("running actionlint")
}

/// A workflow with each action pinned by commit named by the tag of its major release instead:
/// `owner/repo@<sha> # vX.Y.Z` becomes `owner/repo@vX` (and `@<sha> # stable`, a branch,
/// `@stable`). actionlint knows the inputs of popular actions by such tags and checks a step's
/// `with:` against them; an action pinned by commit it runs unchecked.
fn named_by_tag(workflow: &str) -> String {
    let pin = regex::Regex::new(r"@[0-9a-f]{40} # (v[0-9]+|stable)\b\S*").unwrap();
    let named = pin.replace_all(workflow, "@$1").into_owned();
    assert_ne!(named, workflow, "no action pinned by commit");
    named
}

/// actionlint on copies of `workflows` (file name, text) named by tag ([`named_by_tag`]), in
/// `.github/workflows/` of a fresh directory that actionlint takes for a repository (it has a
/// `.git`), so that a call of a local reusable workflow is checked too.
fn actionlint_named_by_tag(dir: &str, workflows: &[(&str, String)], test: &str) -> Output {
    let root = scratch(dir);
    std::fs::write(root.join(".git"), "").unwrap();
    let dir = root.join(".github").join("workflows");
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (name, text) in workflows {
        std::fs::write(dir.join(name), named_by_tag(text)).unwrap();
        files.push(PathBuf::from(".github/workflows").join(name));
    }
    actionlint(&root, &files, test)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_workflows_pass_actionlint() {
    let test = "the_workflows_pass_actionlint";
    let files = workflows();
    let names: Vec<_> = files.iter().map(|f| f.file_name().unwrap()).collect();
    assert_eq!(names, ["ci.yml", "release.yml"]);
    let named: Vec<(&str, String)> = files
        .iter()
        .map(|f| (f.file_name().unwrap().to_str().unwrap(), read(f)))
        .collect();
    for output in [
        actionlint(&support::repo_root(), &files, test),
        actionlint_named_by_tag("actionlint-named-by-tag", &named, test),
    ] {
        assert!(
            output.status.success() && output.stdout.is_empty(),
            "actionlint found problems ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The lint can fail: the release workflow with one output name misspelt, an unknown input of an
/// action (found in the copy named by tag), and (with shellcheck) an unquoted variable is
/// reported at each.
#[test]
fn actionlint_reports_what_is_wrong_in_a_broken_workflow() {
    let release = read(&repo(".github/workflows/release.yml"));
    let broken = release
        .replacen(
            "${{ needs.version.outputs.image }}",
            "${{ needs.version.outputs.imagename }}",
            1,
        )
        .replacen("persist-credentials: false", "persist-credential: false", 1)
        .replacen(
            r#"hack/krew-manifest.sh "$TAG""#,
            r#"hack/krew-manifest.sh $TAG"#,
            1,
        );
    assert_ne!(broken, release);
    let output = actionlint_named_by_tag(
        "actionlint-broken",
        &[
            ("ci.yml", read(&repo(".github/workflows/ci.yml"))),
            ("release.yml", broken),
        ],
        "actionlint_reports_what_is_wrong_in_a_broken_workflow",
    );
    let report = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(
        report.contains(r#"property "imagename" is not defined"#),
        "{report}"
    );
    assert!(
        report.contains(r#"input "persist-credential" is not defined"#),
        "{report}"
    );
    if Command::new("shellcheck").arg("--version").output().is_ok() {
        assert!(report.contains("SC2086"), "{report}");
    }
}

fn yaml(path: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `run:` script of a workflow's job, joined.
fn scripts(job: &Value) -> String {
    job["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["run"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_release_workflow_publishes_both_platforms_the_plugin_and_the_components() {
    let workflow = yaml(&repo(".github/workflows/release.yml"));
    assert_eq!(
        workflow["on"]["push"]["tags"],
        serde_json::json!(["v[0-9]+.[0-9]+.[0-9]+", "v[0-9]+.[0-9]+.[0-9]+-rc.[0-9]+"])
    );
    let jobs = &workflow["jobs"];
    let pairs = |job: &str, keys: &[&str]| -> Vec<String> {
        jobs[job]["strategy"]["matrix"]["include"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                keys.iter()
                    .map(|k| m[k].as_str().unwrap())
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect()
    };
    assert_eq!(pairs("image", &["arch"]), ["amd64", "arm64"]);
    assert!(
        jobs["image"]["permissions"]["packages"] == "write"
            && jobs["manifest"]["permissions"]["packages"] == "write"
            && jobs["release"]["permissions"]["contents"] == "write"
    );
    assert_eq!(
        pairs("plugin", &["os", "arch", "target"]),
        [
            "linux/amd64/x86_64-unknown-linux-musl",
            "linux/arm64/aarch64-unknown-linux-musl",
            "darwin/amd64/x86_64-apple-darwin",
            "darwin/arm64/aarch64-apple-darwin",
        ]
    );
    let release = scripts(&jobs["release"]);
    for needle in [
        r#"edit set image "controller=$IMAGE:$TAG""#,
        "build config/default > dist/ipam-components.yaml",
        "cp config/clusterctl/metadata.yaml dist/metadata.yaml",
        "hack/krew-manifest.sh",
        "gh release create",
    ] {
        assert!(release.contains(needle), "the release job lacks {needle:?}");
    }
    // The scripts the workflow calls exist and run.
    let all = std::fs::read_to_string(repo(".github/workflows/release.yml")).unwrap();
    for script in ["hack/plugin-archive.sh", "hack/krew-manifest.sh"] {
        assert!(all.contains(script), "{script}");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(repo(script)).unwrap().permissions(),
        );
        assert!(mode & 0o111 != 0, "{script} is not executable");
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// The release job's two kustomize steps, on a copy of `config/` and `crds/`: `kustomize edit
/// set image controller=IMAGE:TAG` in `config/default`, then `kustomize build config/default`.
/// The result is the committed components file with the image line changed, and nothing else.
#[test]
fn the_release_renders_the_components_with_the_tags_image_and_nothing_else() {
    let tag = format!("v{}", env!("CARGO_PKG_VERSION"));
    let image = format!("ghcr.io/another-owner/inpool:{tag}");
    let copy = scratch("release-components");
    for dir in ["config", "crds"] {
        copy_tree(&repo(dir), &copy.join(dir));
    }
    let kustomize = kustomize::binary().unwrap_or_else(|e| panic!("{e}"));
    run(Command::new(kustomize)
        .args(["edit", "set", "image", &format!("controller={image}")])
        .current_dir(copy.join("config/default")));
    let rendered = kustomize::build(&copy.join("config/default")).unwrap_or_else(|e| panic!("{e}"));
    let committed =
        std::fs::read_to_string(repo("config/clusterctl/ipam-components.yaml")).unwrap();
    let committed_image = format!("image: ghcr.io/inpool-dev/inpool:{tag}");
    assert_eq!(committed.matches(&committed_image).count(), 1);
    assert_eq!(
        rendered,
        committed.replace(&committed_image, &format!("image: {image}"))
    );
}

/// krew's names for this machine's platform.
fn krew_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no release archive is built for {other}"),
    };
    ("linux", arch)
}

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn sha256(path: &Path) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(path).unwrap());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The release's plugin, end to end but for the upload: the archive holds kubectl-inpool and
/// LICENSE, the manifest names its URL and digest, krew installs it and the installed plugin
/// runs; an archive that is not the one the manifest describes is refused.
#[test]
fn a_plugin_archive_installs_with_krew_from_its_manifest() {
    let tag = format!("v{}", env!("CARGO_PKG_VERSION"));
    let (os, arch) = krew_platform();
    let dist = scratch("krew-dist");
    let archive = run(Command::new(repo("hack/plugin-archive.sh"))
        .arg(env!("CARGO_BIN_EXE_kubectl-inpool"))
        .args([os, arch, &tag])
        .arg(&dist))
    .stdout;
    let archive = PathBuf::from(String::from_utf8(archive).unwrap().trim());
    let name = format!("kubectl-inpool_{tag}_{os}_{arch}.tar.gz");
    assert_eq!(archive, dist.join(&name));
    let listing = run(Command::new("tar").arg("-tzf").arg(&archive)).stdout;
    assert_eq!(
        String::from_utf8_lossy(&listing),
        "kubectl-inpool\nLICENSE\n"
    );

    let manifest = run(Command::new(repo("hack/krew-manifest.sh"))
        .args([&tag, "inpool-dev/inpool"])
        .arg(&dist))
    .stdout;
    let manifest_path = dist.join("inpool.yaml");
    std::fs::write(&manifest_path, &manifest).unwrap();
    let plugin = yaml(&manifest_path);
    assert_eq!(
        plugin["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(plugin["kind"], "Plugin");
    assert_eq!(plugin["metadata"]["name"], "inpool");
    assert_eq!(plugin["spec"]["version"], tag.as_str());
    let platforms = plugin["spec"]["platforms"].as_array().unwrap();
    assert_eq!(platforms.len(), 1, "{plugin}");
    assert_eq!(
        platforms[0]["uri"],
        format!("https://github.com/inpool-dev/inpool/releases/download/{tag}/{name}").as_str()
    );
    assert_eq!(platforms[0]["sha256"], sha256(&archive).as_str());

    let krew = release::krew().unwrap_or_else(|e| panic!("{e}"));
    let krew_root = scratch("krew-root");
    let install = |archive: &Path| {
        Command::new(&krew)
            .arg("install")
            .arg(format!("--manifest={}", manifest_path.display()))
            .arg(format!("--archive={}", archive.display()))
            .env("KREW_ROOT", &krew_root)
            .output()
            .unwrap()
    };
    // Not the archive the manifest describes (one byte more): refused.
    let other = scratch("krew-other").join(&name);
    let mut bytes = std::fs::read(&archive).unwrap();
    bytes.push(0);
    std::fs::write(&other, bytes).unwrap();
    let refused = install(&other);
    assert!(
        !refused.status.success()
            && String::from_utf8_lossy(&refused.stderr).contains("checksum does not match"),
        "krew installed an archive that is not the manifest's: {refused:?}"
    );
    let installed = install(&archive);
    assert!(installed.status.success(), "{installed:?}");
    let version = run(Command::new(krew_root.join("bin").join("kubectl-inpool")).arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        format!("kubectl-inpool {}\n", env!("CARGO_PKG_VERSION"))
    );
}

/// Every directory under the repository (`target/` and hidden ones left out) holding `file`, as
/// Dependabot names directories (`/`, `/testenv/capi`).
fn directories_with(file: &str) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, file: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() && name != "target" && !name.starts_with('.') {
                walk(&path, root, file, out);
            } else if name == file {
                let relative = dir
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.push(format!("/{relative}"));
            }
        }
    }
    let root = support::repo_root();
    let mut found = Vec::new();
    walk(&root, &root, file, &mut found);
    found.sort();
    found
}

/// Dependabot proposes updates for every ecosystem the repository pins: each Cargo workspace
/// (a `Cargo.lock` stands at its root), each Go module of the bench, the actions and the
/// Dockerfile. A new go.mod or workspace that is not listed fails here, naming it.
#[test]
fn dependabot_watches_every_workspace_module_action_and_image() {
    let config = yaml(&repo(".github/dependabot.yml"));
    let updates = config["updates"].as_array().expect("updates");
    let directories = |ecosystem: &str| -> Vec<String> {
        let mut listed: Vec<String> = updates
            .iter()
            .filter(|u| u["package-ecosystem"] == ecosystem)
            .flat_map(|u| {
                let many = u["directories"].as_array().cloned().unwrap_or_default();
                many.into_iter().chain(u.get("directory").cloned())
            })
            .map(|d| {
                d.as_str()
                    .expect("a directory")
                    .trim_end_matches('/')
                    .to_string()
            })
            .map(|d| if d.is_empty() { "/".into() } else { d })
            .collect();
        listed.sort();
        listed
    };
    assert_eq!(directories("cargo"), directories_with("Cargo.lock"));
    assert_eq!(directories("gomod"), directories_with("go.mod"));
    assert_eq!(directories("github-actions"), ["/"]);
    assert_eq!(directories("docker"), ["/"]);
    assert!(repo("Dockerfile").is_file());
    for update in updates {
        assert!(
            update["schedule"]["interval"].is_string(),
            "every update has a schedule: {update:?}"
        );
    }
}
