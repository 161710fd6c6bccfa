//! The mfsched lab: what reproduces and measures, never what a deployment runs on.
//!
//! - [`sim`]: the shared-GPU contention simulator, its calibration and noise ceiling.
//! - [`profiling`]: profiling runs on the simulator.
//! - [`training`]: profiles → training rows, stratified splits, fitting and scoring
//!   MeanField bundles, regenerating the embedded ones, the sample-complexity study.
//! - [`eval`]: closed-loop runs over the workload traces, A/B and reproduction reports.
//! - [`bench`]: inference and policy benchmarks, side by side in one process.
//! - [`analytic`]: the closed-form stand-in predictor.
//! - [`svg`]: charts; [`published`]: the published figures we print beside ours.
//!
//! Product crates never depend on this one (`tests/all/layering.rs` checks it, on
//! `cargo metadata`).

pub mod analytic;
pub mod bench;
pub mod eval;
pub mod html;
pub mod live_profiling;
pub mod profiling;
pub mod published;
pub mod sim;
pub mod svg;
pub mod training;
