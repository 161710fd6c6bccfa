//! MeanField model bundles: `bundle.json` (metadata) + `weights.safetensors`.
//!
//! The weights are the *unfolded* training parameters under the names PyTorch
//! gives an `nn.Sequential(Linear, BatchNorm1d, ReLU, Dropout, Linear,
//! BatchNorm1d, ReLU, Dropout, Linear, Sigmoid)` state dict, prefixed with the
//! model's instance name: `llama3b.0.weight`, `llama3b.1.running_mean`,
//! `llama3b.8.bias`, … (block l's Linear is at index 4l, its BatchNorm at 4l + 1,
//! the head at 4L). A net trained in PyTorch can be dropped in; what the
//! sequential module does not hold (input standardisation, target scale) lives
//! in `bundle.json` with the feature layout, the training data's SHA-256, the
//! seed, the held-out R² per model, the default SLA floor (P25 of profiled
//! throughput) and per-variant throughput ranges.
//!
//! Loading validates everything against the scenario it is used with and fails
//! with one clear message (what, where, what to do); it never panics.

use super::backend::BackendChoice;
use super::features::{self, CorunnerTables, FieldFeatures, Layout, SoloPoint, SoloProfiles};
use super::fold::fold;
use super::meanfield::MeanField;
use super::target::{OutputMap, Target};
use anyhow::{Context, Result, bail};
use mfsched_core::Scenario;
use mfsched_core::write_atomically;
use mfsched_core::{Problem, ThroughputRange};
use mfsched_nn::{BatchNorm, Hidden, Linear, Mlp, Standardize, TargetScale};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Bumped when the files change incompatibly. Version 2 added the target, the
/// solo table, the embedded scenario and an optional held-out R².
pub const FORMAT_VERSION: u32 = 2;
/// Versions this build reads (a version 1 bundle is an absolute-target bundle).
pub const READ_VERSIONS: [u32; 2] = [1, 2];
pub const META_FILE: &str = "bundle.json";
pub const WEIGHTS_FILE: &str = "weights.safetensors";

/// The most `bundle.json` may hold (the shipped ones are a few KiB).
pub const MAX_META_BYTES: u64 = 16 << 20;
/// The most `weights.safetensors` may hold (a 64-32 MLP per model is ~30 KiB;
/// 64 models of a much wider net still fit).
pub const MAX_WEIGHTS_BYTES: u64 = 256 << 20;

/// The most the training profile kept beside a bundle (`profile.csv`) may hold.
pub const MAX_PROFILE_BYTES: u64 = 256 << 20;

/// What to do when a bundle does not fit.
const REMEDY: &str = "retrain it with `mfsched train` or `mfsched models regenerate`";

/// `bundle.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleMeta {
    pub format_version: u32,
    /// The scenario the bundle was trained for.
    pub scenario: String,
    /// The scenario's TOML text, so the bundle evaluates where the scenario
    /// file is not (absent in version 1 bundles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_toml: Option<String>,
    /// What the nets learnt (absent in version 1 bundles: absolute).
    #[serde(default)]
    pub target: Target,
    /// The field features the nets were trained on (absent in bundles from
    /// before the choice existed: the observed state alone).
    #[serde(default, skip_serializing_if = "FieldFeatures::is_observed")]
    pub field_features: FieldFeatures,
    /// Which configurations the nets see (absent: MeanField's own one).
    #[serde(default, skip_serializing_if = "Layout::is_meanfield")]
    pub layout: Layout,
    /// The card's VRAM: the state feature "VRAM used" is a fraction of it.
    pub card_vram_mib: u32,
    pub architecture: Architecture,
    pub training: TrainingInfo,
    pub models: Vec<ModelMeta>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Architecture {
    /// Widths of the Linear → BatchNorm → ReLU → Dropout blocks.
    pub hidden: Vec<usize>,
    pub dropout: f32,
    pub batchnorm_eps: f32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingInfo {
    /// SHA-256 of the training CSV file, hex.
    pub data_sha256: String,
    pub data_rows: usize,
    pub seed: u64,
    pub epochs: usize,
    pub batch_size: usize,
    pub learning_rate: f32,
    /// Share of rows held out (stratified) to measure `r2_holdout`.
    pub holdout_fraction: f64,
    /// Whether each net learnt a ridge model's logit plus an MLP on its
    /// residual (`mfsched_nn::TrainConfig::linear_skip`): two units of every
    /// hidden layer carry the linear part, so the weights read as any others.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub linear_skip: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelMeta {
    pub name: String,
    pub family: String,
    /// What the model is (free-form, as the scenario declares it).
    pub kind: String,
    /// Unit of the predicted throughput.
    pub unit: String,
    /// Input layout, in order (see `surrogate::features`).
    pub features: Vec<String>,
    pub input_mean: Vec<f32>,
    pub input_std: Vec<f32>,
    /// Throughput = offset + scale · sigmoid output.
    pub target_offset: f32,
    pub target_scale: f32,
    pub metrics: Metrics,
    /// Default SLA floor: P25 of the profiled throughput.
    pub sla_floor_p25: f64,
    /// Per variant (in the model's variant order): profiled throughput range.
    pub throughput_ranges: Vec<VariantRange>,
    /// Per configuration of the model's grid: solo throughput (the relative
    /// target's reference; measured or borrowed from the nearest measured one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_throughput: Option<Vec<f64>>,
    /// Per configuration of the model's grid: its solo profile, the features it
    /// contributes to its co-runners' inputs under the co-runner-solo field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_profile: Option<Vec<SoloPoint>>,
    /// Per configuration of the model's grid: its learnt co-runner factors
    /// (`FieldFeatures::CoRunnerFactors`: the inflicted log-slowdown, then the
    /// interaction factors), fitted on the training rows; zeros for a
    /// configuration never seen beside another model there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corunner_factors: Option<Vec<Vec<f64>>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    pub train_rows: usize,
    pub holdout_rows: usize,
    /// R² of the throughput on the held-out rows; none when nothing was held out.
    pub r2_holdout: Option<f64>,
    /// R² of the slowdown (throughput / solo) on the held-out rows, where the
    /// solo throughput is known (absent in older bundles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r2_slowdown_holdout: Option<f64>,
    /// MAPE (%) of the throughput on the held-out rows (absent in older bundles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mape_holdout: Option<f64>,
    /// Measured / predicted throughput on each held-out row, ascending: what
    /// the split-conformal margin of the model's floor is taken from
    /// (`mfsched_core::Floors`). Absent in older bundles and where nothing was
    /// held out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout_ratios: Option<Vec<f32>>,
    /// What the linear skip chose on the training rows, where the net was
    /// trained with one (`training.linear_skip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_skip: Option<LinearSkip>,
}

/// A linear skip's shrinkages, chosen on the training rows: the ridge penalty
/// (per row) of the linear part and the MLP's weight over it, 0 (the linear
/// model alone) to 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearSkip {
    pub ridge_penalty: f64,
    pub mlp_weight: f64,
}

