//! From profiles to MeanField bundles, and the studies built on that.
//!
//! - [`dataset`], [`split`], [`fit`]: profiles → training rows, stratified
//!   splits, training and scoring one predictor per model.
//! - [`regenerate`]: the embedded bundles, rebuilt from seeded simulator profiles.
//! - [`study`]: the published sample-complexity protocol.
//! - [`cv`]: cross-validation on a user's own profile, beside baselines.
//! - [`factors`]: the co-runner-factors field, learnt from a training set's rows.

pub(crate) mod cv;
pub(crate) mod dataset;
pub(crate) mod factors;
pub(crate) mod fit;
pub(crate) mod regenerate;
pub(crate) mod split;
pub(crate) mod study;
