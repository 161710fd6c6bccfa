//! The mfsched domain, shared by every other crate: models and their knobs, the
//! joint space, scenarios, the predictor contract, profiles, workload traces and
//! the statistics helpers. No I/O beyond parsing and writing files atomically.
//!
//! # The façade
//!
//! Every module is private; what other crates may name is re-exported here
//! (`tests/all/layering.rs` checks the lab and the binary name nothing below the
//! root). Names that read well only beside their module are qualified
//! (`scenario::load` as [`load_scenario`], `profile::read_csv` as
//! [`read_profile`], `traces::generate` as [`generate_trace`]).

mod correction;
mod digest;
mod domain;
mod floors;
mod fsutil;
mod predict;
mod profile;
mod scenario;
mod stats;
mod text;
mod traces;

/// Online correction of a predictor from measured throughput.
pub use correction::{
    Corrected, Correction, CorrectionConfig, DriftEdge, ForcedOut, MAX_FORCED_OUT_DOUBLINGS,
    MAX_FORCED_OUT_TICKS, MAX_TRACKED_CONFIGS, ModelCorrection,
};
/// Files read with a bound and written atomically; outside text made printable;
/// digests; statistics.
pub use digest::{sha256_hex, short as short_digest};
/// Models, their knobs and configurations, the joint space, the GPU state.
pub use domain::{
    GpuState, Infeasible, JointConfig, JointSpace, Knob, KnobEncoding, KnobSetting, KnobValue,
    LocalConfig, Model, Problem, ReconfigCosts, ThroughputRange, WorkloadLevel,
};
/// SLA floors as declared and as decisions enforce them (split-conformal margins).
pub use floors::{
    DEFAULT_MISS_RATE as DEFAULT_FLOOR_MISS_RATE, FloorMargin, Floors, MIN_LOWER_RATIO, OutOfReach,
    REACH_BAND as FLOOR_REACH_BAND, REACH_KEEP_BAND as FLOOR_REACH_KEEP_BAND,
    met_together as floors_met_together, miss_rate as floor_miss_rate,
    within_reach as floors_within_reach,
};
pub use fsutil::{
    MAX_CONFIG_BYTES, kind_of as file_kind, read_capped, read_capped_to_string, write_atomically,
};
/// The contract between predictors and their users.
pub use predict::{
    Field, InSpace, PerCandidate, PredictError, Predictor, predicted_quantile_floors,
    predicted_ranges, table_offsets,
};
/// Profiles (measured throughput, CSV on disk) and how they are sampled.
pub use profile::check::{
    ColumnSummary, check_file as check_profile_file, resolve_scenario as resolve_profile_scenario,
};
pub use profile::csv::{
    check_row as check_profile_row, peek as peek_profile, read_columns as read_profile_columns,
    read_csv_bytes as read_profile_bytes,
};
pub use profile::{
    DEFAULT_REPEATS as DEFAULT_PROFILE_REPEATS, Profile, ProfileRow, SamplingPlan, SoloRow,
    read_csv as read_profile, write_csv as write_profile,
};
/// Scenario files and the bundled scenarios.
pub use scenario::{
    BUNDLED as BUNDLED_SCENARIOS, BUNDLED_ZOO, Scenario,
    bundled_families as bundled_scenario_families, bundled_names as bundled_scenario_names,
    from_toml as scenario_from_toml, instantiate as instantiate_scenario, load as load_scenario,
    parse as parse_scenario,
};
pub use stats::{mean, median_duration, nearest_rank, nearest_rank_sorted, quantile_ms};
pub use text::{error_chain, path as printable_path, printable, toml_error as toml_error_line};
/// Workload traces.
pub use traces::{
    DEFAULT_TICKS as DEFAULT_TRACE_TICKS, MAX_TICKS as MAX_TRACE_TICKS, TRACE_NAMES, Trace,
    generate as generate_trace,
};
