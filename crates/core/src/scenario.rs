//! Scenarios: a card plus a set of model instances drawn from a model zoo, written
//! as TOML so users can add their own. The bundled ones (the published
//! `paper-n2` … `paper-n6`, and the scaling benchmarks `scale-n8`, `scale-n12`,
//! `scale-n16` on larger cards) and the bundled zoo are embedded in the binary.

use crate::domain::{
    Card, Knob, KnobEncoding, KnobLevel, KnobType, KnobValue, Model, Problem, ReconfigCosts,
    Variant,
};
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
    ("scale-n8", include_str!("../../../scenarios/scale-n8.toml")),
    (
        "scale-n12",
        include_str!("../../../scenarios/scale-n12.toml"),
    ),
    (
        "scale-n16",
        include_str!("../../../scenarios/scale-n16.toml"),
    ),
];

/// A model family (file form): what the model is, its unit, its variants and its
/// knobs. Any kind and any knobs: nothing here is special to LLMs or detectors.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilySpec {
    /// Free-form (`llm`, `vision`, `speech`, `training`, …).
    pub kind: String,
    /// Throughput unit (`tokens/s`, `FPS`, `samples/s`, `requests/s`, …).
    pub unit: String,
    #[serde(default)]
    pub runtime_overhead_mib: u32,
    pub variants: Vec<Variant>,
    /// The runtime knobs, in grid order (the last varies fastest).
    #[serde(default)]
    pub knobs: Vec<KnobSpec>,
    /// Device memory of every local configuration in grid order, MiB, instead
    /// of the additive rule (overhead + weights + knob levels' `vram_mib`).
    #[serde(default)]
    pub vram_table_mib: Option<Vec<u32>>,
}

/// A knob (file form): parallel lists over its values.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnobSpec {
    pub name: String,
    /// Integers, numbers or strings (categories), one type per knob.
    pub values: Vec<KnobValue>,
    /// Quality factor per value (default: 1.0 for every value).
    #[serde(default)]
    pub quality_factors: Option<Vec<f64>>,
    /// Device memory each value adds, MiB (default: 0).
    #[serde(default)]
    pub vram_mib: Option<Vec<u32>>,
    /// `linear` (numbers' default), `log2` or `one-hot` (categories' default).
    #[serde(default)]
    pub encoding: Option<String>,
    /// Divides the (log₂ of the) value in the surrogate's input; default: the
    /// largest |value| (linear), 1 (log₂).
    #[serde(default)]
    pub scale: Option<f64>,
}

