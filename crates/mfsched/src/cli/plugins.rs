//! `mfsched plugins ...` and the plugin options other commands share.

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use mfsched_core::Field;
use mfsched_core::Scenario;
use mfsched_core::load_scenario;
use mfsched_core::printable;
use mfsched_lab::AnalyticPredictor;
use mfsched_plugin_host::{CheckInputs, check_file};
use mfsched_plugin_host::{CompileCache, LoadedPolicy, LoadedUtility, PluginEngine, PluginLimits};
use mfsched_plugin_host::{
    HARNESS_MIN_RUNS, TemplateKind, TemplateSdk, WIT_PACKAGE_FILES, default_state, fill_defaults,
    list_plugins, resolve_utility, template_component_path, with_declared_params, write_template,
    write_wit_package,
};
use mfsched_surrogate::BackendChoice;
use mfsched_surrogate::{ServeOptions, Served, serve};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where plugins come from and the limits they run under.
#[derive(Debug, Clone, Args)]
pub struct PluginOpts {
    /// A directory of NAME.wasm components; a NAME found there overrides the embedded one.
    #[arg(long = "plugin-dir", visible_alias = "dir", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Wall-clock budget of one plugin call, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub deadline_ms: u64,
    /// Largest linear memory a plugin may use, MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    pub memory_mib: usize,
    /// Compiled-code cache directory (absolute); default: Wasmtime's per-user cache.
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache")]
    pub cache_dir: Option<PathBuf>,
    /// Compile every plugin afresh.
    #[arg(long)]
    pub no_cache: bool,
    /// The throughput predictor the plugins are served.
    #[arg(long, value_enum, default_value_t = PredictorKind::Meanfield)]
    pub predictor: PredictorKind,
    /// A MeanField bundle directory, or a directory of `<scenario>/` bundles like
    /// `models/`, instead of the bundle embedded for the scenario.
    #[arg(long, value_name = "DIR")]
    pub models: Option<PathBuf>,
    /// The field MeanField's joint predictions are made under: the state observed
    /// now (published), or each candidate's own, solved to a fixed point. Only
    /// joint predictions carry it; policies ask the host which field it serves.
    #[arg(long, value_parser = super::choices::field(), default_value_t = Field::Observed)]
    pub field: Field,
    /// Where MeanField inference runs: a hardware GPU when there is one (auto),
    /// the CPU, or any GPU adapter, software ones included.
    #[arg(long, value_parser = super::choices::backend(), default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
}

impl PluginOpts {
    pub fn engine(&self) -> Result<Arc<PluginEngine>> {
        if self.deadline_ms == 0 {
            bail!("--deadline-ms must be positive");
        }
        if self.memory_mib == 0 {
            bail!("--memory-mib must be positive");
        }
        if let Some(dir) = &self.dir
            && !dir.is_dir()
        {
            bail!("--plugin-dir {}: not a directory", dir.display());
        }
        let cache = match (&self.cache_dir, self.no_cache) {
            (_, true) => CompileCache::Off,
            (Some(dir), false) => {
                let dir = std::path::absolute(dir)
                    .with_context(|| format!("--cache-dir {}", dir.display()))?;
                CompileCache::Dir(dir)
            }
            (None, false) => CompileCache::Default,
        };
        let engine = PluginEngine::new(
            PluginLimits {
                deadline: Duration::from_millis(self.deadline_ms),
                memory_bytes: self.memory_mib << 20,
                ..PluginLimits::default()
            },
            cache,
        )?;
        if let Some(note) = engine.cache_note() {
            eprintln!("note: {note}");
        }
        Ok(Arc::new(engine))
    }
}

/// Which throughput predictor serves the plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PredictorKind {
    /// The trained MeanField surrogate (the scenario's embedded bundle, or --models).
    Meanfield,
    /// The closed-form stand-in (for comparisons; not a trained model).
    Analytic,
}

impl PluginOpts {
    /// What the plugins are served for `scenario`: the one composition root
    /// ([`serve`]) for the MeanField surrogate, or the analytic stand-in with
    /// floors and ranges swept from it.
    pub fn served(&self, scenario: &Scenario) -> Result<Served> {
        match self.predictor {
            PredictorKind::Meanfield => serve(
                scenario,
                ServeOptions {
                    models: self.models.as_deref(),
                    backend: self.backend,
                    field: self.field,
                },
            ),
            PredictorKind::Analytic => {
                if self.models.is_some() {
                    bail!("--models applies to --predictor meanfield, not analytic");
                }
                if self.field != Field::Observed {
                    bail!("--field candidate-aware is an option of --predictor meanfield");
                }
                let mut problem = scenario.problem.clone();
                let analytic = AnalyticPredictor::new(&problem);
                fill_defaults(&mut problem, &scenario.explicit_floors, &analytic)?;
                Ok(Served::other(
                    Arc::new(analytic),
                    problem,
                    "analytic closed-form stand-in (not the MeanField surrogate)",
                ))
            }
        }
    }
}

