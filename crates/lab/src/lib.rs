//! The mfsched lab: what reproduces and measures, never what a deployment runs on.
//!
//! - `sim`: the shared-GPU contention simulator, its calibration and noise ceiling.
//! - `profiling`: profiling runs on the simulator; `live_profiling` against real
//!   servers.
//! - `training`: profiles → training rows, stratified splits, fitting and scoring
//!   MeanField bundles, regenerating the embedded ones, the sample-complexity study.
//! - `eval`: closed-loop runs over the workload traces, A/B and reproduction reports.
//! - `bench`: inference and policy benchmarks, side by side in one process.
//! - `gpu_proxy`: `mfsched gpu-proxy`, wgpu kernels of tunable intensity served
//!   as model servers, for co-location profiles on a real card.
//! - `analytic`: the closed-form stand-in predictor.
//! - `svg`, `html`: charts and pages; `published`: the published figures we print
//!   beside ours.
//!
//! Product crates never depend on this one (`tests/all/layering.rs` checks it, on
//! `cargo metadata`).
//!
//! # The façade
//!
//! Every module is private, as in the product crates; the binary names what is
//! re-exported here, qualified where a name reads well only beside its module
//! (`bench::policies::run` as [`run_policy_bench`], `training::cv::run` as
//! [`run_cv`], `sim::serve::Servers` as [`SimServers`]).

mod analytic;
mod bench;
mod eval;
mod gpu_proxy;
mod html;
mod live_profiling;
mod profiling;
mod published;
mod sim;
mod svg;
mod training;

/// Closed-loop evaluation and reports, with the published figures beside ours.
pub use analytic::AnalyticPredictor;
/// Benchmarks, side by side in one process.
pub use bench::forecast::{overall as overall_forecast_scores, run as run_forecast_bench};
pub use bench::peer::{
    PYTHON as PEER_PYTHON, PeerFigures, PeerRun, run as run_peer_bench,
    scenario_toml as peer_scenario_toml,
};
pub use bench::policies::{
    Contender, ContenderResult, gaps as utility_gaps, run as run_policy_bench, ticks as bench_ticks,
};
pub use bench::surrogate::{
    Timing, candidate_aware as bench_candidate_aware, run as run_surrogate_bench,
    steps as surrogate_bench_steps,
};
pub use bench::{format_load_average, load_average};
pub use eval::closed_loop::{Conditions, Harness, Perturbation, PolicySpec, Summary};
/// The online correction on a perturbed simulated card.
pub use eval::correction::{
    CONDITIONS as CORRECTION_CONDITIONS, CorrectionResult, CorrectionRow, CorrectionStudy,
};
pub use eval::report::Comparison;
/// GPU proxy workloads: wgpu kernels standing in for model servers (`mfsched gpu-proxy`).
pub use gpu_proxy::{
    Family as ProxyFamily, GpuProxy, Precision as ProxyPrecision, Shape as ProxyShape,
};
/// Charts and pages.
pub use html::page as html_page;
/// Profiling, on the simulator and against real servers.
pub use live_profiling::{
    LiveOptions, StateSource, remaining_points as live_remaining_points, run as profile_live,
};
pub use profiling::run as run_profiling;
pub use published::{
    N_STAR as PUBLISHED_N_STAR, R2 as PUBLISHED_R2, table2_row as published_table2_row,
};
/// The simulator (always named as one), its stand-in servers, calibration and ceiling.
pub use sim::calibration::{
    Check as CalibrationCheck, REPEATS as CALIBRATION_REPEATS, SCENARIO as CALIBRATION_SCENARIO,
    calibrate,
};
pub use sim::calibration_plot::svg as calibration_svg;
pub use sim::ceiling::noise_ceiling;
pub use sim::sampler::simulated_gpu;
pub use sim::serve::{MetricsFormat, ServeOptions as SimServeOptions, Servers as SimServers};
pub use sim::{DEVICE_NAME as SIM_DEVICE_NAME, Simulator};
pub use svg::{LineChart, Series};
/// Training, cross-validation, regeneration of the embedded bundles, the study.
pub use training::cv::{CvConfig, run as run_cv};
pub use training::dataset::build as build_dataset;
pub use training::fit::{
    Fidelity, HOLDOUT_FRACTION, TrainOptions, default_target, fidelity, output_maps,
    predictions as bundle_predictions, solo_tables, train_bundle, train_net,
};
pub use training::regenerate::{DEFAULT_SEED, profile_on_simulator, regenerate, regenerate_plan};
pub use training::study::{StudyConfig, StudyResult, run as run_study};
