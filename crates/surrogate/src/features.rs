//! Surrogate input features.
//!
//! A predictor for model i sees `[local features of its configuration | state features]`.
//! Local features depend only on the model and its configuration, so they are
//! precomputed per local configuration (a table of Σᵢ kᵢ rows) and, for joint
//! candidates, looked up from the mixed-radix digits (the GPU shader does this on
//! the device).

use mfsched_core::domain::{GpuState, Knob, KnobEncoding, Model, Problem};

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
    use mfsched_core::domain::WorkloadLevel;
    use mfsched_core::scenario;

    #[test]
    fn names_match_the_rows_they_describe() {
        let s = scenario::load("paper-n5").expect("bundled");
        let state = GpuState {
            workload: WorkloadLevel::High,
            vram_used_mib: 12288.0,
            utilization: 0.7,
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
        }
    }
}
