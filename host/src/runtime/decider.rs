//! The seam between the decision loop and whatever decides: the plugin host in
//! production (policies as Wasm components), built-in policies, test deciders.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::domain::{GpuState, JointConfig, Problem};

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

/// Something that decides with named policies.
///
/// Implementations must be callable from several threads at once: the loop asks
/// the active and shadow policies in parallel. `decide` should honour `deadline`
/// itself (the plugin host interrupts the guest); the loop also stops waiting at
/// the deadline and records a `Deadline` failure, so a decider that overruns can
/// never stall a tick.
pub trait Decider: Send + Sync {
    /// The policies it can decide with, sorted.
    fn policies(&self) -> Vec<String>;

    fn decide(
        &self,
        policy: &str,
        problem: &Problem,
        state: &GpuState,
        deadline: Duration,
    ) -> DecideOutcome;

    /// How many times policies were reloaded from disk since start (hot reload).
    fn reloads(&self) -> u64 {
        0
    }
}

/// The built-in policies, available without any plugin.
///
/// `hold` keeps the running configuration: the safe default while no search
/// policy is configured, and the "do nothing" baseline in A/B comparisons.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuiltinDecider;

pub const HOLD: &str = "hold";

impl Decider for BuiltinDecider {
    fn policies(&self) -> Vec<String> {
        vec![HOLD.to_owned()]
    }

    fn decide(
        &self,
        policy: &str,
        problem: &Problem,
        _state: &GpuState,
        _deadline: Duration,
    ) -> DecideOutcome {
        match policy {
            HOLD => Ok(Proposal {
                joint: problem.current.clone(),
                predicted_utility: None,
                predicted_throughput: None,
            }),
            other => Err(Failure {
                kind: FailureKind::UnknownPolicy,
                message: format!("no built-in policy '{other}' (built-in: {HOLD})"),
            }),
        }
    }
}

/// Checks a proposal before it may be applied: arity, ranges, VRAM cap.
pub fn validate(problem: &Problem, proposal: &Proposal) -> Result<(), Failure> {
    problem
        .check_feasible(&proposal.joint)
        .map_err(|e| Failure {
            kind: FailureKind::Invalid,
            message: e.to_string(),
        })?;
    if let Some(t) = &proposal.predicted_throughput
        && t.len() != problem.models.len()
    {
        return Err(Failure {
            kind: FailureKind::Invalid,
            message: format!(
                "predicted throughput has {} values for {} models",
                t.len(),
                problem.models.len()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_keeps_the_running_configuration_and_it_validates() {
        let mut p = crate::scenario::load("paper-n3").expect("bundled").problem;
        p.current = vec![1, 0, 2];
        let state = GpuState {
            workload: crate::domain::WorkloadLevel::Low,
            vram_used_mib: 0.0,
            utilization: 0.0,
        };
        let out = BuiltinDecider
            .decide(HOLD, &p, &state, Duration::from_millis(5))
            .expect("hold always answers");
        assert_eq!(out.joint, vec![1, 0, 2]);
        validate(&p, &out).expect("feasible");
        let err = BuiltinDecider
            .decide("ga", &p, &state, Duration::from_millis(5))
            .expect_err("not built in");
        assert_eq!(err.kind, FailureKind::UnknownPolicy);
    }

    #[test]
    fn validation_rejects_out_of_range_and_wrong_arity() {
        let p = crate::scenario::load("paper-n2").expect("bundled").problem;
        let bad = |joint: Vec<u32>| Proposal {
            joint,
            predicted_utility: None,
            predicted_throughput: None,
        };
        assert_eq!(
            validate(&p, &bad(vec![0])).expect_err("arity").kind,
            FailureKind::Invalid
        );
        assert!(validate(&p, &bad(vec![9999, 0])).is_err());
    }
}
