//! The contract between throughput predictors (the MeanField surrogate, its
//! baselines) and their users (the plugin host, evaluation).

use crate::domain::{GpuState, Problem};

/// Which aggregate state (the "field") a candidate's predictions are made under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Field {
    /// The state observed now, for every candidate (the published design).
    #[default]
    Observed,
    /// Each candidate's own predicted state, solved to a fixed point
    /// (`surrogate::field`); only joint predictions carry it.
    CandidateAware,
}

impl Field {
    pub const ALL: [Field; 2] = [Field::Observed, Field::CandidateAware];

    /// The field's name, as `--field` spells it (serde's kebab-case name too).
    pub fn name(self) -> &'static str {
        match self {
            Field::Observed => "observed",
            Field::CandidateAware => "candidate-aware",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Field::Observed => "observed field",
            Field::CandidateAware => "candidate-aware field",
        }
    }
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a predictor gave no answer. Out-of-range candidates are not an error:
/// they get NaN rows (see [`nan_outside`]), so one bad index cannot sink a batch.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PredictError {
    /// The inference backend failed (and had no fallback left).
    #[error("inference failed: {0}")]
    Backend(String),
    /// The predictor does not fit the problem it was asked about.
    #[error("the predictor does not fit the problem: {0}")]
    Mismatch(String),
}

/// Predicts each model's throughput, in the model's own unit (tokens/s, FPS).
pub trait Predictor: Send + Sync {
    /// Every local configuration of every model under one state: a flat buffer,
    /// model-major (model 0's grid first, in grid order), Σᵢ kᵢ values.
    ///
    /// With the field held fixed (the published mode) this is all a decision needs.
    fn predict_table(&self, problem: &Problem, state: &GpuState) -> Result<Vec<f32>, PredictError>;

    /// N predictions per joint candidate (mixed-radix indices), row-major:
    /// `out[c * N + i]` is model i's throughput in candidate c.
    fn predict_joint(
        &self,
        problem: &Problem,
        state: &GpuState,
        candidates: &[u64],
    ) -> Result<Vec<f32>, PredictError>;

    /// The field joint predictions are made under. With [`Field::CandidateAware`]
    /// the table is only the observed field's, and exact predictions of a
    /// candidate come from `predict_joint`.
    fn field(&self) -> Field {
        Field::Observed
    }
}

/// A predictor's observed field served the per-candidate way: it reports
/// [`Field::CandidateAware`], so policies that follow the field send every
/// candidate through `predict_joint`, and answers exactly as the inner
/// predictor does (the same numbers as its table). Benchmarks and tests use it
/// to measure and check the joint-prediction path on the observed landscape;
/// it is never served as a field of its own.
pub struct PerCandidate(pub std::sync::Arc<dyn Predictor>);

impl std::fmt::Debug for PerCandidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PerCandidate")
    }
}

impl Predictor for PerCandidate {
    fn predict_table(&self, problem: &Problem, state: &GpuState) -> Result<Vec<f32>, PredictError> {
        self.0.predict_table(problem, state)
    }

    fn predict_joint(
        &self,
        problem: &Problem,
        state: &GpuState,
        candidates: &[u64],
    ) -> Result<Vec<f32>, PredictError> {
        self.0.predict_joint(problem, state, candidates)
    }

    fn field(&self) -> Field {
        Field::CandidateAware
    }
}

/// N predictions per candidate where `predict` sees only the candidates inside
/// a joint space of `size` (given their positions in `candidates`, in order);
/// the others get NaN rows. Callers validate indices first; this keeps a bad
/// one from decoding to wrong digits (or failing a whole device call).
pub fn nan_outside(
    size: u64,
    n: usize,
    candidates: &[u64],
    predict: impl FnOnce(&[usize]) -> Result<Vec<f32>, PredictError>,
) -> Result<Vec<f32>, PredictError> {
    let valid: Vec<usize> = (0..candidates.len())
        .filter(|&k| candidates[k] < size)
        .collect();
    let mut predicted = predict(&valid)?.into_iter();
    let mut out = Vec::with_capacity(candidates.len() * n);
    for &c in candidates {
        if c < size {
            out.extend(predicted.by_ref().take(n));
        } else {
            out.extend(std::iter::repeat_n(f32::NAN, n));
        }
    }
    Ok(out)
}

