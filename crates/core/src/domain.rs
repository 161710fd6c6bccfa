//! The domain: models and their knobs, configuration grids, joint configurations,
//! GPU state and the scheduling problem. No I/O lives here.
//!
//! Every other module (simulator, profiles, surrogate, plugin host, WIT) speaks in
//! these types; the WIT package mirrors them one to one.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::ControlFlow;

/// The offered-load regime, as in the published profiling protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadLevel {
    Low,
    Medium,
    High,
    /// Oversubscribed, with high variance.
    Burst,
}

impl WorkloadLevel {
    pub const ALL: [WorkloadLevel; 4] = [
        WorkloadLevel::Low,
        WorkloadLevel::Medium,
        WorkloadLevel::High,
        WorkloadLevel::Burst,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadLevel::Low => "low",
            WorkloadLevel::Medium => "medium",
            WorkloadLevel::High => "high",
            WorkloadLevel::Burst => "burst",
        }
    }

    /// 0 for low … 3 for burst.
    pub fn ordinal(self) -> usize {
        self as usize
    }

    pub fn from_ordinal(i: usize) -> Option<Self> {
        Self::ALL.get(i).copied()
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.as_str() == s)
    }

    /// The regime a load ratio (offered / capacity) falls in, given the three
    /// thresholds between Low, Medium, High and Burst. The daemon's load source
    /// and the lab's live profiling and forecast bench all map load this way.
    pub fn of_ratio(ratio: f64, thresholds: &[f64; 3]) -> Self {
        let above = thresholds.iter().filter(|t| ratio >= **t).count();
        Self::from_ordinal(above).unwrap_or(WorkloadLevel::Burst)
    }
}

impl fmt::Display for WorkloadLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The aggregate GPU state a decision is made for (the MeanField "field").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GpuState {
    pub workload: WorkloadLevel,
    /// Device memory in use, MiB.
    pub vram_used_mib: f64,
    /// Aggregate SM utilisation in [0, 1].
    pub utilization: f64,
    /// The contention that the SM share does not show, in [0, 1]: on a GPU the
    /// memory controller's busy share (NVML's memory utilisation, DCGM's DRAM
    /// active), on a CPU host the share of the servers' runnable time spent
    /// waiting for a core (their threads' run-queue delay). `None` where the
    /// source cannot tell; absent from older logs and profiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contention: Option<f64>,
}

impl GpuState {
    /// A state without a contention reading (the sources that give only memory
    /// and utilisation).
    pub fn new(workload: WorkloadLevel, vram_used_mib: f64, utilization: f64) -> Self {
        Self {
            workload,
            vram_used_mib,
            utilization,
            contention: None,
        }
    }
}

/// One model variant (weights): its memory, its quality.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    pub name: String,
    /// Weights resident in device memory, MiB.
    pub weights_mib: u32,
    /// Task quality of this variant at its best settings (e.g. MMLU for LLMs,
    /// COCO mAP50-95 for detectors), on the variant's own scale.
    pub quality: f64,
}

/// One value of a knob: an integer (batch size, concurrency, image size), a real
/// number (skip rate) or a category (scheduler, precision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KnobValue {
    Integer(i64),
    Real(f64),
    Category(String),
}

impl KnobValue {
    /// The value as a number; `None` for a category.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            KnobValue::Integer(i) => Some(*i as f64),
            KnobValue::Real(r) => Some(*r),
            KnobValue::Category(_) => None,
        }
    }

    /// Same value: numbers compare numerically (1e-9), categories exactly.
    pub fn matches(&self, other: &KnobValue) -> bool {
        match (self, other) {
            (KnobValue::Category(a), KnobValue::Category(b)) => a == b,
            (a, b) => match (a.as_f64(), b.as_f64()) {
                (Some(x), Some(y)) => (x - y).abs() < 1e-9,
                _ => false,
            },
        }
    }
}

impl fmt::Display for KnobValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KnobValue::Integer(i) => write!(f, "{i}"),
            KnobValue::Real(r) => write!(f, "{r}"),
            KnobValue::Category(c) => f.write_str(c),
        }
    }
}

/// What values a knob takes: all integers, all numbers, or all categories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KnobType {
    Integer,
    Real,
    Category,
}

