//! Synthetic predictors: seeded random weights with the real layer shapes
//! (input → 64 → 32 → 1) and each model's real input width. They are untrained —
//! their outputs mean nothing — and exist so backend agreement and inference
//! speed can be measured without (or before) trained bundles.

use crate::features::input_len;
use crate::net::{DenseLayer, FoldedNet};
use mfsched_core::Problem;
use mfsched_rng::Rng;

/// Hidden layer widths of the published MeanField predictor.
pub const HIDDEN_WIDTHS: [usize; 2] = [64, 32];

/// One synthetic predictor per model of `problem`; the same seed gives the same weights.
pub fn synthetic_nets(problem: &Problem, seed: u64) -> Vec<FoldedNet> {
    synthetic_nets_with(problem, seed, &HIDDEN_WIDTHS)
}

/// [`synthetic_nets`] with other hidden layer widths.
pub fn synthetic_nets_with(problem: &Problem, seed: u64, hidden: &[usize]) -> Vec<FoldedNet> {
    problem
        .models
        .iter()
        .enumerate()
        .map(|(i, model)| {
            let mut rng = Rng::derive(seed, i as u64);
            let mut widths = vec![input_len(model)];
            widths.extend_from_slice(hidden);
            widths.push(1);
            let layers = widths
                .windows(2)
                .map(|w| random_layer(w[0], w[1], &mut rng))
                .collect();
            // A plausible throughput range; the values mean nothing either way.
            FoldedNet {
                layers,
                out_offset: 5.0,
                out_scale: 400.0,
            }
        })
        .collect()
}

/// He-initialised weights (variance 2 / fan-in) keep ReLU activations, and so the
/// sigmoid's argument, in a range where outputs vary rather than saturate.
fn random_layer(inputs: usize, outputs: usize, rng: &mut Rng) -> DenseLayer {
    let std = (2.0 / inputs as f64).sqrt();
    DenseLayer {
        inputs,
        outputs,
        weights: (0..inputs * outputs)
            .map(|_| (rng.normal() * std) as f32)
            .collect(),
        bias: (0..outputs).map(|_| (rng.normal() * 0.1) as f32).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::load_scenario;

    #[test]
    fn same_seed_same_nets_with_real_shapes() {
        let problem = load_scenario("paper-n5").expect("bundled").problem;
        let a = synthetic_nets(&problem, 7);
        assert_eq!(a, synthetic_nets(&problem, 7));
        assert_ne!(a, synthetic_nets(&problem, 8));
        for (net, model) in a.iter().zip(&problem.models) {
            net.validate().expect("well-formed");
            assert_eq!(net.input_len(), input_len(model));
            let widths: Vec<usize> = net.layers.iter().map(|l| l.outputs).collect();
            assert_eq!(widths, vec![64, 32, 1]);
        }
    }
}
