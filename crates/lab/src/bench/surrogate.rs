//! The surrogate inference benchmark: CPU and wgpu side by side in one process,
//! medians of repeated runs, for batches of joint candidates of rising size and
//! for the two ways one decision can use the surrogate (the Σk-row table or
//! every feasible candidate).

use anyhow::Result;
use mfsched_core::median_duration;
use mfsched_core::{GpuState, InSpace, Problem};
use mfsched_surrogate::CandidateAware;
use mfsched_surrogate::CpuBackend;
use mfsched_surrogate::FoldedNet;
use mfsched_surrogate::GpuBackend;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Median time of each backend for one kind of call.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Rows (predictions) per call.
    pub rows: usize,
    /// Threads the CPU backend used for the call.
    pub cpu_threads: usize,
    pub cpu: Duration,
    /// `None` without a GPU backend.
    pub gpu: Option<Duration>,
}

impl Timing {
    pub fn cpu_rows_per_s(&self) -> f64 {
        self.rows as f64 / self.cpu.as_secs_f64()
    }

    pub fn gpu_rows_per_s(&self) -> Option<f64> {
        self.gpu.map(|g| self.rows as f64 / g.as_secs_f64())
    }

    /// GPU throughput over CPU throughput (> 1: the GPU is faster).
    pub fn gpu_speedup(&self) -> Option<f64> {
        self.gpu.map(|g| self.cpu.as_secs_f64() / g.as_secs_f64())
    }
}

/// The benchmark's results.
#[derive(Debug, Clone)]
pub struct SurrogateBench {
    /// Joint-candidate batches, one per requested size.
    pub batches: Vec<Timing>,
    /// One decision from the table: every local configuration of every model.
    pub decision_table: Timing,
    /// One decision from every VRAM-feasible joint candidate (N rows each).
    pub decision_joint: Timing,
    pub repeats: usize,
}

/// `repeats` timed runs of each backend, alternating (so drift in machine load
/// hits both alike), after one untimed warm-up each (first-call allocations).
/// Results pass through `black_box` so no call can be optimised away.
fn time_side_by_side<T>(
    repeats: usize,
    rows: usize,
    cpu_threads: usize,
    mut cpu: impl FnMut() -> Result<T>,
    mut gpu: Option<impl FnMut() -> Result<T>>,
    on_step: &mut dyn FnMut(),
) -> Result<Timing> {
    cpu()?;
    if let Some(g) = gpu.as_mut() {
        g()?;
    }
    let mut cpu_times = Vec::with_capacity(repeats);
    let mut gpu_times = Vec::with_capacity(repeats);
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        black_box(cpu()?);
        cpu_times.push(t.elapsed());
        if let Some(g) = gpu.as_mut() {
            let t = Instant::now();
            black_box(g()?);
            gpu_times.push(t.elapsed());
        }
        on_step();
    }
    Ok(Timing {
        rows,
        cpu_threads,
        cpu: median_duration(&cpu_times),
        gpu: (!gpu_times.is_empty()).then(|| median_duration(&gpu_times)),
    })
}

/// Candidates for a batch of about `rows` rows: the feasible indices in order,
/// cycled when the batch is larger than the feasible set.
fn batch(feasible: &[u64], rows: usize, n: usize) -> Vec<u64> {
    let count = rows.div_ceil(n.max(1)).max(1);
    feasible.iter().copied().cycle().take(count).collect()
}

/// Steps `run` reports through `on_step` (for a progress bar).
pub fn steps(sizes: &[usize], repeats: usize) -> u64 {
    ((sizes.len() + 2) * repeats.max(1)) as u64
}

