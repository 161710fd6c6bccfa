//! The mfsched domain, shared by every other crate: models and their knobs, the
//! joint space, scenarios, the predictor contract, profiles, workload traces and
//! the statistics helpers. No I/O beyond parsing and writing files atomically.

pub mod digest;
pub mod domain;
pub mod fsutil;
pub mod predict;
pub mod profile;
pub mod scenario;
pub mod stats;
pub mod text;
pub mod traces;
