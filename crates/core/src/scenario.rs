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

/// Scenario limits, each checked before the work or the allocation it guards,
/// with one line naming the key (docs/limits.md lists every limit). The
/// largest bundled scenario (`scale-n16`) is far inside all of them.
pub(crate) mod limits {
    /// Models in one scenario.
    pub const MODELS: usize = 64;
    /// Variants of one family.
    pub const VARIANTS: usize = 256;
    /// Knobs of one family.
    pub const KNOBS: usize = 16;
    /// Values of one knob.
    pub const KNOB_VALUES: usize = 256;
    /// Local configurations of one model (variants × Π knob values).
    pub const LOCAL_GRID: u64 = 1 << 16;
    /// Local configurations over all models: what a tick's table holds and
    /// the surrogate evaluates.
    pub const TOTAL_GRID: u64 = 1 << 18;
    /// The largest card, MiB (4 TiB).
    pub const CARD_VRAM_MIB: u32 = 1 << 22;
    /// Σ local grid sizes × (card MiB + 1): the work (and, over the MiB, the
    /// memory) of counting the VRAM-feasible set.
    pub const COUNT_WORK: u64 = 1 << 31;
    /// Bytes of a name (scenario, model, family, variant, knob, category value).
    pub const NAME_BYTES: usize = 128;
    /// Bytes of a scenario file.
    pub const FILE_BYTES: u64 = crate::fsutil::MAX_CONFIG_BYTES;
}

