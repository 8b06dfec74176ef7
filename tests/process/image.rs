//! The release binary is what the image's base needs. The Dockerfile copies `inpool` onto
//! distroless/static (no libc, no shell, no dynamic loader) and runs it as `USER 65532:65532`;
//! the Deployment adds a read-only root filesystem, no privilege escalation and no capabilities.
//! No container engine runs here, so this test does what the image does by hand: it builds the
//! binary as the Dockerfile's build stage does (its `COPY` lines make the build context, its
//! build arguments run there with `cargo build`, for the musl target), checks
//! that its ELF headers name no interpreter and no shared library, and runs it in a root that
//! holds only the binary and a kubeconfig, bind-mounted read-only in a mount namespace of its
//! own, as uid and gid 65532 with no-new-privileges: it must serve `/readyz`, realise a claim as
//! its ServiceAccount, and exit 0 on SIGTERM. The debug build the other tests run, linked
//! against glibc, fails both checks, which shows they can fail.
//!
//! Needs root (a mount namespace, a bind mount, chroot, the switch to uid 65532), util-linux's
//! `unshare` and `setpriv`, coreutils' `chroot`, the musl target's standard library (`rustup
//! target add`) and `musl-gcc` (Debian's musl-tools); `.ci/run` installs the last two. Without
//! them the test fails under CI (`CI` set) and elsewhere says NOT RUN.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use inpool::api::{IPAddressClaim, InClusterIPPool};
use inpool_testenv::{common, release, support};
use kube::api::Api;

use common::{
    Diagnostics, Inpool, SYSTEM_NAMESPACE, claim, create, ensure_applied,
    one_inpool_test_at_a_time, pool, ready_of, service_account_kubeconfig, unique, wait_for,
};

/// The image's user and group (`USER 65532:65532`, distroless's `nonroot`).
const NONROOT: u32 = 65532;

const TEST: &str = "the_release_binary_runs_static_as_uid_65532_on_a_read_only_root";

/// What an ELF executable asks of the system that loads it: its program interpreter
/// (`PT_INTERP`, the dynamic loader) and the shared libraries of its dynamic section
/// (`DT_NEEDED`). A static executable, static-pie included, has neither.
#[derive(Debug, Default)]
struct DynamicNeeds {
    interpreter: Option<String>,
    libraries: Vec<String>,
}

/// Reads [`DynamicNeeds`] from a 64-bit little-endian ELF file (x86-64 and aarch64 Linux).
fn dynamic_needs(path: &Path) -> DynamicNeeds {
    let elf = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(
        elf.starts_with(b"\x7fELF\x02\x01"),
        "{} is not a 64-bit little-endian ELF file",
        path.display()
    );
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
    let c_string = |at: usize| {
        let end = elf[at..].iter().position(|&b| b == 0).unwrap();
        String::from_utf8_lossy(&elf[at..at + end]).into_owned()
    };
    // (type, file offset, virtual address, file size) of each program header.
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    let headers: Vec<(u32, usize, usize, usize)> = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .map(|h| (u32_at(h), u64_at(h + 8), u64_at(h + 16), u64_at(h + 32)))
        .collect();
    const PT_LOAD: u32 = 1;
    const PT_DYNAMIC: u32 = 2;
    const PT_INTERP: u32 = 3;
    const DT_NEEDED: usize = 1;
    const DT_STRTAB: usize = 5;
    let mut needs = DynamicNeeds::default();
    for &(kind, offset, _, size) in &headers {
        if kind == PT_INTERP {
            needs.interpreter = Some(c_string(offset).chars().take(size).collect());
        }
    }
    let Some(&(_, dynamic, _, size)) = headers.iter().find(|h| h.0 == PT_DYNAMIC) else {
        return needs;
    };
    let entries: Vec<(usize, usize)> = (dynamic..dynamic + size)
        .step_by(16)
        .map(|e| (u64_at(e), u64_at(e + 8)))
        .collect();
    let file_offset = |address: usize| {
        headers
            .iter()
            .find(|&&(kind, _, vaddr, size)| {
                kind == PT_LOAD && (vaddr..vaddr + size).contains(&address)
            })
            .map(|&(_, offset, vaddr, _)| address - vaddr + offset)
            .expect("an address inside a loaded segment")
    };
    if let Some(&(_, strtab)) = entries.iter().find(|e| e.0 == DT_STRTAB) {
        let strtab = file_offset(strtab);
        needs.libraries = entries
            .iter()
            .filter(|e| e.0 == DT_NEEDED)
            .map(|&(_, name)| c_string(strtab + name))
            .collect();
    }
    needs
}

/// Whether this machine can run the test, or why not.
fn missing() -> Option<String> {
    // /proc/self belongs to the process's effective uid.
    if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
        return Some(
            "it must run as root (a mount namespace, a read-only bind mount, chroot and the \
             switch to uid 65532)"
                .into(),
        );
    }
    for (tool, from) in [
        ("unshare", "util-linux"),
        ("setpriv", "util-linux"),
        ("chroot", "coreutils"),
    ] {
        if Command::new(tool).arg("--version").output().is_err() {
            return Some(format!("{tool} is not on PATH ({from})"));
        }
    }
    release::static_build_missing()
}

