//! `inpool-conformance`: runs the IPAM contract conformance suite against the provider running
//! in the cluster the kubeconfig reaches, and writes the report.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use inpool_conformance::ProviderConfig;
use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// The kubeconfig of the management cluster (else $KUBECONFIG, ~/.kube/config or in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Its context to use (else the current one).
    #[arg(long)]
    context: Option<String>,
    /// What the provider declares: pool kind, group and template, namespace, profiles.
    #[arg(long)]
    provider_config: PathBuf,
    /// Use this namespace instead of the provider config's.
    #[arg(long)]
    namespace: Option<String>,
    /// Where to write the report (YAML, or JSON if the name ends in .json); stdout if absent.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Where to write the JUnit XML.
    #[arg(long)]
    junit: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let mut config = ProviderConfig::from_file(&args.provider_config)?;
    if let Some(namespace) = args.namespace {
        config.namespace = namespace;
    }
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let kube_config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    let client = kube::Client::try_from(kube_config)?;
    let report = inpool_conformance::run(client, config).await?;
    let text = match &args.report {
        Some(path) if path.extension().is_some_and(|e| e == "json") => report.to_json(),
        _ => report.to_yaml(),
    };
    match &args.report {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("writing the report to {}", path.display()))?,
        None => print!("{text}"),
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, report.to_junit())
            .with_context(|| format!("writing JUnit XML to {}", path.display()))?;
    }
    for profile in &report.profiles {
        eprintln!(
            "{:<16} {:<8} passed {:>2}, failed {:>2}, skipped {:>2}",
            profile.name,
            profile.result,
            profile.statistics.passed,
            profile.statistics.failed,
            profile.statistics.skipped
        );
    }
    for failure in report.failures() {
        eprintln!("FAILED {failure}");
    }
    Ok(report.passed())
}
