//! Argument parsing and dispatch. Each subcommand family lives in its own file.

mod bench;
mod daemon;
mod data;
mod decide;
mod eval;
mod gpu_proxy;
mod models;
mod plugins;
mod policytest;
mod profile;
mod replay;
mod repro;
mod scenario;
mod sim;
mod surrogate;
mod train;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "mfsched",
    version,
    about = "Run-time configuration scheduler for AI inference models sharing one GPU"
)]
struct Cli {
    /// Log level of every crate (error, warn, info, debug, trace); RUST_LOG, when
    /// set, wins (e.g. RUST_LOG=mfsched_daemon=debug,info).
    #[arg(long, global = true, value_name = "LEVEL", default_value = "info")]
    log_level: String,
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
    /// Prints or summarises a decision log written by `run`; with --policy,
    /// decides every recorded tick again with other policies (counterfactual A/B).
    Replay(replay::ReplayArgs),
    /// NVML diagnostics.
    #[command(subcommand)]
    Nvml(daemon::NvmlCommand),
    /// Profiles a scenario on the simulator and writes the profile CSV.
    Profile(profile::ProfileArgs),
    /// Profile data files: validation and summaries.
    #[command(subcommand)]
    Data(data::DataCommand),
    /// The shared-GPU simulator: calibration against the published figures, noise ceiling.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// One decision tick through a policy component: the decision, its predicted
    /// utility, its feasibility and the decision latency.
    Decide(decide::DecideArgs),
    /// The policy and utility components: embedded and on disk.
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
    /// A/B: two policies over the dynamic workload scenarios, closed loop on the simulator.
    Ab(eval::AbArgs),
    /// The main job on the embedded default: GA with an exhaustive shadow on the
    /// simulated 24 GB card, bundled models and plugins; writes a report with plots.
    Demo(eval::DemoArgs),
    /// Regenerates the published tables on the simulator in one report: Table I (the
    /// surrogate's sample complexity, N = 2..6) and Table II (GA, exhaustive, StaticFull,
    /// StaticBudgetK at K = 500 and 5000 over the eight dynamic scenarios).
    Repro(repro::ReproArgs),
    /// The MeanField surrogate: scoring bundles on profile data, backend agreement.
    #[command(subcommand)]
    Surrogate(surrogate::SurrogateCommand),
    /// Trains a MeanField bundle (one predictor per model) on a profile CSV.
    Train(train::TrainArgs),
    /// The MeanField bundles shipped with the binary: list, regenerate.
    #[command(subcommand)]
    Models(models::ModelsCommand),
    /// Performance, measured side by side in one process.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// A GPU proxy workload: a wgpu compute kernel of tunable intensity (memory-
    /// or compute-bound) served as a model server with /metrics and readiness,
    /// for co-location profiles on a real card; runs until SIGINT/SIGTERM.
    GpuProxy(gpu_proxy::GpuProxyArgs),
}

/// The value parsers of the libraries' enums (`--field`, `--backend`, `--model`,
/// `--fields`, gpu-proxy's `--family` and `--precision`): the libraries do not
/// depend on clap, so each enum offers its values (`ALL`) and their names
/// (`name`), and what `--help` says of each value lives here.
mod choices {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    use mfsched_core::Field;
    use mfsched_lab::{ProxyFamily, ProxyPrecision};
    use mfsched_surrogate::BackendChoice;
    use mfsched_surrogate::{FieldFeatures, Layout};

    pub(super) fn field() -> impl TypedValueParser<Value = Field> {
        choice(&Field::ALL, Field::name, |field| {
            Some(match field {
                Field::Observed => {
                    "The state observed now, for every candidate (the published design)"
                }
                Field::CandidateAware => {
                    "Each candidate's own predicted state, solved to a fixed point \
                     (`surrogate::field`); only joint predictions carry it"
                }
            })
        })
    }

