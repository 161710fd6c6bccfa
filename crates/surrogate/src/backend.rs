//! Choosing where MeanField inference runs, and a [`Predictor`] over the choice.
//!
//! The CPU path is always built (it is cheap and it is the fallback). The GPU
//! path is used when asked for, or automatically when a hardware adapter is
//! present: a software adapter (lavapipe, llvmpipe; `DeviceType::Cpu`) is slower
//! than the CPU backend, so the automatic choice skips it.

use crate::cpu::{CpuBackend, check_fields};
use crate::gpu::{AdapterSummary, GpuBackend, probe_adapter};
use crate::net::FoldedNet;
use anyhow::{Context, Result};
use mfsched_core::{GpuState, InSpace, Problem};
use mfsched_core::{PredictError, Predictor};
use std::sync::atomic::{AtomicBool, Ordering};

/// Where inference should run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    /// The GPU on a hardware adapter, else the CPU.
    Auto,
    Cpu,
    /// The GPU on whatever adapter there is, software ones included; no adapter is an error.
    Gpu,
}

impl BackendChoice {
    pub const ALL: [BackendChoice; 3] =
        [BackendChoice::Auto, BackendChoice::Cpu, BackendChoice::Gpu];

    /// The choice's name, as `--backend` spells it.
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Cpu => "cpu",
            BackendChoice::Gpu => "gpu",
        }
    }
}

impl std::fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether the automatic choice uses this adapter.
pub fn auto_uses(adapter: &AdapterSummary) -> bool {
    !adapter.is_software()
}

/// A problem's predictors on the chosen backend, with the CPU as fallback.
#[derive(Debug)]
pub struct InferenceBackend {
    cpu: CpuBackend,
    gpu: Option<GpuBackend>,
    /// Cleared after a GPU call fails: later calls go straight to the CPU.
    gpu_healthy: AtomicBool,
    /// Why this backend was chosen, for logs and reports.
    pub reason: String,
}

impl InferenceBackend {
    /// Builds the backend `choice` asks for. Only `Gpu` without a usable adapter fails.
    pub fn select(choice: BackendChoice, problem: &Problem, nets: &[FoldedNet]) -> Result<Self> {
        let cpu = CpuBackend::new(problem, nets)?;
        let (gpu, reason) = match choice {
            BackendChoice::Cpu => (None, "CPU, as asked".to_string()),
            BackendChoice::Gpu => {
                let gpu = GpuBackend::new(problem, nets).context("--backend gpu")?;
                let reason = format!("GPU on {}, as asked", gpu.adapter());
                (Some(gpu), reason)
            }
            BackendChoice::Auto => match probe_adapter() {
                Ok(adapter) if auto_uses(&adapter) => {
                    let gpu = GpuBackend::new(problem, nets)?;
                    let reason = format!("GPU on {} (hardware adapter)", gpu.adapter());
                    (Some(gpu), reason)
                }
                Ok(adapter) => (
                    None,
                    format!(
                        "CPU: adapter {adapter} is a software rasteriser, slower than the CPU backend \
                         (--backend gpu uses it anyway)"
                    ),
                ),
                Err(e) => (None, format!("CPU: no GPU adapter ({e:#})")),
            },
        };
        Ok(Self {
            cpu,
            gpu_healthy: AtomicBool::new(gpu.is_some()),
            gpu,
            reason,
        })
    }

    /// Where inference runs, in a word or two: `CPU` or `GPU on <adapter>`.
    pub fn label(&self) -> String {
        match &self.gpu {
            Some(gpu) => format!("GPU on {}", gpu.adapter().name),
            None => "CPU".to_owned(),
        }
    }

    /// The CPU backend (in use, or the fallback).
    pub fn cpu(&self) -> &CpuBackend {
        &self.cpu
    }

    /// The GPU backend while it is in use.
    pub fn gpu(&self) -> Option<&GpuBackend> {
        self.gpu
            .as_ref()
            .filter(|_| self.gpu_healthy.load(Ordering::Relaxed))
    }

    /// Runs `on_gpu` when the GPU is in use; on its failure reports once, stops
    /// using the GPU and answers with `on_cpu`.
    fn run<T>(
        &self,
        on_gpu: impl FnOnce(&GpuBackend) -> Result<T>,
        on_cpu: impl FnOnce(&CpuBackend) -> Result<T>,
    ) -> Result<T, PredictError> {
        if let Some(gpu) = self.gpu() {
            match on_gpu(gpu) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    if self.gpu_healthy.swap(false, Ordering::Relaxed) {
                        tracing::warn!("GPU inference failed, using the CPU from now on: {e:#}");
                    }
                }
            }
        }
        on_cpu(&self.cpu).map_err(PredictError::backend)
    }
}

