//! The Wasm plugin host: policies and utilities are WebAssembly components
//! (the WIT package in `wit/`) run by Wasmtime.
//!
//! # The façade
//!
//! Every module is private; what other crates may name is re-exported here
//! (`tests/all/layering.rs` checks the lab and the binary name nothing below the
//! root but the generated WIT types, [`wit`]). Names that read well only beside
//! their module are qualified (`template::write` as [`write_template`],
//! `registry::load_file` as [`load_plugin_file`]).
//!
//! Inside: `engine` (limits: per-call deadline by epoch interruption, memory
//! cap; the compilation cache; the linkers); `bindings` (the generated WIT
//! bindings and the domain → WIT conversions); `context` (store data, the host
//! side of `surrogate` and `objective`); `precheck` (what a component file must
//! be before it is compiled); `registry` (loading components, embedded or files,
//! their world and WIT version, the swappable slots); `failure` (why a call
//! failed, typed); `output` (what plugins print, captured per call and capped, and
//! return as text, made printable and cut); `validate` (the checks every decision
//! passes); `pipeline` (one policy's answer under one deadline, validated once,
//! scored once); `tick` (THE tick for every caller: the active policy and the
//! shadows through the pipeline under one deadline, the last-valid rule, one
//! outcome type); `reload` (hot reload of a plugin directory); `version` (the WIT
//! versions accepted); `wit_package` (the WIT package as text and encoded);
//! `check` (`plugins check`); `harness` (`plugins test`); `setup` (a problem's
//! defaults from its predictor); `template` (`plugins new`).

mod bindings;
mod check;
mod context;
mod engine;
mod failure;
mod harness;
mod output;
mod pipeline;
mod precheck;
mod registry;
mod reload;
mod setup;
mod template;
mod tick;
mod validate;
mod version;
mod wit_package;

/// The WIT package and its generated types (a namespace of their own, beside the
/// domain types they convert from).
pub use bindings::{PACKAGE as WIT_PACKAGE_NAME, wit};
/// Authoring tools: `plugins check`, `plugins test`, `plugins new`.
pub use check::{CheckInputs, check_file};
/// Running components: the engine, its limits, what a call sees and how it fails.
pub use context::{CallInputs, CallStats, Scorer};
pub use engine::{CompileCache, PluginEngine, PluginLimits};
pub use failure::PluginFailure;
pub use harness::{
    CLOCK_STEP as HARNESS_CLOCK_STEP, Case as HarnessCase, HarnessInputs,
    MIN_RUNS as HARNESS_MIN_RUNS, run as run_harness,
};
pub use output::{MESSAGE_BYTES as OUTPUT_MESSAGE_BYTES, NAME_BYTES as OUTPUT_NAME_BYTES};
/// The tick: every caller's one runner, its outcome and the policies it asks.
pub use pipeline::{
    Answer, Builtin, Call, Checked, Component, DecisionFailure, HOLD, Pipeline, PolicySource,
    RawDecision, Verdict, run_component,
};
pub use precheck::{ComponentIdentity, ComponentMetadata, MAX_COMPONENT_BYTES};
/// Loading components, the slots they fill, and hot reload.
pub use registry::{
    EMBEDDED_PLUGINS, Loaded, LoadedPolicy, LoadedUtility, Origin, ParamInfo, PluginInfo, Registry,
    Slot, World, dir_plugins, embedded_names as embedded_plugin_names, list as list_plugins,
    load_file as load_plugin_file, resolve as resolve_plugin, resolve_policy, resolve_utility,
};
pub use reload::{
    HotReload, ReloadContext, ReloadCounts, ReloadEvent, ReloadOutcome,
    self_check as reload_self_check, wit_params,
};
/// A problem's defaults, from its predictor.
pub use setup::{default_state, fill_defaults, with_declared_params};
pub use template::{
    Kind as TemplateKind, Sdk as TemplateSdk, component_path as template_component_path,
    write as write_template,
};
pub use tick::{
    Checkpoint, DecideOutcome, Decider, Failure, FailureKind, PolicyRecord, Proposal, TickOutcome,
};
pub use validate::{Rejection, floor_misses, validate};
pub use wit_package::{
    ENCODED as WIT_PACKAGE_ENCODED, FILES as WIT_PACKAGE_FILES, write as write_wit_package,
};
