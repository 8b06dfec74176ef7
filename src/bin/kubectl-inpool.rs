//! `kubectl inpool`: what an operator asks first, answered from the API with the caller's
//! kubeconfig (read-only; nothing of a running inpool is needed). On `PATH` as `kubectl-inpool`,
//! kubectl runs it as a plugin.
//!
//! ```text
//! kubectl inpool pools [--watch]     pools: total/used/free/waiting, conditions
//! kubectl inpool claims [--waiting]  claims: reason, message, queue place
//! kubectl inpool who-has ADDRESS     pool, claim, IPAddress, subnet, since, reservation, pre-allocated
//! kubectl inpool why CLAIM           what the claim waits for
//!
//! everywhere: [-n NS | -A] [-o table|json|yaml] [--kubeconfig FILE] [--context NAME]
//! kubectl inpool --version
//! ```
//!
//! The views are `inpool::inspect`'s, which the demo's picture uses too.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use inpool::inspect::{self, Snapshot};

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-inpool",
    version,
    about = "Answers about inpool's pools and claims from the API (read-only)"
)]
struct Cli {
    /// Kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,

    /// Namespace (default: the context's).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,

    /// Every namespace (pools and claims).
    #[arg(short = 'A', long, global = true, conflicts_with = "namespace")]
    all_namespaces: bool,

    /// Output format: a table, or the same data as JSON or YAML.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,

    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Json,
    Yaml,
}

/// Prints `value` when `output` is JSON or YAML (one document, the same data in both); false
/// when the caller prints its table.
fn print_data<T: serde::Serialize>(output: Output, value: &T) -> anyhow::Result<bool> {
    match output {
        Output::Table => return Ok(false),
        Output::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(value)?),
    }
    Ok(true)
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Pools: counts, waiting claims, conditions (global pools are always listed).
    Pools {
        /// Redraw every 2 seconds until interrupted.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Claims: Ready, reason, message, address, place in the pool's queue.
    Claims {
        /// Only the claims waiting for an address (PoolExhausted).
        #[arg(long)]
        waiting: bool,
    },
    /// Which pool, claim, IPAddress and reservation hold ADDRESS, and since when.
    WhoHas {
        /// An IPv4 or IPv6 address.
        address: IpAddr,
    },
    /// What CLAIM is waiting for: its condition, its pool, its Cluster's pause, its queue place.
    Why {
        /// The IPAddressClaim's name.
        claim: String,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kubectl-inpool: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What the snapshot could not read, on standard error (the output stays parseable).
fn print_notes(snapshot: &Snapshot) {
    for note in &snapshot.notes {
        eprintln!("kubectl-inpool: note: {note}");
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let (client, default_namespace) =
        connect(cli.kubeconfig.as_deref(), cli.context.as_deref()).await?;
    let namespace = cli.namespace.clone().unwrap_or(default_namespace);
    let scope = (!cli.all_namespaces).then_some(namespace.as_str());
    match cli.command {
        Command::Pools { watch } => loop {
            let snapshot = Snapshot::fetch(&client, scope).await?;
            print_notes(&snapshot);
            if !print_data(cli.output, &snapshot.pools)? {
                print!("{}", snapshot.pools_table());
            }
            if !watch {
                return Ok(ExitCode::SUCCESS);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            println!();
        },
        Command::Claims { waiting } => {
            let snapshot = Snapshot::fetch(&client, scope).await?;
            print_notes(&snapshot);
            let claims: Vec<&inspect::ClaimRow> = snapshot
                .claims
                .iter()
                .filter(|c| !waiting || c.is_waiting())
                .collect();
            if !print_data(cli.output, &claims)? {
                print!("{}", snapshot.claims_table(&claims, true));
            }
        }
        Command::WhoHas { address } => {
            let holders = inspect::who_has(&client, address).await?;
            if print_data(cli.output, &holders)? {
                // printed as data
            } else if holders.is_empty() {
                println!(
                    "nobody holds {address}: no IPAddress, no reservation and no spec.preAllocations entry names it"
                );
            } else {
                let rows: Vec<Vec<String>> = holders
                    .iter()
                    .map(|h| {
                        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
                        vec![
                            h.namespace.clone(),
                            h.claim.clone(),
                            h.pool.clone(),
                            dash(&h.ip_address),
                            h.prefix.map_or("-".into(), |p| p.to_string()),
                            dash(&h.subnet),
                            dash(&h.since),
                            match (&h.reservation, &h.released_until) {
                                (Some(r), Some(until)) => {
                                    format!("{r} (released, reusable after {until})")
                                }
                                (r, _) => dash(r),
                            },
                            if h.pre_allocated { "yes" } else { "-" }.into(),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    inspect::table(
                        &[
                            "NAMESPACE",
                            "CLAIM",
                            "POOL",
                            "IPADDRESS",
                            "PREFIX",
                            "SUBNET",
                            "SINCE",
                            "RESERVATION",
                            "PRE-ALLOCATED"
                        ],
                        &rows
                    )
                );
            }
        }
        Command::Why { claim } => {
            let why = inspect::why(&client, &namespace, &claim).await?;
            if !print_data(cli.output, &why)? {
                let c = &why.claim;
                println!("claim {namespace}/{} on {}", c.name, c.pool);
                println!("  Ready: {} {}: {}", c.ready, c.reason, c.message);
                if let Some(address) = &c.address {
                    println!("  address: {address}");
                }
                if let Some(subnet) = &why.subnet {
                    println!("  subnet: {subnet}");
                }
                match &why.pool {
                    Some(p) => println!(
                        "  pool: total {}, used {}, free {}, {} waiting; {}",
                        p.total.map_or("-".into(), |n| n.to_string()),
                        p.used.map_or("-".into(), |n| n.to_string()),
                        p.free.map_or("-".into(), |n| n.to_string()),
                        p.waiting,
                        p.conditions
                    ),
                    None => println!("  pool: not found"),
                }
                if let Some((name, exists, paused)) = &why.cluster {
                    println!(
                        "  cluster: {name} ({})",
                        match (exists, paused) {
                            (false, _) => "missing",
                            (true, true) => "paused",
                            (true, false) => "not paused",
                        }
                    );
                }
                println!("why:");
                for finding in &why.findings {
                    println!("  - {finding}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A client for `--kubeconfig` (else `$KUBECONFIG` or `~/.kube/config`) and `--context`, and
/// the context's namespace.
async fn connect(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> anyhow::Result<(Client, String)> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => Config::from_kubeconfig(&options)
            .await
            .context("loading the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
    };
    let namespace = config.default_namespace.clone();
    Ok((Client::try_from(config)?, namespace))
}
