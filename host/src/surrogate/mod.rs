//! The MeanField surrogate: one small MLP per model, fed with the model's own
//! configuration and the aggregate GPU state.
//!
//! - [`features`]: the input layout (one home for it: training, CPU and GPU
//!   inference all use it).
//! - [`net`]: the inference form of a trained predictor (BatchNorm and input
//!   standardisation folded into dense layers) and the CPU reference inference.
//! - [`fold`]: trained parameters (`mfsched_nn::Mlp`) → [`net::FoldedNet`].
//! - [`dataset`], [`split`], [`training`]: profiles → training rows, stratified
//!   splits, training and scoring one predictor per model.
//! - [`bundle`], [`bundled`]: the on-disk model bundle (safetensors + JSON), its
//!   validation, and the bundles embedded in the binary.
//! - [`meanfield`]: the [`MeanField`] predictor (`crate::predict::Predictor`).
//! - [`field`]: the candidate-aware (self-consistent) field, beyond the published design.
//! - [`cpu`]: batched CPU evaluation of a problem's predictors (table and joint).
//! - [`gpu`]: the same two entry points on a wgpu device (`shaders/meanfield.wgsl`).
//! - [`backend`]: choosing CPU or GPU (a software adapter loses to the CPU), with fallback.
//! - [`agreement`]: how far the GPU backend is from the CPU reference.
//! - [`bench`]: CPU and wgpu inference timed side by side.
//! - [`synthetic`]: seeded untrained predictors with the real shapes, for
//!   agreement checks and benchmarks without trained bundles.
//! - [`study`]: the published sample-complexity protocol.

pub mod agreement;
pub mod backend;
pub mod bench;
pub mod bundle;
pub mod bundled;
pub mod cpu;
pub mod dataset;
pub mod features;
pub mod field;
pub mod fold;
pub mod gpu;
pub mod meanfield;
pub mod net;
pub mod split;
pub mod study;
pub mod synthetic;
pub mod training;

pub use bundle::Bundle;
pub use meanfield::MeanField;