/// A name within [`limits::NAME_BYTES`]; a longer one is refused without
/// being echoed.
fn check_name(what: &str, name: &str) -> Result<()> {
    if name.len() > limits::NAME_BYTES {
        bail!(
            "{what} has {} bytes, over the {} a name may have",
            name.len(),
            limits::NAME_BYTES
        );
    }
    if name.chars().any(char::is_control) {
        bail!("{what} {name:?} holds a control character");
    }
    Ok(())
}

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
        check_name(&format!("family '{family}': a knob name"), &self.name)?;
        let at = || format!("family '{family}', knob '{}'", self.name);
        if self.values.len() > limits::KNOB_VALUES {
            bail!(
                "{}: {} values, over the {} a knob may have",
                at(),
                self.values.len(),
                limits::KNOB_VALUES
            );
        }
        for v in &self.values {
            if let KnobValue::Category(c) = v {
                check_name(&format!("{}: a value", at()), c)?;
            }
        }
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
    /// Its reconfiguration costs, where they differ from the scenario's
    /// `[reconfig]` (a server that restarts for seconds beside one that
    /// reloads in milliseconds).
    reconfig: Option<ReconfigCosts>,
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
        let text = crate::fsutil::read_capped_to_string(path, limits::FILE_BYTES, "scenario file")?;
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
    let file: ScenarioFile = toml::from_str(scenario_toml)
        .map_err(|e| anyhow::anyhow!("{}", crate::text::toml_error(&e, scenario_toml)))?;
    check_name("the scenario name", &file.name)?;
    if file.models.is_empty() {
        bail!("scenario '{}' has no models", file.name);
    }
    if file.models.len() > limits::MODELS {
        bail!(
            "scenario '{}': {} models, over the {} a scenario may have",
            file.name,
            file.models.len(),
            limits::MODELS
        );
    }
    if file.card.vram_mib == 0 {
        bail!("scenario '{}': card.vram_mib must be positive", file.name);
    }
    if file.card.vram_mib > limits::CARD_VRAM_MIB {
        bail!(
            "scenario '{}': card.vram_mib {} is over the {} MiB (4 TiB) a card may have",
            file.name,
            file.card.vram_mib,
            limits::CARD_VRAM_MIB
        );
    }
    // The scenario's costs, then each model's own.
    let declared_costs = std::iter::once((String::new(), &file.reconfig)).chain(
        file.models
            .iter()
            .map(|m| (format!("model '{}': ", m.name), &m.reconfig)),
    );
    for (whose, costs) in declared_costs {
        let Some(r) = costs else { continue };
        for (key, cost) in [
            ("reconfig.variant_switch", r.variant_switch),
            ("reconfig.knob_change", r.knob_change),
        ] {
            if !(cost.is_finite() && cost >= 0.0) {
                bail!(
                    "scenario '{}': {whose}{key} = {cost} must be a non-negative number",
                    file.name
                );
            }
        }
    }
    let mut total_grid = 0u64;
    let mut models = Vec::with_capacity(file.models.len());
    let mut floors = Vec::with_capacity(file.models.len());
    let mut explicit = Vec::with_capacity(file.models.len());
    for entry in &file.models {
        check_name("a model name", &entry.name)?;
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
        let grid = family_grid_len(&entry.family, family)?;
        total_grid = total_grid.saturating_add(grid);
        if total_grid > limits::TOTAL_GRID {
            bail!(
                "scenario '{}': the models' local grids reach {total_grid} configurations at model '{}', over the {} a scenario may have",
                file.name,
                entry.name,
                limits::TOTAL_GRID
            );
        }
        let work = total_grid.saturating_mul(u64::from(file.card.vram_mib) + 1);
        if work > limits::COUNT_WORK {
            bail!(
                "scenario '{}': {total_grid} local configurations × card.vram_mib {} is over the {} the feasible count may cost (a smaller card or fewer configurations)",
                file.name,
                file.card.vram_mib,
                limits::COUNT_WORK
            );
        }
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
        reconfig: file
            .models
            .iter()
            .map(|m| m.reconfig.or(file.reconfig).unwrap_or_default())
            .collect(),
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
    check_name("a family name", family_name)?;
    family_grid_len(family_name, family)?;
    if family.variants.is_empty() {
        bail!("family '{family_name}' has no variants");
    }
    for (i, v) in family.variants.iter().enumerate() {
        check_name(&format!("family '{family_name}': a variant name"), &v.name)?;
        if family.variants[..i].iter().any(|o| o.name == v.name) {
            bail!(
                "family '{family_name}': variant '{}' is declared twice",
                v.name
            );
        }
        if !(v.quality.is_finite() && v.quality >= 0.0) {
            bail!(
                "family '{family_name}', variant '{}': quality = {} must be a non-negative number",
                v.name,
                v.quality
            );
        }
        // The additive rule's largest sum for this variant must fit the
        // u32 a configuration's memory is held in.
        let knobs_max: u64 = family
            .knobs
            .iter()
            .map(|k| {
                k.vram_mib
                    .as_ref()
                    .and_then(|v| v.iter().max())
                    .map_or(0, |&m| u64::from(m))
            })
            .sum();
        let largest = u64::from(family.runtime_overhead_mib) + u64::from(v.weights_mib) + knobs_max;
        if largest > u64::from(u32::MAX) {
            bail!(
                "family '{family_name}', variant '{}': runtime_overhead_mib + weights_mib + the knobs' vram_mib reach {largest} MiB, over the {} MiB a configuration may need",
                v.name,
                u32::MAX
            );
        }
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

/// The local grid size of a family (variants × Π knob values), refused past
/// [`limits::LOCAL_GRID`] before any grid is built.
fn family_grid_len(family_name: &str, family: &FamilySpec) -> Result<u64> {
    if family.variants.len() > limits::VARIANTS {
        bail!(
            "family '{family_name}': {} variants, over the {} a family may have",
            family.variants.len(),
            limits::VARIANTS
        );
    }
    if family.knobs.len() > limits::KNOBS {
        bail!(
            "family '{family_name}': {} knobs, over the {} a family may have",
            family.knobs.len(),
            limits::KNOBS
        );
    }
    let grid = family
        .knobs
        .iter()
        .try_fold(family.variants.len() as u64, |acc, k| {
            acc.checked_mul(k.values.len() as u64)
                .filter(|&g| g <= limits::LOCAL_GRID)
        });
    match grid {
        Some(g) => Ok(g),
        None => bail!(
            "family '{family_name}': variants × the knobs' values is over the {} local configurations a model may have",
            limits::LOCAL_GRID
        ),
    }
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

    /// A one-family scenario: `family` is the body of `[families.f]`.
    fn one_family(card_mib: u64, family: &str, extra: &str) -> String {
        format!(
            "name = \"t\"\n{extra}\n[card]\nname = \"c\"\nvram_mib = {card_mib}\n\n[[models]]\nname = \"m\"\nfamily = \"f\"\n\n[families.f]\nkind = \"k\"\nunit = \"u/s\"\n{family}\n"
        )
    }

    fn refused(text: &str) -> String {
        format!("{:#}", parse(text, BUNDLED_ZOO).expect_err("refused"))
    }

    const ONE_VARIANT: &str = "variants = [{ name = \"v\", weights_mib = 10, quality = 1.0 }]";

    /// Sizes are refused before anything is allocated: 12 knobs × 10 values
    /// (10¹² configurations) fails at once, naming the family and the limit.
    #[test]
    fn scenario_sizes_are_bounded_before_allocation() {
        let knob =
            |i: usize| format!("{{ name = \"k{i}\", values = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] }}");
        let knobs: Vec<String> = (0..12).map(knob).collect();
        let text = one_family(
            24576,
            &format!("{ONE_VARIANT}\nknobs = [{}]", knobs.join(", ")),
            "",
        );
        let err = refused(&text);
        assert!(err.contains("family 'f'") && err.contains("65536"), "{err}");
        let knobs: Vec<String> = (0..17).map(knob).collect();
        let err = refused(&one_family(
            24576,
            &format!("{ONE_VARIANT}\nknobs = [{}]", knobs.join(", ")),
            "",
        ));
        assert!(err.contains("17 knobs"), "{err}");
        let err = refused(&one_family(4294967295, ONE_VARIANT, ""));
        assert!(err.contains("card.vram_mib 4294967295"), "{err}");
        let mut many = String::from("name = \"t\"\n[card]\nname = \"c\"\nvram_mib = 1000\n");
        for i in 0..65 {
            many.push_str(&format!(
                "[[models]]\nname = \"m{i}\"\nfamily = \"yolo11\"\n"
            ));
        }
        assert!(refused(&many).contains("65 models"), "{}", refused(&many));
        // 10,000 configurations on a 2 TiB card: over the count's work.
        let err = refused(&one_family(
            2 << 20,
            &format!(
                "{ONE_VARIANT}\nknobs = [{}]",
                (0..4).map(knob).collect::<Vec<_>>().join(", ")
            ),
            "",
        ));
        assert!(err.contains("the feasible count may cost"), "{err}");
        let long = "n".repeat(1 << 20);
        let err = refused(&format!(
            "name = \"t\"\n[card]\nname = \"c\"\nvram_mib = 1000\n[[models]]\nname = \"{long}\"\nfamily = \"yolo11\"\n"
        ));
        assert!(
            err.len() < 1000,
            "the name is not echoed: {} bytes",
            err.len()
        );
        assert!(err.contains("over the 128"), "{err}");
    }

    /// A model's own reconfiguration costs stand beside the scenario's,
    /// which every other model takes (the built-in ones where none are
    /// declared); a nonsense cost is refused naming the model and the key.
    #[test]
    fn a_model_may_declare_its_own_reconfiguration_costs() {
        let text = |restart: &str| {
            format!(
                "name = \"t\"\n[reconfig]\nvariant_switch = 0.1\nknob_change = 0.02\n[card]\nname = \"c\"\nvram_mib = 1000\n\n\
                 [[models]]\nname = \"fast\"\nfamily = \"f\"\n\n\
                 [[models]]\nname = \"slow\"\nfamily = \"f\"\nreconfig = {{ variant_switch = {restart}, knob_change = 1.0 }}\n\n\
                 [families.f]\nkind = \"k\"\nunit = \"u/s\"\n{ONE_VARIANT}\n"
            )
        };
        let scenario = parse(&text("1.0"), BUNDLED_ZOO).expect("parses");
        let costs = |variant_switch, knob_change| ReconfigCosts {
            variant_switch,
            knob_change,
        };
        assert_eq!(
            scenario.problem.reconfig,
            [costs(0.1, 0.02), costs(1.0, 1.0)]
        );
        let err = refused(&text("nan"));
        assert!(
            err.contains("model 'slow': reconfig.variant_switch = NaN"),
            "{err}"
        );
        let defaults = parse(&one_family(24576, ONE_VARIANT, ""), BUNDLED_ZOO).expect("parses");
        assert_eq!(defaults.problem.reconfig, [ReconfigCosts::default()]);
    }

    /// Values no scenario can mean are refused, naming the key.
    #[test]
    fn nonsense_values_are_refused_naming_the_key() {
        for (quality, says) in [
            ("nan", "quality = NaN"),
            ("inf", "quality = inf"),
            ("-5.0", "quality = -5"),
        ] {
            let err = refused(&one_family(
                24576,
                &format!("variants = [{{ name = \"v\", weights_mib = 10, quality = {quality} }}]"),
                "",
            ));
            assert!(err.contains(says), "{says}: {err}");
        }
        let err = refused(&one_family(
            24576,
            "variants = [{ name = \"v\", weights_mib = 10, quality = 1.0 }, { name = \"v\", weights_mib = 20, quality = 2.0 }]",
            "",
        ));
        assert!(err.contains("variant 'v' is declared twice"), "{err}");
        for (costs, key) in [
            (
                "variant_switch = nan\nknob_change = 0.01",
                "reconfig.variant_switch",
            ),
            (
                "variant_switch = 0.05\nknob_change = -1000.0",
                "reconfig.knob_change",
            ),
        ] {
            let err = refused(&one_family(
                24576,
                ONE_VARIANT,
                &format!("[reconfig]\n{costs}\n"),
            ));
            assert!(err.contains(key), "{key}: {err}");
        }
        let err = refused(&one_family(
            24576,
            "runtime_overhead_mib = 4294967295\nvariants = [{ name = \"v\", weights_mib = 10, quality = 1.0 }]",
            "",
        ));
        assert!(err.contains("4294967305 MiB"), "no silent wrap: {err}");
    }

    #[test]
    fn a_scenario_file_is_read_through_the_capped_reader() {
        let err = format!("{:#}", load("/dev/zero").expect_err("a device"));
        assert!(err.contains("a character device"), "{err}");
    }
}
