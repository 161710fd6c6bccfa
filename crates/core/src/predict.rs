//! The contract between throughput predictors (the MeanField surrogate, its
//! baselines) and their users (the plugin host, evaluation).

use crate::domain::{GpuState, Problem};
use std::sync::Arc;

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

/// Why a predictor gave no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PredictError {
    /// The inference backend failed (and had no fallback left); the source is
    /// the backend's own error.
    #[error("inference failed")]
    Backend(#[source] Arc<dyn std::error::Error + Send + Sync + 'static>),
    /// A candidate index outside the joint space: the caller's mistake (for a
    /// policy, a misuse of the host interface), refused before any inference.
    #[error("candidate {candidate} is not a joint configuration (the space has {size})")]
    OutOfRange { candidate: u64, size: u64 },
    /// The call does not fit the predictor (a field list of the wrong length,
    /// a table that is not the predictor's).
    #[error("the call does not fit the predictor: {0}")]
    Mismatch(String),
}

/// Two backend failures are equal when they read the same (their sources are
/// opaque errors); the other variants compare field by field.
impl PartialEq for PredictError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (PredictError::Backend(a), PredictError::Backend(b)) => {
                crate::text::error_chain(a.as_ref()) == crate::text::error_chain(b.as_ref())
            }
            (
                PredictError::OutOfRange { candidate, size },
                PredictError::OutOfRange {
                    candidate: c,
                    size: s,
                },
            ) => candidate == c && size == s,
            (PredictError::Mismatch(a), PredictError::Mismatch(b)) => a == b,
            _ => false,
        }
    }
}

impl PredictError {
    /// A backend failure with `source` as its cause.
    pub fn backend(source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        PredictError::Backend(Arc::from(source.into()))
    }
}

/// Joint candidate indices checked to lie inside a joint space: the one range
/// check of the predict path. Predictors receive candidates only in this form,
/// so none of them checks (or mis-decodes) an index of its own.
#[derive(Debug, Clone, Copy)]
pub struct InSpace<'a> {
    indices: &'a [u64],
}

impl<'a> InSpace<'a> {
    /// `indices` when every one is below `size`, else the first that is not.
    pub fn check(size: u64, indices: &'a [u64]) -> Result<Self, PredictError> {
        match indices.iter().find(|&&c| c >= size) {
            Some(&candidate) => Err(PredictError::OutOfRange { candidate, size }),
            None => Ok(Self { indices }),
        }
    }

    /// Consecutive slices of at most `len` candidates (slices of checked
    /// candidates are checked).
    pub fn chunks(self, len: usize) -> impl Iterator<Item = InSpace<'a>> {
        self.indices.chunks(len).map(|indices| InSpace { indices })
    }

    /// The candidates at `positions` (indices into these), in that order,
    /// written to `into`: a selection of checked candidates is checked.
    pub fn select<'b>(&self, positions: &[usize], into: &'b mut Vec<u64>) -> InSpace<'b> {
        into.clear();
        into.extend(positions.iter().map(|&k| self.indices[k]));
        InSpace { indices: into }
    }
}

impl std::ops::Deref for InSpace<'_> {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        self.indices
    }
}

/// Predicts each model's throughput, in the model's own unit (tokens/s, FPS).
///
/// A predictor is bound to one problem's models when it is built; a call
/// varies only the state, the running configuration and the candidates.
pub trait Predictor: Send + Sync {
    /// The size of the joint space the predictor was built for: candidates are
    /// the indices below it.
    fn joint_size(&self) -> u64;

    /// Every local configuration of every model under one state: a flat buffer,
    /// model-major (model 0's grid first, in grid order), Σᵢ kᵢ values.
    /// `running` is the configuration that ran while `state` was observed: a
    /// field that carries what the co-runners are (a bundle's co-runner
    /// features) takes each model's co-runners from it; the aggregate state
    /// alone does not need it.
    ///
    /// With the field held fixed (the published mode) this is all a decision needs.
    fn predict_table(&self, state: &GpuState, running: &[u32]) -> Result<Vec<f32>, PredictError>;