    pub(super) fn backend() -> impl TypedValueParser<Value = BackendChoice> {
        choice(
            &BackendChoice::ALL,
            BackendChoice::name,
            |backend| match backend {
                BackendChoice::Auto => Some("The GPU on a hardware adapter, else the CPU"),
                BackendChoice::Cpu => None,
                BackendChoice::Gpu => Some(
                    "The GPU on whatever adapter there is, software ones included; no adapter is an error",
                ),
            },
        )
    }

    pub(super) fn layout() -> impl TypedValueParser<Value = Layout> {
        choice(&Layout::ALL, Layout::name, |layout| {
            Some(match layout {
                Layout::MeanField => {
                    "Own configuration + field (the MeanField surrogate: what the scheduler serves)"
                }
                Layout::Joint => {
                    "Every model's configuration + field (the Joint-MLP baseline: its input \
                     grows with N, so it is trained and scored, never served)"
                }
            })
        })
    }

    pub(super) fn field_features() -> impl TypedValueParser<Value = FieldFeatures> {
        choice(&FieldFeatures::ALL, FieldFeatures::name, |_| None)
    }

    pub(super) fn proxy_family() -> impl TypedValueParser<Value = ProxyFamily> {
        choice(&ProxyFamily::ALL, ProxyFamily::name, |family| {
            Some(match family {
                ProxyFamily::Memory => {
                    "Bandwidth bound: a buffer of batch × 1 MiB read and written once per dispatch"
                }
                ProxyFamily::Compute => {
                    "Compute bound: FMA chains in registers, --iterations steps per lane"
                }
            })
        })
    }

    pub(super) fn proxy_precision() -> impl TypedValueParser<Value = ProxyPrecision> {
        choice(
            &ProxyPrecision::ALL,
            ProxyPrecision::name,
            |precision| match precision {
                ProxyPrecision::F32 => None,
                ProxyPrecision::F16 => {
                    Some("Only on an adapter with SHADER_F16; refused otherwise")
                }
            },
        )
    }

    /// A parser accepting exactly `name` of each of `all`, each value with its `help`
    /// in `--help`; clap's own message for any other word.
    fn choice<T: Copy + Send + Sync + 'static>(
        all: &'static [T],
        name: fn(T) -> &'static str,
        help: fn(T) -> Option<&'static str>,
    ) -> impl TypedValueParser<Value = T> {
        PossibleValuesParser::new(all.iter().map(|&value| {
            let possible = PossibleValue::new(name(value));
            match help(value) {
                Some(text) => possible.help(text),
                None => possible,
            }
        }))
        .map(move |word: String| {
            all.iter()
                .copied()
                .find(|&value| name(value) == word)
                .expect("the parser accepts only these names")
        })
    }
}

/// `mfsched … | head` closes stdout early and `println!` then panics on EPIPE
/// (Rust ignores SIGPIPE, and `unsafe` is denied here, so it cannot be restored).
/// Exit quietly with the status a Unix tool killed by SIGPIPE has (128 + 13)
/// instead of printing a panic; every other panic goes to the default hook.
fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

pub fn main() -> ExitCode {
    exit_quietly_on_broken_pipe();
    let cli = Cli::parse();
    if let Err(err) = crate::logging::init(&cli.log_level) {
        eprintln!("error: {err:#}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Scenario(cmd) => scenario::run(cmd),
        Command::Run(args) => daemon::run(args),
        Command::Replay(args) => replay::replay(args),
        Command::Nvml(cmd) => daemon::nvml(cmd),
        Command::Profile(args) => profile::run(args),
        Command::Data(cmd) => data::run(cmd),
        Command::Sim(cmd) => sim::run(cmd),
        Command::Decide(args) => decide::run(args),
        Command::Plugins(cmd) => plugins::run(cmd),
        Command::Surrogate(cmd) => surrogate::run(cmd),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Train(args) => train::run(args),
        Command::Models(cmd) => models::run(cmd),
        Command::Ab(args) => eval::ab(args),
        Command::Demo(args) => eval::demo(args),
        Command::Repro(args) => repro::repro(args),
        Command::GpuProxy(args) => gpu_proxy::run(args),
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