impl KnobType {
    pub fn as_str(self) -> &'static str {
        match self {
            KnobType::Integer => "integer",
            KnobType::Real => "real",
            KnobType::Category => "category",
        }
    }

    /// "an integer", "a real", "a category": for messages.
    pub fn with_article(self) -> &'static str {
        match self {
            KnobType::Integer => "an integer",
            KnobType::Real => "a real",
            KnobType::Category => "a category",
        }
    }
}

/// How a knob's value enters the surrogate's input row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "encoding", rename_all = "kebab-case")]
pub enum KnobEncoding {
    /// value / scale.
    Linear { scale: f64 },
    /// log₂(value) / scale (values ≥ 1): for knobs whose effect is multiplicative.
    Log2 { scale: f64 },
    /// One input per value (categories).
    OneHot,
}

/// One value of a knob with what it costs in quality and device memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobLevel {
    pub value: KnobValue,
    /// Multiplies the variant quality (1.0 = no loss).
    pub quality_factor: f64,
    /// Device memory this value adds to the configuration, MiB (KV cache for a
    /// concurrency, activations for an image size); 0 when the model's memory
    /// is a per-configuration table.
    pub vram_mib: u32,
}

/// A runtime knob of a model: its name and its discrete values, in grid order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knob {
    pub name: String,
    pub kind: KnobType,
    pub levels: Vec<KnobLevel>,
    pub encoding: KnobEncoding,
}

impl Knob {
    /// The level holding `value`, if the knob has it.
    pub fn level_of(&self, value: &KnobValue) -> Option<usize> {
        self.levels.iter().position(|l| l.value.matches(value))
    }

    /// The values, for messages.
    pub fn values_text(&self) -> String {
        let values: Vec<String> = self.levels.iter().map(|l| l.value.to_string()).collect();
        values.join(", ")
    }
}

/// A model instance in a problem with its knob grid.
///
/// The local configuration grid is the cartesian product variant × knob₁ × … ×
/// knobₖ, in that order, variant slowest and the last knob fastest. `configs`
/// materialises it: it is small (≤ a few dozen), unlike the joint space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// Instance name, unique in a problem.
    pub name: String,
    /// Family it was made from (e.g. `llama-3.2-3b`).
    pub family: String,
    /// What the model is, free-form (`llm`, `vision`, `speech`, `training`, …):
    /// shown to people and policies, never interpreted by the host.
    pub kind: String,
    /// The unit of its throughput (`tokens/s`, `FPS`, `samples/s`, …).
    pub unit: String,
    pub variants: Vec<Variant>,
    pub knobs: Vec<Knob>,
    /// CUDA context, allocator pools and runtime, MiB.
    pub runtime_overhead_mib: u32,
    /// Device memory of every configuration in grid order, MiB, when the family
    /// gives a table instead of the additive rule.
    pub vram_table_mib: Option<Vec<u32>>,
    pub configs: Vec<LocalConfig>,
}

/// One point of a model's local grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalConfig {
    /// Index into `Model::variants`.
    pub variant: usize,
    /// Index into each knob's levels, parallel to `Model::knobs`.
    pub levels: Vec<u32>,
    pub vram_mib: u32,
    pub quality: f64,
}

/// The knob values of one local configuration, as written in profiles and
/// decisions: the variant's name and every knob's value by knob name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobSetting {
    pub variant: String,
    pub knobs: BTreeMap<String, KnobValue>,
}

impl fmt::Display for KnobSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.variant)?;
        for (name, value) in &self.knobs {
            write!(f, " {name}={value}")?;
        }
        Ok(())
    }
}

impl Model {
    /// Builds the local grid from the knob lists. Called once by whoever
    /// constructs a model. Device memory per configuration is the table entry
    /// when the model has a table, else runtime overhead + weights + the knob
    /// levels' memory; quality is the variant's times the knob levels' factors.
    pub fn build_grid(&mut self) {
        let per_variant: usize = self.knobs.iter().map(|k| k.levels.len()).product();
        let mut configs = Vec::with_capacity(self.variants.len() * per_variant);
        for (vi, variant) in self.variants.iter().enumerate() {
            for j in 0..per_variant {
                // Mixed-radix digits of j, the last knob fastest.
                let mut levels = vec![0u32; self.knobs.len()];
                let mut rest = j;
                for (k, knob) in self.knobs.iter().enumerate().rev() {
                    levels[k] = (rest % knob.levels.len()) as u32;
                    rest /= knob.levels.len();
                }
                let chosen = || {
                    self.knobs
                        .iter()
                        .zip(&levels)
                        .map(|(k, &l)| &k.levels[l as usize])
                };
                let additive = self.runtime_overhead_mib
                    + variant.weights_mib
                    + chosen().map(|l| l.vram_mib).sum::<u32>();
                let vram_mib = self
                    .vram_table_mib
                    .as_ref()
                    .and_then(|t| t.get(configs.len()).copied())
                    .unwrap_or(additive);
                let quality = chosen().fold(variant.quality, |q, l| q * l.quality_factor);
                configs.push(LocalConfig {
                    variant: vi,
                    levels,
                    vram_mib,
                    quality,
                });
            }
        }
        self.configs = configs;
    }

