//! Surrogate input features.
//!
//! A predictor for model i sees `[local features of its configuration | state features]`.
//! Local features depend only on the model and its configuration, so they are
//! precomputed per local configuration (a table of Σᵢ kᵢ rows) and, for joint
//! candidates, looked up from the mixed-radix digits (the GPU shader does this on
//! the device).

use mfsched_core::Profile;
use mfsched_core::{GpuState, Knob, KnobEncoding, Model, Problem};
use serde::{Deserialize, Serialize};

/// Number of state features: workload one-hot (4), VRAM used / card VRAM, utilisation.
pub const STATE_FEATURES: usize = 6;

/// The last state features, (VRAM used / card VRAM, utilisation): the part of the
/// field a candidate-aware prediction gives each candidate of its own.
pub const FIELD_FEATURES: usize = 2;

/// Inputs a knob takes in the row: one, or one per value when one-hot.
fn knob_width(knob: &Knob) -> usize {
    match knob.encoding {
        KnobEncoding::OneHot => knob.levels.len(),
        KnobEncoding::Linear { .. } | KnobEncoding::Log2 { .. } => 1,
    }
}

/// Length of a model's local feature vector.
pub fn local_len(model: &Model) -> usize {
    model.variants.len() + model.knobs.iter().map(knob_width).sum::<usize>()
}

/// Input width of model i's predictor.
pub fn input_len(model: &Model) -> usize {
    local_len(model) + STATE_FEATURES
}

/// Local features of one configuration, appended to `out`: the variant
/// one-hot, then each knob as its encoding says (value / scale, log₂(value) /
/// scale, or a one-hot over its values), in knob order.
pub fn push_local(model: &Model, config: usize, out: &mut Vec<f32>) {
    let c = &model.configs[config];
    out.extend((0..model.variants.len()).map(|v| if v == c.variant { 1.0 } else { 0.0 }));
    for (knob, &level) in model.knobs.iter().zip(&c.levels) {
        let value = || knob.levels[level as usize].value.as_f64().unwrap_or(0.0);
        match knob.encoding {
            KnobEncoding::Linear { scale } => out.push((value() / scale) as f32),
            KnobEncoding::Log2 { scale } => out.push((value().log2() / scale) as f32),
            KnobEncoding::OneHot => out.extend(
                (0..knob.levels.len()).map(|l| if l == level as usize { 1.0 } else { 0.0 }),
            ),
        }
    }
}

/// Names of a model's local features, parallel to [`push_local`]'s output: the
/// layout a trained predictor expects, recorded in bundles and checked on load.
pub fn local_names(model: &Model) -> Vec<String> {
    let mut names: Vec<String> = model
        .variants
        .iter()
        .map(|v| format!("variant={}", v.name))
        .collect();
    for knob in &model.knobs {
        let scaled = |inner: String, scale: f64| {
            if scale == 1.0 {
                inner
            } else {
                format!("{inner}/{scale}")
            }
        };
        match knob.encoding {
            KnobEncoding::Linear { scale } => names.push(scaled(knob.name.clone(), scale)),
            KnobEncoding::Log2 { scale } => {
                names.push(scaled(format!("log2({})", knob.name), scale))
            }
            KnobEncoding::OneHot => names.extend(
                knob.levels
                    .iter()
                    .map(|l| format!("{}={}", knob.name, l.value)),
            ),
        }
    }
    names
}

/// Names of the state features, parallel to [`push_state`]'s output.
pub const STATE_NAMES: [&str; STATE_FEATURES] = [
    "workload=low",
    "workload=medium",
    "workload=high",
    "workload=burst",
    "vram_used/card_vram",
    "utilization",
];

/// Names of model i's full input row.
pub fn input_names(model: &Model) -> Vec<String> {
    let mut names = local_names(model);
    names.extend(STATE_NAMES.iter().map(|s| s.to_string()));
    names
}

/// State features appended to `out`.
pub fn push_state(problem: &Problem, state: &GpuState, out: &mut Vec<f32>) {
    let w = state.workload.ordinal();
    out.extend((0..4).map(|i| if i == w { 1.0 } else { 0.0 }));
    out.push((state.vram_used_mib / f64::from(problem.card.vram_mib.max(1))) as f32);
    out.push(state.utilization as f32);
}

/// Which configurations a predictor sees.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Own configuration + field (the MeanField surrogate: what the scheduler serves).
    #[default]
    #[serde(rename = "meanfield")]
    MeanField,
    /// Every model's configuration + field (the Joint-MLP baseline: its input
    /// grows with N, so it is trained and scored, never served).
    Joint,
}

impl Layout {
    pub const ALL: [Layout; 2] = [Layout::MeanField, Layout::Joint];

