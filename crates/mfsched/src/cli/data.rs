use anyhow::Result;
use clap::Subcommand;
use mfsched_core::ColumnSummary;
use mfsched_core::{check_profile_file, peek_profile, resolve_profile_scenario};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Validates a profile CSV and summarises it (rows, models, regimes, column ranges).
    Check {
        /// The profile CSV.
        file: PathBuf,
        /// The scenario to check against (bundled name or .toml). Default: the one
        /// the file names, else the bundled scenario with the file's models.
        #[arg(long)]
        scenario: Option<String>,
    },
}

pub fn run(cmd: DataCommand) -> Result<()> {
    match cmd {
        DataCommand::Check { file, scenario } => check(&file, scenario.as_deref()),
    }
}

fn check(file: &std::path::Path, scenario: Option<&str>) -> Result<()> {
    let resolved = resolve_profile_scenario(file, scenario)?;
    let problem = &resolved.scenario.problem;
    // Streamed: a file of any length is checked in bounded memory.
    let summary = check_profile_file(file, problem)?;
    let version = peek_profile(file)?.version;
    println!(
        "file      {} (profile format version {})",
        file.display(),
        version.map_or("?".to_string(), |v| v.to_string())
    );
    println!("scenario  {} ({})", resolved.scenario.name, resolved.reason);
    println!("rows      {} co-location", summary.rows);
    let models: Vec<String> = summary
        .models
        .iter()
        .map(|(name, kind, unit)| format!("{name} ({kind}, {unit})"))
        .collect();
    println!("models    {}", models.join(", "));
    let regimes: Vec<String> = summary
        .regimes
        .iter()
        .map(|(w, n)| format!("{w} {n}"))
        .collect();
    println!("regimes   {}", regimes.join(", "));
    if summary.solo.iter().any(|&(rows, _)| rows > 0) {
        let solo: Vec<String> = summary
            .models
            .iter()
            .zip(&summary.solo)
            .map(|((name, _, _), (rows, configs))| {
                format!("{name} {rows} rows ({configs} configurations)")
            })
            .collect();
        println!("solo      {}", solo.join(", "));
    }
    println!();
    println!("{:<22} {:>12} {:>12}  values", "column", "min", "max");
    for column in &summary.columns {
        match column {
            ColumnSummary::Numeric { name, min, max } => {
                println!("{name:<22} {min:>12.3} {max:>12.3}");
            }
            ColumnSummary::Categorical { name, counts } => {
                let values: Vec<String> = counts.iter().map(|(v, n)| format!("{v} {n}")).collect();
                println!("{name:<22} {:>12} {:>12}  {}", "", "", values.join(", "));
            }
        }
    }
    println!();
    println!("ok: every row is valid for {}", resolved.scenario.name);
    Ok(())
}