    /// Size of the local grid: variants × Π knob levels.
    pub fn grid_len(&self) -> usize {
        self.variants.len() * self.knobs.iter().map(|k| k.levels.len()).product::<usize>()
    }

    pub fn grid_size(&self) -> usize {
        self.configs.len()
    }

    /// Index of the knob named `name`.
    pub fn knob_index(&self, name: &str) -> Option<usize> {
        self.knobs.iter().position(|k| k.name == name)
    }

    /// The value of knob `k` in local configuration `config`.
    pub fn value(&self, config: usize, k: usize) -> &KnobValue {
        &self.knobs[k].levels[self.configs[config].levels[k] as usize].value
    }

    /// The numeric value of the knob named `name` in `config`; `None` when the
    /// model has no such knob or it is a category.
    pub fn number(&self, config: usize, name: &str) -> Option<f64> {
        self.knob_index(name)
            .and_then(|k| self.value(config, k).as_f64())
    }

    pub fn knobs(&self, config: usize) -> KnobSetting {
        let c = &self.configs[config];
        KnobSetting {
            variant: self.variants[c.variant].name.clone(),
            knobs: self
                .knobs
                .iter()
                .enumerate()
                .map(|(k, knob)| (knob.name.clone(), self.value(config, k).clone()))
                .collect(),
        }
    }

    /// Finds the local configuration with these knob values (every knob named,
    /// no other).
    pub fn find_config(&self, setting: &KnobSetting) -> Option<usize> {
        if setting.knobs.len() != self.knobs.len() {
            return None;
        }
        let variant = self
            .variants
            .iter()
            .position(|v| v.name == setting.variant)?;
        let mut levels = Vec::with_capacity(self.knobs.len());
        for knob in &self.knobs {
            levels.push(knob.level_of(setting.knobs.get(&knob.name)?)? as u32);
        }
        self.configs
            .iter()
            .position(|c| c.variant == variant && c.levels == levels)
    }

    pub fn min_vram_mib(&self) -> u32 {
        self.configs.iter().map(|c| c.vram_mib).min().unwrap_or(0)
    }

    /// Names of the model's knobs, variant first, in grid order.
    pub fn knob_names(&self) -> Vec<&str> {
        std::iter::once("variant")
            .chain(self.knobs.iter().map(|k| k.name.as_str()))
            .collect()
    }
}

/// The GPU a problem runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Card {
    pub name: String,
    pub vram_mib: u32,
}

/// Costs charged in the utility when a model's configuration changes between ticks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReconfigCosts {
    /// Switching variant (reloading weights).
    pub variant_switch: f64,
    /// Changing a runtime knob only.
    pub knob_change: f64,
}

impl Default for ReconfigCosts {
    fn default() -> Self {
        Self {
            variant_switch: 0.05,
            knob_change: 0.01,
        }
    }
}

/// The throughput a model variant showed in profiling, for the utility's per-variant
/// min–max normalisation (so a fast small variant does not dominate a slow large one).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThroughputRange {
    pub min: f64,
    pub max: f64,
}

/// A joint configuration: one local configuration index per model.
pub type JointConfig = Vec<u32>;

/// Mixed-radix numbering of the joint space: index = Σ cᵢ · strideᵢ, the last
/// model varying fastest (so ascending indices are lexicographic tuples).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JointSpace {
    radices: Vec<u32>,
    strides: Vec<u64>,
    size: u64,
}

impl JointSpace {
    pub fn new(radices: Vec<u32>) -> Self {
        let mut strides = vec![0u64; radices.len()];
        let mut acc = 1u64;
        for i in (0..radices.len()).rev() {
            strides[i] = acc;
            acc = acc.saturating_mul(u64::from(radices[i]));
        }
        Self {
            radices,
            strides,
            size: acc,
        }
    }

