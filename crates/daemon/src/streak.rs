//! Runs of failed ticks per policy, reduced to their two edges: a policy
//! starts failing, a policy answers again after so many failed ticks. The
//! daemon's log lines and the dashboard's events both come from these edges,
//! so an operator reads one line per run of failures, never one per tick.
//! The actuators key their runs of failed deliveries the same way (by their
//! configuration key, `actuator.file`, `actuator.webhook.urls.MODEL`).

use std::collections::BTreeMap;

/// An edge of a policy's run of failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The first failed tick after an answer (or the first tick asked).
    Failing,
    /// The first answer after `failed_ticks` failed ticks in a row.
    Recovered { failed_ticks: u64 },
}

/// The failed ticks in a row of each policy that is failing now.
#[derive(Debug, Default, Clone)]
pub struct Streaks {
    failing: BTreeMap<String, u64>,
}

impl Streaks {
    /// Notes one tick of `policy`; the edge it crossed, if any.
    pub fn observe(&mut self, policy: &str, failed: bool) -> Option<Change> {
        if failed {
            let run = self.failing.entry(policy.to_owned()).or_insert(0);
            *run += 1;
            (*run == 1).then_some(Change::Failing)
        } else {
            self.failing
                .remove(policy)
                .map(|failed_ticks| Change::Recovered { failed_ticks })
        }
    }

    /// Failed ticks in a row of `policy` up to its latest tick (0 when it answered);
    /// the tests' view of the count the edges are drawn from.
    #[cfg(test)]
    fn failing_for(&self, policy: &str) -> u64 {
        self.failing.get(policy).copied().unwrap_or(0)
    }

    /// Forgets the policies `asked` rejects (no longer active nor a shadow):
    /// a run of failures ends when the policy stops being asked, so asking it
    /// again later starts a new one with its own line.
    pub fn retain(&mut self, asked: impl Fn(&str) -> bool) {
        self.failing.retain(|p, _| asked(p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_edge_per_run_of_failures_with_its_length() {
        let mut s = Streaks::default();
        assert_eq!(s.observe("a", false), None, "answering is no news");
        assert_eq!(s.observe("a", true), Some(Change::Failing));
        for _ in 0..40 {
            assert_eq!(s.observe("a", true), None, "no line per tick");
        }
        assert_eq!(s.failing_for("a"), 41);
        assert_eq!(s.observe("b", true), Some(Change::Failing), "per policy");
        assert_eq!(
            s.observe("a", false),
            Some(Change::Recovered { failed_ticks: 41 })
        );
        assert_eq!(s.observe("a", false), None);
        assert_eq!(s.failing_for("a"), 0);
        assert_eq!(s.observe("a", true), Some(Change::Failing), "a new run");
    }

    #[test]
    fn a_policy_no_longer_asked_starts_over() {
        let mut s = Streaks::default();
        s.observe("gone", true);
        s.observe("kept", true);
        s.retain(|p| p == "kept");
        assert_eq!(s.failing_for("gone"), 0);
        assert_eq!(s.observe("gone", true), Some(Change::Failing));
        assert_eq!(s.observe("kept", true), None);
    }
}