    /// The layout's name, as bundles and `--model` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Layout::MeanField => "meanfield",
            Layout::Joint => "joint",
        }
    }

    pub fn is_meanfield(&self) -> bool {
        *self == Layout::MeanField
    }
}

/// Names of model `i`'s input row under `layout` and `field`: the layout a
/// bundle records and is checked against. The joint layout names every
/// model's local features, prefixed with the model.
pub fn layout_names(
    problem: &Problem,
    i: usize,
    layout: Layout,
    field: FieldFeatures,
) -> Vec<String> {
    match layout {
        Layout::MeanField => input_names_with(&problem.models[i], field),
        Layout::Joint => {
            let mut names: Vec<String> = problem
                .models
                .iter()
                .flat_map(|m| {
                    local_names(m)
                        .into_iter()
                        .map(move |n| format!("{}.{n}", m.name))
                })
                .collect();
            names.extend(STATE_NAMES.iter().map(|s| s.to_string()));
            names.extend(field.names_after_state());
            names
        }
    }
}

/// Which field features follow the local ones.
///
/// - [`FieldFeatures::Observed`]: the aggregate state alone (the published
///   design; every bundle before this field existed).
/// - [`FieldFeatures::CoRunnerSolo`]: the state, then, summed over the
///   co-runners, their *solo* profiles (the utilisation and the VRAM fraction
///   the profile's solo rows measured for each co-runner's configuration): what
///   the co-runners are, not only how busy the card is, with an input size that
///   does not grow with N.
/// - [`FieldFeatures::CoRunnerFactors`]: the state, then, summed over the
///   co-runners, their *learnt factors*: per configuration, the log-slowdown it
///   inflicts on an average co-runner and [`FACTOR_RANK`] interaction factors,
///   fitted on the training rows' co-location throughputs (a low-rank pair
///   model, `log s = μᵢ + aᵢ + Σⱼ (bⱼ + uᵢ·vⱼ)`, whose victim side the net
///   learns from the own configuration). Unlike the solo profiles they come
///   from co-location rows, so a held-out score must learn them from its
///   training rows only ([`FieldFeatures::is_learnt`]).
/// - [`FieldFeatures::Contention`]: the state, then the measured contention
///   reading ([`GpuState::contention`]: the memory controller's busy share on a
///   card, the servers' run-queue wait share on a CPU host): what the SM
///   share cannot show. Observed like the state, so under the candidate-aware
///   field every candidate sees the contention measured now.
/// - [`FieldFeatures::ContentionFactors`]: both: the state, the contention
///   reading, then the co-runners' learnt factors (on the rig the reading
///   carried what the factors did not, and the other way round).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum FieldFeatures {
    #[default]
    Observed,
    CoRunnerSolo,
    CoRunnerFactors,
    Contention,
    #[serde(rename = "contention+co-runner-factors")]
    ContentionFactors,
}

impl FieldFeatures {
    pub const ALL: [FieldFeatures; 5] = [
        FieldFeatures::Observed,
        FieldFeatures::CoRunnerSolo,
        FieldFeatures::CoRunnerFactors,
        FieldFeatures::Contention,
        FieldFeatures::ContentionFactors,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FieldFeatures::Observed => "observed",
            FieldFeatures::CoRunnerSolo => "co-runner-solo",
            FieldFeatures::CoRunnerFactors => "co-runner-factors",
            FieldFeatures::Contention => "contention",
            FieldFeatures::ContentionFactors => "contention+co-runner-factors",
        }
    }

    pub fn is_observed(&self) -> bool {
        *self == FieldFeatures::Observed
    }

    /// Whether the co-runner features are learnt from co-location rows (and so
    /// from a training set's rows only), not read from solo rows.
    pub fn is_learnt(&self) -> bool {
        matches!(
            self,
            FieldFeatures::CoRunnerFactors | FieldFeatures::ContentionFactors
        )
    }

    /// Names of the co-runner features that follow the state, parallel to
    /// [`push_corunner_sums`]' output for this field.
    pub fn corunner_names(self) -> &'static [&'static str] {
        match self {
            FieldFeatures::Observed | FieldFeatures::Contention => &[],
            FieldFeatures::CoRunnerSolo => &SOLO_NAMES,
            FieldFeatures::CoRunnerFactors | FieldFeatures::ContentionFactors => &FACTOR_NAMES,
        }
    }

    /// Whether the contention reading follows the state.
    pub fn uses_contention(self) -> bool {
        matches!(
            self,
            FieldFeatures::Contention | FieldFeatures::ContentionFactors
        )
    }

    /// Whether the field needs per-configuration co-runner tables (solo
    /// profiles or learnt factors).
    pub fn has_corunner_tables(self) -> bool {
        !self.corunner_names().is_empty()
    }

    /// Names of the inputs after the state: the contention reading, then the
    /// co-runner sums.
    pub fn names_after_state(self) -> Vec<String> {
        self.uses_contention()
            .then_some(CONTENTION_NAME)
            .into_iter()
            .chain(self.corunner_names().iter().copied())
            .map(str::to_string)
            .collect()
    }

    /// Inputs after the local features.
    pub fn width(self) -> usize {
        STATE_FEATURES + usize::from(self.uses_contention()) + self.corunner_names().len()
    }
}