impl Metrics {
    /// The held-out R² to three decimals, or `-` when nothing was held out.
    pub fn r2_text(&self) -> String {
        Self::text(self.r2_holdout, 3)
    }

    /// The held-out R² of the slowdown to three decimals, or `-`.
    pub fn r2_slowdown_text(&self) -> String {
        Self::text(self.r2_slowdown_holdout, 3)
    }

    /// What the split-conformal margin at miss rate `alpha` does to the
    /// model's floor: "×1.08 (q̂ 0.926)", "×1.00" where the margin is 1, or
    /// `-` without held-out ratios; "short" where too few rows were held out
    /// for the guarantee.
    pub fn floor_margin_text(&self, alpha: f64) -> String {
        let Some(m) = self
            .holdout_ratios
            .as_deref()
            .and_then(|r| mfsched_core::FloorMargin::conformal(r, alpha))
        else {
            return "-".to_owned();
        };
        format!(
            "×{:.2} (q̂ {:.3}){}",
            m.factor(),
            m.ratio,
            if m.short { ", short" } else { "" }
        )
    }

    /// The held-out MAPE (%) to one decimal, or `-`.
    pub fn mape_text(&self) -> String {
        Self::text(self.mape_holdout, 1)
    }

    fn text(value: Option<f64>, digits: usize) -> String {
        value.map_or_else(|| "-".to_string(), |r| format!("{r:.digits$}"))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantRange {
    pub variant: String,
    pub min: f64,
    pub max: f64,
}

/// A bundle in memory: metadata plus one trained network per model (same order).
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    pub meta: BundleMeta,
    pub nets: Vec<Mlp>,
}

impl Bundle {
    /// Reads `DIR/bundle.json` and `DIR/weights.safetensors`.
    pub fn read(dir: &Path) -> Result<Self> {
        let read = |name: &str| {
            let path = dir.join(name);
            let max = if name == META_FILE {
                MAX_META_BYTES
            } else {
                MAX_WEIGHTS_BYTES
            };
            mfsched_core::read_capped(&path, max, name).with_context(|| {
                format!(
                    "model bundle {}: cannot read {name} (a bundle directory holds {META_FILE} and {WEIGHTS_FILE})",
                    dir.display()
                )
            })
        };
        let meta = read(META_FILE)?;
        let weights = read(WEIGHTS_FILE)?;
        Self::from_bytes(&meta, &weights).with_context(|| format!("model bundle {}", dir.display()))
    }

