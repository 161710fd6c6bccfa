//! mfsched: run-time configuration scheduling for AI inference models sharing one GPU.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of modules.

pub mod domain;
pub mod fsutil;
pub mod predict;
pub mod scenario;
pub mod surrogate;