impl std::fmt::Display for FieldFeatures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Name of the contention field's feature.
const CONTENTION_NAME: &str = "contention";

/// Names of the co-runner-solo field's features.
const SOLO_NAMES: [&str; 2] = [
    "corunners.solo_utilization",
    "corunners.solo_vram/card_vram",
];

/// Interaction factors per configuration in the co-runner-factors field.
pub const FACTOR_RANK: usize = 2;

/// Names of the co-runner-factors field's features: the inflicted
/// log-slowdown, then the interaction factors.
const FACTOR_NAMES: [&str; FACTOR_RANK + 1] = [
    "corunners.inflicted_log_slowdown",
    "corunners.factor_1",
    "corunners.factor_2",
];

/// Per model, per configuration of its grid: the numbers that configuration
/// contributes to its co-runners' inputs (a field's [`FieldFeatures::corunner_names`]),
/// summed over the co-runners by [`push_corunner_sums`].
pub type CorunnerTables = Vec<Vec<Vec<f64>>>;

/// One configuration measured alone: what it demands of the card by itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SoloPoint {
    pub utilization: f64,
    /// VRAM used / card VRAM.
    pub vram_fraction: f64,
}

/// Per model, per configuration of its grid: its solo profile. Configurations
/// never measured alone borrow the nearest measured one (as the relative
/// target's solo throughput does, `target::fill_solo`).
pub type SoloProfiles = Vec<Vec<SoloPoint>>;

/// The solo profiles of every model from a profile's solo rows (the mean over a
/// configuration's rows); `None` with the first model that has none.
pub fn solo_profiles(problem: &Problem, profile: &Profile) -> Result<SoloProfiles, String> {
    let card = f64::from(problem.card.vram_mib.max(1));
    problem
        .models
        .iter()
        .enumerate()
        .map(|(i, model)| {
            let mut sums = vec![(0.0, 0.0, 0u32); model.grid_size()];
            for row in profile.solo.iter().filter(|r| r.model == i) {
                if let Some(s) = sums.get_mut(row.config as usize) {
                    s.0 += row.state.utilization;
                    s.1 += row.state.vram_used_mib / card;
                    s.2 += 1;
                }
            }
            let mean = |pick: fn(&(f64, f64, u32)) -> f64| -> Vec<Option<f64>> {
                sums.iter()
                    .map(|s| (s.2 > 0).then(|| pick(s) / f64::from(s.2)))
                    .collect()
            };
            let fill =
                |values: Vec<Option<f64>>| crate::target::fill_solo(model, &values).map(|(v, _)| v);
            match (fill(mean(|s| s.0)), fill(mean(|s| s.1))) {
                (Some(u), Some(v)) => Ok(u
                    .into_iter()
                    .zip(v)
                    .map(|(utilization, vram_fraction)| SoloPoint {
                        utilization,
                        vram_fraction,
                    })
                    .collect()),
                _ => Err(format!(
                    "model '{}' has no solo rows: the {} field needs every model measured alone \
                     (rows where only it runs; docs/profile-format.md)",
                    model.name,
                    FieldFeatures::CoRunnerSolo
                )),
            }
        })
        .collect()
}

/// The co-runner-solo field's tables: each configuration's solo utilisation
/// and VRAM fraction.
pub fn solo_tables(solo: &SoloProfiles) -> CorunnerTables {
    solo.iter()
        .map(|points| {
            points
                .iter()
                .map(|p| vec![p.utilization, p.vram_fraction])
                .collect()
        })
        .collect()
}

/// The co-runner features of model `i` in joint configuration `joint`,
/// appended to `out`: `width` numbers, each the sum over the co-runners of
/// what their configurations contribute in `tables`.
pub fn push_corunner_sums(
    tables: &CorunnerTables,
    width: usize,
    i: usize,
    joint: &[u32],
    out: &mut Vec<f32>,
) {
    let mut sums = vec![0.0f64; width];
    for (j, &c) in joint.iter().enumerate() {
        if j != i
            && let Some(p) = tables.get(j).and_then(|t| t.get(c as usize))
        {
            for (s, v) in sums.iter_mut().zip(p) {
                *s += v;
            }
        }
    }
    out.extend(sums.into_iter().map(|s| s as f32));
}