    /// Parses a bundle from the two files' bytes (checks its own consistency,
    /// not yet the fit to a scenario: see [`Bundle::check_against`]).
    pub fn from_bytes(meta_json: &[u8], weights: &[u8]) -> Result<Self> {
        let meta: BundleMeta = serde_json::from_slice(meta_json).map_err(|e| {
            let hint = if e.is_eof() { " (truncated?)" } else { "" };
            anyhow::anyhow!("{META_FILE} is not valid{hint}: {e}; {REMEDY}")
        })?;
        if !READ_VERSIONS.contains(&meta.format_version) {
            bail!(
                "{META_FILE} has format version {}, this mfsched reads versions {}; {REMEDY}",
                meta.format_version,
                READ_VERSIONS.map(|v| v.to_string()).join(" and ")
            );
        }
        let arch = &meta.architecture;
        if !(arch.batchnorm_eps.is_finite() && arch.batchnorm_eps > 0.0) {
            bail!(
                "architecture.batchnorm_eps = {} must be a positive number; {REMEDY}",
                arch.batchnorm_eps
            );
        }
        if !(arch.dropout.is_finite() && (0.0..1.0).contains(&arch.dropout)) {
            bail!(
                "architecture.dropout = {} must be in [0, 1); {REMEDY}",
                arch.dropout
            );
        }
        for m in &meta.models {
            for r in &m.throughput_ranges {
                // The utility normalises by the range: an empty (nothing
                // measured), reversed or non-finite one would change every
                // score silently. One measured value (min = max > 0) is a range.
                if !(r.min.is_finite()
                    && r.max.is_finite()
                    && r.min >= 0.0
                    && r.max >= r.min
                    && r.max > 0.0)
                {
                    bail!(
                        "model '{}', variant '{}': throughput range [{}, {}] is not 0 ≤ min ≤ max with max > 0; {REMEDY}",
                        m.name,
                        r.variant,
                        r.min,
                        r.max
                    );
                }
            }
            if let Some(ratios) = &m.metrics.holdout_ratios
                && (ratios.len() > m.metrics.holdout_rows
                    || ratios.iter().any(|r| !(r.is_finite() && *r >= 0.0)))
            {
                bail!(
                    "model '{}': metrics.holdout_ratios must hold at most holdout_rows ({}) numbers ≥ 0, got {} (or a value that is not); {REMEDY}",
                    m.name,
                    m.metrics.holdout_rows,
                    ratios.len()
                );
            }
            match (&m.solo_throughput, meta.target.needs_solo()) {
                (None, true) => bail!(
                    "model '{}' has no solo_throughput, which the {} target needs; {REMEDY}",
                    m.name,
                    meta.target
                ),
                (Some(solo), _) if solo.iter().any(|v| !(v.is_finite() && *v > 0.0)) => bail!(
                    "model '{}': solo_throughput holds a value that is not a positive number; {REMEDY}",
                    m.name
                ),
                _ => {}
            }
        }
        let tensors = SafeTensors::deserialize(weights).map_err(|e| {
            anyhow::anyhow!("{WEIGHTS_FILE} is truncated or corrupt ({e}); {REMEDY}")
        })?;
        let nets = meta
            .models
            .iter()
            .map(|m| read_net(&tensors, m, &meta.architecture))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { meta, nets })
    }

    /// Checks that the bundle fits the scenario: the same card VRAM, every model
    /// present in order, the same feature layout.
    pub fn check_against(&self, scenario: &Scenario) -> Result<()> {
        let p = &scenario.problem;
        let wanted: Vec<&str> = p.models.iter().map(|m| m.name.as_str()).collect();
        let have: Vec<&str> = self.meta.models.iter().map(|m| m.name.as_str()).collect();
        for name in &wanted {
            if !have.contains(name) {
                bail!(
                    "has no model '{name}' (scenario {} needs {}; the bundle has {}); {REMEDY}",
                    scenario.name,
                    wanted.join(", "),
                    have.join(", ")
                );
            }
        }
        if have != wanted {
            bail!(
                "models are [{}] but scenario {} has [{}] (in this order); {REMEDY}",
                have.join(", "),
                scenario.name,
                wanted.join(", ")
            );
        }
        if self.meta.card_vram_mib != p.card.vram_mib {
            bail!(
                "was trained for a {} MiB card, scenario {} has {} MiB; {REMEDY}",
                self.meta.card_vram_mib,
                scenario.name,
                p.card.vram_mib
            );
        }
        for (i, (m, model)) in self.meta.models.iter().zip(&p.models).enumerate() {
            if m.unit != model.unit {
                bail!(
                    "model '{}' predicts throughput in {} but scenario {} measures it in {}; {REMEDY}",
                    m.name,
                    m.unit,
                    scenario.name,
                    model.unit
                );
            }
            let expected = features::layout_names(p, i, self.meta.layout, self.meta.field_features);
            if m.features != expected {
                bail!(
                    "model '{}' was trained on features [{}] but scenario {} gives [{}]; {REMEDY}",
                    m.name,
                    m.features.join(", "),
                    scenario.name,
                    expected.join(", ")
                );
            }
            let profile_len = m.solo_profile.as_ref().map(Vec::len);
            match (self.meta.field_features, profile_len) {
                (FieldFeatures::CoRunnerSolo, None) => bail!(
                    "model '{}' has no solo profile, which the {} field it was trained on needs; {REMEDY}",
                    m.name,
                    self.meta.field_features
                ),
                (_, Some(len)) if len != model.grid_size() => bail!(
                    "model '{}' has {len} solo profile points, scenario {} gives it {} configurations; {REMEDY}",
                    m.name,
                    scenario.name,
                    model.grid_size()
                ),
                _ => {}
            }
            match (self.meta.field_features, &m.corunner_factors) {
                (field, None) if field.is_learnt() => bail!(
                    "model '{}' has no corunner_factors, which the {} field it was trained on needs; {REMEDY}",
                    m.name,
                    self.meta.field_features
                ),
                (_, Some(factors)) if factors.len() != model.grid_size() => bail!(
                    "model '{}' has {} corunner_factors rows, scenario {} gives it {} configurations; {REMEDY}",
                    m.name,
                    factors.len(),
                    scenario.name,
                    model.grid_size()
                ),
                (_, Some(factors))
                    if factors.iter().any(|f| {
                        f.len() != features::FACTOR_RANK + 1 || f.iter().any(|v| !v.is_finite())
                    }) =>
                {
                    bail!(
                        "model '{}': a corunner_factors row is not {} finite numbers; {REMEDY}",
                        m.name,
                        features::FACTOR_RANK + 1
                    )
                }
                _ => {}
            }
            if let Some(solo) = &m.solo_throughput
                && solo.len() != model.grid_size()
            {
                bail!(
                    "model '{}' has {} solo throughputs, scenario {} gives it {} configurations; {REMEDY}",
                    m.name,
                    solo.len(),
                    scenario.name,
                    model.grid_size()
                );
            }
            let variants: Vec<&str> = model.variants.iter().map(|v| v.name.as_str()).collect();
            let ranged: Vec<&str> = m
                .throughput_ranges
                .iter()
                .map(|r| r.variant.as_str())
                .collect();
            if ranged != variants {
                bail!(
                    "model '{}' has throughput ranges for variants [{}], scenario {} has [{}]; {REMEDY}",
                    m.name,
                    ranged.join(", "),
                    scenario.name,
                    variants.join(", ")
                );
            }
        }
        Ok(())
    }

