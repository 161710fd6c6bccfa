use anyhow::Result;
use clap::Subcommand;
use mfsched_core::{Knob, KnobEncoding};
use mfsched_core::{bundled_scenario_names, load_scenario};

#[derive(Debug, Subcommand)]
pub enum ScenarioCommand {
    /// Lists the bundled scenarios.
    List,
    /// Shows a scenario's models, knobs, grid sizes and VRAM-feasible joint count.
    Show {
        /// A bundled scenario name or a path to a scenario .toml file.
        name: String,
    },
}

pub fn run(cmd: ScenarioCommand) -> Result<()> {
    match cmd {
        ScenarioCommand::List => {
            println!(
                "{:<10} {:>3} {:>10} {:>10}  description",
                "name", "N", "joint", "feasible"
            );
            for name in bundled_scenario_names() {
                let s = load_scenario(name)?;
                println!(
                    "{:<10} {:>3} {:>10} {:>10}  {}",
                    s.name,
                    s.problem.models.len(),
                    s.problem.space().size(),
                    s.problem.count_feasible(),
                    s.description
                );
            }
            Ok(())
        }
        ScenarioCommand::Show { name } => {
            let s = load_scenario(&name)?;
            let p = &s.problem;
            println!("scenario  {}", s.name);
            println!("          {}", s.description);
            println!("card      {} ({} MiB)", p.card.name, p.card.vram_mib);
            println!();
            println!(
                "{:<12} {:<14} {:<8} {:<10} {:<16} {:>5} {:>13}",
                "model", "family", "kind", "unit", "variants", "grid", "VRAM MiB"
            );
            for m in &p.models {
                let variants: Vec<&str> = m.variants.iter().map(|v| v.name.as_str()).collect();
                let max = m.configs.iter().map(|c| c.vram_mib).max().unwrap_or(0);
                println!(
                    "{:<12} {:<14} {:<8} {:<10} {:<16} {:>5} {:>6}-{:<6}",
                    m.name,
                    m.family,
                    m.kind,
                    m.unit,
                    variants.join("/"),
                    m.grid_size(),
                    m.min_vram_mib(),
                    max
                );
                for knob in &m.knobs {
                    println!("  {}", knob_line(knob));
                }
                if m.vram_table_mib.is_some() {
                    println!("  memory: a per-configuration table");
                }
            }
            println!();
            println!("joint configurations  {}", p.space().size());
            println!("VRAM-feasible         {}", p.count_feasible());
            Ok(())
        }
    }
}

/// One knob as `scenario show` prints it: name, type, values, and what the
/// values cost (quality factors, memory) where they cost anything.
fn knob_line(knob: &Knob) -> String {
    let join = |values: Vec<String>| values.join(", ");
    let mut line = format!(
        "{} ({}): {}",
        knob.name,
        knob.kind.as_str(),
        knob.values_text()
    );
    if knob.levels.iter().any(|l| l.quality_factor != 1.0) {
        line += &format!(
            "; quality × {}",
            join(
                knob.levels
                    .iter()
                    .map(|l| l.quality_factor.to_string())
                    .collect()
            )
        );
    }
    if knob.levels.iter().any(|l| l.vram_mib != 0) {
        line += &format!(
            "; + {} MiB",
            join(knob.levels.iter().map(|l| l.vram_mib.to_string()).collect())
        );
    }
    line += &match knob.encoding {
        KnobEncoding::Linear { scale } => format!("; input value/{scale}"),
        KnobEncoding::Log2 { scale } => format!("; input log2(value)/{scale}"),
        KnobEncoding::OneHot => "; input one-hot".to_string(),
    };
    line
}
