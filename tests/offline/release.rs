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
            r#"hack/release-assets.sh "$TAG""#,
            r#"hack/release-assets.sh $TAG"#,
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
        r#"hack/release-assets.sh "$TAG" "$IMAGE" "$REPOSITORY" dist notes.md"#,
        "gh release create",
    ] {
        assert!(release.contains(needle), "the release job lacks {needle:?}");
    }
    // The scripts the workflow calls exist and run.
    let all = std::fs::read_to_string(repo(".github/workflows/release.yml")).unwrap();
    for script in ["hack/plugin-archive.sh", "hack/release-assets.sh"] {
        assert!(all.contains(script), "{script}");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(repo(script)).unwrap().permissions(),
        );
        assert!(mode & 0o111 != 0, "{script} is not executable");
    }
}

/// A step as a report names it: its `name`, else its `uses`, else its script's first line.
fn step_label(step: &Value) -> String {
    step["name"]
        .as_str()
        .or(step["uses"].as_str())
        .or(step["run"].as_str().and_then(|run| run.lines().next()))
        .unwrap_or("?")
        .to_string()
}

/// A job's `needs`, one job or a list.
fn needs(job: &Value) -> Vec<&str> {
    match &job["needs"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn steps(job: &Value) -> &[Value] {
    job["steps"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn uses(step: &Value, action: &str) -> bool {
    step["uses"]
        .as_str()
        .is_some_and(|uses| uses.starts_with(&format!("{action}@")))
}

fn runs(step: &Value, command: &str) -> bool {
    step["run"]
        .as_str()
        .is_some_and(|run| run.contains(command))
}

fn grants(job: &Value, scope: &str) -> bool {
    job["permissions"][scope] == "write"
}

/// YAML's `true`, written bare or quoted.
fn is_true(value: &Value) -> bool {
    *value == Value::Bool(true) || *value == "true"
}

/// What the release's supply chain lacks, one line per fault naming the workflow, the job and
/// the step, in `workflows` (file name and text; `ci.yml` and `release.yml`):
/// - an action not pinned by a commit SHA (a local `./` workflow excepted), or pinned without a
///   `# vX.Y.Z` comment naming its release (`# stable` for dtolnay/rust-toolchain, which has no
///   release tags), which YAML drops, so the text is read for it;
/// - in the release workflow: a top-level permission beyond `contents: read`; no job calling
///   `./.github/workflows/ci.yml` (with `on: workflow_call` in ci.yml), or another job that does
///   not need it; the image built without BuildKit's provenance (`mode=max`) and SBOM; no
///   `cosign sign --yes IMAGE@DIGEST` after cosign-installer; no attest-build-provenance of the
///   image (pushed to the registry) or of `dist/*`; kubectl-inpool not built by `cargo
///   auditable`, or without a CycloneDX SBOM in `dist/`; the release not created as a draft, or
///   not published by its job's last step; `checksums.txt` not signed into a bundle in `dist/`
///   before the release is created; a job that signs or attests without `id-token: write` and
///   `attestations: write` (cosign alone needs only the first).
fn supply_chain_faults(workflows: &[(&str, &str)]) -> Vec<String> {
    let mut faults = Vec::new();
    let pinned = regex::Regex::new(r"^[^@\s]+@[0-9a-f]{40}$").unwrap();
    let pin_line =
        regex::Regex::new(r"uses:\s*([^@\s]+)@[0-9a-f]{40}(?:\s+#\s*(\S+))?\s*$").unwrap();
    let release_comment = regex::Regex::new(r"^v[0-9]+\.[0-9]+\.[0-9]+$").unwrap();
    let mut parsed = std::collections::BTreeMap::new();
    for (file, text) in workflows {
        for (number, line) in text.lines().enumerate() {
            let Some(pin) = pin_line.captures(line) else {
                continue;
            };
            let comment = pin.get(2).map_or("", |c| c.as_str());
            if !(release_comment.is_match(comment)
                || (&pin[1] == "dtolnay/rust-toolchain" && comment == "stable"))
            {
                faults.push(format!(
                    "{file}:{}: {} has no \"# vX.Y.Z\" comment naming its release",
                    number + 1,
                    &pin[1]
                ));
            }
        }
        let workflow: Value =
            serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{file}: {e}"));
        for (id, job) in workflow["jobs"].as_object().expect("jobs") {
            let job_uses = job["uses"]
                .as_str()
                .map(|uses| (format!("job {id:?}"), uses));
            let step_uses = steps(job).iter().filter_map(|step| {
                let uses = step["uses"].as_str()?;
                Some((format!("job {id:?}, step {:?}", step_label(step)), uses))
            });
            for (place, uses) in job_uses.into_iter().chain(step_uses) {
                if !uses.starts_with("./") && !pinned.is_match(uses) {
                    faults.push(format!(
                        "{file}: {place}: {uses} is not pinned by a commit SHA"
                    ));
                }
            }
        }
        parsed.insert(*file, workflow);
    }
    let (Some(ci), Some(release)) = (parsed.get("ci.yml"), parsed.get("release.yml")) else {
        faults.push("ci.yml and release.yml are both needed".to_string());
        return faults;
    };
    let mut fault = |what: String| faults.push(format!("release.yml: {what}"));

    if release["permissions"] != serde_json::json!({"contents": "read"}) {
        fault(format!(
            "the top-level permissions are {}, not contents: read alone",
            release["permissions"]
        ));
    }
    let jobs = release["jobs"].as_object().expect("jobs");
    match jobs
        .iter()
        .find(|(_, job)| job["uses"] == "./.github/workflows/ci.yml")
    {
        Some((gate, _)) => {
            for (id, job) in jobs.iter().filter(|(id, _)| *id != gate) {
                if !needs(job).contains(&gate.as_str()) {
                    fault(format!("job {id:?} does not need the CI job {gate:?}"));
                }
            }
            if ci["on"].get("workflow_call").is_none() {
                fault("ci.yml cannot be called: it has no on: workflow_call".to_string());
            }
        }
        None => fault("no job calls ./.github/workflows/ci.yml".to_string()),
    }

    let all_steps = || {
        jobs.iter().flat_map(|(id, job)| {
            steps(job)
                .iter()
                .enumerate()
                .map(move |(at, s)| (id, job, at, s))
        })
    };
    let mut builds = 0;
    for (id, _, _, step) in all_steps().filter(|(_, _, _, s)| uses(s, "docker/build-push-action")) {
        builds += 1;
        let with = &step["with"];
        if with["provenance"] != "mode=max" || !is_true(&with["sbom"]) {
            fault(format!(
                "job {id:?}, step {:?}: the image is built without provenance: mode=max and sbom: true",
                step_label(step)
            ));
        }
    }
    if builds == 0 {
        fault("no step builds the image with docker/build-push-action".to_string());
    }
    for (id, job) in jobs {
        let job_steps = steps(job);
        let installed = job_steps
            .iter()
            .position(|s| uses(s, "sigstore/cosign-installer"));
        for (at, step) in job_steps.iter().enumerate() {
            let signs = runs(step, "cosign sign");
            if signs && installed.is_none_or(|installed| installed > at) {
                fault(format!(
                    "job {id:?}, step {:?}: cosign runs before sigstore/cosign-installer",
                    step_label(step)
                ));
            }
            let attests = uses(step, "actions/attest-build-provenance");
            if (signs || attests) && !grants(job, "id-token") {
                fault(format!(
                    "job {id:?}, step {:?}: signs or attests without id-token: write",
                    step_label(step)
                ));
            }
            if attests && !grants(job, "attestations") {
                fault(format!(
                    "job {id:?}, step {:?}: attests without attestations: write",
                    step_label(step)
                ));
            }
        }
    }
    if !all_steps().any(|(_, _, _, s)| runs(s, "cosign sign --yes \"$IMAGE@$DIGEST\"")) {
        fault("no step signs the image: cosign sign --yes \"$IMAGE@$DIGEST\"".to_string());
    }
    if !all_steps().any(|(_, _, _, s)| {
        uses(s, "actions/attest-build-provenance")
            && s["with"]["subject-name"].is_string()
            && s["with"]["subject-digest"].is_string()
            && is_true(&s["with"]["push-to-registry"])
    }) {
        fault("no attest-build-provenance of the image (subject-name, subject-digest, push-to-registry: true)".to_string());
    }
    let plugin = all_steps().filter(|(id, _, _, _)| *id == "plugin");
    let plugin: Vec<_> = plugin.map(|(_, _, _, s)| s).collect();
    if !plugin
        .iter()
        .any(|s| runs(s, "cargo auditable build --release"))
        || plugin.iter().any(|s| runs(s, "cargo build"))
    {
        fault("job \"plugin\": kubectl-inpool is not built by cargo auditable".to_string());
    }
    if !plugin
        .iter()
        .any(|s| runs(s, "cargo cyclonedx --format json") && runs(s, "\"dist/kubectl-inpool_"))
    {
        fault("job \"plugin\": no CycloneDX SBOM of the archive in dist/".to_string());
    }

    let Some((id, job, created, create)) =
        all_steps().find(|(_, _, _, s)| runs(s, "gh release create"))
    else {
        fault("no step creates the release".to_string());
        return faults;
    };
    if !runs(create, "--draft") {
        fault(format!(
            "job {id:?}, step {:?}: the release is not created as a draft",
            step_label(create)
        ));
    }
    let job_steps = steps(job);
    let last = job_steps.last().unwrap();
    if !(runs(last, "gh release edit") && runs(last, "--draft=false")) {
        fault(format!(
            "job {id:?}, step {:?}: the last step does not publish the draft (gh release edit --draft=false)",
            step_label(last)
        ));
    }
    let signed = job_steps[..created].iter().any(|s| {
        runs(
            s,
            "cosign sign-blob --yes --bundle checksums.txt.sigstore.json checksums.txt",
        ) && s["working-directory"] == "dist"
    });
    if !signed {
        fault(format!(
            "job {id:?}: checksums.txt is not signed into dist/checksums.txt.sigstore.json before the release is created"
        ));
    }
    if !job_steps[..created].iter().any(|s| {
        uses(s, "actions/attest-build-provenance") && s["with"]["subject-path"] == "dist/*"
    }) {
        fault(format!(
            "job {id:?}: no attest-build-provenance of dist/* before the release is created"
        ));
    }
    faults
}

fn committed_workflows() -> Vec<(&'static str, String)> {
    ["ci.yml", "release.yml"]
        .into_iter()
        .map(|name| (name, read(&repo(&format!(".github/workflows/{name}")))))
        .collect()
}

fn faults_of(workflows: &[(&'static str, String)]) -> Vec<String> {
    let borrowed: Vec<(&str, &str)> = workflows.iter().map(|(n, t)| (*n, t.as_str())).collect();
    supply_chain_faults(&borrowed)
}

/// The release's supply chain as the workflows state it (see [`supply_chain_faults`]), and the
/// image's binary built by cargo auditable, pinned, in the Dockerfile's build stage.
#[test]
fn the_release_is_pinned_signed_attested_drafted_and_gated_on_ci() {
    let faults = faults_of(&committed_workflows());
    assert!(faults.is_empty(), "{}", faults.join("\n"));
    let dockerfile = read(&repo("Dockerfile"));
    let build_stage = dockerfile.split("\nFROM ").nth(1).expect("a build stage");
    for needle in [
        "RUN cargo install cargo-auditable --locked --version ",
        "RUN cargo auditable build --release --locked --package inpool --bin inpool",
    ] {
        assert!(
            build_stage.contains(needle),
            "the build stage lacks {needle:?}"
        );
    }
}

/// The `FROM` lines of a Dockerfile that name a base image by tag alone, each as
/// `line N: <image>`. A base image is pinned when its reference ends in `@sha256:` and 64 hex
/// digits; a stage named earlier (`FROM build`) is not an image and is not checked.
fn unpinned_base_images(dockerfile: &str) -> Vec<String> {
    let pinned = regex::Regex::new(r"^[^@\s]+@sha256:[0-9a-f]{64}$").unwrap();
    let mut stages = Vec::new();
    let mut faults = Vec::new();
    for (index, line) in dockerfile.lines().enumerate() {
        let mut words = line.split_whitespace();
        if words.next() != Some("FROM") {
            continue;
        }
        let words: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
        let image = words.first().copied().unwrap_or_default();
        if !stages.contains(&image) && !pinned.is_match(image) {
            faults.push(format!("line {}: {image}", index + 1));
        }
        if let [_, as_, name] = words[..]
            && as_.eq_ignore_ascii_case("AS")
        {
            stages.push(name);
        }
    }
    faults
}

/// Every base image of the Dockerfile is pinned by digest, and the check can fail: the same
/// file with its runtime image named by tag alone is reported at that line, and only there.
#[test]
fn every_base_image_is_pinned_by_digest() {
    let dockerfile = read(&repo("Dockerfile"));
    assert_eq!(unpinned_base_images(&dockerfile), Vec::<String>::new());
    let runtime = dockerfile
        .lines()
        .position(|l| l.starts_with("FROM gcr.io/distroless/static:nonroot@"))
        .expect("the runtime stage");
    let planted: String = dockerfile
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == runtime {
                "FROM gcr.io/distroless/static:nonroot\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert_eq!(
        unpinned_base_images(&planted),
        [format!(
            "line {}: gcr.io/distroless/static:nonroot",
            runtime + 1
        )]
    );
    assert_eq!(
        unpinned_base_images("FROM alpine@sha256:abc AS a\nFROM a\n"),
        ["line 1: alpine@sha256:abc"],
        "a short digest is no pin; a named stage is no image"
    );
}

/// The check can fail: the release workflow with one action named by tag, one pin without its
/// comment, the image built without an SBOM, the release created public, the plugin jobs not
/// waiting for CI, and the image unsigned is reported at each, naming the step, and nothing else.
#[test]
fn the_supply_chain_check_names_each_step_at_fault() {
    let mut workflows = committed_workflows();
    let release = &mut workflows[1].1;
    let planted = release
        .replacen(
            "sigstore/cosign-installer@6f9f17788090df1f26f669e9d70d6ae9567deba6 # v4.1.2",
            "sigstore/cosign-installer@v4",
            1,
        )
        .replacen(
            "actions/attest-build-provenance@4d101475d8b20a2381f78447822ac1eab6504dd8 # v4.2.2",
            "actions/attest-build-provenance@4d101475d8b20a2381f78447822ac1eab6504dd8",
            1,
        )
        .replacen("          sbom: true\n", "", 1)
        .replacen("flags=(--draft --verify-tag", "flags=(--verify-tag", 1)
        .replacen(
            "    needs: [ci, version]\n    strategy:\n      matrix:\n        include:\n          # Static",
            "    needs: version\n    strategy:\n      matrix:\n        include:\n          # Static",
            1,
        )
        .replacen("cosign sign --yes", "echo cosign sign", 1);
    let uncommented = 1 + planted
        .lines()
        .position(|l| l.ends_with("@4d101475d8b20a2381f78447822ac1eab6504dd8"))
        .unwrap();
    let expected = [
        format!(
            "release.yml:{uncommented}: actions/attest-build-provenance has no \"# vX.Y.Z\" comment naming its release"
        ),
        "release.yml: job \"manifest\", step \"sigstore/cosign-installer@v4\": sigstore/cosign-installer@v4 is not pinned by a commit SHA".to_string(),
        "release.yml: job \"plugin\" does not need the CI job \"ci\"".to_string(),
        "release.yml: job \"image\", step \"Build and push the image by digest\": the image is built without provenance: mode=max and sbom: true".to_string(),
        "release.yml: no step signs the image: cosign sign --yes \"$IMAGE@$DIGEST\"".to_string(),
        "release.yml: job \"release\", step \"Create the release as a draft, with every asset\": the release is not created as a draft".to_string(),
    ];
    assert_ne!(planted, *release);
    *release = planted;
    assert_eq!(faults_of(&workflows), expected);
}

/// A release dry run: `hack/release-assets.sh`, the script the release job runs, on a plugin
/// archive of this machine's platform, with kustomize v5.8.0 from the Go module proxy. It makes
/// every asset the release job makes before signing: the components (the committed file with
/// the tag's image and nothing else changed), metadata.yaml, the krew manifest naming the
/// archive's digest, and checksums.txt covering every file; and the notes. The checkout is left
/// as it was.
#[test]
fn a_release_dry_run_makes_every_asset_and_leaves_the_checkout_alone() {
    let tag = format!("v{}", env!("CARGO_PKG_VERSION"));
    let (os, arch) = krew_platform();
    let dist = scratch("release-dry-run");
    run(Command::new(repo("hack/plugin-archive.sh"))
        .arg(env!("CARGO_BIN_EXE_kubectl-inpool"))
        .args([os, arch, &tag])
        .arg(&dist));
    let kustomization = read(&repo("config/default/kustomization.yaml"));
    let notes = dist.with_file_name("release-dry-run-notes.md");
    run(Command::new(repo("hack/release-assets.sh"))
        .args([&tag, "ghcr.io/another-owner/inpool", "another-owner/inpool"])
        .arg(&dist)
        .arg(&notes)
        .env(
            "KUSTOMIZE",
            kustomize::binary().unwrap_or_else(|e| panic!("{e}")),
        ));
    assert_eq!(
        read(&repo("config/default/kustomization.yaml")),
        kustomization,
        "the dry run changed the checkout"
    );

    let mut made: Vec<String> = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    made.sort();
    let archive = format!("kubectl-inpool_{tag}_{os}_{arch}.tar.gz");
    assert_eq!(
        made,
        [
            "checksums.txt",
            "inpool.yaml",
            "ipam-components.yaml",
            archive.as_str(),
            "metadata.yaml"
        ]
    );
    let committed = read(&repo("config/clusterctl/ipam-components.yaml"));
    let committed_image = format!("image: ghcr.io/inpool-dev/inpool:{tag}");
    assert_eq!(committed.matches(&committed_image).count(), 1);
    assert_eq!(
        read(&dist.join("ipam-components.yaml")),
        committed.replace(
            &committed_image,
            &format!("image: ghcr.io/another-owner/inpool:{tag}")
        )
    );
    assert_eq!(
        read(&dist.join("metadata.yaml")),
        read(&repo("config/clusterctl/metadata.yaml"))
    );
    let plugin = yaml(&dist.join("inpool.yaml"));
    assert_eq!(
        plugin["spec"]["platforms"][0]["sha256"],
        sha256(&dist.join(&archive)).as_str()
    );
    let sums = read(&dist.join("checksums.txt"));
    let mut summed: Vec<&str> = sums
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    summed.sort();
    let others: Vec<&str> = made
        .iter()
        .map(String::as_str)
        .filter(|f| *f != "checksums.txt")
        .collect();
    assert_eq!(summed, others, "checksums.txt covers every other asset");
    run(Command::new("sha256sum")
        .args(["-c", "checksums.txt"])
        .current_dir(&dist));
    let notes = read(&notes);
    for line in [
        format!("- Image: `ghcr.io/another-owner/inpool:{tag}`"),
        format!(
            "cosign verify ghcr.io/another-owner/inpool:{tag} --certificate-identity \
             https://github.com/another-owner/inpool/.github/workflows/release.yml@refs/tags/{tag}"
        ),
    ] {
        assert!(notes.contains(&line), "the notes lack {line:?}:\n{notes}");
    }
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
