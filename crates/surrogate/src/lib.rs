//! The MeanField surrogate: one small MLP per model, fed with the model's own
//! configuration and the aggregate GPU state. Training lives in the lab
//! (`mfsched_lab::training`); this crate only serves trained bundles.
//!
//! - [`features`]: the input layout (one home for it: training, CPU and GPU
//!   inference all use it).
//! - [`net`]: the inference form of a trained predictor (BatchNorm and input
//!   standardisation folded into dense layers) and its CPU arithmetic (GEMMs).
//! - [`serve`]: the one composition of the served predictor (bundle → MeanField →
//!   backend → field) that every command and the daemon use.
//! - [`fold`]: trained parameters (`mfsched_nn::Mlp`) → [`net::FoldedNet`].
//! - [`bundle`], [`bundled`]: the on-disk model bundle (safetensors + JSON), its
//!   validation, and the bundles embedded in the binary.
//! - [`meanfield`]: the [`MeanField`] predictor (`mfsched_core::predict::Predictor`).
//! - [`field`]: the candidate-aware (self-consistent) field, beyond the published design.
//! - [`cpu`]: batched CPU evaluation of a problem's predictors (table and joint).
//! - [`gpu`]: the same two entry points on a wgpu device (`crates/surrogate/src/meanfield.wgsl`).
//! - [`backend`]: choosing CPU or GPU (a software adapter loses to the CPU), with fallback.
//! - [`agreement`]: how far the GPU backend is from the CPU reference.
//! - [`target`]: what a net learns (absolute, log, relative to solo) and how its
//!   output becomes throughput.
//! - [`synthetic`]: seeded untrained predictors with the real shapes, for
//!   agreement checks and benchmarks without trained bundles.

pub mod agreement;
pub mod backend;
pub mod bundle;
pub mod bundled;
pub mod cpu;
pub mod features;
pub mod field;
pub mod fold;
pub mod gpu;
pub mod meanfield;
pub mod net;
pub mod serve;
pub mod synthetic;
pub mod target;

pub use bundle::Bundle;
pub use meanfield::MeanField;
