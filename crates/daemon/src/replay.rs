//! Reading a decision log back for people: one line per tick, or a summary.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::declog::{LogContents, PolicyRecord, TickRecord};
use mfsched_core::printable;
use mfsched_plugin_host::{OUTPUT_MESSAGE_BYTES, OUTPUT_NAME_BYTES};

/// Names and messages come from plugins (through the log): printed escaped, so
/// none can forge a line.
fn outcome_text(r: &PolicyRecord) -> String {
    let policy = match &r.component {
        // Which build decided: the name alone does not say after a hot reload.
        Some(sha) => format!(
            "{}@{}",
            printable(&r.policy, OUTPUT_NAME_BYTES),
            mfsched_core::short_digest(sha)
        ),
        None => printable(&r.policy, OUTPUT_NAME_BYTES),
    };
    match &r.outcome {
        Ok(p) => {
            let utility = p
                .predicted_utility
                .map_or_else(String::new, |u| format!(" u={u:.4}"));
            format!("{policy} {:?}{utility} {}us", p.joint, r.latency_us)
        }
        Err(f) => format!(
            "{policy} FAILED {}: {} {}us",
            f.kind.as_str(),
            printable(&f.message, OUTPUT_MESSAGE_BYTES),
            r.latency_us
        ),
    }
}

fn unknown_or(v: Option<f64>, fmt: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "unknown".to_owned(), fmt)
}

/// One line per tick.
/// The index in `contents.utilities` of the utility tick `tick` was scored
/// with (`None` when the log records none for it).
fn segment(contents: &LogContents, tick: u64) -> Option<usize> {
    contents.utilities.iter().rposition(|u| u.tick <= tick)
}

pub fn lines(contents: &LogContents) -> String {
    let mut out = String::new();
    let mut scored_with = None;
    let mut priced = None;
    for r in &contents.records {
        // A line each time the utility changes, naming it for the ticks after.
        let now = segment(contents, r.tick);
        if now != scored_with
            && let Some(u) = now.map(|i| &contents.utilities[i])
        {
            writeln!(out, "utility {} from tick {}", u.label(), r.tick).ok();
        }
        scored_with = now;
        // A line each time the reconfiguration costs change (measured
        // downtimes replacing the scenario's): not at every daemon start.
        if let Some(c) = contents.costs.iter().find(|c| c.tick == r.tick) {
            if priced.is_some_and(|p| p != &c.costs) {
                let costs: Vec<String> = c
                    .costs
                    .iter()
                    .map(|c| format!("{:.3}/{:.3}", c.variant_switch, c.knob_change))
                    .collect();
                writeln!(
                    out,
                    "reconfiguration costs (variant/knob per model) {} from tick {}",
                    costs.join(" "),
                    r.tick
                )
                .ok();
            }
            priced = Some(&c.costs);
        }
        write!(
            out,
            "tick {} {} vram={} util={} | active {}{}",
            r.tick,
            r.state.workload,
            unknown_or(r.sample.vram_used_mib, |v| format!("{v:.0}MiB")),
            unknown_or(r.sample.utilization, |u| format!("{:.0}%", u * 100.0)),
            outcome_text(&r.active),
            if r.kept_last_valid {
                " (kept last valid)"
            } else {
                ""
            },
        )
        .ok();
        write!(out, " | applied {:?}", r.applied).ok();
        if !r.changed_models.is_empty() {
            write!(out, " changed {:?}", r.changed_models).ok();
        }
        for s in &r.shadows {
            write!(out, " | shadow {}", outcome_text(s)).ok();
        }
        if r.missed_before > 0 {
            write!(out, " | {} missed before", r.missed_before).ok();
        }
        out.push('\n');
    }
    out
}

#[derive(Debug, Default)]
struct PolicyStats {
    decisions: u64,
    failures: BTreeMap<&'static str, u64>,
    latencies_us: Vec<u64>,
    utility_sum: f64,
    utility_n: u64,
    non_finite_utility: u64,
}

