//! Backend agreement: how far the wgpu backend's predictions are from the CPU
//! reference, over the table and over every VRAM-feasible joint candidate.
//!
//! The gate is on the normalised output σ ∈ [0, 1] (the sigmoid before the map to
//! throughput, y = out_offset + out_scale · σ), so one tolerance fits every model
//! whatever its throughput unit: |Δσ| = |Δy| / out_scale. Throughput-unit and
//! relative differences are reported beside it.

use crate::cpu::CpuBackend;
use crate::gpu::{AdapterSummary, GpuBackend};
use crate::net::FoldedNet;
use anyhow::{Result, bail};
use mfsched_core::table_offsets;
use mfsched_core::{GpuState, Problem, WorkloadLevel};

/// Largest accepted |Δσ| between backends.
pub const TOLERANCE: f64 = 1e-5;

/// The largest differences between two backends over a set of rows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Agreement {
    pub rows: usize,
    /// Largest |Δσ| = |Δy| / out_scale: the gated quantity.
    pub max_normalised: f64,
    /// Largest |Δy|, in the models' throughput units.
    pub max_absolute: f64,
    /// Largest |Δy| / |y_reference| (rows with y_reference = 0 excluded).
    pub max_relative: f64,
}

impl Agreement {
    /// Compares `candidate` to `reference` row by row; `scale(r)` is the
    /// out_scale of the model that row r belongs to.
    pub fn measure(
        reference: &[f32],
        candidate: &[f32],
        scale: impl Fn(usize) -> f32,
    ) -> Result<Self> {
        if reference.len() != candidate.len() {
            bail!(
                "the backends returned {} and {} rows for the same request",
                reference.len(),
                candidate.len()
            );
        }
        let mut a = Agreement {
            rows: reference.len(),
            ..Default::default()
        };
        for (r, (&want, &got)) in reference.iter().zip(candidate).enumerate() {
            let diff = (f64::from(got) - f64::from(want)).abs();
            // NaN must fail the gate: `max` would silently drop it.
            let normalised = diff / f64::from(scale(r)).abs();
            a.max_normalised = if normalised.is_nan() {
                f64::INFINITY
            } else {
                a.max_normalised.max(normalised)
            };
            a.max_absolute = a
                .max_absolute
                .max(if diff.is_nan() { f64::INFINITY } else { diff });
            if want != 0.0 {
                a.max_relative = a.max_relative.max(diff / f64::from(want).abs());
            }
        }
        Ok(a)
    }

    /// The worse of two measurements, over both row sets.
    pub fn merge(self, other: Self) -> Self {
        Self {
            rows: self.rows + other.rows,
            max_normalised: self.max_normalised.max(other.max_normalised),
            max_absolute: self.max_absolute.max(other.max_absolute),
            max_relative: self.max_relative.max(other.max_relative),
        }
    }

    pub fn passes(&self) -> bool {
        self.max_normalised <= TOLERANCE
    }
}

/// The states the table is compared under: one per workload level, with memory
/// and utilisation rising with the load.
pub fn check_states(problem: &Problem) -> Vec<GpuState> {
    let vram = f64::from(problem.card.vram_mib);
    WorkloadLevel::ALL
        .iter()
        .enumerate()
        .map(|(i, &workload)| GpuState {
            workload,
            vram_used_mib: vram * (0.3 + 0.2 * i as f64),
            utilization: 0.25 + 0.2 * i as f64,
            contention: None,
        })
        .collect()
}

/// The outcome of a backend check.
#[derive(Debug, Clone)]
pub struct BackendCheck {
    pub adapter: AdapterSummary,
    /// The table under every state of [`check_states`].
    pub table: Agreement,
    pub table_states: usize,
    /// The joint candidates (N rows each) under the high-load state.
    pub joint: Agreement,
    pub candidates: usize,
}

impl BackendCheck {
    pub fn passes(&self) -> bool {
        self.table.passes() && self.joint.passes()
    }
}

/// Runs the table and `candidates` on both backends and measures their agreement.
pub fn check_backends(
    problem: &Problem,
    nets: &[FoldedNet],
    candidates: &[u64],
) -> Result<BackendCheck> {
    let cpu = CpuBackend::new(problem, nets)?;
    let gpu = GpuBackend::new(problem, nets)?;
    let n = problem.models.len();
    let offsets = table_offsets(problem);
    let table_scale = |r: usize| {
        let model = offsets.partition_point(|&o| o <= r) - 1;
        nets[model].out_scale
    };
    let states = check_states(problem);
    let mut table = Agreement::default();
    for state in &states {
        let m = Agreement::measure(
            &cpu.predict_table(state),
            &gpu.predict_table(state)?,
            table_scale,
        )?;
        table = table.merge(m);
    }
    let high = states[WorkloadLevel::High.ordinal()];
    let joint = Agreement::measure(
        &cpu.predict_joint(&high, candidates)?,
        &gpu.predict_joint(&high, candidates)?,
        |r| nets[r % n].out_scale,
    )?;
    Ok(BackendCheck {
        adapter: gpu.adapter().clone(),
        table,
        table_states: states.len(),
        joint,
        candidates: candidates.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_normalised_by_the_row_scale() {
        let a = Agreement::measure(&[100.0, 10.0], &[100.5, 10.0], |r| [1000.0, 1.0][r])
            .expect("same length");
        assert_eq!(a.rows, 2);
        assert!((a.max_absolute - 0.5).abs() < 1e-9);
        assert!((a.max_normalised - 0.0005).abs() < 1e-9);
        assert!((a.max_relative - 0.005).abs() < 1e-9);
        assert!(!a.passes());
    }

    #[test]
    fn nan_fails_and_length_mismatch_is_an_error() {
        let a = Agreement::measure(&[1.0], &[f32::NAN], |_| 1.0).expect("same length");
        assert!(!a.passes());
        assert!(Agreement::measure(&[1.0], &[], |_| 1.0).is_err());
    }
}