    /// N predictions per joint candidate, row-major: `out[c * N + i]` is model
    /// i's throughput in candidate c. `running` is the configuration that ran
    /// while `state` was observed: the candidate-aware field anchors each
    /// candidate's field on it; under the observed field it is not needed.
    ///
    /// Implement this one; call [`Predictor::predict_joint`], which checks the
    /// candidates first.
    fn predict_in_space(
        &self,
        state: &GpuState,
        running: &[u32],
        candidates: InSpace<'_>,
    ) -> Result<Vec<f32>, PredictError>;

    /// [`Predictor::predict_in_space`] of `candidates` once [`InSpace::check`]
    /// has passed them: an index outside the joint space is
    /// [`PredictError::OutOfRange`] and nothing is predicted.
    fn predict_joint(
        &self,
        state: &GpuState,
        running: &[u32],
        candidates: &[u64],
    ) -> Result<Vec<f32>, PredictError> {
        let candidates = InSpace::check(self.joint_size(), candidates)?;
        self.predict_in_space(state, running, candidates)
    }

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
pub struct PerCandidate(pub Arc<dyn Predictor>);

impl std::fmt::Debug for PerCandidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PerCandidate")
    }
}

impl Predictor for PerCandidate {
    fn joint_size(&self) -> u64 {
        self.0.joint_size()
    }

    fn predict_table(&self, state: &GpuState, running: &[u32]) -> Result<Vec<f32>, PredictError> {
        self.0.predict_table(state, running)
    }

    fn predict_in_space(
        &self,
        state: &GpuState,
        running: &[u32],
        candidates: InSpace<'_>,
    ) -> Result<Vec<f32>, PredictError> {
        self.0.predict_in_space(state, running, candidates)
    }

    fn field(&self) -> Field {
        Field::CandidateAware
    }
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
                contention: None,
            };
            let table = predictor.predict_table(&state, &problem.current)?;
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
                contention: None,
            };
            let table = predictor.predict_table(&state, &problem.current)?;
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
    use super::{Field, GpuState, InSpace, PredictError, Predictor};
    use crate::domain::WorkloadLevel;
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

    /// A predictor that counts the rows it was asked for.
    struct Rows(std::sync::atomic::AtomicUsize);

    impl Predictor for Rows {
        fn joint_size(&self) -> u64 {
            10
        }
        fn predict_table(&self, _: &GpuState, _: &[u32]) -> Result<Vec<f32>, PredictError> {
            Ok(vec![1.0; 10])
        }
        fn predict_in_space(
            &self,
            _: &GpuState,
            _: &[u32],
            candidates: InSpace<'_>,
        ) -> Result<Vec<f32>, PredictError> {
            self.0
                .fetch_add(candidates.len(), std::sync::atomic::Ordering::Relaxed);
            Ok(vec![1.0; candidates.len()])
        }
    }

    /// The one range check: an index at or past the space's size is refused,
    /// naming it, before the predictor does any work.
    #[test]
    fn a_candidate_outside_the_space_is_refused_before_any_prediction() {
        assert!(InSpace::check(10, &[0, 9]).is_ok());
        let err = InSpace::check(10, &[3, 10, 11]).expect_err("10 is past the space");
        assert!(
            matches!(
                err,
                PredictError::OutOfRange {
                    candidate: 10,
                    size: 10
                }
            ),
            "{err}"
        );
        let rows = Rows(Default::default());
        let state = GpuState {
            workload: WorkloadLevel::Medium,
            vram_used_mib: 0.0,
            utilization: 0.5,
            contention: None,
        };
        assert!(rows.predict_joint(&state, &[], &[1, u64::MAX]).is_err());
        assert_eq!(rows.0.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(
            rows.predict_joint(&state, &[], &[1, 2])
                .expect("in range")
                .len(),
            2
        );
    }

    #[test]
    fn checked_chunks_cover_the_candidates_in_order() {
        let all: Vec<u64> = (0..7).collect();
        let checked = InSpace::check(7, &all).expect("in range");
        let chunks: Vec<Vec<u64>> = checked.chunks(3).map(|c| c.to_vec()).collect();
        assert_eq!(chunks, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
        let mut picked = Vec::new();
        assert_eq!(*checked.select(&[5, 0, 5], &mut picked), [5, 0, 5]);
    }
}