/// Names of model i's full input row under `field`.
pub fn input_names_with(model: &Model, field: FieldFeatures) -> Vec<String> {
    let mut names = input_names(model);
    names.extend(field.names_after_state());
    names
}

/// The state features under `field` appended to `out`: [`push_state`]'s, then
/// the contention reading where the field has it (an error when the state has
/// none: a row or a reading without it cannot be this field's input).
pub fn push_field_state(
    problem: &Problem,
    field: FieldFeatures,
    state: &GpuState,
    out: &mut Vec<f32>,
) -> Result<(), String> {
    push_state(problem, state, out);
    out.extend(contention_input(field, state)?);
    Ok(())
}

/// The contention input `field` puts after the state: none for a field
/// without it, an error when the field has it and the state has no reading.
pub fn contention_input(field: FieldFeatures, state: &GpuState) -> Result<Option<f32>, String> {
    if !field.uses_contention() {
        return Ok(None);
    }
    state.contention.map(|c| Some(c as f32)).ok_or_else(|| {
        "the contention field needs a contention reading, and this state has none \
         (a sampler or profile without it: docs/model-bundle.md)"
            .to_string()
    })
}

/// The local feature table of one model: `grid_size × local_len` values, row-major.
pub fn local_table(model: &Model) -> Vec<f32> {
    let mut out = Vec::with_capacity(model.grid_size() * local_len(model));
    for c in 0..model.grid_size() {
        push_local(model, c, &mut out);
    }
    out
}

/// The full input row of model `i` in configuration `config` under `state`.
pub fn input_row(problem: &Problem, i: usize, config: usize, state: &GpuState) -> Vec<f32> {
    let model = &problem.models[i];
    let mut row = Vec::with_capacity(input_len(model));
    push_local(model, config, &mut row);
    push_state(problem, state, &mut row);
    row
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::WorkloadLevel;
    use mfsched_core::load_scenario;

    /// The CLI accepts these names; bundles record the serde ones: one spelling.
    #[test]
    fn layout_and_field_names_are_the_serde_names() {
        for layout in Layout::ALL {
            let recorded = serde_json::to_value(layout).expect("serialises");
            assert_eq!(recorded, serde_json::json!(layout.name()));
        }
        for field in FieldFeatures::ALL {
            let recorded = serde_json::to_value(field).expect("serialises");
            assert_eq!(recorded, serde_json::json!(field.name()));
        }
    }

    #[test]
    fn names_match_the_rows_they_describe() {
        let s = load_scenario("paper-n5").expect("bundled");
        let state = GpuState {
            workload: WorkloadLevel::High,
            vram_used_mib: 12288.0,
            utilization: 0.7,
            contention: None,
        };
        for (i, m) in s.problem.models.iter().enumerate() {
            let names = input_names(m);
            assert_eq!(names.len(), input_len(m), "{}", m.name);
            let row = input_row(&s.problem, i, m.grid_size() - 1, &state);
            assert_eq!(row.len(), names.len());
            // The last configuration has the last variant and the largest knob values.
            let last_variant = format!("variant={}", m.variants.last().expect("variants").name);
            let at = names
                .iter()
                .position(|n| *n == last_variant)
                .expect("named");
            assert_eq!(row[at], 1.0);
            assert_eq!(row[names.len() - 4], 1.0, "workload=high");
            assert_eq!(row[names.len() - 2], 0.5, "vram fraction");
            let with = input_names_with(m, FieldFeatures::CoRunnerSolo);
            assert_eq!(
                with.len(),
                local_len(m) + FieldFeatures::CoRunnerSolo.width()
            );
            assert_eq!(with[..names.len()], names[..], "the observed layout first");
        }
    }

    #[test]
    fn corunner_features_sum_the_others_solo_profiles() {
        let p = |utilization, vram_fraction| SoloPoint {
            utilization,
            vram_fraction,
        };
        let solo = solo_tables(&vec![
            vec![p(0.1, 0.01), p(0.2, 0.02)],
            vec![p(0.3, 0.03), p(0.4, 0.04)],
            vec![p(0.5, 0.05), p(0.6, 0.06)],
        ]);
        let width = FieldFeatures::CoRunnerSolo.corunner_names().len();
        let mut out = Vec::new();
        push_corunner_sums(&solo, width, 0, &[1, 0, 1], &mut out);
        assert!(
            (out[0] - 0.9).abs() < 1e-6 && (out[1] - 0.09).abs() < 1e-6,
            "{out:?}"
        );
        out.clear();
        push_corunner_sums(&solo, width, 2, &[1, 1, 0], &mut out);
        assert!(
            (out[0] - 0.6).abs() < 1e-6,
            "own configuration left out: {out:?}"
        );
    }
}