    pub fn for_models(models: &[Model]) -> Self {
        Self::new(models.iter().map(|m| m.grid_size() as u32).collect())
    }

    pub fn radices(&self) -> &[u32] {
        &self.radices
    }

    /// Total number of joint configurations, feasible or not.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `None` if a component is out of range or the arity is wrong.
    pub fn index(&self, tuple: &[u32]) -> Option<u64> {
        if tuple.len() != self.radices.len() {
            return None;
        }
        let mut idx = 0u64;
        for ((&c, &r), &s) in tuple.iter().zip(&self.radices).zip(&self.strides) {
            if c >= r {
                return None;
            }
            idx += u64::from(c) * s;
        }
        Some(idx)
    }

    /// Model `position`'s local configuration in joint configuration `index`
    /// (one digit of the mixed-radix number; `index` must be below `size()`).
    pub fn digit(&self, index: u64, position: usize) -> u32 {
        ((index / self.strides[position]) % u64::from(self.radices[position])) as u32
    }

    /// Writes the digits of `index` (below `size()`) into `out` (length N), without allocating.
    /// Peels digits from the last (fastest) model up, one division per digit
    /// rather than [`JointSpace::digit`]'s two: the CPU inference decodes every
    /// candidate of a joint batch through it.
    pub fn decode(&self, index: u64, out: &mut [u32]) {
        let mut rest = index;
        for (digit, &radix) in out.iter_mut().zip(&self.radices).rev() {
            let radix = u64::from(radix);
            *digit = (rest % radix) as u32;
            rest /= radix;
        }
    }

    pub fn tuple(&self, index: u64) -> Option<JointConfig> {
        if index >= self.size {
            return None;
        }
        Some(
            self.strides
                .iter()
                .zip(&self.radices)
                .map(|(&s, &r)| ((index / s) % u64::from(r)) as u32)
                .collect(),
        )
    }
}

/// Why a joint configuration cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Infeasible {
    #[error("expected {expected} models in the joint configuration, got {got}")]
    Arity { expected: usize, got: usize },
    #[error("model {model} configuration {config} is out of range (grid has {grid})")]
    OutOfRange {
        model: String,
        config: u32,
        grid: usize,
    },
    #[error("needs {needed_mib} MiB of VRAM, over the {cap_mib} MiB cap")]
    Vram { needed_mib: u64, cap_mib: u32 },
}

/// A scheduling problem: models on a card, their floors, and where they are now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    pub card: Card,
    pub models: Vec<Model>,
    /// Per-model throughput floor (SLA), in the model's own unit (tokens/s, FPS).
    pub sla_floors: Vec<f64>,
    /// Per model: the utility charged when its configuration changes.
    pub reconfig: Vec<ReconfigCosts>,
    /// Per model, per variant (parallel to `Model::variants`); empty until a
    /// surrogate bundle or profile supplies them.
    pub throughput_ranges: Vec<Vec<ThroughputRange>>,
    /// The joint configuration currently running.
    pub current: JointConfig,
}

impl Problem {
    /// Sets every SLA floor the scenario left open (`explicit[i]` false) to
    /// `floor(i)` where that gives one, and returns how many: the one rule by
    /// which a scenario's own floors win over those a bundle's profile
    /// measured or a predictor derived.
    pub fn fill_open_floors(
        &mut self,
        explicit: &[bool],
        floor: impl Fn(usize) -> Option<f64>,
    ) -> usize {
        let mut filled = 0;
        for (i, f) in self.sla_floors.iter_mut().enumerate() {
            if !explicit.get(i).copied().unwrap_or(false)
                && let Some(value) = floor(i)
            {
                *f = value;
                filled += 1;
            }
        }
        filled
    }

    pub fn space(&self) -> JointSpace {
        JointSpace::for_models(&self.models)
    }

    pub fn vram_mib(&self, joint: &[u32]) -> u64 {
        joint
            .iter()
            .zip(&self.models)
            .map(|(&c, m)| u64::from(m.configs[c as usize].vram_mib))
            .sum()
    }

