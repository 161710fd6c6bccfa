//! Benchmarks, measured side by side in one process.

pub mod policies;
pub mod surrogate;
