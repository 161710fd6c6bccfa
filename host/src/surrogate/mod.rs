//! The MeanField surrogate: one small MLP per model, fed with the model's own
//! configuration and the aggregate GPU state.
//!
//! - [`features`]: the input layout (one home for it: training, CPU and GPU
//!   inference all use it).
//! - [`net`]: the inference form of a trained predictor (BatchNorm and input
//!   standardisation folded into dense layers) and the CPU reference inference.
//! - [`cpu`]: batched CPU evaluation of a problem's predictors (table and joint).
//! - [`gpu`]: the same two entry points on a wgpu device (`shaders/meanfield.wgsl`).
//! - [`backend`]: choosing CPU or GPU (a software adapter loses to the CPU), with fallback.
//! - [`bench`]: CPU and wgpu inference timed side by side.
//! - [`agreement`]: how far the GPU backend is from the CPU reference.
//! - [`synthetic`]: seeded untrained predictors with the real shapes, for
//!   agreement checks and benchmarks without trained bundles.

pub mod agreement;
pub mod backend;
pub mod bench;
pub mod cpu;
pub mod features;
pub mod gpu;
pub mod net;
pub mod synthetic;
