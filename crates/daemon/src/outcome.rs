//! What the decision log records of each policy's answer: the one decision
//! pipeline (`mfsched_plugin_host::pipeline`) decides; this is its outcome in a
//! stable, serialisable form.

use mfsched_core::domain::JointConfig;
use mfsched_plugin_host::{DecisionFailure, PluginFailure, Verdict};
use serde::{Deserialize, Serialize};

/// A policy's proposal for one tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub joint: JointConfig,
    /// The utility the policy predicts for `joint`, if it computes one.
    pub predicted_utility: Option<f64>,
    /// Predicted throughput per model (the model's unit), if the policy computes it;
    /// used to count predicted SLA violations.
    pub predicted_throughput: Option<Vec<f64>>,
}

/// Why a policy gave no usable decision. The kind is a metrics label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// It did not answer within the tick's deadline.
    Deadline,
    /// It answered with an error or trapped.
    Error,
    /// It answered with a configuration the validation rejected.
    Invalid,
    /// No policy of that name is loaded.
    UnknownPolicy,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Deadline => "deadline",
            FailureKind::Error => "error",
            FailureKind::Invalid => "invalid",
            FailureKind::UnknownPolicy => "unknown-policy",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

/// What deciding produced: a proposal or a failure with its reason.
pub type DecideOutcome = Result<Proposal, Failure>;

/// A verdict of the decision pipeline as the decision log records it.
pub fn from_verdict(verdict: &Verdict) -> DecideOutcome {
    match &verdict.result {
        Ok(checked) => Ok(Proposal {
            joint: checked.config.clone(),
            predicted_utility: checked.utility,
            predicted_throughput: Some(checked.predictions.iter().map(|&t| f64::from(t)).collect()),
        }),
        Err(failure) => Err(Failure {
            kind: match failure {
                DecisionFailure::Plugin(PluginFailure::Deadline) => FailureKind::Deadline,
                DecisionFailure::Plugin(PluginFailure::Unknown(_)) => FailureKind::UnknownPolicy,
                DecisionFailure::Plugin(_) => FailureKind::Error,
                DecisionFailure::Rejected(_) => FailureKind::Invalid,
            },
            message: failure.to_string(),
        }),
    }
}
