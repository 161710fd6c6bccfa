//! The MeanField surrogate: one small MLP per model, fed with the model's own
//! configuration and the aggregate GPU state. Training lives in the lab
//! (the lab's `training` module); this crate only serves trained bundles.
//!
//! # The façade
//!
//! Every module is private; what other crates may name is re-exported here
//! (`tests/all/layering.rs` checks the lab and the binary name nothing below the
//! root). Names that read well only beside their module are qualified
//! (`bundled::load` as [`load_bundled`], `field::TOLERANCE` as [`FIELD_TOLERANCE`]).
//!
//! Inside: `features` is the one home of the input layout (training, CPU and GPU
//! inference all use it); `net` the inference form of a trained predictor
//! (BatchNorm and input standardisation folded into dense layers) and its CPU
//! arithmetic; `serve` the one composition of the served predictor (bundle →
//! MeanField → backend → field) every command and the daemon use; `fold` trained
//! parameters → [`FoldedNet`]; `bundle`/`bundled` the on-disk bundle (safetensors +
//! JSON), its validation and the bundles embedded in the binary; `meanfield` the
//! [`MeanField`] predictor; `field` the candidate-aware (self-consistent) field;
//! `cpu` and `gpu` (`meanfield.wgsl` beside it) batched evaluation of a problem's
//! predictors; `backend` choosing between them, with fallback; `agreement` how far
//! the GPU is from the CPU reference; `target` what a net learns and how its
//! output becomes throughput; `synthetic` seeded untrained predictors with the
//! real shapes.

mod agreement;
mod backend;
mod bundle;
mod bundled;
mod cpu;
mod features;
mod field;
mod fold;
mod gpu;
mod meanfield;
mod net;
mod serve;
mod synthetic;
mod target;

/// The candidate-aware field and the GPU–CPU agreement check.
pub use agreement::{Agreement, TOLERANCE as AGREEMENT_TOLERANCE, check_backends};
/// Serving: the one composition every command and the daemon use, and the backends.
pub use backend::{BackendChoice, auto_uses};
/// Bundles on disk and in the binary.
pub use bundle::{
    Architecture, Bundle, BundleMeta, FORMAT_VERSION as BUNDLE_FORMAT_VERSION, LinearSkip,
    Metrics as BundleMetrics, ModelMeta, TrainingInfo, VariantRange,
};
pub use bundled::{
    PROFILE_FILE as BUNDLED_PROFILE_FILE, bundle_dir, embedded as embedded_bundle,
    embedded_names as embedded_bundle_names, load as load_bundled,
    training_profile as bundled_training_profile,
};
pub use cpu::{CpuBackend, MIN_CANDIDATES_PER_THREAD, default_threads};
/// What a net sees and learns: the input layout, the targets, the folded form.
pub use features::{
    CorunnerTables, FACTOR_RANK, FieldFeatures, Layout, STATE_FEATURES, SoloProfiles, input_row,
    layout_names, local_len, local_table, push_corunner_sums, push_field_state, push_local,
    push_state, solo_profiles, solo_tables as solo_corunner_tables,
};
pub use field::{CandidateAware, TOLERANCE as FIELD_TOLERANCE};
pub use fold::fold;
pub use gpu::{
    AdapterSummary, GpuBackend, adapter_gate, adapter_gate_with, checked as wgpu_checked,
    request_adapter,
};
pub use meanfield::MeanField;
pub use net::FoldedNet;
pub use serve::{ServeOptions, Served, serve};
pub use synthetic::{HIDDEN_WIDTHS, synthetic_nets};
pub use target::{OutputMap, Target, fill_solo};
/// An adapter's optional features, as [`adapter_gate_with`] asks for them.
pub use wgpu::Features as AdapterFeatures;