/// Latency quantile in µs (nearest rank); 0 when there is none.
fn percentile(latencies_us: &[u64], q: f64) -> u64 {
    let mut values: Vec<f64> = latencies_us.iter().map(|&v| v as f64).collect();
    let p = mfsched_core::nearest_rank(&mut values, q);
    if p.is_nan() { 0 } else { p as u64 }
}

/// Totals per policy (active and shadow), gaps in tick numbering, the torn tail.
pub fn summary(contents: &LogContents) -> String {
    let records: &[TickRecord] = &contents.records;
    let mut out = String::new();
    let (first, last) = match (records.first(), records.last()) {
        (Some(f), Some(l)) => (f.tick, l.tick),
        _ => {
            writeln!(out, "records      0").ok();
            return out;
        }
    };
    let gaps = records
        .windows(2)
        .filter(|w| w[1].tick != w[0].tick + 1)
        .count();
    let missed: u64 = records.iter().map(|r| r.missed_before).sum();
    let kept = records.iter().filter(|r| r.kept_last_valid).count();
    let changes: usize = records.iter().map(|r| r.changed_models.len()).sum();
    let seconds = records.last().zip(records.first()).map_or(0.0, |(l, f)| {
        l.unix_ms.saturating_sub(f.unix_ms) as f64 / 1000.0
    });
    writeln!(out, "records      {}", records.len()).ok();
    writeln!(out, "ticks        {first}..={last} over {seconds:.1} s").ok();
    writeln!(out, "tick gaps    {gaps}").ok();
    writeln!(out, "missed ticks {missed}").ok();
    writeln!(out, "kept last valid (active policy failed) {kept}").ok();
    writeln!(out, "model changes applied {changes}").ok();
    // Utilities are not averaged across a change: a policy's row is per
    // utility it was scored with (`[uN]`, listed below) when there are several.
    let segments: Vec<Option<usize>> = records.iter().map(|r| segment(contents, r.tick)).collect();
    let several = segments.iter().any(|s| *s != segments[0]);
    // Builds are not merged either: a policy answered by several components
    // (hot-swapped) has a row per build (`@hash`), the ticks that failed
    // before any build answered in a row of their own (`@?`).
    type Key = (String, &'static str, Option<usize>, Option<String>);
    let mut stats: BTreeMap<Key, PolicyStats> = BTreeMap::new();
    for (r, &seg) in records.iter().zip(&segments) {
        let all =
            std::iter::once((&r.active, "active")).chain(r.shadows.iter().map(|s| (s, "shadow")));
        for (p, role) in all {
            let build = p
                .component
                .as_deref()
                .map(|c| mfsched_core::short_digest(c).to_owned());
            let s = stats
                .entry((p.policy.clone(), role, seg, build))
                .or_default();
            s.latencies_us.push(p.latency_us);
            match &p.outcome {
                Ok(prop) => {
                    s.decisions += 1;
                    match prop.predicted_utility {
                        Some(u) if u.is_finite() => {
                            s.utility_sum += u;
                            s.utility_n += 1;
                        }
                        // The utility scores a configuration under a floor as -inf.
                        Some(_) => s.non_finite_utility += 1,
                        None => {}
                    }
                }
                Err(f) => *s.failures.entry(f.kind.as_str()).or_default() += 1,
            }
        }
    }
    writeln!(
        out,
        "\n{:<20} {:<6} {:>9} {:>9} {:>10} {:>10} {:>10}  failures",
        "policy", "role", "decisions", "failed", "p50 us", "p99 us", "mean util"
    )
    .ok();
    let mut builds: BTreeMap<&str, std::collections::BTreeSet<&Option<String>>> = BTreeMap::new();
    for (policy, _, _, build) in stats.keys() {
        builds.entry(policy).or_default().insert(build);
    }
    let several_builds: Vec<String> = builds
        .iter()
        .filter(|(_, b)| b.len() > 1)
        .map(|(p, _)| (*p).to_owned())
        .collect();
    for ((policy, role, seg, build), s) in stats {
        let failed: u64 = s.failures.values().sum();
        let util = if s.utility_n > 0 {
            format!("{:.4}", s.utility_sum / s.utility_n as f64)
        } else {
            "-".to_owned()
        };
        let mut reasons: Vec<String> = s.failures.iter().map(|(k, n)| format!("{k}={n}")).collect();
        if s.non_finite_utility > 0 {
            reasons.push(format!(
                "({} decision(s) with non-finite utility, not in the mean)",
                s.non_finite_utility
            ));
        }
        let shown_build = several_builds.contains(&policy);
        let mut policy = printable(&policy, OUTPUT_NAME_BYTES);
        if shown_build {
            policy.push_str(&format!("@{}", build.as_deref().unwrap_or("?")));
        }
        if several {
            policy.push_str(&seg.map_or_else(|| " [u?]".to_owned(), |i| format!(" [u{}]", i + 1)));
        }
        writeln!(
            out,
            "{:<20} {role:<6} {:>9} {failed:>9} {:>10} {:>10} {util:>10}  {}",
            policy,
            s.decisions,
            percentile(&s.latencies_us, 0.5),
            percentile(&s.latencies_us, 0.99),
            reasons.join(" ")
        )
        .ok();
    }
    if !contents.utilities.is_empty() {
        writeln!(out, "\nutilities (from tick, scored with)").ok();
        for (i, u) in contents.utilities.iter().enumerate() {
            writeln!(out, "u{}  {:>6}  {}", i + 1, u.tick, u.label()).ok();
        }
    }
    if !contents.components.is_empty() {
        writeln!(out, "\ncomponents (identity, answered as, declares)").ok();
        for c in &contents.components {
            let declares = c.identity.metadata.describe();
            writeln!(
                out,
                "{}  {}  {}",
                c.identity.sha256,
                printable(&c.policy, OUTPUT_NAME_BYTES),
                if declares.is_empty() {
                    "(nothing)".to_owned()
                } else {
                    declares
                }
            )
            .ok();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declog::tests::record;

    /// The costs a log was decided with are printed where they change, not
    /// at each daemon start that records them again.
    #[test]
    fn a_line_says_when_the_reconfiguration_costs_change() {
        use crate::declog::CostsRecord;
        let (scenario, measured) = crate::declog::tests::two_models_costs();
        let costs = |tick, costs: &Vec<mfsched_core::ReconfigCosts>| CostsRecord {
            tick,
            costs: costs.clone(),
        };
        let contents = LogContents {
            records: (0..4).map(record).collect(),
            costs: vec![
                costs(0, &scenario),
                costs(2, &measured),
                costs(3, &measured),
            ],
            ..LogContents::default()
        };
        let text = lines(&contents);
        let said: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("reconfiguration costs"))
            .collect();
        assert_eq!(
            said,
            vec![
                "reconfiguration costs (variant/knob per model) 0.040/0.040 1.000/1.000 from tick 2"
            ],
            "{text}"
        );
        let at = |needle: &str| text.lines().position(|l| l.starts_with(needle));
        assert_eq!(at("reconfiguration costs"), at("tick 2").map(|i| i - 1));
    }

    /// A policy hot-swapped between two builds has a row per build, so the
    /// one that failed is told from the one that answered; a policy that one
    /// build answered keeps its plain row.
    #[test]
    fn the_summary_splits_a_policy_by_the_builds_that_answered() {
        let good = record(0);
        let mut failed = record(1);
        failed.active.component = Some("cd".repeat(32));
        failed.active.outcome = Err(mfsched_plugin_host::Failure {
            kind: mfsched_plugin_host::FailureKind::Error,
            message: "no".into(),
        });
        let contents = LogContents {
            records: vec![good, failed],
            ..LogContents::default()
        };
        let text = summary(&contents);
        let row = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("a row {prefix}: {text}"))
                .to_owned()
        };
        assert!(
            row("hold@abababababab").contains("        1         0"),
            "{text}"
        );
        assert!(row("hold@cdcdcdcdcdcd").contains("error=1"), "{text}");
        assert!(row("other ").contains("deadline=2"), "{text}");
    }
}
