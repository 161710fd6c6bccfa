//! Samplers: what the device the models share looks like now.
//!
//! `NvmlSampler` reads the card through NVML (loaded at run time: the binary runs
//! without it). `HostSampler` (host.rs) reads a CPU box: the servers' CPU time as
//! the utilisation and the memory they hold as the "VRAM" (the field's names
//! are the GPU's; on a host they mean CPU and host memory). `FootprintSampler`
//! measures nothing: it reports the VRAM the applied configuration is modelled
//! to take and leaves utilisation unknown. `DcgmSampler` (dcgm.rs) reads a
//! DCGM exporter's page. Values a sampler cannot give are `None`, never 0.

use anyhow::{Context, Result, bail};
use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use serde::{Deserialize, Serialize};

use super::config::{SamplerConfig, SamplerKind};
use mfsched_core::{Problem, WorkloadLevel};

pub(crate) mod dcgm;
pub(crate) mod host;
pub use dcgm::{DcgmReading, DcgmSampler};
pub use host::HostSampler;

const MIB: f64 = 1024.0 * 1024.0;

/// One reading. `None` means the source cannot tell, not zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Which sampler produced it (`nvml`, `host`, `dcgm`, `footprint`, `sim`).
    pub source: String,
    /// The device memory in use: a card's VRAM; on a host, the servers' memory.
    pub vram_used_mib: Option<f64>,
    pub vram_total_mib: Option<f64>,
    /// Fraction of time a kernel ran, in [0, 1] (on a host: the servers' share
    /// of their cores' time).
    pub utilization: Option<f64>,
    /// What the busy share does not show, in [0, 1]
    /// ([`mfsched_core::GpuState::contention`]): the memory controller's busy
    /// share on a card, the servers' run-queue wait share on a host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contention: Option<f64>,
    pub processes: Vec<ProcessMemory>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessMemory {
    pub pid: u32,
    pub used_mib: Option<f64>,
}

pub trait Sampler: Send + std::fmt::Debug {
    /// Reads the GPU while `applied` (the running joint configuration) runs
    /// under `workload` (which only the simulator needs: a real card shows it).
    fn sample(
        &mut self,
        problem: &Problem,
        applied: &[u32],
        workload: WorkloadLevel,
    ) -> Result<Sample>;

    /// Starts the next sample's span now, for a sampler whose readings are
    /// deltas since the previous one (the host's CPU time): what ran before
    /// (the servers' start-up) is not the state the next tick decides from.
    /// A failure is the next sample's to report.
    fn restart_span(&mut self) {}
}

/// Makes the simulated card's sampler for a problem and seed. The simulator lives
/// in the lab; the composition root hands it in, so the daemon never depends on it.
pub type SimulatedGpu = dyn Fn(&Problem, u64) -> Result<Box<dyn Sampler>> + Send + Sync;

/// Builds the configured sampler, or the fallback one when NVML is absent and the
/// config allows it (the reason is returned so the daemon can say it in one line).
/// `simulated` is the simulated card, where this build has one.
pub fn build(
    config: &SamplerConfig,
    problem: &Problem,
    seed: u64,
    simulated: Option<&SimulatedGpu>,
) -> Result<(Box<dyn Sampler>, Option<String>)> {
    match config.kind {
        SamplerKind::Nvml => match NvmlSampler::new(config.device) {
            Ok(s) => Ok((Box::new(s), None)),
            Err(err) if config.allow_fallback => {
                let fallback = build_plain(config, config.fallback, problem, seed, simulated)?;
                let note = format!(
                    "{err:#}; sampler.allow_fallback is set, sampling with '{}' instead",
                    kind_name(config.fallback)
                );
                Ok((fallback, Some(note)))
            }
            Err(err) => {
                bail!(
                    "{err:#}; set sampler.allow_fallback = true or run with --sampler sim (or footprint)"
                )
            }
        },
        other => Ok((build_plain(config, other, problem, seed, simulated)?, None)),
    }
}

fn build_plain(
    config: &SamplerConfig,
    kind: SamplerKind,
    problem: &Problem,
    seed: u64,
    simulated: Option<&SimulatedGpu>,
) -> Result<Box<dyn Sampler>> {
    match kind {
        SamplerKind::Footprint => Ok(Box::new(FootprintSampler)),
        SamplerKind::Host => Ok(Box::new(
            HostSampler::new(&config.host).context("sampler.kind = \"host\"")?,
        )),
        SamplerKind::Dcgm => {
            let dcgm = config
                .dcgm
                .as_ref()
                .context("sampler.kind = \"dcgm\" needs [sampler.dcgm] url")?;
            Ok(Box::new(DcgmSampler::start(dcgm, config.device)?))
        }
        SamplerKind::Sim => match simulated {
            Some(make) => make(problem, seed).context("starting the simulator sampler"),
            None => bail!(
                "this build has no simulated GPU: use sampler.kind = \"nvml\" or \"footprint\""
            ),
        },
        SamplerKind::Nvml => bail!("internal: build_plain is not for nvml"),
    }
}

pub fn kind_name(kind: SamplerKind) -> &'static str {
    match kind {
        SamplerKind::Nvml => "nvml",
        SamplerKind::Sim => "sim",
        SamplerKind::Footprint => "footprint",
        SamplerKind::Host => "host",
        SamplerKind::Dcgm => "dcgm",
    }
}

/// No measurement: the applied configuration's modelled VRAM, utilisation unknown.
#[derive(Debug, Clone, Copy)]
pub struct FootprintSampler;