/// Offsets of each model's block in a `predict_table` buffer (length N + 1).
pub fn table_offsets(problem: &Problem) -> Vec<usize> {
    let mut offsets = Vec::with_capacity(problem.models.len() + 1);
    let mut acc = 0;
    offsets.push(0);
    for m in &problem.models {
        acc += m.grid_size();
        offsets.push(acc);
    }
    offsets
}

/// Per model, per variant: the range of a predictor's table over the four
/// workload regimes at the given utilisations, for the utility's per-variant
/// min–max normalisation when no profile supplies `Problem::throughput_ranges`.
pub fn predicted_ranges(
    predictor: &dyn Predictor,
    problem: &Problem,
    utilizations: &[f64],
) -> Result<Vec<Vec<crate::domain::ThroughputRange>>, PredictError> {
    let offsets = table_offsets(problem);
    let mut ranges: Vec<Vec<crate::domain::ThroughputRange>> = problem
        .models
        .iter()
        .map(|m| {
            vec![
                crate::domain::ThroughputRange {
                    min: f64::INFINITY,
                    max: f64::NEG_INFINITY,
                };
                m.variants.len()
            ]
        })
        .collect();
    for workload in crate::domain::WorkloadLevel::ALL {
        for &utilization in utilizations {
            let state = GpuState {
                workload,
                vram_used_mib: f64::from(problem.card.vram_mib) / 2.0,
                utilization,
            };
            let table = predictor.predict_table(problem, &state)?;
            for (i, m) in problem.models.iter().enumerate() {
                for (c, config) in m.configs.iter().enumerate() {
                    let t = f64::from(table[offsets[i] + c]);
                    let r = &mut ranges[i][config.variant];
                    r.min = r.min.min(t);
                    r.max = r.max.max(t);
                }
            }
        }
    }
    Ok(ranges)
}

/// Per model: the `q` quantile (e.g. 0.25 for P25) of a predictor's table over
/// the model's grid, the four workload regimes and the given utilisations; a
/// stand-in for floors from profiled throughput when no profile supplies them.
pub fn predicted_quantile_floors(
    predictor: &dyn Predictor,
    problem: &Problem,
    utilizations: &[f64],
    q: f64,
) -> Result<Vec<f64>, PredictError> {
    let offsets = table_offsets(problem);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); problem.models.len()];
    for workload in crate::domain::WorkloadLevel::ALL {
        for &utilization in utilizations {
            let state = GpuState {
                workload,
                vram_used_mib: f64::from(problem.card.vram_mib) / 2.0,
                utilization,
            };
            let table = predictor.predict_table(problem, &state)?;
            for (i, s) in samples.iter_mut().enumerate() {
                s.extend(
                    table[offsets[i]..offsets[i + 1]]
                        .iter()
                        .map(|&t| f64::from(t)),
                );
            }
        }
    }
    Ok(samples
        .into_iter()
        .map(|mut s| {
            let floor = crate::stats::interpolated(&mut s, q);
            if floor.is_nan() { 0.0 } else { floor }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::Field;
    use serde::Deserialize;
    use serde::de::IntoDeserializer;
    use serde::de::value::{Error, StrDeserializer};

    /// `--field` and serde spell a field alike.
    #[test]
    fn field_names_are_the_serde_names() {
        for field in Field::ALL {
            let name: StrDeserializer<'_, Error> = field.name().into_deserializer();
            assert_eq!(Field::deserialize(name).ok(), Some(field));
        }
    }
}
