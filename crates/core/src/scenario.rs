//! Scenarios: a card plus a set of model instances drawn from a model zoo, written
//! as TOML so users can add their own. The bundled ones (`paper-n2` … `paper-n6`)
//! and the bundled zoo are embedded in the binary.

use crate::domain::{Card, KnobValue, Model, ModelKind, Problem, ReconfigCosts, Variant};
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The bundled model zoo.
pub const BUNDLED_ZOO: &str = include_str!("../../../scenarios/zoo.toml");

/// The bundled scenarios, by name.
pub const BUNDLED: &[(&str, &str)] = &[
    ("paper-n2", include_str!("../../../scenarios/paper-n2.toml")),
    ("paper-n3", include_str!("../../../scenarios/paper-n3.toml")),
    ("paper-n4", include_str!("../../../scenarios/paper-n4.toml")),
    ("paper-n5", include_str!("../../../scenarios/paper-n5.toml")),
    ("paper-n6", include_str!("../../../scenarios/paper-n6.toml")),
];

/// A model family in the zoo (file form).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilySpec {
    pub kind: ModelKind,
    pub runtime_overhead_mib: u32,
    #[serde(default)]
    pub kv_cache_mib_per_slot: u32,
    #[serde(default)]
    pub concurrency: Vec<u32>,
    #[serde(default)]
    pub skip_rate: Vec<KnobValue<f64>>,
    #[serde(default)]
    pub image_size: Vec<KnobValue<u32>>,
    #[serde(default)]
    pub activation_mib: Vec<u32>,
    pub variants: Vec<Variant>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ZooFile {
    families: BTreeMap<String, FamilySpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelEntry {
    name: String,
    family: String,
    /// Restricts the family's variants (e.g. AWQ only).
    variants: Option<Vec<String>>,
    /// Throughput floor in the model's unit; defaults to the profile's P25.
    sla_floor: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    name: String,
    #[serde(default)]
    description: String,
    card: Card,
    models: Vec<ModelEntry>,
    #[serde(default)]
    reconfig: Option<ReconfigCosts>,
    /// Families defined by the scenario itself, beside (or overriding) the zoo's.
    #[serde(default)]
    families: BTreeMap<String, FamilySpec>,
}

/// A loaded scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// The problem with every model at its first configuration and floors from the
    /// file (0 where the file gives none: see `explicit_floors`).
    pub problem: Problem,
    /// Which floors the scenario file set explicitly.
    pub explicit_floors: Vec<bool>,
}

pub fn bundled_names() -> impl Iterator<Item = &'static str> {
    BUNDLED.iter().map(|(n, _)| *n)
}

/// Loads a bundled scenario by name, or a scenario file by path.
pub fn load(name_or_path: &str) -> Result<Scenario> {
    if let Some((_, text)) = BUNDLED.iter().find(|(n, _)| *n == name_or_path) {
        return parse(text, BUNDLED_ZOO)
            .with_context(|| format!("bundled scenario {name_or_path}"));
    }
    let path = Path::new(name_or_path);
    if path.extension().is_some_and(|e| e == "toml") || path.exists() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read scenario file {}", path.display()))?;
        return parse(&text, BUNDLED_ZOO)
            .with_context(|| format!("scenario file {}", path.display()));
    }
    let known: Vec<&str> = bundled_names().collect();
    bail!(
        "unknown scenario '{name_or_path}': use one of {} or a path to a .toml file",
        known.join(", ")
    )
}