impl KnobSpec {
    fn build(&self, family: &str) -> Result<Knob> {
        let at = || format!("family '{family}', knob '{}'", self.name);
        let name_ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok || self.name == "variant" {
            bail!(
                "family '{family}': knob name '{}' must be letters, digits, '_' or '-', and not 'variant'",
                self.name
            );
        }
        if self.values.is_empty() {
            bail!("{}: no values", at());
        }
        let kind = knob_type(&self.values)
            .with_context(|| format!("{}: values mix numbers and strings", at()))?;
        let values: Vec<KnobValue> = self
            .values
            .iter()
            .map(|v| match (kind, v) {
                (KnobType::Real, KnobValue::Integer(i)) => KnobValue::Real(*i as f64),
                _ => v.clone(),
            })
            .collect();
        for (i, v) in values.iter().enumerate() {
            if let Some(x) = v.as_f64()
                && !x.is_finite()
            {
                bail!("{}: value {v} is not a finite number", at());
            }
            if values[..i].iter().any(|w| w.matches(v)) {
                bail!("{}: value {v} is given twice", at());
            }
        }
        let parallel = |what: &str, len: Option<usize>| -> Result<()> {
            match len {
                Some(l) if l != values.len() => bail!(
                    "{}: {what} has {l} entries but values has {}",
                    at(),
                    values.len()
                ),
                _ => Ok(()),
            }
        };
        parallel(
            "quality_factors",
            self.quality_factors.as_ref().map(Vec::len),
        )?;
        parallel("vram_mib", self.vram_mib.as_ref().map(Vec::len))?;
        if let Some(q) = &self.quality_factors
            && q.iter().any(|f| !(f.is_finite() && *f >= 0.0))
        {
            bail!("{}: quality factors must be non-negative numbers", at());
        }
        let numbers: Vec<f64> = values.iter().filter_map(KnobValue::as_f64).collect();
        if let Some(s) = self.scale
            && !(s.is_finite() && s > 0.0)
        {
            bail!("{}: scale must be a positive number", at());
        }
        let encoding = match (self.encoding.as_deref(), kind) {
            (None | Some("one-hot"), KnobType::Category) => KnobEncoding::OneHot,
            (Some(e), KnobType::Category) => {
                bail!("{}: a category knob is encoded one-hot, not '{e}'", at())
            }
            (None | Some("linear"), _) => KnobEncoding::Linear {
                scale: self.scale.unwrap_or_else(|| {
                    let max = numbers.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                    if max > 0.0 { max } else { 1.0 }
                }),
            },
            (Some("log2"), _) => {
                if numbers.iter().any(|&x| x < 1.0) {
                    bail!("{}: log2 encoding needs every value ≥ 1", at());
                }
                KnobEncoding::Log2 {
                    scale: self.scale.unwrap_or(1.0),
                }
            }
            (Some("one-hot"), _) => KnobEncoding::OneHot,
            (Some(e), _) => bail!("{}: unknown encoding '{e}' (linear, log2 or one-hot)", at()),
        };
        Ok(Knob {
            name: self.name.clone(),
            kind,
            levels: values
                .into_iter()
                .enumerate()
                .map(|(i, value)| KnobLevel {
                    value,
                    quality_factor: self.quality_factors.as_ref().map_or(1.0, |q| q[i]),
                    vram_mib: self.vram_mib.as_ref().map_or(0, |v| v[i]),
                })
                .collect(),
            encoding,
        })
    }
}

