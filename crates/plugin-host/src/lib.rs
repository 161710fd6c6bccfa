//! The Wasm plugin host: policies and utilities are WebAssembly components
//! (the WIT package in `wit/`) run by Wasmtime.
//!
//! - [`engine`]: the engine, its limits (per-call deadline by epoch
//!   interruption, memory cap), the compilation cache and the linkers.
//! - [`bindings`]: the generated WIT bindings and the domain → WIT conversions.
//! - [`context`]: store data and the host side of `surrogate` and `objective`.
//! - [`precheck`]: what a component file must be before it is compiled.
//! - [`registry`]: loading components (embedded or files), their world and WIT
//!   version, and the swappable slots.
//! - [`failure`]: why a call failed, typed.
//! - [`output`]: what plugins print (captured per call, capped) and return as
//!   text (made printable, cut) before anyone sees it.
//! - [`validate`]: the checks every decision passes before use.
//! - [`pipeline`]: one policy's answer: proposed under one deadline, validated
//!   once (floors included), scored once.
//! - [`tick`]: THE tick, for every caller: the active policy and the shadows
//!   through the pipeline under one deadline, the last-valid rule, one outcome
//!   type and its recorded form.
//! - [`reload`]: hot reload of a plugin directory.
//! - [`version`]: which WIT versions the host accepts.
//! - [`wit_package`]: the WIT package, as text and encoded, for `plugins wit`.
//! - [`check`]: `plugins check`, every finding about one component.
//! - [`harness`]: `plugins test`, a policy against many states, several runs
//!   each, the guest's clocks varied between runs.

pub mod bindings;
pub mod check;
pub mod context;
pub mod engine;
pub mod failure;
pub mod harness;
pub mod output;
pub mod pipeline;
pub mod precheck;
pub mod registry;
pub mod reload;
pub mod setup;
pub mod template;
pub mod tick;
pub mod validate;
pub mod version;
pub mod wit_package;

pub use context::{CallInputs, CallStats};
pub use engine::{CompileCache, PluginEngine, PluginLimits};
pub use failure::PluginFailure;
pub use pipeline::{
    Answer, Builtin, Call, Checked, Component, DecisionFailure, HOLD, Pipeline, PolicySource,
    RawDecision, Verdict,
};
pub use registry::{
    Loaded, LoadedPolicy, LoadedUtility, Origin, ParamInfo, PluginInfo, Registry, Slot, World,
};
pub use reload::{HotReload, ReloadContext, ReloadCounts, ReloadEvent, ReloadOutcome};
pub use tick::{
    Checkpoint, DecideOutcome, Decider, Failure, FailureKind, PolicyRecord, Proposal, TickOutcome,
};
pub use validate::{Rejection, floor_misses, validate};