impl Sampler for FootprintSampler {
    fn sample(
        &mut self,
        problem: &Problem,
        applied: &[u32],
        _workload: WorkloadLevel,
    ) -> Result<Sample> {
        Ok(Sample {
            source: "footprint".into(),
            vram_used_mib: Some(problem.vram_mib(applied) as f64),
            vram_total_mib: Some(f64::from(problem.card.vram_mib)),
            utilization: None,
            contention: None,
            processes: Vec::new(),
        })
    }
}

pub struct NvmlSampler {
    nvml: Nvml,
    device: u32,
}

impl std::fmt::Debug for NvmlSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSampler")
            .field("device", &self.device)
            .finish()
    }
}

impl NvmlSampler {
    pub fn new(device: u32) -> Result<Self> {
        let nvml = Nvml::init().map_err(|e| anyhow::anyhow!("NVML is not available: {e}"))?;
        let count = nvml.device_count().context("NVML device count")?;
        if device >= count {
            bail!("NVML device {device} does not exist ({count} device(s))");
        }
        Ok(Self { nvml, device })
    }

    fn read(&self) -> Result<Sample> {
        let dev = self
            .nvml
            .device_by_index(self.device)
            .with_context(|| format!("NVML device {}", self.device))?;
        let memory = dev.memory_info().ok();
        let rates = dev.utilization_rates().ok();
        let utilization = rates.as_ref().map(|u| f64::from(u.gpu) / 100.0);
        // NVML's "memory" rate: the share of the sample period in which the
        // device memory was read or written.
        let contention = rates.as_ref().map(|u| f64::from(u.memory) / 100.0);
        let processes = dev
            .running_compute_processes()
            .unwrap_or_default()
            .into_iter()
            .map(|p| ProcessMemory {
                pid: p.pid,
                used_mib: process_mib(&p.used_gpu_memory),
            })
            .collect();
        Ok(Sample {
            source: "nvml".into(),
            vram_used_mib: memory.as_ref().map(|m| m.used as f64 / MIB),
            vram_total_mib: memory.as_ref().map(|m| m.total as f64 / MIB),
            utilization,
            contention,
            processes,
        })
    }
}

/// Some drivers report `u64::MAX` for per-process memory: that means unknown.
fn process_mib(used: &UsedGpuMemory) -> Option<f64> {
    match used {
        UsedGpuMemory::Used(bytes) if *bytes != u64::MAX => Some(*bytes as f64 / MIB),
        _ => None,
    }
}

impl Sampler for NvmlSampler {
    fn sample(
        &mut self,
        _problem: &Problem,
        _applied: &[u32],
        _workload: WorkloadLevel,
    ) -> Result<Sample> {
        self.read()
    }
}

/// What NVML gives on this machine, as text (`mfsched nvml probe`).
pub fn nvml_probe() -> Result<String> {
    use std::fmt::Write;
    let nvml = Nvml::init().map_err(|e| anyhow::anyhow!("NVML is not available: {e}"))?;
    let mut out = String::new();
    let unknown = |r: Result<String, nvml_wrapper::error::NvmlError>| {
        r.unwrap_or_else(|e| format!("unknown ({e})"))
    };
    writeln!(out, "driver     {}", unknown(nvml.sys_driver_version())).ok();
    let count = nvml.device_count().context("NVML device count")?;
    writeln!(out, "devices    {count}").ok();
    let mut sampler = NvmlSampler { nvml, device: 0 };
    for i in 0..count {
        sampler.device = i;
        let name = sampler
            .nvml
            .device_by_index(i)
            .and_then(|d| d.name())
            .unwrap_or_else(|e| format!("unknown ({e})"));
        writeln!(out, "device {i}   {name}").ok();
        let sample = sampler.read()?;
        let show = |v: Option<f64>, unit: &str| {
            v.map_or_else(|| "unknown".to_owned(), |v| format!("{v:.1} {unit}"))
        };
        writeln!(out, "  memory used   {}", show(sample.vram_used_mib, "MiB")).ok();
        writeln!(
            out,
            "  memory total  {}",
            show(sample.vram_total_mib, "MiB")
        )
        .ok();
        writeln!(
            out,
            "  utilisation   {}",
            show(sample.utilization.map(|u| u * 100.0), "%")
        )
        .ok();
        writeln!(
            out,
            "  memory busy   {}",
            show(
                sample.contention.map(|u| u * 100.0),
                "% (the contention reading)"
            )
        )
        .ok();
        writeln!(out, "  processes     {}", sample.processes.len()).ok();
        for p in &sample.processes {
            writeln!(out, "    pid {:<8} {}", p.pid, show(p.used_mib, "MiB")).ok();
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_sentinel_per_process_memory_is_unknown_not_zero() {
        assert_eq!(process_mib(&UsedGpuMemory::Used(u64::MAX)), None);
        assert_eq!(process_mib(&UsedGpuMemory::Unavailable), None);
        assert_eq!(
            process_mib(&UsedGpuMemory::Used(3 * 1024 * 1024)),
            Some(3.0)
        );
    }

    #[test]
    fn footprint_sampler_reports_modelled_vram_and_unknown_utilisation() {
        let s = mfsched_core::load_scenario("paper-n2").expect("bundled");
        let p = &s.problem;
        let sample = FootprintSampler
            .sample(p, &p.current, WorkloadLevel::High)
            .expect("no I/O");
        assert_eq!(sample.vram_used_mib, Some(p.vram_mib(&p.current) as f64));
        assert_eq!(sample.utilization, None);
    }
}
