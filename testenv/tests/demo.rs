//! The demo (`cargo run --bin demo`), run as a user would: with `--once` it shows claims
//! realised and `PoolExhausted`, a pre-allocated claim holding its address and an address of a
//! second subnet with that subnet's prefix and gateway, grows the pool, shows every claim
//! realised and exits 0; without it, Ctrl-C (SIGINT) stops it with exit 0. Either way the control plane it started is gone
//! afterwards: its process ended, its API server port is closed and its data directory removed.
//!
//! The demo does not need `../shared`: it installs `crds/` and `config/local-capi/` only.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use regex::Regex;

/// What the demo says about the control plane it started.
struct Started {
    pid: u32,
    port: u16,
    data_dir: PathBuf,
}

fn started(output: &str) -> Started {
    let ready =
        Regex::new(r"control plane ready in \S+: pid (\d+), server https://127\.0\.0\.1:(\d+)")
            .unwrap();
    let captures = ready
        .captures(output)
        .unwrap_or_else(|| panic!("no 'control plane ready' line:\n{output}"));
    let data_dir = Regex::new(r"step 1/4: .* in (\S+)\n")
        .unwrap()
        .captures(output)
        .unwrap_or_else(|| panic!("no data dir in step 1:\n{output}"))[1]
        .to_string();
    Started {
        pid: captures[1].parse().unwrap(),
        port: captures[2].parse().unwrap(),
        data_dir: PathBuf::from(data_dir),
    }
}

fn process_alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn assert_control_plane_gone(started: &Started, output: &str) {
    assert!(
        !process_alive(started.pid),
        "the control plane (pid {}) still runs:\n{output}",
        started.pid
    );
    assert!(
        std::net::TcpStream::connect_timeout(
            &([127, 0, 0, 1], started.port).into(),
            Duration::from_secs(2)
        )
        .is_err(),
        "the API server still listens on port {}",
        started.port
    );
    assert!(
        !started.data_dir.exists(),
        "the data dir {} was not removed",
        started.data_dir.display()
    );
    assert!(
        output.contains("stopped the control plane") && output.contains("removed"),
        "{output}"
    );
}

/// Claim rows of one picture: (name, ready, reason, address).
fn claim_rows(picture: &str) -> Vec<(String, String, String, String)> {
    let row =
        Regex::new(r"(?m)^default\s+(\S+)\s+\S+/\S+\s+(True|False|-)\s+(\S+)\s+(\S+)\s*$").unwrap();
    row.captures_iter(picture)
        .map(|c| (c[1].into(), c[2].into(), c[3].into(), c[4].into()))
        .collect()
}

/// The pictures (`=== inpool demo ...` blocks) of the output, each with what follows it.
fn pictures(output: &str) -> Vec<&str> {
    output.split("=== inpool demo").skip(1).collect()
}

