//! mfsched: run-time configuration scheduling for AI inference models sharing one GPU.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of modules.

pub mod analytic;
pub mod domain;
pub mod eval;
pub mod fsutil;
pub mod plugin;
pub mod predict;
pub mod profile;
pub mod published;
pub mod runtime;
pub mod scenario;
pub mod sim;
pub mod surrogate;
pub mod svg;
pub mod template;
