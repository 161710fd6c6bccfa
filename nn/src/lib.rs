//! Small dense regression networks trained in plain Rust, bit-reproducibly.
//!
//! The MeanField surrogate trains thousands of tiny MLPs (Linear → BatchNorm →
//! ReLU → Dropout, twice, then Linear → Sigmoid) on a few hundred rows each. A
//! general tensor library brings little here and costs reproducibility (candle
//! cannot seed its CPU device), so this crate does the forward pass, manual
//! backpropagation and Adam itself, drawing every random number (initialisation,
//! shuffling, dropout masks) from the project's seeded [`mfsched_rng::Rng`]:
//! same data and seed, bit-identical weights, on any build profile.
//!
//! It is its own crate so that the dev profile can compile it optimised (see the
//! workspace `Cargo.toml`): the test suite retrains real bundles.
//!
//! - [`kernels`]: the vectorisable inner loops (dot, axpy).
//! - [`mlp`]: the trained parameters in PyTorch's layout and the eval-mode forward pass.
//! - [`train`]: the training loop.
//! - [`ridge`]: ridge regression, the linear model under a net with a linear skip.
//! - [`metrics`]: R² and friends.

pub mod kernels;
pub mod metrics;
pub mod mlp;
pub mod ridge;
pub mod train;

pub use mlp::{BatchNorm, Hidden, Linear, Mlp, Standardize, TargetScale};
pub use train::{MIN_INPUT_STD, SkipChoice, TrainConfig, TrainError, train, train_explained};