#[test]
fn once_shows_exhaustion_then_growth_and_exits_0_leaving_nothing_behind() {
    let started_at = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_demo"))
        .arg("--once")
        .stdin(Stdio::null())
        .output()
        .expect("run the demo");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    eprintln!(
        "demo --once took {:?}:\n{stdout}\n{stderr}",
        started_at.elapsed()
    );
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");

    // Before the pool grows: five claims of the 5-address pool realised, three waiting, both
    // IPv6 claims, both prefix-pool claims and the three claims of the two-subnet pool realised.
    let (before, after) = stdout
        .split_once("step 4/4: growing")
        .unwrap_or_else(|| panic!("the demo never grew the pool:\n{stdout}"));
    let first = pictures(before)
        .last()
        .copied()
        .unwrap_or_else(|| panic!("no picture before the growth:\n{stdout}"));
    let rows = claim_rows(first);
    assert_eq!(rows.len(), 15, "{first}");
    let exhausted: Vec<_> = rows
        .iter()
        .filter(|(_, ready, reason, address)| {
            ready == "False" && reason == "PoolExhausted" && address == "-"
        })
        .collect();
    assert_eq!(exhausted.len(), 3, "three claims wait:\n{first}");
    let realised: Vec<_> = rows
        .iter()
        .filter(|(_, ready, reason, _)| ready == "True" && reason == "AddressAllocated")
        .collect();
    assert_eq!(realised.len(), 12, "{first}");
    assert!(first.contains("the first picture is stable"), "{first}");

    // The two-subnet pool: the pre-allocated claim holds its address; of the two other claims,
    // one takes the own subnet's last free address, the other the second subnet's first, with
    // that subnet's prefix and gateway.
    let address_of = |name: &str| {
        rows.iter()
            .find(|(n, ..)| n == name)
            .map(|(_, _, _, a)| a.as_str())
    };
    assert_eq!(address_of("vip-0"), Some("10.20.0.11/24"), "{first}");
    let mut edges = [address_of("edge-0"), address_of("edge-1")];
    edges.sort();
    assert_eq!(
        edges,
        [Some("10.20.0.10/24"), Some("10.21.0.10/26")],
        "{first}"
    );
    assert!(
        Regex::new(
            r"InClusterIPPool\s+default\s+demo-subnets\s+-\s+IPv4 \(2 subnets\)\s+12\s+3\s+9\s+"
        )
        .unwrap()
        .is_match(first),
        "the two-subnet pool counts both subnets and the pre-allocation:\n{first}"
    );
    assert!(
        before.contains(
            "pre-allocation: InClusterIPPool/demo-subnets in default names 10.20.0.11 for \
             claim default/vip-0, which holds 10.20.0.11/24, gateway 10.20.0.1"
        ),
        "{before}"
    );
    assert!(
        Regex::new(
            r"subnet: claim default/edge-[01] holds 10\.21\.0\.10/26, gateway 10\.21\.0\.1 from spec\.additionalSubnets\[0\] \(10\.21\.0\.0/26, gateway 10\.21\.0\.1\) of InClusterIPPool/demo-subnets in default"
        )
        .unwrap()
        .is_match(before),
        "{before}"
    );

    // After: every claim realised, each with its own address; the IPv4 pool has 8 addresses.
    let last = pictures(after)
        .last()
        .copied()
        .unwrap_or_else(|| panic!("no picture after the growth:\n{stdout}"));
    assert!(last.contains("(final)"), "{last}");
    let rows = claim_rows(last);
    assert_eq!(rows.len(), 15, "{last}");
    for (name, ready, reason, address) in &rows {
        assert_eq!(
            (ready.as_str(), reason.as_str()),
            ("True", "AddressAllocated"),
            "{name}:\n{last}"
        );
        assert_ne!(address, "-", "{name}:\n{last}");
    }
    let mut addresses: Vec<&String> = rows.iter().map(|(_, _, _, a)| a).collect();
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 15, "addresses are unique:\n{last}");
    let v4 = addresses
        .iter()
        .filter(|a| a.starts_with("10.10.0."))
        .count();
    assert_eq!(v4, 8, "{last}");
    assert!(
        Regex::new(r"InClusterIPPool\s+default\s+demo-pool\s+-\s+IPv4\s+8\s+")
            .unwrap()
            .is_match(last),
        "the grown pool shows 8 addresses:\n{last}"
    );
    // The prefix pool's claims hold the first two /64s of its /56, and its row counts 256.
    let sub_prefixes: Vec<&str> = addresses
        .iter()
        .map(|a| a.as_str())
        .filter(|a| a.starts_with("fd00:10:"))
        .collect();
    assert_eq!(sub_prefixes, ["fd00:10:0:1::/64", "fd00:10::/64"], "{last}");
    assert!(
        Regex::new(
            r"GlobalInClusterPrefixPool\s+-\s+demo-prefixes\s+-\s+IPv6/64\s+256\s+2\s+254\s+"
        )
        .unwrap()
        .is_match(last),
        "the prefix pool shows 256 sub-prefixes, 2 used:\n{last}"
    );
    assert!(stdout.contains("all 15 claims are Ready"), "{stdout}");
    assert!(stdout.contains("kubeconfig: "), "{stdout}");

    assert_control_plane_gone(&started(&stdout), &stdout);
}

/// Collects a child's stdout lines in the background.
fn collect(child: &mut Child) -> Arc<Mutex<String>> {
    let out = Arc::new(Mutex::new(String::new()));
    let stdout = child.stdout.take().unwrap();
    let sink = out.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut text = sink.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
    });
    out
}

#[test]
fn ctrl_c_stops_the_demo_and_everything_it_started() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_demo"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the demo");
    let output = collect(&mut child);
    let deadline = Instant::now() + Duration::from_secs(300);
    while !output.lock().unwrap().contains("showing the live picture") {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the demo exited ({status}) before showing the live picture:\n{}",
                output.lock().unwrap()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the demo did not reach the live picture:\n{}",
            output.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // It keeps showing the picture; then Ctrl-C.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        matches!(child.try_wait(), Ok(None)),
        "the demo ended by itself"
    );
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        assert!(Instant::now() < deadline, "the demo ignored Ctrl-C");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Let the reader thread take the last lines.
    std::thread::sleep(Duration::from_millis(300));
    let output = output.lock().unwrap().clone();
    assert_eq!(status.code(), Some(0), "{output}");
    assert!(output.contains("Ctrl-C: stopping"), "{output}");
    assert_control_plane_gone(&started(&output), &output);
}
