//! The MeanField surrogate: one small MLP per model, fed with the model's own
//! configuration and the aggregate GPU state.
//!
//! - [`features`]: the input layout (one home for it: training, CPU and GPU
//!   inference all use it).
//! - [`net`]: the inference form of a trained predictor (BatchNorm and input
//!   standardisation folded into dense layers) and the CPU reference inference.
//! - [`fold`]: trained parameters (`mfsched_nn::Mlp`) → [`net::FoldedNet`].
//! - [`bundle`]: the on-disk model bundle (safetensors + JSON) and its validation.
//! - [`meanfield`]: the [`MeanField`] predictor (`crate::predict::Predictor`).

pub mod bundle;
pub mod bundled;
pub mod dataset;
pub mod features;
pub mod fold;
pub mod meanfield;
pub mod net;
pub mod split;
pub mod study;
pub mod training;

pub use bundle::Bundle;
pub use meanfield::{Backend, MeanField};
