//! `mfsched run` and `mfsched nvml probe`.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

use mfsched_daemon::{DaemonConfig, Overrides, SamplerKind};
use mfsched_lab::simulated_gpu;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The daemon config (`--print-config` prints one with every key documented).
    #[arg(long, required_unless_present = "print_config")]
    config: Option<PathBuf>,
    /// Prints the documented example config (every key, its default or an
    /// example value) and exits: a starting point for --config.
    #[arg(long, conflicts_with_all = ["config", "sampler", "listen", "max_ticks"])]
    print_config: bool,
    /// Overrides sampler.kind: nvml, sim, host, dcgm or footprint.
    #[arg(long)]
    sampler: Option<String>,
    /// Overrides api.listen (e.g. 127.0.0.1:0 for any free port).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Stop after this many ticks instead of waiting for SIGINT/SIGTERM.
    #[arg(long)]
    max_ticks: Option<u64>,
}

pub fn run(args: RunArgs) -> Result<()> {
    if args.print_config {
        print!("{}", mfsched_daemon::EXAMPLE_CONFIG);
        return Ok(());
    }
    // clap requires --config unless --print-config.
    let path = args.config.context("--config is required")?;
    let config = DaemonConfig::load(&path)?;
    let sampler = match args.sampler.as_deref() {
        None => None,
        Some(s) => Some(SamplerKind::parse(s).with_context(|| {
            format!("--sampler '{s}' is unknown: use nvml, sim, host, dcgm or footprint")
        })?),
    };
    let overrides = Overrides {
        sampler,
        listen: args.listen,
        max_ticks: args.max_ticks,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let summary = rt.block_on(mfsched_daemon::run(config, overrides, Some(&simulated_gpu)))?;
    eprintln!(
        "stopped after {} tick(s), {} missed; the log holds {} record(s)",
        summary.ticks, summary.missed_ticks, summary.log_records
    );
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum NvmlCommand {
    /// Prints what NVML reports on this machine (driver, devices, memory, utilisation, processes).
    Probe,
}

pub fn nvml(cmd: NvmlCommand) -> Result<()> {
    match cmd {
        NvmlCommand::Probe => {
            let text = mfsched_daemon::nvml_probe()?;
            if text.is_empty() {
                bail!("NVML answered with nothing");
            }
            print!("{text}");
            Ok(())
        }
    }
}
