//! Evaluation: dynamic workload scenarios, closed-loop policy runs, side-by-side
//! comparison and the reproduction report.

pub mod closed_loop;
pub mod report;
