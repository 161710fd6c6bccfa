//! Why a plugin call produced no usable answer, as a typed value.

use mfsched_core::{PredictError, error_chain};
use wasmtime::Trap;

/// A plugin call that failed, classified.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PluginFailure {
    #[error("ran past its per-call deadline")]
    Deadline,
    #[error("hit the memory limit (asked for {requested_mib} MiB)")]
    Memory { requested_mib: usize },
    #[error("trapped: {0}")]
    Trap(String),
    #[error("refused to decide: {0}")]
    Refused(String),
    #[error("misused the host interface: {0}")]
    Misuse(String),
    #[error("the utility component failed: {0}")]
    Utility(String),
    #[error("could not be instantiated: {0}")]
    Instantiate(String),
    #[error("is not loaded: no policy '{0}'")]
    Unknown(String),
    /// A prediction the policy asked the host for failed. Recorded as text, so
    /// the message carries the whole chain.
    #[error("{}", predict_reason(.0))]
    Predict(PredictError),
    #[error("could not be served by the host: {0}")]
    Host(String),
}

impl PluginFailure {
    /// The failure said of a policy's call: "the policy ran past its
    /// deadline", but "the utility component the policy called failed: …",
    /// whose cause is the utility's, not the policy's.
    pub fn of_the_policy(&self) -> String {
        match self {
            Self::Utility(why) => format!("the utility component the policy called failed: {why}"),
            other => format!("the policy {other}"),
        }
    }
}

/// A candidate outside the joint space is the policy's misuse of `predict`;
/// any other prediction failure is the host's.
fn predict_reason(e: &PredictError) -> String {
    match e {
        PredictError::OutOfRange { .. } => format!("misused the host interface: predict: {e}"),
        _ => format!("could not be served by the host: {}", error_chain(e)),
    }
}

/// Classifies an error returned by a call into a plugin. `memory_refused` is
/// the store's memory cap record (a refused growth explains the trap).
pub fn classify(e: &wasmtime::Error, memory_refused: Option<usize>) -> PluginFailure {
    if let Some(f) = e.downcast_ref::<PluginFailure>() {
        return f.clone();
    }
    if let Some(bytes) = memory_refused {
        return PluginFailure::Memory {
            requested_mib: bytes.div_ceil(1 << 20),
        };
    }
    if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return PluginFailure::Deadline;
    }
    PluginFailure::Trap(describe(e))
}

/// One printable line of bounded length: the outermost message and, when
/// different, the root cause (Wasmtime puts a multi-line backtrace in the outer
/// message: only its first line is kept).
pub fn describe(e: &wasmtime::Error) -> String {
    let first_line = |s: String| s.lines().next().unwrap_or("").trim().to_string();
    let top = first_line(e.to_string());
    let root = first_line(e.root_cause().to_string());
    let line = if top == root || top.is_empty() {
        root
    } else {
        format!("{top}: {root}")
    };
    crate::output::printable(&line, crate::output::MESSAGE_BYTES)
}