/// The parameters `policy` runs with: every key checked against what the
/// policy declares and its other declared defaults passed explicitly
/// ([`with_declared_params`]). The field is not a parameter: a policy
/// asks the host (`surrogate.prediction-field`).
pub fn policy_params(
    label: &str,
    policy: &LoadedPolicy,
    params: Vec<(String, String)>,
) -> Result<Vec<(String, String)>> {
    with_declared_params(&policy.info, params).map_err(|e| anyhow::anyhow!("{label}: {e}"))
}

/// The utility a command scores with, and the parameters it is called with.
#[derive(Debug, clap::Args)]
pub struct UtilityChoice {
    /// The utility component: a name or a .wasm path (default: `utility`, the
    /// published one; `plugins test --log`: the one the log was scored with).
    #[arg(long, value_name = "NAME|FILE.wasm")]
    pub utility: Option<String>,
    /// A utility parameter (repeatable), checked against what the utility
    /// declares; `mfsched plugins list` shows each utility's.
    #[arg(long = "utility-param", value_name = "KEY=VALUE")]
    pub utility_params: Vec<String>,
}

impl UtilityChoice {
    /// The embedded, published utility, at its defaults.
    pub fn embedded() -> Self {
        Self {
            utility: None,
            utility_params: Vec::new(),
        }
    }

    /// Whether the command line chose nothing (a log's utility may then stand in).
    pub fn is_default(&self) -> bool {
        self.utility.is_none() && self.utility_params.is_empty()
    }

    /// The utility, loaded and called with the parameters given.
    pub fn resolve(
        &self,
        engine: &PluginEngine,
        dir: Option<&std::path::Path>,
    ) -> Result<Arc<LoadedUtility>> {
        let name = self.utility.as_deref().unwrap_or(EMBEDDED_UTILITY);
        let utility = resolve_utility(engine, name, dir)?;
        let given = key_values("--utility-param", &self.utility_params)?;
        let configured = utility
            .configured(given)
            .map_err(|e| anyhow::anyhow!("--utility-param: {e}"))?;
        Ok(Arc::new(configured))
    }
}

/// The utility `UtilityChoice` resolves when none is named.
const EMBEDDED_UTILITY: &str = "utility";

