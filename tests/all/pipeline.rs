//! One decision pipeline: the same invalid answers (a configuration off the
//! grid, one over the card's VRAM, one under a model's SLA floor) are rejected
//! for the same reason by `decide`, by `ab` and by the daemon, and nothing
//! invalid is ever applied.

use std::path::Path;

use crate::common::process::{mfsched, stderr, stdout};

/// The hostile components and the reason every path must give for each.
const HOSTILE: &[(&str, &str)] = &[
    ("out-of-range", "is out of range"),
    ("vram-infeasible", "over the"),
    ("floor-breaker", "under its SLA floor"),
];

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
            utf8(&crate::common::test_plugin(name)),
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
            utf8(&crate::common::test_plugin(name)),
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

/// `mfsched run` self-checks the files of its plugin directory at start-up,
/// through the same pipeline: each hostile policy is refused there, for the
/// same reason, and the daemon does not start on it.
#[test]
fn the_daemon_refuses_each_invalid_policy_at_start_up_for_the_same_reason() {
    for (name, reason) in HOSTILE {
        let dir = tempfile::tempdir().expect("temp dir");
        crate::common::plugin_dir(dir.path(), &[(name, name)]);
        let config = crate::common::daemon_config(
            dir.path(),
            "paper-n5",
            1000,
            &format!("active = \"{name}\"\nplugin_dir = \"plugins\""),
            "",
        );
        let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "2"]);
        assert!(!out.status.success(), "{name}");
        let err = stderr(&out);
        assert!(err.contains("self-check failed"), "{name}: {err}");
        assert!(
            err.contains("the decision was rejected") || err.contains("its decision was rejected"),
            "{name}: {err}"
        );
        assert!(err.contains(reason), "{name}: {err}");
        assert!(
            err.contains(&format!("policy '{name}' is not loaded")),
            "{name}: {err}"
        );
    }
}

/// The daemon's tick, with the hostile components offered directly (as a
/// plugin that passed its self-check and turned later would be): every tick
/// rejects the answer for the same reason and applies nothing new.
#[test]
fn the_daemon_rejects_each_invalid_answer_on_every_tick_and_applies_nothing_invalid() {
    use mfsched_daemon::ActuatorConfig;
    use mfsched_daemon::Actuators;
    use mfsched_daemon::DecisionLog;
    use mfsched_daemon::FootprintSampler;
    use mfsched_daemon::Metrics;
    use mfsched_daemon::read_decision_log;
    use mfsched_daemon::{Daemon, Deciding, LoopSettings, WorkloadSource};
    use mfsched_plugin_host::FailureKind;
    use mfsched_plugin_host::{CompileCache, Pipeline, PluginEngine, PluginLimits};
    use mfsched_plugin_host::{Loaded, Registry, load_plugin_file, resolve_utility};
    use std::sync::Arc;
    use std::time::Duration;

    let scenario = mfsched_core::load_scenario("paper-n5").expect("bundled");
    let served = mfsched_surrogate::serve(
        &scenario,
        mfsched_surrogate::ServeOptions {
            models: None,
            backend: mfsched_surrogate::BackendChoice::Cpu,
            field: mfsched_core::Field::Observed,
        },
    )
    .expect("the embedded bundle");
    let engine = Arc::new(
        PluginEngine::new(PluginLimits::default(), CompileCache::Default).expect("engine"),
    );
    let registry = Arc::new(Registry::default());
    let utility =
        registry.utility_slot(resolve_utility(&engine, "utility", None).expect("utility"));
    for (name, _) in HOSTILE {
        match load_plugin_file(&engine, &crate::common::test_plugin(name)).expect(name) {
            Loaded::Policy(p) => {
                registry.policy_slot(p);
            }
            Loaded::Utility(_) => panic!("{name} is a policy"),
        }
    }
    let pipeline = Arc::new(Pipeline::new(
        engine,
        utility,
        Arc::clone(&served.predictor),
    ));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for (name, reason) in HOSTILE {
        let dir = tempfile::tempdir().expect("temp dir");
        let log_path = dir.path().join("decisions.log");
        let (log, _) = DecisionLog::open(&log_path).expect("log");
        let metrics = Arc::new(Metrics::default());
        let actuators = Actuators::new(
            &ActuatorConfig::default(),
            &served.problem,
            Arc::clone(&metrics),
        )
        .expect("actuators");
        let settings = LoopSettings {
            period: Duration::from_millis(1000),
            deadline: Duration::from_millis(900),
            active: (*name).to_owned(),
            shadows: Vec::new(),
            unknown_utilization: 0.5,
            contention_window: Duration::from_secs(5),
            downtime_cost_horizon: None,
            reversal_damping: None,
            correction: None,
            floors: mfsched_core::Floors::point(served.problem.sla_floors.clone()),
            workload: WorkloadSource::Fixed(mfsched_core::WorkloadLevel::Medium),
        };
        let deciding = Deciding::new(
            Arc::clone(&pipeline),
            Arc::clone(&registry) as Arc<dyn mfsched_plugin_host::PolicySource>,
            Vec::new(),
        );
        let daemon = Daemon::new(
            settings,
            served.problem.clone(),
            Box::new(FootprintSampler),
            deciding,
            actuators,
            log,
            metrics,
        )
        .expect("daemon");
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        rt.block_on(daemon.run(stop_rx, Some(2))).expect("runs");
        let log = read_decision_log(&log_path).expect("log");
        assert_eq!(log.records.len(), 2, "{name}");
        for r in &log.records {
            let failure = r.active.outcome.as_ref().expect_err("rejected");
            assert_eq!(failure.kind, FailureKind::Invalid, "{name}");
            assert!(
                failure.message.contains("the decision was rejected"),
                "{failure:?}"
            );
            assert!(failure.message.contains(reason), "{name}: {failure:?}");
            assert!(r.kept_last_valid);
            assert_eq!(
                r.applied, served.problem.current,
                "{name}: nothing new applied"
            );
        }
    }
}

/// A parameter the policy does not declare is refused by every command, with
/// the ones it knows; `plugins check` is no exception.
#[test]
fn an_undeclared_parameter_is_refused_everywhere_naming_the_known_ones() {
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n3",
        "--policy",
        "ga",
        "--param",
        "bogus=1",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("unknown parameter 'bogus' for policy 'ga'"),
        "{err}"
    );
    assert!(
        err.contains("population"),
        "the known ones are named: {err}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let out = mfsched(&[
        "ab",
        "--a",
        "ga:bogus=1",
        "--b",
        "static-budget",
        "--scenarios",
        "steady",
        "--ticks",
        "2",
        "--out",
        utf8(dir.path()),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown parameter 'bogus'"),
        "{}",
        stderr(&out)
    );
    let ga = Path::new(mfsched_test_programs::TEST_PLUGINS_DIR)
        .join("../wasm32-wasip2/release/mfsched_plugin_ga.wasm");
    let out = mfsched(&["plugins", "check", utf8(&ga), "--param", "bogus=1"]);
    assert!(!out.status.success());
    assert!(
        stdout(&out).contains("ERROR unknown parameter 'bogus'"),
        "{}",
        stdout(&out)
    );
}