/// The backend answers for the models it was built for; only the state and
/// the candidates vary between calls.
impl Predictor for InferenceBackend {
    fn joint_size(&self) -> u64 {
        self.cpu.space().size()
    }

    /// The observed layout needs no running configuration.
    fn predict_table(&self, state: &GpuState, _running: &[u32]) -> Result<Vec<f32>, PredictError> {
        self.run(|g| g.predict_table(state), |c| Ok(c.predict_table(state)))
    }

    fn predict_in_space(
        &self,
        state: &GpuState,
        _running: &[u32],
        candidates: InSpace<'_>,
    ) -> Result<Vec<f32>, PredictError> {
        self.predict_joint_fields(state, candidates, None)
    }
}

impl InferenceBackend {
    /// Joint predictions with each candidate's own field when `fields` is given
    /// (one per candidate; see `surrogate::field`); a field list of the wrong
    /// length is a mismatch.
    pub fn predict_joint_fields(
        &self,
        state: &GpuState,
        candidates: InSpace<'_>,
        fields: Option<&[[f32; 2]]>,
    ) -> Result<Vec<f32>, PredictError> {
        check_fields(&candidates, fields).map_err(|e| PredictError::Mismatch(e.to_string()))?;
        self.run(
            |g| g.predict_joint_fields(state, candidates, fields),
            |c| c.predict_joint_fields(state, candidates, fields),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::tests::gate;
    use crate::synthetic::synthetic_nets;
    use mfsched_core::load_scenario;

    fn adapter(device_type: wgpu::DeviceType) -> AdapterSummary {
        AdapterSummary {
            name: "test".into(),
            device_type,
            backend: wgpu::Backend::Vulkan,
            driver: String::new(),
        }
    }

    #[test]
    fn auto_skips_software_adapters_only() {
        assert!(!auto_uses(&adapter(wgpu::DeviceType::Cpu)));
        assert!(auto_uses(&adapter(wgpu::DeviceType::DiscreteGpu)));
        assert!(auto_uses(&adapter(wgpu::DeviceType::IntegratedGpu)));
    }

    #[test]
    fn cpu_choice_predicts_and_refuses_a_candidate_outside_the_space() {
        let problem = load_scenario("paper-n2").expect("bundled").problem;
        let nets = synthetic_nets(&problem, 2);
        let b = InferenceBackend::select(BackendChoice::Cpu, &problem, &nets).expect("cpu");
        assert!(b.gpu().is_none());
        let state = crate::agreement::check_states(&problem)[1];
        let table = b.predict_table(&state, &[]).expect("predicts");
        assert_eq!(table.len(), 27);
        let running = &problem.current;
        let joint = b
            .predict_joint(&state, running, &[0, 161])
            .expect("predicts");
        // Candidate 161 is the last configuration of both models.
        assert_eq!(joint, vec![table[0], table[18], table[17], table[26]]);
        let bad = b
            .predict_joint(&state, running, &[0, 162])
            .expect_err("162 is past the space");
        assert!(
            matches!(
                bad,
                PredictError::OutOfRange {
                    candidate: 162,
                    size: 162
                }
            ),
            "{bad}"
        );
        // Refused before the backend: it stays usable.
        assert_eq!(
            b.predict_joint(&state, running, &[0, 161])
                .expect("predicts"),
            joint
        );
    }

    #[test]
    fn gpu_choice_uses_the_adapter_and_matches_the_cpu() {
        if !gate("gpu_choice_uses_the_adapter_and_matches_the_cpu") {
            return;
        }
        let problem = load_scenario("paper-n2").expect("bundled").problem;
        let nets = synthetic_nets(&problem, 2);
        let gpu = InferenceBackend::select(BackendChoice::Gpu, &problem, &nets).expect("adapter");
        let cpu = InferenceBackend::select(BackendChoice::Cpu, &problem, &nets).expect("cpu");
        assert!(gpu.gpu().is_some(), "{}", gpu.reason);
        let state = crate::agreement::check_states(&problem)[2];
        for (g, c) in gpu
            .predict_table(&state, &[])
            .expect("predicts")
            .iter()
            .zip(cpu.predict_table(&state, &[]).expect("predicts"))
        {
            assert!((g - c).abs() <= 1e-5 * 400.0, "{g} vs {c}");
        }
    }
}