/// Parses a scenario against a zoo (both TOML text).
pub fn parse(scenario_toml: &str, zoo_toml: &str) -> Result<Scenario> {
    let zoo: ZooFile = toml::from_str(zoo_toml).map_err(|e| anyhow::anyhow!("zoo: {e}"))?;
    let file: ScenarioFile = toml::from_str(scenario_toml).map_err(|e| anyhow::anyhow!("{e}"))?;
    if file.models.is_empty() {
        bail!("scenario '{}' has no models", file.name);
    }
    if file.card.vram_mib == 0 {
        bail!("scenario '{}': card.vram_mib must be positive", file.name);
    }
    let mut models = Vec::with_capacity(file.models.len());
    let mut floors = Vec::with_capacity(file.models.len());
    let mut explicit = Vec::with_capacity(file.models.len());
    for entry in &file.models {
        if models.iter().any(|m: &Model| m.name == entry.name) {
            bail!("model name '{}' is used twice", entry.name);
        }
        let family = file
            .families
            .get(&entry.family)
            .or_else(|| zoo.families.get(&entry.family))
            .with_context(|| {
                format!(
                    "model '{}': unknown family '{}' (zoo has: {})",
                    entry.name,
                    entry.family,
                    zoo.families.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            })?;
        models.push(instantiate(
            &entry.name,
            &entry.family,
            family,
            entry.variants.as_deref(),
        )?);
        if let Some(f) = entry.sla_floor
            && !(f.is_finite() && f >= 0.0)
        {
            bail!(
                "model '{}': sla_floor must be a non-negative number",
                entry.name
            );
        }
        floors.push(entry.sla_floor.unwrap_or(0.0));
        explicit.push(entry.sla_floor.is_some());
    }
    let n = models.len();
    let mut problem = Problem {
        card: file.card,
        models,
        sla_floors: floors,
        reconfig: file.reconfig.unwrap_or_default(),
        throughput_ranges: Vec::new(),
        current: vec![0; n],
    };
    // Start from the least-memory configuration of every model: always the most
    // likely to fit.
    problem.current = problem
        .models
        .iter()
        .map(|m| {
            m.configs
                .iter()
                .enumerate()
                .min_by_key(|(_, c)| c.vram_mib)
                .map_or(0, |(i, _)| i as u32)
        })
        .collect();
    if problem.check_feasible(&problem.current).is_err() {
        bail!(
            "scenario '{}': even the smallest configuration of every model ({} MiB) exceeds the card's {} MiB",
            file.name,
            problem.vram_mib(&problem.current),
            problem.card.vram_mib
        );
    }
    Ok(Scenario {
        name: file.name,
        description: file.description,
        problem,
        explicit_floors: explicit,
    })
}

/// Builds one model instance from its family, keeping only `only_variants` if given.
pub fn instantiate(
    name: &str,
    family_name: &str,
    family: &FamilySpec,
    only_variants: Option<&[String]>,
) -> Result<Model> {
    if family.variants.is_empty() {
        bail!("family '{family_name}' has no variants");
    }
    match family.kind {
        ModelKind::Llm if !family.image_size.is_empty() => {
            bail!("family '{family_name}': an LLM has no image_size knob")
        }
        ModelKind::Vision if !family.concurrency.is_empty() => {
            bail!("family '{family_name}': a vision model has no concurrency knob")
        }
        _ => {}
    }
    if family.activation_mib.len() != family.image_size.len() {
        bail!(
            "family '{family_name}': activation_mib has {} entries but image_size has {}",
            family.activation_mib.len(),
            family.image_size.len()
        );
    }
    let variants: Vec<Variant> = match only_variants {
        None => family.variants.clone(),
        Some(names) => {
            let mut picked = Vec::new();
            for n in names {
                let v = family.variants.iter().find(|v| &v.name == n).with_context(|| {
                    format!(
                        "model '{name}': family '{family_name}' has no variant '{n}' (it has: {})",
                        family.variants.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", ")
                    )
                })?;
                picked.push(v.clone());
            }
            if picked.is_empty() {
                bail!("model '{name}': empty variant list");
            }
            picked
        }
    };
    let mut model = Model {
        name: name.to_string(),
        family: family_name.to_string(),
        kind: family.kind,
        variants,
        concurrency: family.concurrency.clone(),
        skip_rate: family.skip_rate.clone(),
        image_size: family.image_size.clone(),
        runtime_overhead_mib: family.runtime_overhead_mib,
        kv_cache_mib_per_slot: family.kv_cache_mib_per_slot,
        activation_mib: family.activation_mib.clone(),
        configs: Vec::new(),
    };
    model.build_grid();
    Ok(model)
}

/// The zoo's families (bundled).
pub fn bundled_families() -> Result<BTreeMap<String, FamilySpec>> {
    let zoo: ZooFile = toml::from_str(BUNDLED_ZOO).map_err(|e| anyhow::anyhow!("zoo: {e}"))?;
    Ok(zoo.families)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_n5_has_the_published_feasible_count() {
        let s = load("paper-n5").expect("bundled");
        assert_eq!(s.problem.models.len(), 5);
        assert_eq!(s.problem.space().size(), 18 * 18 * 9 * 9 * 9);
        assert_eq!(s.problem.count_feasible(), 78_732);
    }

    #[test]
    fn paper_n2_is_the_published_grid() {
        let s = load("paper-n2").expect("bundled");
        assert_eq!(s.problem.space().size(), 162);
        assert_eq!(s.problem.count_feasible(), 162);
    }

    #[test]
    fn every_bundled_scenario_loads_with_a_feasible_start() {
        for name in bundled_names() {
            let s = load(name).expect(name);
            assert_eq!(s.name, name);
            assert!(s.problem.check_feasible(&s.problem.current).is_ok());
            assert!(s.problem.count_feasible() > 0);
        }
    }

    #[test]
    fn fp16_7b_cannot_fit_beside_the_n5_co_runners() {
        let s = load("paper-n5").expect("bundled");
        let families = bundled_families().expect("zoo");
        let fp16 = instantiate(
            "x",
            "llama-2-7b",
            &families["llama-2-7b"],
            Some(&["fp16".into()]),
        )
        .expect("fp16 7b");
        let others: u64 = s
            .problem
            .models
            .iter()
            .filter(|m| m.name != "llama7b")
            .map(|m| u64::from(m.min_vram_mib()))
            .sum();
        assert!(u64::from(fp16.min_vram_mib()) + others > u64::from(s.problem.card.vram_mib));
    }

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/scenarios")
            .join(name);
        std::fs::read_to_string(&path).expect("fixture exists")
    }

    fn parse_error(name: &str) -> String {
        let err = parse(&fixture(name), BUNDLED_ZOO).expect_err(name);
        format!("{err:#}")
    }

    #[test]
    fn bad_scenarios_are_clear_errors() {
        assert!(parse_error("unknown-family.toml").contains("unknown family 'nope'"));
        assert!(parse_error("unknown-variant.toml").contains("no variant 'x'"));
        assert!(parse_error("duplicate-model.toml").contains("'a' is used twice"));
        assert!(parse_error("misspelt-key.toml").contains("famly"));
        assert!(parse_error("does-not-fit.toml").contains("exceeds"));
        let err = load("no-such-scenario").expect_err("unknown name");
        assert!(
            format!("{err:#}").contains("paper-n5"),
            "lists the known names"
        );
    }

    #[test]
    fn a_scenario_can_define_its_own_family() {
        let s = parse(&fixture("custom-family.toml"), BUNDLED_ZOO).expect("valid");
        let chat = &s.problem.models[0];
        assert_eq!(chat.grid_size(), 2);
        assert_eq!(chat.configs[1].vram_mib, 700 + 800 + 8 * 256);
        assert_eq!(s.problem.sla_floors[0], 50.0);
        assert_eq!(s.explicit_floors, vec![true, false]);
    }
}