/// Runs the benchmark for `problem` under `state`: batches of `sizes` rows, then
/// one full decision each way. Without `gpu` only the CPU is timed.
pub fn run(
    problem: &Problem,
    nets: &[FoldedNet],
    gpu: Option<&GpuBackend>,
    state: &GpuState,
    sizes: &[usize],
    repeats: usize,
    mut on_step: impl FnMut(),
) -> Result<SurrogateBench> {
    let cpu = CpuBackend::new(problem, nets)?;
    let n = problem.models.len();
    let feasible = problem.feasible_indices();
    if feasible.is_empty() {
        anyhow::bail!("the scenario has no VRAM-feasible joint configuration to benchmark");
    }
    let joint = |candidates: &[u64], on_step: &mut dyn FnMut()| {
        time_side_by_side(
            repeats,
            candidates.len() * n,
            cpu.threads_for(candidates.len()),
            || cpu.predict_joint(state, candidates),
            gpu.map(|g| move || g.predict_joint(state, candidates)),
            on_step,
        )
    };
    let mut batches = Vec::with_capacity(sizes.len());
    for &rows in sizes {
        batches.push(joint(&batch(&feasible, rows, n), &mut on_step)?);
    }
    let decision_table = time_side_by_side(
        repeats,
        problem.models.iter().map(|m| m.grid_size()).sum(),
        // The table is one block per model, on the calling thread.
        1,
        || Ok(cpu.predict_table(state)),
        gpu.map(|g| move || g.predict_table(state)),
        &mut on_step,
    )?;
    let decision_joint = joint(&feasible, &mut on_step)?;
    Ok(SurrogateBench {
        batches,
        decision_table,
        decision_joint,
        repeats,
    })
}

/// One candidate-aware decision on each backend: the fixed point over every
/// VRAM-feasible candidate, timed side by side.
#[derive(Debug, Clone)]
pub struct FieldBench {
    /// Median time of a whole solve; `rows` is its first pass's rows (feasible
    /// candidates × N).
    pub solve: Timing,
    /// Passes and rows evaluated in all passes, per backend.
    pub passes_cpu: usize,
    pub rows_cpu: u64,
    pub passes_gpu: Option<usize>,
    pub rows_gpu: Option<u64>,
    /// Largest |CPU − wgpu| prediction over the out scale of its model.
    pub max_normalised_difference: Option<f64>,
}

/// Times `repeats` candidate-aware solves over every feasible candidate on the
/// CPU and (when given) the wgpu-backed field, alternating.
pub fn candidate_aware(
    problem: &Problem,
    cpu: &CandidateAware,
    gpu: Option<&CandidateAware>,
    state: &GpuState,
    repeats: usize,
    mut on_step: impl FnMut(),
) -> Result<FieldBench> {
    let feasible = problem.feasible_indices();
    let candidates = InSpace::check(problem.space().size(), &feasible)?;
    let running = &problem.current;
    let n = problem.models.len();
    let cpu_solved = cpu.solve(state, running, candidates)?;
    let gpu_solved = gpu
        .map(|g| g.solve(state, running, candidates))
        .transpose()?;
    let timing = time_side_by_side(
        repeats,
        feasible.len() * n,
        cpu.meanfield().cpu_threads_for(feasible.len()),
        || Ok(cpu.solve(state, running, candidates)?),
        gpu.map(|g| || Ok(g.solve(state, running, candidates)?)),
        &mut on_step,
    )?;
    let max_normalised_difference = gpu_solved.as_ref().map(|g| {
        let scale: Vec<f32> = cpu
            .meanfield()
            .nets()
            .iter()
            .map(|net| net.out_scale)
            .collect();
        cpu_solved
            .predictions
            .iter()
            .zip(&g.predictions)
            .enumerate()
            .map(|(r, (a, b))| f64::from((a - b).abs() / scale[r % n].max(f32::EPSILON)))
            .fold(0.0, f64::max)
    });
    Ok(FieldBench {
        solve: timing,
        passes_cpu: cpu_solved.passes,
        rows_cpu: cpu_solved.rows,
        passes_gpu: gpu_solved.as_ref().map(|g| g.passes),
        rows_gpu: gpu_solved.as_ref().map(|g| g.rows),
        max_normalised_difference,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cycle_through_the_feasible_set() {
        assert_eq!(batch(&[3, 5, 9], 10, 2), vec![3, 5, 9, 3, 5]);
        assert_eq!(batch(&[3, 5, 9], 1, 5), vec![3]);
    }
}
