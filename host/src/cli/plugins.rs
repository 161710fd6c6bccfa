//! `mfsched plugins ...` and the plugin options other commands share.

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};
use mfsched::analytic::AnalyticPredictor;
use mfsched::plugin::registry;
use mfsched::plugin::{CompileCache, PluginEngine, PluginLimits};
use mfsched::predict::Predictor;
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
            },
            cache,
        )?;
        if let Some(note) = engine.cache_note() {
            eprintln!("note: {note}");
        }
        Ok(Arc::new(engine))
    }
}

/// The predictor plugins are served by, and how to name it to a user.
pub fn predictor() -> (Arc<dyn Predictor>, &'static str) {
    (
        Arc::new(AnalyticPredictor),
        "analytic closed-form stand-in (not the MeanField surrogate)",
    )
}

#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
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
        PluginsCommand::List { opts, json } => {
            let engine = opts.engine()?;
            let listed = registry::list(&engine, opts.dir.as_deref())?;
            if json {
                let rows: Vec<serde_json::Value> = listed
                    .iter()
                    .map(|(what, info)| match info {
                        Ok(i) => serde_json::json!({
                            "name": i.name,
                            "origin": i.origin.to_string(),
                            "world": i.world.to_string(),
                            "wit": format!("{}@{}", mfsched::plugin::bindings::PACKAGE, i.wit_version),
                            "title": i.title,
                            "params": i.params,
                        }),
                        Err(e) => serde_json::json!({ "source": what, "error": format!("{e:#}") }),
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            println!(
                "{:<16} {:<8} {:<24} {:<10} description",
                "name", "world", "WIT", "origin"
            );
            for (what, info) in &listed {
                match info {
                    Ok(i) => {
                        let origin = match &i.origin {
                            mfsched::plugin::Origin::Embedded => "embedded".to_string(),
                            mfsched::plugin::Origin::File(_) => "file".to_string(),
                        };
                        println!(
                            "{:<16} {:<8} {:<24} {:<10} {}",
                            i.name,
                            i.world.to_string(),
                            format!("{}@{}", mfsched::plugin::bindings::PACKAGE, i.wit_version),
                            origin,
                            i.title
                        );
                        if let mfsched::plugin::Origin::File(p) = &i.origin {
                            println!("{:<16} {:<8} {:<24} {:<10} {}", "", "", "", "", p.display());
                        }
                        for p in &i.params {
                            println!(
                                "{:<16} {:<8} {:<24} {:<10}   --param {}={}  {}",
                                "", "", "", "", p.name, p.default_value, p.description
                            );
                        }
                    }
                    Err(e) => println!("{what}: cannot load: {e:#}"),
                }
            }
            Ok(())
        }
    }
}
