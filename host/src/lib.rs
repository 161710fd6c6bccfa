//! mfsched: run-time configuration scheduling for AI inference models sharing one GPU.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of modules.

pub mod atomic_write;
pub mod domain;
pub mod predict;
pub mod profile;
pub mod scenario;
pub mod sim;
pub mod surrogate;
