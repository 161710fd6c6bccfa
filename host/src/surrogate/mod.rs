//! The MeanField surrogate: one small MLP per model, fed with the model's own
//! configuration and the aggregate GPU state.
//!
//! - [`features`]: the input layout (one home for it: training, CPU and GPU
//!   inference all use it).
//! - [`net`]: the inference form of a trained predictor (BatchNorm and input
//!   standardisation folded into dense layers) and the CPU reference inference.
//! - [`fold`]: trained parameters (`mfsched_nn::Mlp`) → [`net::FoldedNet`].

pub mod features;
pub mod fold;
pub mod net;