    /// Checks arity, ranges and the VRAM cap.
    pub fn check_feasible(&self, joint: &[u32]) -> Result<(), Infeasible> {
        if joint.len() != self.models.len() {
            return Err(Infeasible::Arity {
                expected: self.models.len(),
                got: joint.len(),
            });
        }
        for (&c, m) in joint.iter().zip(&self.models) {
            if c as usize >= m.grid_size() {
                return Err(Infeasible::OutOfRange {
                    model: m.name.clone(),
                    config: c,
                    grid: m.grid_size(),
                });
            }
        }
        let needed_mib = self.vram_mib(joint);
        if needed_mib > u64::from(self.card.vram_mib) {
            return Err(Infeasible::Vram {
                needed_mib,
                cap_mib: self.card.vram_mib,
            });
        }
        Ok(())
    }

    /// Visits every VRAM-feasible joint configuration in ascending joint-index order.
    ///
    /// Depth-first over models with a suffix bound (the least VRAM the remaining
    /// models can take), so infeasible subtrees are never entered: the cost is
    /// proportional to the feasible count, not to the full space.
    pub fn for_each_feasible(&self, mut visit: impl FnMut(&[u32])) {
        self.try_for_each_feasible(|t| {
            visit(t);
            ControlFlow::Continue(())
        });
    }

    /// [`Problem::for_each_feasible`] that stops when `visit` breaks; returns
    /// whether the walk was stopped.
    pub fn try_for_each_feasible(&self, mut visit: impl FnMut(&[u32]) -> ControlFlow<()>) -> bool {
        let n = self.models.len();
        if n == 0 {
            return false;
        }
        let cap = u64::from(self.card.vram_mib);
        let mut suffix_min = vec![0u64; n + 1];
        for i in (0..n).rev() {
            suffix_min[i] = suffix_min[i + 1] + u64::from(self.models[i].min_vram_mib());
        }
        if suffix_min[0] > cap {
            return false;
        }
        let mut tuple = vec![0u32; n];
        let mut used = vec![0u64; n + 1];
        // Iterative DFS: `depth` is the model being chosen; tuple[depth] the next
        // candidate to try at that depth.
        let mut depth = 0usize;
        loop {
            let model = &self.models[depth];
            let mut advanced = false;
            while (tuple[depth] as usize) < model.grid_size() {
                let c = tuple[depth];
                let total = used[depth] + u64::from(model.configs[c as usize].vram_mib);
                if total + suffix_min[depth + 1] <= cap {
                    used[depth + 1] = total;
                    if depth + 1 == n {
                        if visit(&tuple).is_break() {
                            return true;
                        }
                        tuple[depth] += 1;
                        continue;
                    }
                    depth += 1;
                    tuple[depth] = 0;
                    advanced = true;
                    break;
                }
                tuple[depth] += 1;
            }
            if advanced {
                continue;
            }
            // Exhausted this depth: backtrack.
            if depth == 0 {
                return false;
            }
            depth -= 1;
            tuple[depth] += 1;
        }
    }

    /// How many joint configurations fit in memory (saturating at `u64::MAX`).
    /// Counted, not enumerated: a dynamic programme over the models on the
    /// MiB used so far, so it costs Σk × the card's MiB whatever the count
    /// (10¹⁸ at 16 models).
    pub fn count_feasible(&self) -> u64 {
        let cap = self.card.vram_mib as usize;
        let mut ways = vec![0u64; cap + 1];
        ways[0] = 1;
        for model in &self.models {
            let mut next = vec![0u64; cap + 1];
            for c in &model.configs {
                let need = c.vram_mib as usize;
                if need > cap {
                    continue;
                }
                for (used, &count) in ways[..=cap - need].iter().enumerate() {
                    if count > 0 {
                        next[used + need] = next[used + need].saturating_add(count);
                    }
                }
            }
            ways = next;
        }
        ways.iter().fold(0u64, |sum, &w| sum.saturating_add(w))
    }

    /// The feasible joint indices, ascending. Materialises only feasible ones.
    pub fn feasible_indices(&self) -> Vec<u64> {
        let space = self.space();
        let mut out = Vec::new();
        self.for_each_feasible(|t| out.extend(space.index(t)));
        out
    }

    /// The feasible joint indices, ascending, when there are at most `limit`;
    /// `None` as soon as there are more (the walk stops there).
    pub fn feasible_indices_up_to(&self, limit: usize) -> Option<Vec<u64>> {
        let space = self.space();
        let mut out = Vec::new();
        let stopped = self.try_for_each_feasible(|t| {
            if out.len() == limit {
                return ControlFlow::Break(());
            }
            out.extend(space.index(t));
            ControlFlow::Continue(())
        });
        (!stopped).then_some(out)
    }

