use anyhow::Result;
use clap::Subcommand;
use mfsched_core::scenario;

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
            for name in scenario::bundled_names() {
                let s = scenario::load(name)?;
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
            let s = scenario::load(&name)?;
            let p = &s.problem;
            println!("scenario  {}", s.name);
            println!("          {}", s.description);
            println!("card      {} ({} MiB)", p.card.name, p.card.vram_mib);
            println!();
            println!(
                "{:<10} {:<14} {:<7} {:<11} {:<24} {:>5} {:>13}",
                "model", "family", "kind", "variants", "knobs", "grid", "VRAM MiB"
            );
            for m in &p.models {
                let variants: Vec<&str> = m.variants.iter().map(|v| v.name.as_str()).collect();
                let mut knobs = Vec::new();
                if !m.concurrency.is_empty() {
                    knobs.push(format!("c{:?}", m.concurrency));
                }
                if !m.skip_rate.is_empty() {
                    knobs.push(format!(
                        "skip{:?}",
                        m.skip_rate.iter().map(|k| k.value).collect::<Vec<_>>()
                    ));
                }
                if !m.image_size.is_empty() {
                    knobs.push(format!(
                        "img{:?}",
                        m.image_size.iter().map(|k| k.value).collect::<Vec<_>>()
                    ));
                }
                let max = m.configs.iter().map(|c| c.vram_mib).max().unwrap_or(0);
                println!(
                    "{:<10} {:<14} {:<7} {:<11} {:<24} {:>5} {:>6}-{:<6}",
                    m.name,
                    m.family,
                    m.kind,
                    variants.join("/"),
                    knobs.join(" "),
                    m.grid_size(),
                    m.min_vram_mib(),
                    max
                );
            }
            println!();
            println!("joint configurations  {}", p.space().size());
            println!("VRAM-feasible         {}", p.count_feasible());
            Ok(())
        }
    }
}