    /// The bundle, once [`Bundle::check_against`] accepts it for `scenario`
    /// and, when it embeds one, for its own scenario too (as `eval` needs):
    /// a bundle whose embedded scenario disagrees with its models is refused
    /// wherever it is used.
    pub fn checked(self, scenario: &Scenario) -> Result<Self> {
        self.check_against(scenario)?;
        if self.meta.scenario_toml.is_some() {
            let own = self.scenario()?;
            self.check_against(&own)
                .with_context(|| format!("against its own embedded scenario '{}'", own.name))?;
        }
        Ok(self)
    }

    /// The predictor for the scenario's problem (after [`Bundle::check_against`]),
    /// on the CPU reference backend.
    pub fn meanfield(&self, problem: &Problem) -> Result<MeanField> {
        self.meanfield_on(problem, BackendChoice::Cpu)
    }

    /// As [`Bundle::meanfield`], on the backend `choice` asks for.
    pub fn meanfield_on(&self, problem: &Problem, choice: BackendChoice) -> Result<MeanField> {
        if !self.meta.layout.is_meanfield() {
            bail!(
                "this bundle is a Joint MLP (every model's configuration in its input), which the \
                 scheduler cannot serve; score it with `mfsched surrogate eval`"
            );
        }
        let nets = self.nets.iter().map(fold).collect();
        let field = self.meta.field_features;
        let meanfield = match (field, self.corunner_tables()) {
            (FieldFeatures::Observed, _) => MeanField::with_backend(problem, nets, choice)?,
            (field, _) if !field.has_corunner_tables() => {
                MeanField::with_field(problem, nets, field, CorunnerTables::new(), choice)?
            }
            (field, Some(tables)) => MeanField::with_field(problem, nets, field, tables, choice)?,
            (field, None) => bail!(
                "this bundle was trained on the {field} field but records no co-runner tables; {REMEDY}"
            ),
        };
        meanfield.with_outputs(self.output_maps(problem)?)
    }

    /// Per model: how its net's output becomes throughput.
    pub fn output_maps(&self, problem: &Problem) -> Result<Vec<OutputMap>> {
        self.meta
            .models
            .iter()
            .zip(&problem.models)
            .map(|(m, model)| OutputMap::new(model, self.meta.target, m.solo_throughput.as_deref()))
            .collect()
    }

    /// Per model, per configuration: what it contributes to its co-runners'
    /// inputs under the field the bundle was trained on (none for the observed
    /// field, or where a model's record lacks it).
    pub fn corunner_tables(&self) -> Option<CorunnerTables> {
        match self.meta.field_features {
            FieldFeatures::Observed | FieldFeatures::Contention => None,
            FieldFeatures::CoRunnerSolo => self
                .meta
                .models
                .iter()
                .map(|m| m.solo_profile.clone())
                .collect::<Option<SoloProfiles>>()
                .map(|s| features::solo_tables(&s)),
            FieldFeatures::CoRunnerFactors | FieldFeatures::ContentionFactors => self
                .meta
                .models
                .iter()
                .map(|m| m.corunner_factors.clone())
                .collect(),
        }
    }

