//! Evaluation: dynamic workload scenarios, closed-loop policy runs, side-by-side
//! comparison and the reproduction report.

pub(crate) mod closed_loop;
pub(crate) mod correction;
pub(crate) mod report;
