//! Argument parsing and dispatch. Each subcommand family lives in its own file.

mod daemon;
mod scenario;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "mfsched",
    version,
    about = "Run-time configuration scheduler for AI inference models sharing one GPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Bundled and user scenarios: models, knobs, grid sizes, feasible counts.
    #[command(subcommand)]
    Scenario(scenario::ScenarioCommand),
    /// Runs the scheduling daemon: decision loop, actuators, decision log, HTTP API.
    Run(daemon::RunArgs),
    /// Prints or summarises a decision log written by `run`.
    Replay(daemon::ReplayArgs),
    /// NVML diagnostics.
    #[command(subcommand)]
    Nvml(daemon::NvmlCommand),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Scenario(cmd) => scenario::run(cmd),
        Command::Run(args) => daemon::run(args),
        Command::Replay(args) => daemon::replay(args),
        Command::Nvml(cmd) => daemon::nvml(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the error and its causes, outermost first.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
