//! The Wasm plugin host: policies and utilities are WebAssembly components
//! (the WIT package in `wit/`) run by Wasmtime.
//!
//! - [`engine`]: the engine, its limits (per-call deadline by epoch
//!   interruption, memory cap), the compilation cache and the linkers.
//! - [`bindings`]: the generated WIT bindings and the domain → WIT conversions.
//! - [`context`]: store data and the host side of `surrogate` and `objective`.
//! - [`registry`]: loading components (embedded or files), their world and WIT
//!   version, and the swappable slots.
//! - [`failure`]: why a call failed, typed.
//! - [`validate`]: the checks every decision passes before use.
//! - [`runner`]: one decision tick, keeping the last valid decision on failure.
//! - [`reload`]: hot reload of a plugin directory.
//! - [`version`]: which WIT versions the host accepts.
//! - [`check`]: `plugins check`, every finding about one component.

pub mod bench;
pub mod bindings;
pub mod check;
pub mod context;
pub mod engine;
pub mod failure;
pub mod registry;
pub mod reload;
pub mod runner;
pub mod setup;
pub mod validate;
pub mod version;

pub use context::{CallInputs, CallStats};
pub use engine::{CompileCache, PluginEngine, PluginLimits};
pub use failure::PluginFailure;
pub use registry::{
    Loaded, LoadedPolicy, LoadedUtility, Origin, ParamInfo, PluginInfo, Registry, Slot, World,
};
pub use reload::{HotReload, ReloadContext, ReloadEvent, ReloadOutcome};
pub use runner::{
    Checkpoint, Decider, DecisionEvent, DecisionFailure, DecisionOutcome, DecisionReport,
    RawDecision, run_policy, score_one,
};
pub use validate::{Rejection, validate};
