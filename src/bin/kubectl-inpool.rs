//! `kubectl inpool`: what an operator asks first, answered from the API with the caller's
//! kubeconfig (read-only; nothing of a running inpool is needed). On `PATH` as `kubectl-inpool`,
//! kubectl runs it as a plugin.
//!
//! ```text
//! kubectl inpool pools [-n NS | -A] [--watch] [-o json]   pools: total/used/free/waiting, conditions
//! kubectl inpool claims [-n NS | -A] [--waiting] [-o json] claims: reason, message, queue place
//! kubectl inpool who-has ADDRESS [-o json]                 pool, claim, IPAddress, since, reservation
//! kubectl inpool why CLAIM [-n NS] [-o json]               what the claim waits for
//! ```
//!
//! The views are `inpool::inspect`'s, which the demo's picture uses too.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use inpool::inspect::{self, Snapshot};

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-inpool",
    about = "Answers about inpool's pools and claims from the API (read-only)"
)]
struct Cli {
    /// Kubeconfig to use (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,

    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,

    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Debug, Args)]
struct Where {
    /// Namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    namespace: Option<String>,

    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    all_namespaces: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Pools: counts, waiting claims, conditions (global pools are always listed).
    Pools {
        #[command(flatten)]
        scope: Where,
        /// Redraw every 2 seconds until interrupted.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Claims: Ready, reason, message, address, place in the pool's queue.
    Claims {
        #[command(flatten)]
        scope: Where,
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
        /// Namespace (default: the kubeconfig context's).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
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

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let (client, default_namespace) = connect(cli.kubeconfig.as_deref()).await?;
    let namespace = |scope: &Where| -> Option<String> {
        (!scope.all_namespaces).then(|| {
            scope
                .namespace
                .clone()
                .unwrap_or_else(|| default_namespace.clone())
        })
    };
    match cli.command {
        Command::Pools { scope, watch } => loop {
            let snapshot = Snapshot::fetch(&client, namespace(&scope).as_deref()).await?;
            match cli.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&snapshot.pools)?),
                Output::Table => print!("{}", snapshot.pools_table()),
            }
            if !watch {
                return Ok(ExitCode::SUCCESS);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            println!();
        },
        Command::Claims { scope, waiting } => {
            let snapshot = Snapshot::fetch(&client, namespace(&scope).as_deref()).await?;
            let claims: Vec<&inspect::ClaimRow> = snapshot
                .claims
                .iter()
                .filter(|c| !waiting || c.is_waiting())
                .collect();
            match cli.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&claims)?),
                Output::Table => print!("{}", snapshot.claims_table(&claims, true)),
            }
        }
        Command::WhoHas { address } => {
            let holders = inspect::who_has(&client, address).await?;
            match cli.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&holders)?),
                Output::Table if holders.is_empty() => {
                    println!("nobody holds {address}: no IPAddress and no reservation names it");
                }
                Output::Table => {
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
                                dash(&h.since),
                                match (&h.reservation, &h.released_until) {
                                    (Some(r), Some(until)) => {
                                        format!("{r} (released, reusable after {until})")
                                    }
                                    (r, _) => dash(r),
                                },
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
                                "SINCE",
                                "RESERVATION"
                            ],
                            &rows
                        )
                    );
                }
            }
        }
        Command::Why { claim, namespace } => {
            let namespace = namespace.unwrap_or(default_namespace);
            let why = inspect::why(&client, &namespace, &claim).await?;
            match cli.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&why)?),
                Output::Table => {
                    let c = &why.claim;
                    println!("claim {namespace}/{} on {}", c.name, c.pool);
                    println!("  Ready: {} {}: {}", c.ready, c.reason, c.message);
                    if let Some(address) = &c.address {
                        println!("  address: {address}");
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
    }
    Ok(ExitCode::SUCCESS)
}

/// A client for `--kubeconfig`, else the usual kubeconfig, and the context's namespace.
async fn connect(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<(Client, String)> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => Config::infer().await.context("finding a kubeconfig")?,
    };
    let namespace = config.default_namespace.clone();
    Ok((Client::try_from(config)?, namespace))
}
