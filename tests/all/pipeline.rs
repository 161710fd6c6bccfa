//! One decision pipeline: the same invalid answers (a configuration off the
//! grid, one over the card's VRAM, one under a model's SLA floor) are rejected
//! for the same reason by `decide`, by `ab` and by the daemon, and nothing
//! invalid is ever applied.

use std::path::{Path, PathBuf};

use crate::common::process::{mfsched, stderr, stdout};

/// The hostile components and the reason every path must give for each.
const HOSTILE: &[(&str, &str)] = &[
    ("out-of-range", "is out of range"),
    ("vram-infeasible", "over the"),
    ("floor-breaker", "under its SLA floor"),
];

fn hostile(name: &str) -> PathBuf {
    Path::new(mfsched_plugin_host::TEST_PLUGINS_DIR).join(format!("{name}.wasm"))
}

fn utf8(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

#[test]
fn decide_rejects_each_invalid_answer_and_keeps_the_running_configuration() {
    for (name, reason) in HOSTILE {
        let out = mfsched(&[
            "decide",
            "--scenario",
            "paper-n5",
            "--policy",
            utf8(&hostile(name)),
        ]);
        assert!(!out.status.success(), "{name}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(err.contains("the decision was rejected"), "{name}: {err}");
        assert!(err.contains(reason), "{name}: {err}");
        assert!(
            err.contains("running configuration was kept"),
            "{name}: {err}"
        );
        assert!(stdout(&out).contains("KEPT"), "{name}: {}", stdout(&out));
    }
}

#[test]
fn ab_rejects_each_invalid_answer_on_every_tick() {
    for (name, reason) in HOSTILE {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = mfsched(&[
            "ab",
            "--problem",
            "paper-n5",
            "--a",
            utf8(&hostile(name)),
            "--b",
            "static-budget:k=500",
            "--scenarios",
            "steady",
            "--ticks",
            "3",
            "--out",
            utf8(dir.path()),
        ]);
        let json: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("results.json")).expect("results.json"),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}; {}", stderr(&out)));
        let runs = json["runs"].as_array().expect("runs");
        let run = runs
            .iter()
            .find(|r| r["policy"].as_str().is_some_and(|p| p.contains(name)))
            .unwrap_or_else(|| panic!("{name}: no run in {runs:?}"));
        let ticks = run["ticks"].as_array().expect("ticks");
        assert_eq!(ticks.len(), 3);
        for t in ticks {
            assert_eq!(t["accepted"], false, "{name}: {t}");
            let failure = t["failure"].as_str().expect("a failure");
            assert!(failure.contains("the decision was rejected"), "{failure}");
            assert!(failure.contains(reason), "{name}: {failure}");
        }
    }
}

#[test]
fn the_daemon_rejects_each_invalid_answer_and_applies_nothing_invalid() {
    let problem = mfsched_core::scenario::load("paper-n5")
        .expect("bundled")
        .problem;
    for (name, reason) in HOSTILE {
        let dir = tempfile::tempdir().expect("temp dir");
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins).expect("plugin dir");
        std::fs::copy(hostile(name), plugins.join(format!("{name}.wasm"))).expect("copy");
        let config = dir.path().join("mfsched.toml");
        std::fs::write(
            &config,
            format!(
                r#"scenario = "paper-n5"
seed = 7

[loop]
period_ms = 1000
deadline_ms = 800

[policy]
active = "{name}"
plugin_dir = "plugins"

[sampler]
kind = "footprint"

[log]
path = "decisions.log"

[api]
listen = "127.0.0.1:0"
"#
            ),
        )
        .expect("config");
        let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "2"]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let log = mfsched_daemon::declog::read(&dir.path().join("decisions.log")).expect("log");
        assert_eq!(log.records.len(), 2, "{name}");
        for r in &log.records {
            let failure = r.active.outcome.as_ref().expect_err("rejected");
            assert_eq!(
                failure.kind,
                mfsched_daemon::outcome::FailureKind::Invalid,
                "{name}"
            );
            assert!(failure.message.contains(reason), "{name}: {failure:?}");
            assert!(r.kept_last_valid);
            assert_eq!(r.applied, problem.current, "{name}: nothing new applied");
        }
    }
}