    /// The scenario the bundle was trained for: its embedded TOML when it has
    /// one, else the scenario its name loads (bundled or a file path).
    pub fn scenario(&self) -> Result<Scenario> {
        match &self.meta.scenario_toml {
            Some(text) => mfsched_core::scenario_from_toml(text).with_context(|| {
                format!(
                    "the scenario '{}' embedded in {META_FILE}",
                    self.meta.scenario
                )
            }),
            None => mfsched_core::load_scenario(&self.meta.scenario),
        }
    }

    /// Fills the problem's per-variant throughput ranges and, where the scenario
    /// did not set a floor explicitly, the default floor (profiled P25).
    pub fn apply(&self, problem: &mut Problem, explicit_floors: &[bool]) {
        problem.throughput_ranges = self
            .meta
            .models
            .iter()
            .map(|m| {
                m.throughput_ranges
                    .iter()
                    .map(|r| ThroughputRange {
                        min: r.min,
                        max: r.max,
                    })
                    .collect()
            })
            .collect();
        let models = &self.meta.models;
        problem.fill_open_floors(explicit_floors, |i| models.get(i).map(|m| m.sla_floor_p25));
    }

    /// Writes both files into `dir` (created if needed), each atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let (json, weights) = self.encode()?;
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create directory {}", dir.display()))?;
        write_atomically(&dir.join(WEIGHTS_FILE), &weights)?;
        write_atomically(&dir.join(META_FILE), &json)
    }

    /// SHA-256 of the bundle's canonical encoding (the two files `write` writes,
    /// metadata first): which bundle predicted, wherever it was loaded from.
    pub fn digest(&self) -> Result<String> {
        let (mut bytes, weights) = self.encode()?;
        bytes.extend_from_slice(&weights);
        Ok(mfsched_core::sha256_hex(&bytes))
    }

    /// `bundle.json` and `weights.safetensors`, as bytes.
    fn encode(&self) -> Result<(Vec<u8>, Vec<u8>)> {
        let mut tensors: BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> = BTreeMap::new();
        let mut put_f32 = |name: String, shape: Vec<usize>, values: &[f32]| {
            let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            tensors.insert(name, (Dtype::F32, shape, bytes));
        };
        for (m, net) in self.meta.models.iter().zip(&self.nets) {
            for (l, h) in net.hidden.iter().enumerate() {
                let (lin, bn) = (
                    format!("{}.{}", m.name, 4 * l),
                    format!("{}.{}", m.name, 4 * l + 1),
                );
                put_f32(
                    format!("{lin}.weight"),
                    vec![h.linear.outputs, h.linear.inputs],
                    &h.linear.weight,
                );
                put_f32(
                    format!("{lin}.bias"),
                    vec![h.linear.outputs],
                    &h.linear.bias,
                );
                put_f32(
                    format!("{bn}.weight"),
                    vec![h.linear.outputs],
                    &h.norm.gamma,
                );
                put_f32(format!("{bn}.bias"), vec![h.linear.outputs], &h.norm.beta);
                put_f32(
                    format!("{bn}.running_mean"),
                    vec![h.linear.outputs],
                    &h.norm.running_mean,
                );
                put_f32(
                    format!("{bn}.running_var"),
                    vec![h.linear.outputs],
                    &h.norm.running_var,
                );
            }
            let head = format!("{}.{}", m.name, 4 * net.hidden.len());
            put_f32(
                format!("{head}.weight"),
                vec![1, net.head.inputs],
                &net.head.weight,
            );
            put_f32(format!("{head}.bias"), vec![1], &net.head.bias);
        }
        // PyTorch keeps the BatchNorm step count as a 0-d int64 tensor.
        for (m, net) in self.meta.models.iter().zip(&self.nets) {
            for (l, h) in net.hidden.iter().enumerate() {
                let count = i64::try_from(h.norm.batches_tracked).unwrap_or(i64::MAX);
                tensors.insert(
                    format!("{}.{}.num_batches_tracked", m.name, 4 * l + 1),
                    (Dtype::I64, vec![], count.to_le_bytes().to_vec()),
                );
            }
        }
        let views = tensors
            .iter()
            .map(|(name, (dtype, shape, bytes))| {
                TensorView::new(*dtype, shape.clone(), bytes).map(|v| (name.clone(), v))
            })
            .collect::<Result<Vec<_>, _>>()
            .context("building the safetensors views")?;
        let weights = safetensors::serialize(views, None).context("serialising the weights")?;
        let mut json = serde_json::to_vec_pretty(&self.meta).context("serialising bundle.json")?;
        json.push(b'\n');
        Ok((json, weights))
    }
}