/// `KEY=VALUE` arguments of `flag` as pairs, trimmed; an empty key or a
/// missing `=` is refused, naming the argument.
pub(super) fn key_values(flag: &str, raw: &[String]) -> Result<Vec<(String, String)>> {
    raw.iter()
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .with_context(|| format!("{flag} {p}: expected KEY=VALUE"))?;
            if k.trim().is_empty() {
                bail!("{flag} {p}: the key is empty");
            }
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// What `plugins check` and `plugins test` run a policy with.
#[derive(Debug, clap::Args)]
pub struct PolicyRun {
    /// A policy parameter (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    params: Vec<String>,
    /// Seed passed to the policy.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    opts: PluginOpts,
}

#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    /// Checks a component before shipping it: WIT version and world, sandboxed
    /// instantiation, a run on a bundled problem within the limits, and the
    /// host's validation of its answer. One line per finding; fails on any error.
    Check {
        /// The component to check (a .wasm file).
        file: PathBuf,
        /// A bundled scenario name or a scenario .toml file to decide on.
        #[arg(long, default_value = "paper-n5")]
        scenario: String,
        #[command(flatten)]
        run: PolicyRun,
    },
    /// Tests a policy against recorded or fixture states, several runs each:
    /// every answer must pass the host's validation, every run of a state must
    /// give the same answer although the clocks the policy sees change between
    /// runs, and every decision must stay within the latency budget. A summary
    /// table; fails on any finding. `plugins check` is the quick version.
    Test {
        /// The policy: a .wasm component, an embedded name, or a NAME.wasm of --plugin-dir.
        policy: String,
        /// A decision log written by `mfsched run`: its recorded states, each
        /// with the configuration running then, scored with the utility (and
        /// parameters) the log recorded unless --utility or --utility-param is given.
        #[arg(long, value_name = "DECISIONS.log", conflicts_with = "states")]
        log: Option<PathBuf>,
        /// States as JSON lines, e.g. {"workload":"high","vram_used_mib":12000,"utilization":0.7},
        /// optionally with "current": [..], the configuration running then.
        /// Default (neither this nor --log): each workload level at the running
        /// configuration's memory and utilisation 0.5.
        #[arg(long, value_name = "FILE.jsonl")]
        states: Option<PathBuf>,
        /// A bundled scenario name or a scenario .toml file the states belong to.
        /// Default: the scenario a --log records (decision log version 3), else paper-n5.
        #[arg(long)]
        scenario: Option<String>,
        /// Runs per state (at least 5); the policy's clocks read further ahead in each.
        #[arg(
            long,
            default_value_t = HARNESS_MIN_RUNS as u64,
            value_parser = clap::value_parser!(u64).range(HARNESS_MIN_RUNS as u64..=1000)
        )]
        runs: u64,
        /// The latency one decision must stay within, milliseconds (default: --deadline-ms).
        #[arg(long, value_name = "MS")]
        budget_ms: Option<u64>,
        #[command(flatten)]
        utility: UtilityChoice,
        #[command(flatten)]
        run: PolicyRun,
    },
    /// Writes a new Rust policy crate (standalone, depending on the mfsched-sdk
    /// crate, which carries the WIT bindings), or with --utility a utility
    /// crate (on mfsched-utility-sdk), that builds to a component with
    /// `cargo build --target wasm32-wasip2 --release`.
    New {
        /// Crate name: lowercase letters, digits, '-' or '_'.
        name: String,
        /// Directory to create (default: ./NAME); it must not exist or be empty.
        #[arg(long, value_name = "PATH")]
        dir: Option<PathBuf>,
        /// The SDK's directory (`sdk/` of an mfsched checkout, `sdk/utility/`
        /// with --utility). Default: the checkout this binary was built from
        /// when it is still there, else the repository by git.
        #[arg(long, value_name = "DIR")]
        sdk: Option<PathBuf>,
        /// Write a utility crate (the objective policies maximise, additive:
        /// one term per model) instead of a policy.
        #[arg(long)]
        utility: bool,
    },
    /// The WIT package policies and utilities are built against: printed, or
    /// with --out written as files (the .wit text, and the package encoded as
    /// a Wasm component, as registry tools such as wkg consume it).
    Wit {
        /// Directory to write into (created when missing).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Lists the embedded plugins and those of --plugin-dir, with world and WIT version.
    List {
        #[command(flatten)]
        opts: PluginOpts,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: PluginsCommand) -> Result<()> {
    match cmd {
        PluginsCommand::Check {
            file,
            scenario,
            run,
        } => check(&file, &scenario, &run.params, run.seed, &run.opts),
        PluginsCommand::Test {
            policy,
            log,
            states,
            scenario,
            runs,
            budget_ms,
            utility,
            run,
        } => super::policytest::run(&super::policytest::TestArgs {
            policy: &policy,
            source: match (log, states) {
                (Some(log), _) => super::policytest::StateSource::Log(log),
                (None, Some(states)) => super::policytest::StateSource::Jsonl(states),
                (None, None) => super::policytest::StateSource::Levels,
            },
            scenario: scenario.as_deref(),
            runs: usize::try_from(runs).unwrap_or(usize::MAX),
            budget_ms,
            utility: &utility,
            params: &run.params,
            seed: run.seed,
            opts: &run.opts,
        }),
        PluginsCommand::New {
            name,
            dir,
            sdk,
            utility,
        } => new_crate(
            if utility {
                TemplateKind::Utility
            } else {
                TemplateKind::Policy
            },
            &name,
            dir,
            sdk,
        ),
        PluginsCommand::Wit { out: None } => {
            for (_, text) in WIT_PACKAGE_FILES {
                print!("{text}");
            }
            Ok(())
        }
        PluginsCommand::Wit { out: Some(dir) } => {
            for path in write_wit_package(&dir)? {
                println!("wrote {}", path.display());
            }
            Ok(())
        }
        PluginsCommand::List { opts, json } => {
            let engine = opts.engine()?;
            let listed = list_plugins(&engine, opts.dir.as_deref())?;
            if json {
                let rows: Vec<serde_json::Value> = listed
                    .iter()
                    .map(|(what, info)| match info {
                        Ok(i) => serde_json::json!({
                            "name": i.name,
                            "origin": i.origin.to_string(),
                            "world": i.world.to_string(),
                            "wit": format!("{}@{}", mfsched_plugin_host::WIT_PACKAGE_NAME, i.wit_version),
                            "title": i.title,
                            "sha256": i.sha256,
                            "metadata": i.metadata,
                            "params": i.params,
                        }),
                        Err(e) => serde_json::json!({ "source": what, "error": format!("{e:#}") }),
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            println!(
                "{:<16} {:<8} {:<24} {:<10} {:<12} description",
                "name", "world", "WIT", "origin", "sha256"
            );
            for (what, info) in &listed {
                match info {
                    Ok(i) => {
                        let origin = match &i.origin {
                            mfsched_plugin_host::Origin::Embedded => "embedded".to_string(),
                            mfsched_plugin_host::Origin::File(_) => "file".to_string(),
                        };
                        println!(
                            "{:<16} {:<8} {:<24} {:<10} {:<12} {}",
                            i.name,
                            i.world.to_string(),
                            format!(
                                "{}@{}",
                                mfsched_plugin_host::WIT_PACKAGE_NAME,
                                i.wit_version
                            ),
                            origin,
                            i.short_hash(),
                            match i.metadata.describe() {
                                m if m.is_empty() => i.title.clone(),
                                m => format!("{} ({m})", i.title),
                            }
                        );
                        if let mfsched_plugin_host::Origin::File(p) = &i.origin {
                            println!(
                                "{:<16} {:<8} {:<24} {:<10} {:<12} {}",
                                "",
                                "",
                                "",
                                "",
                                "",
                                mfsched_core::printable_path(p)
                            );
                        }
                        // The flag that sets it: a utility's parameters are not a policy's.
                        let flag = match i.world {
                            mfsched_plugin_host::World::Policy => "--param",
                            mfsched_plugin_host::World::Utility => "--utility-param",
                        };
                        for p in &i.params {
                            println!(
                                "{:<16} {:<8} {:<24} {:<10} {:<12}   {flag} {}={}  {}",
                                "", "", "", "", "", p.name, p.default_value, p.description
                            );
                        }
                    }
                    Err(e) => println!(
                        "{}: cannot load: {}",
                        printable(what, 512),
                        printable(&format!("{e:#}"), 4096)
                    ),
                }
            }
            Ok(())
        }
    }
}

fn check(
    file: &std::path::Path,
    scenario_name: &str,
    raw_params: &[String],
    seed: u64,
    opts: &PluginOpts,
) -> Result<()> {
    if !file.is_file() {
        bail!(
            "{}: no such component file",
            mfsched_core::printable_path(file)
        );
    }
    let scenario = load_scenario(scenario_name)?;
    let Served {
        predictor,
        name: predictor_name,
        problem,
        ..
    } = opts.served(&scenario)?;
    let inputs = CheckInputs {
        engine: opts.engine()?,
        predictor,
        problem: &problem,
        problem_name: &scenario.name,
        state: default_state(&problem),
        params: super::decide::parse_params(raw_params, seed)?,
    };
    println!(
        "checking {} on {} (predictor: {predictor_name})",
        mfsched_core::printable_path(file),
        scenario.name
    );
    let findings = check_file(&inputs, file);
    for f in &findings {
        println!("{} {}", if f.ok { "ok   " } else { "ERROR" }, f.text);
    }
    let failed = findings.iter().filter(|f| !f.ok).count();
    if failed > 0 {
        bail!(
            "{}: {failed} check(s) failed (the ERROR lines above)",
            mfsched_core::printable_path(file)
        );
    }
    println!(
        "passed: {} is ready to ship",
        mfsched_core::printable_path(file)
    );
    Ok(())
}

fn new_crate(
    kind: TemplateKind,
    name: &str,
    dir: Option<PathBuf>,
    sdk: Option<PathBuf>,
) -> Result<()> {
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    let given = sdk.is_some();
    let sdk = match sdk {
        None => TemplateSdk::default_source(kind),
        Some(path) => {
            let path = std::fs::canonicalize(&path)
                .with_context(|| format!("--sdk {}", path.display()))?;
            if !path.join("Cargo.toml").is_file() {
                bail!(
                    "--sdk {}: no Cargo.toml there (point it at the sdk/ directory of an mfsched checkout)",
                    path.display()
                );
            }
            TemplateSdk::Path(path)
        }
    };
    let written = write_template(kind, name, &dir, &sdk)?;
    for path in &written {
        println!("wrote {}", path.display());
    }
    println!(
        "the crate depends on the SDK at {sdk}{}",
        if given {
            ""
        } else {
            " (the checkout this mfsched was built from; --sdk DIR for another)"
        }
    );
    let component = template_component_path(name);
    println!();
    println!("next:");
    println!("  cd {}", dir.display());
    println!("  cargo build --target wasm32-wasip2 --release");
    println!("  mfsched plugins check {}", component.display());
    match kind {
        TemplateKind::Policy => {
            println!("  mfsched plugins test {}", component.display());
            println!("  mfsched ab --a {} --b ga --ticks 40", component.display());
        }
        TemplateKind::Utility => {
            for policy in ["exact", "ga"] {
                println!(
                    "  mfsched decide --scenario paper-n5 --policy {policy} --utility {}",
                    component.display()
                );
            }
            // The template declares a parameter: show how it is set.
            println!(
                "  mfsched decide --scenario paper-n5 --policy exact --utility {} --utility-param throughput-weight=0.5",
                component.display()
            );
        }
    }
    Ok(())
}