    pub fn model_index(&self, name: &str) -> Option<usize> {
        self.models.iter().position(|m| m.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy_model(name: &str, vrams: &[u32]) -> Model {
        Model {
            name: name.into(),
            family: name.into(),
            kind: "toy".into(),
            unit: "items/s".into(),
            variants: vec![Variant {
                name: "v".into(),
                weights_mib: 0,
                quality: 1.0,
            }],
            knobs: vec![Knob {
                name: "size".into(),
                kind: KnobType::Integer,
                levels: vrams
                    .iter()
                    .enumerate()
                    .map(|(i, &vram_mib)| KnobLevel {
                        value: KnobValue::Integer(320 + 160 * i as i64),
                        quality_factor: 1.0,
                        vram_mib,
                    })
                    .collect(),
                encoding: KnobEncoding::Linear { scale: 640.0 },
            }],
            runtime_overhead_mib: 0,
            vram_table_mib: None,
            configs: vec![],
        }
    }

    fn toy_problem(cap: u32, models: Vec<Vec<u32>>) -> Problem {
        let models: Vec<Model> = models
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let mut m = toy_model(&format!("m{i}"), v);
                m.build_grid();
                m
            })
            .collect();
        let n = models.len();
        Problem {
            card: Card {
                name: "toy".into(),
                vram_mib: cap,
            },
            models,
            sla_floors: vec![0.0; n],
            reconfig: vec![ReconfigCosts::default(); n],
            throughput_ranges: vec![],
            current: vec![0; n],
        }
    }

    #[test]
    fn index_round_trips_over_the_whole_space() {
        let space = JointSpace::new(vec![3, 1, 4, 2]);
        assert_eq!(space.size(), 24);
        for i in 0..space.size() {
            let t = space.tuple(i).expect("in range");
            assert_eq!(space.index(&t), Some(i));
        }
        assert_eq!(space.tuple(24), None);
        let mut digits = [0u32; 4];
        for i in 0..space.size() {
            let t = space.tuple(i).expect("in range");
            assert!((0..4).all(|p| space.digit(i, p) == t[p]));
            space.decode(i, &mut digits);
            assert_eq!(digits[..], t[..]);
        }
        assert_eq!(space.index(&[3, 0, 0, 0]), None, "component out of range");
        assert_eq!(space.index(&[0, 0, 0]), None, "wrong arity");
        // Last model varies fastest.
        assert_eq!(space.tuple(1), Some(vec![0, 0, 0, 1]));
        assert_eq!(space.tuple(2), Some(vec![0, 0, 1, 0]));
    }

    #[test]
    fn feasible_enumeration_matches_brute_force() {
        // Irregular VRAMs and a cap that cuts through the middle of the space.
        let p = toy_problem(
            100,
            vec![
                vec![10, 50, 30],
                vec![5, 40],
                vec![25, 0, 60, 35],
                vec![20, 15, 45],
            ],
        );
        let space = p.space();
        let brute: Vec<u64> = (0..space.size())
            .filter(|&i| p.check_feasible(&space.tuple(i).expect("in range")).is_ok())
            .collect();
        assert!(!brute.is_empty() && brute.len() < space.size() as usize);
        assert_eq!(p.feasible_indices(), brute);
        assert_eq!(p.feasible_indices_up_to(brute.len()), Some(brute.clone()));
        assert_eq!(p.feasible_indices_up_to(brute.len() - 1), None);
        assert_eq!(p.count_feasible(), brute.len() as u64);
    }

    #[test]
    fn nothing_fits_and_everything_fits() {
        assert_eq!(toy_problem(10, vec![vec![20], vec![5]]).count_feasible(), 0);
        assert_eq!(
            toy_problem(1000, vec![vec![1, 2], vec![3, 4, 5]]).count_feasible(),
            6
        );
    }

    #[test]
    fn infeasibility_reasons() {
        let p = toy_problem(50, vec![vec![10, 45], vec![5, 40]]);
        assert!(matches!(
            p.check_feasible(&[0]),
            Err(Infeasible::Arity { .. })
        ));
        assert!(matches!(
            p.check_feasible(&[2, 0]),
            Err(Infeasible::OutOfRange { .. })
        ));
        assert_eq!(
            p.check_feasible(&[1, 1]),
            Err(Infeasible::Vram {
                needed_mib: 85,
                cap_mib: 50
            })
        );
        assert_eq!(p.check_feasible(&[0, 1]), Ok(()));
    }
}
