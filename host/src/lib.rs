//! mfsched: run-time configuration scheduling for AI inference models sharing one GPU.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of modules.

pub mod domain;
pub mod eval;
pub mod predict;
pub mod runtime;
pub mod scenario;
pub mod surrogate;
pub mod svg;
