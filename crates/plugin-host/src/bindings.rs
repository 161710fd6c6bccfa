//! Host bindings of the WIT package (`wit/`) and the conversions from the
//! domain types, which the WIT types mirror one to one.

use mfsched_core::{GpuState, KnobValue, Model, Problem, WorkloadLevel};

/// The `policy` world: what a search policy imports and exports.
pub(crate) mod policy {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "mfsched:scheduler/policy",
        imports: { default: trappable },
    });
}

/// The `utility` world, sharing the policy world's `types`.
pub(crate) mod utility {
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
pub const VERSION: &str = "0.4.0";

impl From<WorkloadLevel> for wit::WorkloadLevel {
    fn from(w: WorkloadLevel) -> Self {
        match w {
            WorkloadLevel::Low => Self::Low,
            WorkloadLevel::Medium => Self::Medium,
            WorkloadLevel::High => Self::High,
            WorkloadLevel::Burst => Self::Burst,
        }
    }
}

impl From<wit::WorkloadLevel> for WorkloadLevel {
    fn from(w: wit::WorkloadLevel) -> Self {
        match w {
            wit::WorkloadLevel::Low => Self::Low,
            wit::WorkloadLevel::Medium => Self::Medium,
            wit::WorkloadLevel::High => Self::High,
            wit::WorkloadLevel::Burst => Self::Burst,
        }
    }
}

impl From<&GpuState> for wit::GpuState {
    fn from(s: &GpuState) -> Self {
        Self {
            workload: s.workload.into(),
            vram_used_mib: s.vram_used_mib,
            utilization: s.utilization,
        }
    }
}

/// A state a policy passes to the host's predictor. The WIT's state is the
/// policy's view of the field (workload, memory, utilisation); the contention
/// reading is not in it, so the tick's own carries over: a policy asking about
/// another utilisation asks about it under the contention measured now.
pub fn state_from_policy(s: wit::GpuState, tick: &GpuState) -> GpuState {
    GpuState {
        contention: tick.contention,
        ..GpuState::new(s.workload.into(), s.vram_used_mib, s.utilization)
    }
}

impl From<&KnobValue> for wit::KnobValue {
    fn from(v: &KnobValue) -> Self {
        match v {
            KnobValue::Integer(i) => Self::Integer(*i),
            KnobValue::Real(r) => Self::Real(*r),
            KnobValue::Category(c) => Self::Category(c.clone()),
        }
    }
}

impl From<mfsched_core::Field> for wit::Field {
    fn from(f: mfsched_core::Field) -> Self {
        match f {
            mfsched_core::Field::Observed => Self::Observed,
            mfsched_core::Field::CandidateAware => Self::CandidateAware,
        }
    }
}

impl From<&Model> for wit::Model {
    fn from(m: &Model) -> Self {
        Self {
            name: m.name.clone(),
            family: m.family.clone(),
            kind: m.kind.clone(),
            unit: m.unit.clone(),
            variants: m
                .variants
                .iter()
                .map(|v| wit::Variant {
                    name: v.name.clone(),
                    weights_mib: v.weights_mib,
                    quality: v.quality,
                })
                .collect(),
            knobs: m
                .knobs
                .iter()
                .map(|k| wit::Knob {
                    name: k.name.clone(),
                    levels: k
                        .levels
                        .iter()
                        .map(|l| wit::KnobLevel {
                            value: (&l.value).into(),
                            quality_factor: l.quality_factor,
                        })
                        .collect(),
                })
                .collect(),
            runtime_overhead_mib: m.runtime_overhead_mib,
            configs: (0..m.grid_size())
                .map(|ci| {
                    let c = &m.configs[ci];
                    wit::LocalConfig {
                        variant: c.variant as u32,
                        values: (0..m.knobs.len()).map(|k| m.value(ci, k).into()).collect(),
                        vram_mib: c.vram_mib,
                        quality: c.quality,
                    }
                })
                .collect(),
        }
    }
}

impl From<&Problem> for wit::Problem {
    fn from(p: &Problem) -> Self {
        let mut problem = Self {
            card: wit::Card {
                name: p.card.name.clone(),
                vram_mib: p.card.vram_mib,
            },
            models: p.models.iter().map(wit::Model::from).collect(),
            sla_floors: Vec::new(),
            reconfig: Vec::new(),
            throughput_ranges: Vec::new(),
            current: Vec::new(),
        };
        set_per_tick(&mut problem, p);
        problem
    }
}

/// Sets what changes from one tick of a problem to the next (floors, costs,
/// ranges, the running configuration) from `p`, reusing `w`'s buffers; the
/// card and the models are left as they are.
pub fn set_per_tick(w: &mut wit::Problem, p: &Problem) {
    w.sla_floors.clone_from(&p.sla_floors);
    w.reconfig.clear();
    w.reconfig
        .extend(p.reconfig.iter().map(|r| wit::ReconfigCosts {
            variant_switch: r.variant_switch,
            knob_change: r.knob_change,
        }));
    w.throughput_ranges
        .resize_with(p.throughput_ranges.len(), Vec::new);
    for (to, from) in w.throughput_ranges.iter_mut().zip(&p.throughput_ranges) {
        to.clear();
        to.extend(from.iter().map(|r| wit::ThroughputRange {
            min: r.min,
            max: r.max,
        }));
    }
    w.current.clone_from(&p.current);
}
