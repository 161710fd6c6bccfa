//! The one logging set-up: `tracing` events from every crate to stderr, filtered
//! by `--log-level` or, when set, `RUST_LOG` (`mfsched_daemon=debug,info`, …).

use tracing_subscriber::EnvFilter;

/// Installs the stderr subscriber. `level` is the default for every target
/// (`error`, `warn`, `info`, `debug`, `trace`); `RUST_LOG` wins when set.
pub fn init(level: &str) -> anyhow::Result<()> {
    let filter = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec)
            .map_err(|e| anyhow::anyhow!("RUST_LOG '{spec}' is not a filter: {e}"))?,
        _ => EnvFilter::try_new(level)
            .map_err(|e| anyhow::anyhow!("--log-level '{level}' is not a level: {e}"))?,
    };
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}
