//! Host bindings of the WIT package (`wit/`) and the conversions from the
//! domain types, which the WIT types mirror one to one.

use mfsched_core::domain;

/// The `policy` world: what a search policy imports and exports.
pub mod policy {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "mfsched:scheduler/policy",
        imports: { default: trappable },
    });
}

/// The `utility` world, sharing the policy world's `types`.
pub mod utility {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "mfsched:scheduler/utility",
        with: {
            "mfsched:scheduler/types": super::policy::mfsched::scheduler::types,
        },
    });
}

pub use policy::mfsched::scheduler::types as wit;

/// The WIT package's name and version, as plugins import it.
pub const PACKAGE: &str = "mfsched:scheduler";
pub const VERSION: &str = "0.1.0";

impl From<domain::WorkloadLevel> for wit::WorkloadLevel {
    fn from(w: domain::WorkloadLevel) -> Self {
        match w {
            domain::WorkloadLevel::Low => Self::Low,
            domain::WorkloadLevel::Medium => Self::Medium,
            domain::WorkloadLevel::High => Self::High,
            domain::WorkloadLevel::Burst => Self::Burst,
        }
    }
}

impl From<wit::WorkloadLevel> for domain::WorkloadLevel {
    fn from(w: wit::WorkloadLevel) -> Self {
        match w {
            wit::WorkloadLevel::Low => Self::Low,
            wit::WorkloadLevel::Medium => Self::Medium,
            wit::WorkloadLevel::High => Self::High,
            wit::WorkloadLevel::Burst => Self::Burst,
        }
    }
}

impl From<&domain::GpuState> for wit::GpuState {
    fn from(s: &domain::GpuState) -> Self {
        Self {
            workload: s.workload.into(),
            vram_used_mib: s.vram_used_mib,
            utilization: s.utilization,
        }
    }
}

impl From<wit::GpuState> for domain::GpuState {
    fn from(s: wit::GpuState) -> Self {
        Self {
            workload: s.workload.into(),
            vram_used_mib: s.vram_used_mib,
            utilization: s.utilization,
        }
    }
}

impl From<&domain::Model> for wit::Model {
    fn from(m: &domain::Model) -> Self {
        Self {
            name: m.name.clone(),
            family: m.family.clone(),
            kind: match m.kind {
                domain::ModelKind::Llm => wit::ModelKind::Llm,
                domain::ModelKind::Vision => wit::ModelKind::Vision,
            },
            variants: m
                .variants
                .iter()
                .map(|v| wit::Variant {
                    name: v.name.clone(),
                    weights_mib: v.weights_mib,
                    quality: v.quality,
                })
                .collect(),
            concurrency: m.concurrency.clone(),
            skip_rate: m
                .skip_rate
                .iter()
                .map(|k| wit::KnobF64 {
                    value: k.value,
                    quality_factor: k.quality_factor,
                })
                .collect(),
            image_size: m
                .image_size
                .iter()
                .map(|k| wit::KnobU32 {
                    value: k.value,
                    quality_factor: k.quality_factor,
                })
                .collect(),
            runtime_overhead_mib: m.runtime_overhead_mib,
            kv_cache_mib_per_slot: m.kv_cache_mib_per_slot,
            activation_mib: m.activation_mib.clone(),
            configs: m
                .configs
                .iter()
                .map(|c| wit::LocalConfig {
                    variant: c.variant as u32,
                    concurrency: c.concurrency,
                    skip_rate: c.skip_rate,
                    image_size: c.image_size,
                    vram_mib: c.vram_mib,
                    quality: c.quality,
                })
                .collect(),
        }
    }
}

impl From<&domain::Problem> for wit::Problem {
    fn from(p: &domain::Problem) -> Self {
        Self {
            card: wit::Card {
                name: p.card.name.clone(),
                vram_mib: p.card.vram_mib,
            },
            models: p.models.iter().map(wit::Model::from).collect(),
            sla_floors: p.sla_floors.clone(),
            reconfig: wit::ReconfigCosts {
                variant_switch: p.reconfig.variant_switch,
                knob_change: p.reconfig.knob_change,
            },
            throughput_ranges: p
                .throughput_ranges
                .iter()
                .map(|per_variant| {
                    per_variant
                        .iter()
                        .map(|r| wit::ThroughputRange {
                            min: r.min,
                            max: r.max,
                        })
                        .collect()
                })
                .collect(),
            current: p.current.clone(),
        }
    }
}