/// Builds model `m`'s network from the tensors, checking names, dtypes and shapes
/// against the declared architecture and feature count.
fn read_net(tensors: &SafeTensors<'_>, m: &ModelMeta, arch: &Architecture) -> Result<Mlp> {
    let width = m.features.len();
    if width == 0 {
        bail!("model '{}' lists no features; {REMEDY}", m.name);
    }
    for (what, len) in [
        ("input_mean", m.input_mean.len()),
        ("input_std", m.input_std.len()),
    ] {
        if len != width {
            bail!(
                "model '{}': {what} has {len} values for {width} features; {REMEDY}",
                m.name
            );
        }
    }
    if m.input_std.iter().any(|s| !(s.is_finite() && *s > 0.0))
        || m.input_mean.iter().any(|v| !v.is_finite())
    {
        bail!(
            "model '{}': input standardisation has a non-finite or non-positive value; {REMEDY}",
            m.name
        );
    }
    if !(m.target_scale.is_finite() && m.target_scale > 0.0 && m.target_offset.is_finite()) {
        bail!(
            "model '{}': target scale must be positive and finite; {REMEDY}",
            m.name
        );
    }
    if arch.hidden.is_empty() || arch.hidden.contains(&0) {
        bail!(
            "architecture.hidden must list positive widths, got {:?}; {REMEDY}",
            arch.hidden
        );
    }
    let f32s = |name: String, shape: &[usize]| -> Result<Vec<f32>> {
        let view = tensors.tensor(&name).map_err(|_| {
            anyhow::anyhow!(
                "{WEIGHTS_FILE} has no tensor '{name}' (model '{}'); {REMEDY}",
                m.name
            )
        })?;
        if view.dtype() != Dtype::F32 {
            bail!(
                "tensor '{name}' is {:?}, expected F32; {REMEDY}",
                view.dtype()
            );
        }
        if view.shape() != shape {
            bail!(
                "tensor '{name}' has shape {:?}, expected {shape:?} ({width} features, hidden widths {:?}); {REMEDY}",
                view.shape(),
                arch.hidden
            );
        }
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if values.iter().any(|v| !v.is_finite()) {
            bail!("tensor '{name}' has non-finite values; {REMEDY}");
        }
        Ok(values)
    };
    let mut hidden = Vec::with_capacity(arch.hidden.len());
    let mut inputs = width;
    for (l, &outputs) in arch.hidden.iter().enumerate() {
        let (lin, bn) = (
            format!("{}.{}", m.name, 4 * l),
            format!("{}.{}", m.name, 4 * l + 1),
        );
        let running_var = f32s(format!("{bn}.running_var"), &[outputs])?;
        if running_var.iter().any(|v| *v < 0.0) {
            bail!("tensor '{bn}.running_var' has negative variances; {REMEDY}");
        }
        let batches_tracked = match tensors.tensor(&format!("{bn}.num_batches_tracked")) {
            Ok(v) if v.dtype() == Dtype::I64 && v.data().len() == 8 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(v.data());
                u64::try_from(i64::from_le_bytes(b)).unwrap_or(0)
            }
            _ => 0, // optional: only informative
        };
        hidden.push(Hidden {
            linear: Linear {
                inputs,
                outputs,
                weight: f32s(format!("{lin}.weight"), &[outputs, inputs])?,
                bias: f32s(format!("{lin}.bias"), &[outputs])?,
            },
            norm: BatchNorm {
                gamma: f32s(format!("{bn}.weight"), &[outputs])?,
                beta: f32s(format!("{bn}.bias"), &[outputs])?,
                running_mean: f32s(format!("{bn}.running_mean"), &[outputs])?,
                running_var,
                batches_tracked,
                eps: arch.batchnorm_eps,
            },
        });
        inputs = outputs;
    }
    let head = format!("{}.{}", m.name, 4 * arch.hidden.len());
    Ok(Mlp {
        input: Standardize {
            mean: m.input_mean.clone(),
            std: m.input_std.clone(),
        },
        hidden,
        head: Linear {
            inputs,
            outputs: 1,
            weight: f32s(format!("{head}.weight"), &[1, inputs])?,
            bias: f32s(format!("{head}.bias"), &[1])?,
        },
        target: TargetScale {
            offset: m.target_offset,
            scale: m.target_scale,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundled;
    use mfsched_core::{BUNDLED_SCENARIOS, bundled_scenario_names, load_scenario};
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/bundles")
            .join(name)
    }

    fn shipped(name: &str) -> Bundle {
        bundled::embedded(name).expect("shipped").expect("parses")
    }

    #[test]
    fn write_then_read_gives_the_same_bundle_and_bytes() {
        let bundle = shipped("paper-n3");
        let dir = tempfile::tempdir().expect("temp dir");
        bundle.write(dir.path()).expect("writes");
        assert_eq!(Bundle::read(dir.path()).expect("reads"), bundle);
        // Writing is deterministic: the shipped weights file comes back byte for byte.
        let shipped_weights = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/paper-n3/weights.safetensors"),
        )
        .expect("shipped file");
        let written = std::fs::read(dir.path().join(WEIGHTS_FILE)).expect("written");
        assert_eq!(written, shipped_weights);
    }

    #[test]
    fn shipped_bundles_fit_their_scenarios_and_predict_like_their_training_form() {
        for name in bundled_scenario_names() {
            let s = load_scenario(name).expect("bundled");
            let bundle = shipped(name);
            bundle.check_against(&s).expect("fits");
            let mf = bundle.meanfield(&s.problem).expect("binds");
            let state = mfsched_core::GpuState {
                workload: mfsched_core::WorkloadLevel::High,
                vram_used_mib: 14000.0,
                utilization: 0.8,
                contention: None,
            };
            for (i, (net, folded)) in bundle.nets.iter().zip(mf.nets()).enumerate() {
                let model = &s.problem.models[i];
                let x: Vec<f32> = (0..model.grid_size())
                    .flat_map(|c| features::input_row(&s.problem, i, c, &state))
                    .collect();
                for (a, b) in net.predict(&x).iter().zip(folded.predict(&x)) {
                    assert!(
                        (a - b).abs() / net.target.scale < 1e-5,
                        "{name} {}",
                        model.name
                    );
                }
            }
        }
    }

    #[test]
    fn held_out_ratios_are_kept_and_nonsense_ones_are_refused_naming_the_model() {
        let bundle = shipped("paper-n2");
        for m in &bundle.meta.models {
            let ratios = m.metrics.holdout_ratios.as_ref().expect("kept");
            assert_eq!(ratios.len(), m.metrics.holdout_rows, "{}", m.name);
            assert!(ratios.windows(2).all(|w| w[0] <= w[1]), "ascending");
            assert!(m.metrics.floor_margin_text(0.05).starts_with('×'));
        }
        let (_, weights) = bundle.encode().expect("encodes");
        for (what, ratios) in [
            ("negative", vec![0.9, -0.5]),
            ("more than held out", vec![1.0; 131]),
        ] {
            let mut meta = bundle.meta.clone();
            meta.models[1].metrics.holdout_ratios = Some(ratios);
            let json = serde_json::to_vec(&meta).expect("json");
            let err = Bundle::from_bytes(&json, &weights).expect_err(what);
            assert!(
                err.to_string()
                    .contains("model 'yolo-a': metrics.holdout_ratios"),
                "{what}: {err}"
            );
        }
    }

    /// A co-runner-factors bundle needs every model's factors, one row of
    /// rank + 1 finite numbers per configuration; its tables are what it
    /// recorded.
    #[test]
    fn corunner_factors_are_checked_against_the_scenario() {
        let s = load_scenario("paper-n2").expect("bundled");
        let mut bundle = shipped("paper-n2");
        bundle.meta.field_features = FieldFeatures::CoRunnerFactors;
        for (i, m) in bundle.meta.models.iter_mut().enumerate() {
            m.features = features::layout_names(
                &s.problem,
                i,
                Layout::MeanField,
                FieldFeatures::CoRunnerFactors,
            );
        }
        let err = bundle.check_against(&s).expect_err("no factors");
        assert!(
            err.to_string().contains(
                "model 'llama3b' has no corunner_factors, which the co-runner-factors field"
            ),
            "{err}"
        );
        let width = features::FACTOR_RANK + 1;
        for (m, model) in bundle.meta.models.iter_mut().zip(&s.problem.models) {
            m.corunner_factors = Some(vec![vec![0.25; width]; model.grid_size()]);
        }
        bundle.check_against(&s).expect("complete factors");
        let tables = bundle.corunner_tables().expect("recorded");
        assert_eq!(tables[1].len(), s.problem.models[1].grid_size());
        for (what, edit, expected) in [
            (
                "short",
                (|f: &mut Vec<Vec<f64>>| {
                    f.pop();
                }) as fn(&mut Vec<Vec<f64>>),
                "corunner_factors rows, scenario paper-n2 gives it",
            ),
            (
                "NaN",
                |f: &mut Vec<Vec<f64>>| f[0][1] = f64::NAN,
                "a corunner_factors row is not 3 finite numbers",
            ),
            (
                "narrow",
                |f: &mut Vec<Vec<f64>>| f[2].truncate(1),
                "a corunner_factors row is not 3 finite numbers",
            ),
        ] {
            let mut broken = bundle.clone();
            edit(
                broken.meta.models[1]
                    .corunner_factors
                    .as_mut()
                    .expect("set"),
            );
            let err = broken.check_against(&s).expect_err(what);
            assert!(
                err.to_string().contains("model 'yolo-a'") && err.to_string().contains(expected),
                "{what}: {err}"
            );
        }
    }

    #[test]
    fn a_bundle_for_other_models_is_refused() {
        let err = shipped("paper-n2")
            .check_against(&load_scenario("paper-n3").expect("bundled"))
            .expect_err("other models");
        assert!(err.to_string().contains("has no model 'qwen1.5b'"), "{err}");
    }

    #[test]
    fn a_bundle_in_another_unit_is_refused() {
        let s = load_scenario("paper-n2").expect("bundled");
        let mut bundle = shipped("paper-n2");
        bundle.meta.models[1].unit = "images/s".into();
        let err = bundle.check_against(&s).expect_err("unit mismatch");
        assert!(
            err.to_string()
                .contains("model 'yolo-a' predicts throughput in images/s but scenario paper-n2 measures it in FPS"),
            "{err}"
        );
    }

    /// A version 1 bundle (as the shipped ones were before they kept held-out
    /// ratios) reads as an absolute-target bundle without an embedded
    /// scenario; a relative bundle without its solo table is refused.
    #[test]
    fn version_1_reads_as_absolute_and_relative_needs_its_solo_table() {
        let shipped = shipped("paper-n2");
        let weights = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/paper-n2/weights.safetensors"),
        )
        .expect("shipped weights");
        let mut v1 = serde_json::to_value(&shipped.meta).expect("json");
        let fields = v1.as_object_mut().expect("an object");
        fields.insert("format_version".into(), 1.into());
        fields.remove("scenario_toml");
        fields.remove("target");
        let bundle = Bundle::from_bytes(&serde_json::to_vec(&v1).expect("json"), &weights)
            .expect("version 1 reads");
        assert_eq!(bundle.meta.format_version, 1);
        assert_eq!(bundle.meta.target, Target::Absolute);
        assert!(bundle.meta.scenario_toml.is_none());
        assert_eq!(bundle.scenario().expect("by name").name, "paper-n2");

        let mut meta = bundle.meta.clone();
        meta.target = Target::RelativeToSolo;
        let json = serde_json::to_vec(&meta).expect("json");
        let err = Bundle::from_bytes(&json, &weights).expect_err("no solo table");
        assert!(
            err.to_string().contains(
                "model 'llama3b' has no solo_throughput, which the relative target needs"
            ),
            "{err}"
        );
    }

    #[test]
    fn apply_fills_ranges_and_only_the_floors_the_scenario_left_open() {
        let s = load_scenario("paper-n2").expect("bundled");
        let bundle = shipped("paper-n2");
        let mut problem = s.problem.clone();
        problem.sla_floors = vec![123.0, 45.0];
        bundle.apply(&mut problem, &[true, false]);
        assert_eq!(problem.sla_floors[0], 123.0, "explicit floor kept");
        assert_eq!(problem.sla_floors[1], bundle.meta.models[1].sla_floor_p25);
        assert_eq!(problem.throughput_ranges.len(), 2);
        assert_eq!(problem.throughput_ranges[1].len(), 3, "yolo: n, s, m");
        assert!(problem.throughput_ranges[1][0].max > problem.throughput_ranges[1][2].max);
    }

    /// Every broken fixture (made by `tests/fixtures/bundles/make.py`) is one
    /// clear error naming what is wrong.
    #[test]
    fn broken_bundles_are_clear_errors() {
        let s = load_scenario("paper-n2").expect("bundled");
        let cases = [
            ("truncated", "weights.safetensors is truncated or corrupt"),
            ("truncated-json", "bundle.json is not valid (truncated?)"),
            (
                "wrong-shape",
                "tensor 'llama3b.4.weight' has shape [32, 60], expected [32, 64]",
            ),
            ("missing-tensor", "no tensor 'yolo-a.1.running_var'"),
            ("wrong-layout", "model 'llama3b' was trained on features"),
            ("missing-model", "has no model 'yolo-a'"),
            ("wrong-version", "format version 99"),
        ];
        for (name, expected) in cases {
            let result = Bundle::read(&fixture(name)).and_then(|b| b.check_against(&s));
            let err = format!("{:#}", result.expect_err(name));
            assert!(err.contains(expected), "{name}: {err}");
            assert!(!err.contains('\n'), "{name}: one line: {err}");
        }
    }

    #[test]
    fn a_missing_directory_names_the_files_it_wants() {
        let err = Bundle::read(&fixture("no-such-bundle")).expect_err("missing");
        let msg = format!("{err:#}");
        assert!(msg.contains("cannot read bundle.json"), "{msg}");
    }

    /// Values a bundle cannot mean are refused when it is read; a bundle whose
    /// embedded scenario disagrees with its own models is refused by
    /// `checked`, which `decide` and `run` use as `eval` does.
    #[test]
    fn nonsense_bundle_values_are_refused() {
        let b = shipped("paper-n2");
        let (meta, weights) = b.encode().expect("encode");
        let edit = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v: serde_json::Value = serde_json::from_slice(&meta).expect("json");
            f(&mut v);
            let bytes = serde_json::to_vec(&v).expect("json");
            format!(
                "{:#}",
                Bundle::from_bytes(&bytes, &weights).expect_err("refused")
            )
        };
        let err = edit(&|v| v["architecture"]["batchnorm_eps"] = (-1000.0).into());
        assert!(err.contains("batchnorm_eps = -1000"), "{err}");
        let err = edit(&|v| {
            v["models"][0]["throughput_ranges"][0]["min"] = 0.0.into();
            v["models"][0]["throughput_ranges"][0]["max"] = 0.0.into();
        });
        assert!(err.contains("throughput range [0, 0]"), "{err}");
        let s = load_scenario("paper-n2").expect("bundled");
        let mut other = b.clone();
        other.meta.scenario_toml = Some(
            BUNDLED_SCENARIOS
                .iter()
                .find(|(n, _)| *n == "paper-n3")
                .expect("bundled")
                .1
                .to_owned(),
        );
        let err = format!("{:#}", other.checked(&s).expect_err("disagrees"));
        assert!(err.contains("its own embedded scenario"), "{err}");
    }
}