/// A root directory holding only `/inpool` (the binary under test) and `/kubeconfig`, as the
/// image holds only the binary beside what the kubelet mounts; everything readable by 65532.
fn image_root(binary: &Path, kubeconfig: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(unique("image-root"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(binary, root.join("inpool")).unwrap();
    std::fs::copy(kubeconfig, root.join("kubeconfig")).unwrap();
    for (file, mode) in [("", 0o755), ("inpool", 0o755), ("kubeconfig", 0o644)] {
        std::fs::set_permissions(root.join(file), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    root
}

/// `ARGS…` run as `/inpool` in `root` the way the image runs it: a mount namespace of its own in
/// which `root` is bind-mounted read-only, no-new-privileges, then chroot and the switch to uid
/// and gid 65532 with no supplementary groups (coreutils' chroot drops them with
/// `--userspec`, and with root's uid every capability). Each program executes the next in the
/// same process, so the returned command's process is inpool's.
fn in_image(root: &Path) -> Command {
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(
            r#"root=$1; shift
mount --bind "$root" "$root" && mount -o remount,bind,ro "$root" || exit 111
exec setpriv --no-new-privs chroot --userspec="$UID_GID" --groups= "$root" /inpool "$@""#,
        )
        .arg("sh")
        .arg(root)
        .env("UID_GID", format!("{NONROOT}:{NONROOT}"));
    command
}

/// The value of `field` in `/proc/PID/status`, whitespace-separated.
fn status_field(pid: u32, field: &str) -> Vec<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status:\n{status}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_release_binary_runs_static_as_uid_65532_on_a_read_only_root() {
    if let Some(why) = missing() {
        support::not_run(TEST, &why);
        return;
    }
    ensure_applied().await;
    // The build takes minutes of both cores: in this test's turn, so that no other test's
    // inpool process (leader election with second-long leases) runs meanwhile.
    let _turn = one_inpool_test_at_a_time().await;
    let binary = tokio::task::spawn_blocking(release::static_inpool)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));

    // Statically linked: nothing for a loader to find, as distroless/static has none.
    let needs = dynamic_needs(&binary);
    assert!(
        needs.interpreter.is_none() && needs.libraries.is_empty(),
        "{} is not static: {needs:?}",
        binary.display()
    );
    let glibc = dynamic_needs(Path::new(env!("CARGO_BIN_EXE_inpool")));
    assert!(
        glibc.interpreter.is_some() && glibc.libraries.iter().any(|l| l.starts_with("libc.so")),
        "the check did not see the debug build's loader and libc: {glibc:?}"
    );

    let kubeconfig = service_account_kubeconfig(support::env().kubeconfig());
    let root = image_root(&binary, &kubeconfig);
    let version = in_image(&root).arg("--version").output().unwrap();
    assert!(version.status.success(), "{version:?}");
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("inpool {}", env!("CARGO_PKG_VERSION"))
    );
    // The same root, the glibc build: no loader there, so it cannot even start.
    let dynamic_root = image_root(Path::new(env!("CARGO_BIN_EXE_inpool")), &kubeconfig);
    let dynamic = in_image(&dynamic_root).arg("--version").output().unwrap();
    assert!(
        !dynamic.status.success()
            && String::from_utf8_lossy(&dynamic.stderr).contains("No such file or directory"),
        "the glibc build ran in a root without its loader: {dynamic:?}"
    );

    // As deployed (the Deployment's --leader-elect), on the ServiceAccount's permissions.
    let lease = unique("image");
    let mut inpool = Inpool::start_command(
        in_image(&root),
        "image",
        Path::new("/kubeconfig"),
        &Diagnostics::Insecure,
        &[
            "--leader-elect",
            &format!("--leader-election-namespace={SYSTEM_NAMESPACE}"),
            &format!("--leader-election-lease-name={lease}"),
        ],
    );
    let pid = inpool.pid();
    inpool.wait_ready(Duration::from_secs(60)).await;

    // The process is inpool's, as 65532 with no groups, no capabilities, no-new-privileges.
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(exe.ends_with("inpool"), "{exe:?}");
    let nonroot = NONROOT.to_string();
    assert_eq!(status_field(pid, "Uid"), [nonroot.as_str(); 4]);
    assert_eq!(status_field(pid, "Gid"), [nonroot.as_str(); 4]);
    assert_eq!(status_field(pid, "Groups"), Vec::<String>::new());
    assert_eq!(status_field(pid, "CapEff"), ["0000000000000000"]);
    assert_eq!(status_field(pid, "CapPrm"), ["0000000000000000"]);
    assert_eq!(status_field(pid, "NoNewPrivs"), ["1"]);
    // Its root is the directory above, mounted read-only, holding nothing else.
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root_mount = mountinfo
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|fields| fields[4] == "/")
        .unwrap_or_else(|| panic!("no mount at its / in:\n{mountinfo}"));
    assert!(
        root_mount[5].split(',').any(|o| o == "ro"),
        "its root is not mounted read-only: {root_mount:?}"
    );
    let proc_root = PathBuf::from(format!("/proc/{pid}/root"));
    let mut entries: Vec<String> = std::fs::read_dir(&proc_root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    assert_eq!(entries, ["inpool", "kubeconfig"]);
    let write = std::fs::write(proc_root.join("written"), b"x");
    assert_eq!(
        write.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ReadOnlyFilesystem),
        "even root can write in its root"
    );

    // Real work: a claim realised.
    let (client, ns) = support::env().namespace().await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("image", &["10.78.0.10"], 24, None)).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&claims, &claim("machine", "image")).await;
    wait_for("the claim to be Ready", Duration::from_secs(60), || async {
        let (status, _, address) = ready_of(&claims.get("machine").await.ok()?)?;
        (status == "True" && address.is_some()).then_some(())
    })
    .await;
    inpool.assert_nothing_forbidden();

    assert_eq!(inpool.terminate(), Some(0), "logs:\n{}", inpool.logs());
    for dir in [root, dynamic_root] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}
