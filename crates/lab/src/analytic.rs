//! A closed-form throughput model: a stand-in predictor for tests, and for
//! `decide`/`bench` until a trained MeanField bundle is available.
//!
//! It is neither the surrogate nor the simulator: a few lines of arithmetic
//! with the right shapes, read from the knobs a model declares, so policies
//! have a landscape with real trade-offs to search. Faster with smaller
//! weights; a `concurrency` knob batches (throughput ∝ c^0.75) and marks a
//! memory-bound model (tokens/s ∝ 1/weights); an `image_size` knob costs
//! pixels (∝ size^-1.6) and marks a compute-bound one, more sensitive to the
//! field; `skip_rate` skips work; any other knob's levels are read as more
//! work in grid order (its last level halves throughput). Everyone is slower
//! under a heavier field.

use crate::sim::physics::{CONCURRENCY, IMAGE_SIZE, SKIP_RATE};
use mfsched_core::{GpuState, InSpace, JointSpace, Problem};
use mfsched_core::{PredictError, Predictor};

/// The closed-form model of one problem's models and card. Every prediction is
/// computed, none cached, so the batched path costs per row as a real
/// predictor would.
#[derive(Debug, Clone)]
pub struct AnalyticPredictor {
    problem: Problem,
    space: JointSpace,
}

impl AnalyticPredictor {
    /// The model of `problem`'s models on its card (its floors, weights and
    /// running configuration play no part).
    pub fn new(problem: &Problem) -> Self {
        Self {
            problem: problem.clone(),
            space: problem.space(),
        }
    }

    /// Throughput of model `i` in local configuration `config` under `state`.
    pub fn throughput(problem: &Problem, i: usize, config: usize, state: &GpuState) -> f32 {
        let model = &problem.models[i];
        let c = &model.configs[config];
        let weights = f64::from(model.variants[c.variant].weights_mib);
        let number = |name: &str| model.number(config, name);
        let skip = number(SKIP_RATE).unwrap_or(0.0);
        let workload = state.workload.ordinal() as f64;
        let pressure =
            (state.vram_used_mib / f64::from(problem.card.vram_mib.max(1))).clamp(0.0, 1.0);
        let util = state.utilization.clamp(0.0, 1.0);
        let (alone, sensitivity) = if let Some(image) = number(IMAGE_SIZE) {
            let fps = 1200.0 / (1.0 + weights / 8.0) * (640.0 / image).powf(1.6);
            (fps / (1.0 - 0.9 * skip), 1.6)
        } else {
            // Decode streams the weights once per token: tokens/s ∝ 1/weights.
            let single = 600_000.0 / weights.max(1.0);
            let concurrency = number(CONCURRENCY).unwrap_or(1.0).powf(0.75);
            (single * concurrency / (1.0 - 0.7 * skip), 1.0)
        };
        let work: f64 = model
            .knobs
            .iter()
            .enumerate()
            .filter(|(_, k)| ![SKIP_RATE, IMAGE_SIZE, CONCURRENCY].contains(&k.name.as_str()))
            .map(|(k, knob)| {
                let level = c.levels[k] as f64;
                let scale = (knob.levels.len().max(2) - 1) as f64;
                1.0 + level / scale
            })
            .product();
        let alone = alone / work;
        let slowdown = sensitivity * (0.18 * util + 0.05 * workload + 0.06 * pressure);
        (alone * (1.0 - slowdown).max(0.05)) as f32
    }
}

impl Predictor for AnalyticPredictor {
    fn joint_size(&self) -> u64 {
        self.space.size()
    }

    fn predict_table(&self, state: &GpuState, _: &[u32]) -> Result<Vec<f32>, PredictError> {
        let problem = &self.problem;
        let mut out = Vec::new();
        for (i, m) in problem.models.iter().enumerate() {
            out.extend((0..m.grid_size()).map(|c| Self::throughput(problem, i, c, state)));
        }
        Ok(out)
    }

    fn predict_in_space(
        &self,
        state: &GpuState,
        _running: &[u32],
        candidates: InSpace<'_>,
    ) -> Result<Vec<f32>, PredictError> {
        let n = self.problem.models.len();
        let mut out = Vec::with_capacity(candidates.len() * n);
        for &c in candidates.iter() {
            out.extend((0..n).map(|i| {
                let local = self.space.digit(c, i) as usize;
                Self::throughput(&self.problem, i, local, state)
            }));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::WorkloadLevel;

    #[test]
    fn table_and_joint_paths_agree_and_contention_slows_everyone() {
        let p = mfsched_core::load_scenario("paper-n3")
            .expect("bundled")
            .problem;
        let calm = GpuState {
            workload: WorkloadLevel::Low,
            vram_used_mib: 4000.0,
            utilization: 0.2,
            contention: None,
        };
        let busy = GpuState {
            workload: WorkloadLevel::Burst,
            vram_used_mib: 20000.0,
            utilization: 0.95,
            contention: None,
        };
        let analytic = AnalyticPredictor::new(&p);
        let table = analytic.predict_table(&calm, &p.current).expect("predicts");
        let offsets = mfsched_core::table_offsets(&p);
        let space = p.space();
        for idx in [0, 7, space.size() - 1] {
            let tuple = space.tuple(idx).expect("in range");
            let joint = analytic
                .predict_joint(&calm, &p.current, &[idx])
                .expect("predicts");
            for (i, &l) in tuple.iter().enumerate() {
                assert_eq!(joint[i], table[offsets[i] + l as usize]);
            }
        }
        let slow = analytic.predict_table(&busy, &p.current).expect("predicts");
        assert!(table.iter().zip(&slow).all(|(a, b)| b < a && *b > 0.0));
    }
}