/// The one type of a knob's values; integers among reals make it real.
fn knob_type(values: &[KnobValue]) -> Option<KnobType> {
    let has = |f: fn(&KnobValue) -> bool| values.iter().any(f);
    let categories = has(|v| matches!(v, KnobValue::Category(_)));
    let reals = has(|v| matches!(v, KnobValue::Real(_)));
    let integers = has(|v| matches!(v, KnobValue::Integer(_)));
    match (categories, reals, integers) {
        (true, false, false) => Some(KnobType::Category),
        (true, _, _) => None,
        (false, true, _) => Some(KnobType::Real),
        (false, false, _) => Some(KnobType::Integer),
    }
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
    /// The TOML text it was read from (bundles embed it, so they evaluate anywhere).
    pub source: String,
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

/// A scenario from its TOML text (as a bundle embeds it), against the bundled zoo.
pub fn from_toml(text: &str) -> Result<Scenario> {
    parse(text, BUNDLED_ZOO)
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
        source: scenario_toml.to_string(),
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
    for what in [("kind", &family.kind), ("unit", &family.unit)] {
        if what.1.trim().is_empty() {
            bail!("family '{family_name}': {} must not be empty", what.0);
        }
    }
    let knobs = family
        .knobs
        .iter()
        .map(|k| k.build(family_name))
        .collect::<Result<Vec<_>>>()?;
    for (i, k) in knobs.iter().enumerate() {
        if knobs[..i].iter().any(|o| o.name == k.name) {
            bail!(
                "family '{family_name}': knob '{}' is declared twice",
                k.name
            );
        }
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
        kind: family.kind.clone(),
        unit: family.unit.clone(),
        variants,
        knobs,
        runtime_overhead_mib: family.runtime_overhead_mib,
        vram_table_mib: family.vram_table_mib.clone(),
        configs: Vec::new(),
    };
    if let Some(table) = &family.vram_table_mib {
        if let Some(k) = family.knobs.iter().find(|k| k.vram_mib.is_some()) {
            bail!(
                "family '{family_name}': knob '{}' gives vram_mib but the family has a vram_table_mib (memory comes from one or the other)",
                k.name
            );
        }
        // A table is per configuration of the whole family; a model that keeps
        // only some variants keeps their rows.
        let per_variant = model.grid_len() / model.variants.len();
        if table.len() != family.variants.len() * per_variant {
            bail!(
                "family '{family_name}': vram_table_mib has {} entries but the grid has {} configurations",
                table.len(),
                family.variants.len() * per_variant
            );
        }
        model.vram_table_mib = Some(
            model
                .variants
                .iter()
                .flat_map(|v| {
                    let at = family
                        .variants
                        .iter()
                        .position(|f| f.name == v.name)
                        .expect("picked from the family");
                    table[at * per_variant..(at + 1) * per_variant]
                        .iter()
                        .copied()
                })
                .collect(),
        );
    }
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

    /// A one-model scenario whose family is `family_toml` (the lines after
    /// `[families.f]`).
    fn with_family(family_toml: &str) -> Result<Scenario> {
        let text = format!(
            "name = \"t\"\n[card]\nname = \"c\"\nvram_mib = 100000\n\
             [[models]]\nname = \"m\"\nfamily = \"f\"\n\
             [families.f]\nkind = \"speech\"\nunit = \"requests/s\"\n\
             variants = [{{ name = \"v\", weights_mib = 10, quality = 1.0 }}]\n{family_toml}"
        );
        parse(&text, BUNDLED_ZOO)
    }

    fn family_error(family_toml: &str) -> String {
        format!("{:#}", with_family(family_toml).expect_err(family_toml))
    }

    #[test]
    fn knobs_of_any_type_build_the_grid_in_declared_order() {
        let s = with_family(
            "knobs = [{ name = \"beam\", values = [1, 4], vram_mib = [10, 40], encoding = \"log2\" },\n\
             { name = \"sched\", values = [\"ddim\", \"euler\"], quality_factors = [1.0, 0.5] }]",
        )
        .expect("valid");
        let m = &s.problem.models[0];
        assert_eq!(m.grid_size(), 4);
        // The last knob varies fastest.
        assert_eq!(m.value(1, 1), &KnobValue::Category("euler".into()));
        assert_eq!(m.value(2, 0), &KnobValue::Integer(4));
        assert_eq!(m.configs[3].vram_mib, 10 + 40);
        assert_eq!(m.configs[1].quality, 0.5);
        assert_eq!(m.unit, "requests/s");
        let setting = m.knobs(3);
        assert_eq!(setting.to_string(), "v beam=4 sched=euler");
        assert_eq!(m.find_config(&setting), Some(3));
    }

    #[test]
    fn a_per_configuration_memory_table_replaces_the_additive_rule() {
        let s = with_family(
            "knobs = [{ name = \"batch\", values = [1, 8] }]\nvram_table_mib = [500, 900]",
        )
        .expect("valid");
        let vram: Vec<u32> = s.problem.models[0]
            .configs
            .iter()
            .map(|c| c.vram_mib)
            .collect();
        assert_eq!(vram, [500, 900]);
    }

    #[test]
    fn bad_families_are_clear_errors() {
        for (toml, says) in [
            (
                "knobs = [{ name = \"b\", values = [1, \"x\"] }]",
                "knob 'b': values mix numbers and strings",
            ),
            (
                "knobs = [{ name = \"b\", values = [1, 2], vram_mib = [1] }]",
                "vram_mib has 1 entries but values has 2",
            ),
            (
                "knobs = [{ name = \"b\", values = [0, 2], encoding = \"log2\" }]",
                "log2 encoding needs every value ≥ 1",
            ),
            (
                "knobs = [{ name = \"b\", values = [1, 2], encoding = \"cubic\" }]",
                "unknown encoding 'cubic'",
            ),
            (
                "knobs = [{ name = \"variant\", values = [1] }]",
                "must be letters, digits",
            ),
            (
                "knobs = [{ name = \"b\", values = [1, 1] }]",
                "value 1 is given twice",
            ),
            (
                "knobs = [{ name = \"b\", values = [1, 2] }]\nvram_table_mib = [1]",
                "vram_table_mib has 1 entries but the grid has 2",
            ),
            (
                "knobs = [{ name = \"b\", values = [1, 2], vram_mib = [1, 2] }]\nvram_table_mib = [1, 2]",
                "gives vram_mib but the family has a vram_table_mib",
            ),
        ] {
            let err = family_error(toml);
            assert!(err.contains(says), "{toml}: {err}");
        }
    }
}
