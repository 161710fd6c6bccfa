//! End-to-end tests: they run the `mfsched` binary as a user would.

use std::process::{Command, Output};

use crate::common::process::{fails_in_one_line, mfsched, stderr, stdout};

#[test]
fn scenario_show_paper_n5_prints_the_published_feasible_count() {
    let out = mfsched(&["scenario", "show", "paper-n5"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("VRAM-feasible         78732"), "{text}");
    assert!(text.contains("llama7b"), "{text}");
}

#[test]
fn scenario_list_names_every_bundled_scenario() {
    let out = mfsched(&["scenario", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for n in 2..=6 {
        assert!(text.contains(&format!("paper-n{n}")), "{text}");
    }
}

#[test]
fn unknown_scenario_is_one_clear_line_and_a_failure() {
    let out = mfsched(&["scenario", "show", "paper-n9"]);
    let err = fails_in_one_line(&out, "");
    assert!(err.contains("unknown scenario 'paper-n9'"), "{err}");
}

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Copies a daemon config fixture into `dir` (its relative paths then land there).
fn daemon_config(dir: &Path, fixture: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/daemon")
        .join(fixture);
    let dst = dir.join("mfsched.toml");
    std::fs::copy(&src, &dst).expect("copy the fixture");
    dst
}

#[test]
fn run_serves_the_api_and_stops_cleanly_on_sigterm_with_a_replayable_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = daemon_config(dir.path(), "fast-footprint.toml");
    let (child, mut daemon_err, addr) = common::process::start_daemon(&config);
    // Killed if an assertion fails before it is stopped.
    let mut daemon = common::process::Killed(child);
    common::wait_for(std::time::Duration::from_secs(60), "3 ticks", &[], || {
        let (_, page) = common::http(addr, "GET", "/metrics", None);
        (common::metric(&page, "mfsched_ticks_total")? >= 3.0).then_some(())
    });
    let (status, body) = common::http(addr, "GET", "/healthz", None);
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = common::http(addr, "GET", "/metrics", None);
    assert_eq!(status, 200);
    assert!(
        metrics.contains("# TYPE mfsched_ticks_total counter"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mfsched_decisions_total{policy=\"hold\",role=\"active\"}"),
        "{metrics}"
    );
    grafana_dashboard_matches(&metrics);
    let (status, policies) = common::http(addr, "GET", "/v1/policies", None);
    assert_eq!(status, 200);
    assert!(policies.contains("\"active\":\"hold\""), "{policies}");
    // Each component is named by its content hash too.
    let ga_sha = mfsched_core::sha256_hex(
        mfsched_plugin_host::EMBEDDED_PLUGINS
            .iter()
            .find(|(n, _)| *n == "ga")
            .map(|(_, b)| *b)
            .expect("embedded ga"),
    );
    assert!(
        policies.contains(&format!("\"ga\":\"{ga_sha}\"")),
        "{policies}"
    );
    let (status, decision) = common::http(addr, "GET", "/v1/decision", None);
    assert_eq!(status, 200);
    assert!(decision.contains("applied_knobs"), "{decision}");
    // Changes need the token; a page that rebound its DNS name to loopback
    // (another Host) gets nothing, not even reads.
    let (status, _) = common::http(
        addr,
        "POST",
        "/v1/policies/active",
        Some(r#"{"policy":"hold"}"#),
    );
    assert_eq!(status, 401, "no token");
    let (auth, bearer) = common::bearer();
    let (status, _) = common::http_with(
        addr,
        "POST",
        "/v1/policies/active",
        Some(r#"{"policy":"hold"}"#),
        &[(auth, &bearer), ("Host", "attacker.example")],
    );
    assert_eq!(status, 421, "a foreign Host");
    let (status, _) = common::http_with(
        addr,
        "GET",
        "/v1/policies",
        None,
        &[("Host", "attacker.example:9464")],
    );
    assert_eq!(status, 421, "a foreign Host, reading");
    let (status, refused) = common::http_with(
        addr,
        "POST",
        "/v1/policies/active",
        Some(r#"{"policy":"no-such-policy"}"#),
        &[(auth, &bearer)],
    );
    assert_eq!(status, 400, "{refused}");

    let status = common::process::terminate(&mut daemon.0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut daemon_err, &mut rest).expect("stderr");
    assert!(status.success(), "exit {status:?}: {rest}");
    assert!(rest.contains("stopped after"), "{rest}");

    let log = dir.path().join("decisions.log");
    let out = mfsched(&["replay", "--summary", log.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = stdout(&out);
    assert!(summary.contains("tick gaps    0"), "{summary}");
    assert!(summary.contains("hold"), "{summary}");
    assert!(
        stderr(&out).is_empty(),
        "a clean shutdown leaves no torn tail"
    );
    let applied = std::fs::read_to_string(dir.path().join("applied.json"));
    // `hold` never changes anything, so the file actuator had nothing to write.
    assert!(applied.is_err(), "nothing changed, nothing written");

    // A crash mid-record: the torn tail is reported, the rest is replayed.
    let bytes = std::fs::read(&log).expect("log");
    let torn = dir.path().join("torn.log");
    std::fs::write(&torn, &bytes[..bytes.len() - 5]).expect("write");
    let out = mfsched(&["replay", torn.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("torn tail"), "{}", stderr(&out));
    assert!(stdout(&out).contains("tick 0 "), "{}", stdout(&out));
}

/// The Grafana dashboard under examples/ queries only metric families the
/// daemon serves, and shows every one it serves.
fn grafana_dashboard_matches(metrics: &str) {
    let served: std::collections::BTreeSet<&str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/grafana/mfsched.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the dashboard"))
            .expect("JSON");
    let mut queried = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            // Metric names: mfsched_ followed by [a-z0-9_].
            let mut rest = expr;
            while let Some(at) = rest.find("mfsched_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                let family = name
                    .strip_suffix("_bucket")
                    .or_else(|| name.strip_suffix("_sum"))
                    .or_else(|| name.strip_suffix("_count"))
                    .unwrap_or(&name)
                    .to_owned();
                assert!(
                    served.contains(family.as_str()),
                    "the dashboard queries {name}, which /metrics does not serve ({:?})",
                    panel["title"]
                );
                queried.insert(family);
            }
        }
    }
    for family in &served {
        assert!(
            queried.contains(*family),
            "/metrics serves {family}, which no dashboard panel shows"
        );
    }
}

#[test]
fn a_bounded_run_decides_every_tick() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = daemon_config(dir.path(), "fast-footprint.toml");
    let out = mfsched(&[
        "run",
        "--config",
        config.to_str().expect("utf-8 path"),
        "--max-ticks",
        "5",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("stopped after 5 tick(s)"),
        "{}",
        stderr(&out)
    );
    let log = dir.path().join("decisions.log");
    let out = mfsched(&["replay", log.to_str().expect("utf-8 path")]);
    let text = stdout(&out);
    // One line per tick, after the line naming the utility they were scored with.
    assert_eq!(text.lines().count(), 6, "{text}");
    assert!(text.starts_with("utility utility@"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("tick ")).count(),
        5,
        "{text}"
    );
    // A second run continues the numbering in the same log.
    let out = mfsched(&[
        "run",
        "--config",
        config.to_str().expect("utf-8 path"),
        "--max-ticks",
        "2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = mfsched(&["replay", "--summary", log.to_str().expect("utf-8 path")]);
    assert!(
        stdout(&out).contains("ticks        0..=6"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn replay_decides_a_run_log_again_and_the_policy_that_ran_reproduces_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    // exact decides (with a GA shadow) on a trace whose regime changes every few ticks.
    let config = common::daemon_config(
        dir.path(),
        "paper-n2",
        100,
        "active = \"exact\"\nshadows = [\"ga\"]",
        "[workload]\ntrace = \"periodic\"\ntrace_ticks = 24\n",
    );
    let config = config.to_str().expect("utf-8 path");
    let out = mfsched(&["run", "--config", config, "--max-ticks", "12"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = dir.path().join("decisions.log");
    let log = log.to_str().expect("utf-8 path");
    let report = dir.path().join("replay");
    let out = mfsched(&[
        "replay",
        log,
        "--policy",
        "exact",
        "--policy",
        "static-budget:k=500",
        "--json",
        "--out",
        report.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(r["ticks"], 12);
    assert_eq!(r["scenario"], "paper-n2");
    assert_eq!(r["seed"], 7);
    assert_eq!(r["policies"][0]["label"], "exact");
    assert_eq!(r["policies"][0]["differ_from_ran"], 0, "{r}");
    assert_eq!(r["policies"][0]["decided"], 12);
    assert_eq!(r["policies"][1]["label"], "static-budget:k=500");
    assert_eq!(r["policies"][1]["decided"], 12);
    for t in r["decisions"].as_array().expect("ticks") {
        assert_eq!(t["policies"][0], t["ran"], "exact again: {t}");
    }
    // The same utility, predicted by the same surrogate: the replayed exact's
    // mean is what ran.
    assert_eq!(r["policies"][0]["mean_utility"], r["ran"]["mean_utility"]);
    let md = std::fs::read_to_string(report.join("report.md")).expect("report.md");
    assert!(md.contains("| static-budget:k=500 | 12 | 0 |"), "{md}");
    assert!(report.join("results.json").is_file());
    // A policy the binary does not have: one line, non-zero.
    let out = mfsched(&["replay", log, "--policy", "nonesuch"]);
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));
}

/// `replay --summary` of the log at `log`: each (policy, role) decided
/// `ticks` ticks and failed none.
fn assert_decided_every_tick(log: &str, policies: &[(&str, &str)], ticks: u32) {
    let out = mfsched(&["replay", "--summary", log]);
    let summary = stdout(&out);
    let ticks = ticks.to_string();
    for &(policy, role) in policies {
        let line = summary
            .lines()
            .find(|l| l.starts_with(&format!("{policy} ")))
            .unwrap_or_else(|| panic!("no {policy} line: {summary}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        // policy, role, decisions, failed
        assert_eq!(words[..4], [policy, role, &ticks, "0"], "{summary}");
    }
}

#[test]
fn the_daemon_decides_under_the_candidate_aware_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = daemon_config(dir.path(), "candidate-aware.toml");
    let config = config.to_str().expect("utf-8 path");
    let out = mfsched(&["run", "--config", config, "--max-ticks", "3"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("candidate-aware field"), "{err}");
    assert!(err.contains("stopped after 3 tick(s)"), "{err}");
    let log = dir.path().join("decisions.log");
    assert_decided_every_tick(
        log.to_str().expect("utf-8 path"),
        &[("ga", "active"), ("exhaustive", "shadow")],
        3,
    );
    // A bundle without its training profile cannot serve the field: one line.
    let bundle = dir.path().join("bundle");
    std::fs::create_dir(&bundle).expect("mkdir");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/paper-n3");
    for file in ["bundle.json", "weights.safetensors"] {
        std::fs::copy(shipped.join(file), bundle.join(file)).expect(file);
    }
    let text = std::fs::read_to_string(config).expect("config");
    std::fs::write(
        config,
        text.replace("[policy]\n", "[policy]\nbundle_dir = \"bundle\"\n"),
    )
    .expect("write");
    let out = mfsched(&["run", "--config", config, "--max-ticks", "1"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l.starts_with("error: ") && l.contains("policy.field")),
        "{err}"
    );
}

#[test]
fn an_unknown_config_key_is_one_clear_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = daemon_config(dir.path(), "unknown-key.toml");
    let out = mfsched(&["run", "--config", config.to_str().expect("utf-8 path")]);
    let err = fails_in_one_line(&out, "");
    assert!(err.contains("perod_ms"), "{err}");
}

#[test]
fn nvml_sampler_without_nvml_fails_in_one_line_unless_fallback_is_allowed() {
    let probe = mfsched(&["nvml", "probe"]);
    if probe.status.success() {
        // A machine with NVML: the probe reports the devices it found.
        assert!(stdout(&probe).contains("devices"), "{}", stdout(&probe));
        return;
    }
    assert_eq!(
        stderr(&probe).trim().lines().count(),
        1,
        "{}",
        stderr(&probe)
    );
    assert!(stderr(&probe).contains("NVML is not available"));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = daemon_config(dir.path(), "nvml-no-fallback.toml");
    let out = mfsched(&["run", "--config", config.to_str().expect("utf-8 path")]);
    let err = fails_in_one_line(&out, "");
    assert!(err.contains("NVML is not available"), "{err}");
    assert!(err.contains("allow_fallback"), "{err}");
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).expect("stdout is JSON")
}

#[test]
fn decide_works_for_each_bundled_policy_on_paper_n5() {
    for policy in ["ga", "exhaustive", "static-budget"] {
        let out = mfsched(&[
            "decide",
            "--scenario",
            "paper-n5",
            "--policy",
            policy,
            "--no-cache",
            "--json",
        ]);
        assert!(out.status.success(), "{policy}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["accepted"], true, "{v}");
        assert_eq!(v["feasible"], true, "{v}");
        assert_eq!(v["floors_met"], true, "{v}");
        assert_eq!(v["models"].as_array().map(Vec::len), Some(5));
        assert!(
            v["predicted_utility"].as_f64().is_some_and(|u| u > 0.0),
            "{v}"
        );
        assert!(v["latency_ms"].as_f64().is_some_and(|l| l > 0.0), "{v}");
        assert!(v["vram_mib"].as_u64() <= v["cap_mib"].as_u64());
    }
}

#[test]
fn decide_text_names_the_meanfield_predictor_and_the_outcome() {
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n3",
        "--policy",
        "ga",
        "--param",
        "population=16",
        "--state",
        r#"{"workload":"burst","vram_used_mib":20000,"utilization":0.9}"#,
        "--no-cache",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("MeanField surrogate, CPU (embedded bundle paper-n3)"),
        "{text}"
    );
    assert!(text.contains("burst load"), "{text}");
    assert!(text.contains("population=16"), "{text}");
    assert!(text.contains("outcome            accepted"), "{text}");
}

#[test]
fn decide_can_use_the_analytic_stand_in_or_a_models_dir() {
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n2",
        "--policy",
        "exhaustive",
        "--predictor",
        "analytic",
        "--no-cache",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("not the MeanField surrogate"),
        "{}",
        stdout(&out)
    );

    let models = format!("{}/../../models", env!("CARGO_MANIFEST_DIR"));
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n2",
        "--policy",
        "exhaustive",
        "--models",
        &models,
        "--no-cache",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("models/paper-n2)"),
        "{}",
        stdout(&out)
    );

    let broken = format!(
        "{}/../../tests/fixtures/bundles/wrong-shape",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n2",
        "--policy",
        "exhaustive",
        "--models",
        &broken,
        "--no-cache",
    ]);
    let err = fails_in_one_line(&out, "");
    assert!(err.contains("has shape [32, 60]"), "{err}");
}

#[test]
fn a_hostile_policy_file_fails_within_the_deadline_with_one_line() {
    let spin = format!("{}/spin.wasm", mfsched_test_programs::TEST_PLUGINS_DIR);
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n2",
        "--policy",
        &spin,
        "--deadline-ms",
        "150",
        "--no-cache",
    ]);
    let err = fails_in_one_line(&out, "");
    assert!(err.contains("deadline"), "{err}");
    assert!(err.contains("running configuration was kept"), "{err}");
    assert!(stdout(&out).contains("KEPT"), "{}", stdout(&out));
}

#[test]
fn decide_rejects_bad_input_with_one_clear_line() {
    let cases: [(&[&str], &str); 5] = [
        (&["--state", "{\"workload\":\"huge\"}"], "--state"),
        (&["--param", "population"], "expected KEY=VALUE"),
        (&["--param", "populaton=3"], "unknown parameter 'populaton'"),
        (&["--deadline-ms", "0"], "--deadline-ms must be positive"),
        (&["--utility", "ga"], "is a policy, not a utility"),
    ];
    for (extra, want) in cases {
        let mut args = vec![
            "decide",
            "--scenario",
            "paper-n2",
            "--policy",
            "ga",
            "--no-cache",
        ];
        args.extend_from_slice(extra);
        let out = mfsched(&args);
        let err = fails_in_one_line(&out, format_args!("{extra:?}"));
        assert!(err.contains(want), "{extra:?}: {err}");
    }
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n2",
        "--policy",
        "nope",
        "--no-cache",
    ]);
    assert!(
        stderr(&out).contains("unknown plugin 'nope'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plugins_list_shows_worlds_wit_version_and_broken_files() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/plugins");
    let out = mfsched(&["plugins", "list", "--dir", dir, "--no-cache"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for (name, world) in [
        ("ga", "policy"),
        ("exhaustive", "policy"),
        ("static-budget", "policy"),
        ("utility", "utility"),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name}: {text}"));
        assert!(line.contains(world), "{line}");
        assert!(line.contains("mfsched:scheduler@0.4.0"), "{line}");
    }
    assert!(text.contains("corrupt.wasm: cannot load"), "{text}");
    assert!(text.contains("--param population=24"), "{text}");
}

#[test]
fn bench_policies_reports_latency_and_gaps() {
    let out = mfsched(&[
        "bench",
        "policies",
        "--scenario",
        "paper-n3",
        "--decisions",
        "3",
        "--json",
        "--no-cache",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    let rows = v["policies"].as_array().expect("rows");
    assert_eq!(rows.len(), 7);
    assert_eq!(rows[0]["gap_p50_pct"].as_f64(), Some(0.0), "{v}");
    // exact finds exhaustive's optimum on every tick.
    let exact = rows
        .iter()
        .find(|r| r["policy"] == "exact")
        .expect("an exact row");
    assert_eq!(exact["gap_max_pct"].as_f64(), Some(0.0), "{exact}");
    assert!(v["ga_over_exact"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    for r in rows {
        assert_eq!(r["failed"], 0, "{r}");
        assert!(r["latency_p50_ms"].as_f64().is_some_and(|l| l > 0.0), "{r}");
        assert!(r["gap_p50_pct"].as_f64().is_some_and(|g| g >= 0.0), "{r}");
    }
}

/// `bench train` times the published architecture and the linear skip side
/// by side: one row per size, both medians positive, their ratio.
#[test]
fn bench_train_times_both_architectures_side_by_side() {
    let out = mfsched(&[
        "bench",
        "train",
        "--rows",
        "20,40",
        "--epochs",
        "3",
        "--repeats",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("load average"), "{text}");
    let rows: Vec<Vec<f64>> = text
        .lines()
        .filter_map(|l| {
            let cells: Vec<f64> = l
                .split_whitespace()
                .map(str::parse::<f64>)
                .collect::<Result<_, _>>()
                .ok()?;
            (cells.len() == 6).then_some(cells)
        })
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    for (row, size) in rows.iter().zip([20.0, 40.0]) {
        assert_eq!(row[0], size, "{text}");
        assert!(row[2] > 0.0 && row[3] > 0.0 && row[4] > 0.0, "{text}");
    }
}

/// Beyond exhaustive search's reach (10¹⁷ feasible configurations at N = 16)
/// the reference is exact; several scenarios give one report each and a
/// latency-vs-N chart.
#[test]
fn bench_policies_scales_to_sixteen_models_against_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("scaling.svg");
    let out = mfsched(&[
        "bench",
        "policies",
        "--scenario",
        "paper-n2,scale-n16",
        "--decisions",
        "2",
        "--json",
        "--svg",
        svg.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    let reports = v.as_array().expect("one report per scenario");
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0]["reference"], "exhaustive (table)", "{v}");
    let n16 = &reports[1];
    assert_eq!(n16["models"], 16, "{n16}");
    assert_eq!(n16["reference"], "exact", "{n16}");
    assert!(
        n16["feasible"]
            .as_u64()
            .is_some_and(|f| f > 1_000_000_000_000),
        "{n16}"
    );
    let rows = n16["policies"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["policy"].as_str()).collect();
    assert_eq!(names, ["exact", "ga"], "{n16}");
    for r in rows {
        assert_eq!(r["failed"], 0, "{r}");
        assert!(r["gap_p50_pct"].as_f64().is_some_and(|g| g >= 0.0), "{r}");
    }
    let chart = std::fs::read_to_string(&svg).expect("the chart");
    assert!(chart.contains("against N"), "{chart}");
}

#[test]
fn models_list_shows_every_shipped_bundle_with_its_accuracy() {
    let out = mfsched(&["models", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for n in 2..=6 {
        assert!(text.contains(&format!("paper-n{n}")), "{text}");
    }
    assert!(text.contains("llama7b 0.9"), "{text}");
}

/// profile → train → eval, as a user would, on a small stratified paper-n3 profile.
#[test]
fn train_then_eval_a_bundle_from_a_fresh_profile() {
    let dir = tempfile::tempdir().expect("temp dir");
    let csv = dir.path().join("p.csv");
    let bundle = dir.path().join("bundle");
    let csv_s = csv.to_str().expect("utf-8 path");
    let out = mfsched(&[
        "profile",
        "--scenario",
        "paper-n3",
        "--samples",
        "160",
        "--seed",
        "3",
        "--out",
        csv_s,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = mfsched(&[
        "train",
        "--data",
        csv_s,
        "--scenario",
        "paper-n3",
        "--out",
        bundle.to_str().expect("utf-8 path"),
        "--seed",
        "5",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("qwen1.5b"), "{}", stdout(&out));
    assert!(bundle.join("weights.safetensors").exists());
    let out = mfsched(&[
        "surrogate",
        "eval",
        "--model",
        bundle.to_str().expect("utf-8 path"),
        "--data",
        csv_s,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mean: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("mean"))
        // The mean line: R² of slowdown, MAPE, then R² of throughput last.
        .and_then(|v| v.split_whitespace().last()?.parse().ok())
        .unwrap_or_else(|| panic!("a mean R² line: {text}"));
    // Scored on its own profile (train + held-out rows): a trained bundle fits it.
    assert!(mean > 0.9, "{text}");
    // Trained with the default linear skip: recorded with what it chose, and
    // served like any other net, on the wgpu shader as on the CPU.
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(bundle.join("bundle.json")).expect("bundle.json"),
    )
    .expect("JSON");
    assert_eq!(meta["training"]["linear_skip"], true, "{meta}");
    for m in meta["models"].as_array().expect("models") {
        let skip = &m["metrics"]["linear_skip"];
        let weight = skip["mlp_weight"].as_f64().expect("a weight");
        assert!((0.0..=1.0).contains(&weight), "{skip}");
        assert!(
            skip["ridge_penalty"].as_f64().is_some_and(|p| p > 0.0),
            "{skip}"
        );
    }
    if common::gpu_adapter("train_then_eval_a_bundle_from_a_fresh_profile") {
        let out = mfsched(&[
            "surrogate",
            "check-backends",
            "--scenario",
            "paper-n3",
            "--models",
            bundle.to_str().expect("utf-8 path"),
        ]);
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        assert!(stdout(&out).contains("PASS: max |Δσ|"), "{}", stdout(&out));
    }
}

#[test]
fn a_broken_bundle_is_one_clear_line_and_a_failure() {
    for (fixture, expected) in [
        ("truncated", "truncated or corrupt"),
        ("wrong-shape", "has shape [32, 60], expected [32, 64]"),
        ("wrong-layout", "was trained on features"),
    ] {
        let dir = format!(
            "{}/../../tests/fixtures/bundles/{fixture}",
            env!("CARGO_MANIFEST_DIR")
        );
        let data = format!(
            "{}/../../tests/fixtures/profiles/good.csv",
            env!("CARGO_MANIFEST_DIR")
        );
        let out = mfsched(&[
            "surrogate",
            "eval",
            "--model",
            &dir,
            "--scenario",
            "paper-n2",
            "--data",
            &data,
        ]);
        let err = fails_in_one_line(&out, fixture);
        assert!(err.contains(expected), "{fixture}: {err}");
    }
}

#[test]
fn sample_complexity_writes_the_table_json_and_plot() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = mfsched(&[
        "repro",
        "sample-complexity",
        "--scenarios",
        "paper-n2",
        "--sizes",
        "20,60",
        "--seeds",
        "1",
        "--folds",
        "2",
        "--out",
        dir.path().to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("MeanField") && text.contains("Joint MLP"),
        "{text}"
    );
    assert!(text.contains("simulated 24 GB card"), "{text}");
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("results.json")).expect("results.json"),
    )
    .expect("valid JSON");
    let curves = json["curves"].as_array().expect("curves");
    assert_eq!(curves.len(), 2, "MeanField and Joint MLP at N = 2");
    for c in curves {
        let points = c["points"].as_array().expect("points");
        assert_eq!(points.len(), 2);
        for p in points {
            let r2 = p["mean_r2"].as_f64().expect("a number");
            assert!(r2 > 0.0 && r2 <= 1.0, "{p}");
            assert_eq!(p["evaluations"], 2);
        }
    }
    let svg = std::fs::read_to_string(dir.path().join("learning-curves.svg")).expect("svg");
    assert!(
        svg.starts_with("<svg") && svg.contains("Joint MLP"),
        "{svg}"
    );
}

fn fixture(name: &str) -> String {
    format!(
        "{}/../../tests/fixtures/profiles/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn profile_paper_n2_writes_648_rows_that_data_check_accepts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("p.csv");
    let out_s = out.to_str().expect("utf-8 path");
    let run = mfsched(&[
        "profile",
        "--scenario",
        "paper-n2",
        "--seed",
        "1",
        "--out",
        out_s,
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stdout(&run).contains("wrote 648 rows"), "{}", stdout(&run));
    assert!(
        stderr(&run).contains("on the simulator"),
        "{}",
        stderr(&run)
    );
    let text = std::fs::read_to_string(&out).expect("profile written");
    assert_eq!(text.lines().count(), 649, "header + 648 rows");

    let check = mfsched(&["data", "check", out_s]);
    assert!(check.status.success(), "{}", stderr(&check));
    let summary = stdout(&check);
    assert!(
        summary.contains("scenario  paper-n2 (named in the file)"),
        "{summary}"
    );
    assert!(summary.contains("rows      648 co-location"), "{summary}");
    assert!(
        summary.contains("regimes   low 162, medium 162, high 162, burst 162"),
        "{summary}"
    );
    assert!(summary.contains("llama3b.throughput"), "{summary}");
}

#[test]
fn profiling_is_reproducible_and_stratified_beyond_two_models() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, seed: &str| {
        let path = dir.path().join(name);
        let path_s = path.to_str().expect("utf-8 path").to_string();
        let run = mfsched(&[
            "profile",
            "--scenario",
            "paper-n4",
            "--samples",
            "24",
            "--repeats",
            "2",
            "--seed",
            seed,
            "--out",
            &path_s,
        ]);
        assert!(run.status.success(), "{}", stderr(&run));
        std::fs::read_to_string(path).expect("written")
    };
    let a = write("a.csv", "5");
    assert_eq!(a, write("b.csv", "5"), "same seed, same file");
    assert_ne!(a, write("c.csv", "6"), "another seed, other numbers");
    assert_eq!(a.lines().count(), 25);
    for w in ["low", "medium", "high", "burst"] {
        assert_eq!(
            a.matches(&format!(",{w},")).count(),
            6,
            "{w}: balanced regimes"
        );
    }
}

#[test]
fn every_bad_profile_is_one_clear_line_and_a_failure() {
    let cases = [
        ("unknown-column.csv", "column llama3b.batch"),
        ("missing-column.csv", "missing column"),
        (
            "empty-value.csv",
            "line 3, column llama3b.throughput: empty value",
        ),
        ("non-numeric.csv", "line 2, column utilization"),
        (
            "negative-throughput.csv",
            "line 4, column yolo-a.throughput",
        ),
        ("unknown-variant.csv", "'int8' is not a variant of llama3b"),
        ("wrong-version.csv", "format version '3' is not supported"),
        ("off-grid.csv", "line 2, column llama3b.concurrency"),
        ("bad-workload.csv", "line 2, column workload"),
        ("ragged.csv", "line 3"),
        ("empty.csv", "the file is empty"),
        ("header-only.csv", "no data rows"),
    ];
    for (file, what) in cases {
        let out = mfsched(&["data", "check", &fixture(file)]);
        let err = fails_in_one_line(&out, file);
        assert!(err.contains(what), "{file}: {err}");
        assert!(!err.contains("panicked"), "{file}: {err}");
    }
    // A model the scenario does not know, with --scenario given.
    let out = mfsched(&[
        "data",
        "check",
        &fixture("unknown-model.csv"),
        "--scenario",
        "paper-n2",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("model 'qwen9' is not in the scenario"),
        "{err}"
    );
    // …and without: no scenario can be inferred.
    let out = mfsched(&["data", "check", &fixture("unknown-model.csv")]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("pass --scenario"), "{}", stderr(&out));
}

#[test]
fn data_check_infers_the_scenario_from_the_models() {
    let out = mfsched(&["data", "check", &fixture("other-scenario-name.csv")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("scenario  paper-n2 (its models match"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn sim_calibration_shows_measured_against_published() {
    let out = mfsched(&["sim", "calibration", "--seed", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("measured on the simulator"), "{text}");
    for figure in [
        "AWQ LLM throughput loss",
        "YOLO11n FPS loss",
        "YOLO11m FPS loss",
        "largest ANOVA effect, LLM",
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(figure))
            .unwrap_or_else(|| panic!("no line for {figure}: {text}"));
        assert!(line.trim_end().ends_with("ok"), "{line}");
    }
}

#[test]
fn profiling_an_unknown_scenario_is_one_clear_line() {
    let out = mfsched(&[
        "profile",
        "--scenario",
        "paper-n9",
        "--seed",
        "1",
        "--out",
        "x.csv",
    ]);
    let err = fails_in_one_line(&out, "");
    assert!(err.contains("unknown scenario 'paper-n9'"), "{err}");
}

#[test]
fn check_backends_passes_on_paper_n2_and_names_the_adapter() {
    if !common::gpu_adapter("check_backends_passes_on_paper_n2_and_names_the_adapter") {
        return;
    }
    let out = mfsched(&["surrogate", "check-backends", "--scenario", "paper-n2"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("adapter     "), "{text}");
    assert!(
        text.contains("joint (162 candidates)          324"),
        "{text}"
    );
    assert!(text.contains("PASS: max |Δσ|"), "{text}");
}

#[test]
fn check_backends_rejects_bad_input_with_one_clear_line() {
    for (args, want) in [
        (
            &["surrogate", "check-backends", "--scenario", "paper-n9"][..],
            "unknown scenario 'paper-n9'",
        ),
        (
            &[
                "surrogate",
                "check-backends",
                "--scenario",
                "paper-n2",
                "--sample",
                "0",
            ][..],
            "--sample must be positive",
        ),
    ] {
        let out = mfsched(args);
        let err = fails_in_one_line(&out, format_args!("{args:?}"));
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn bench_surrogate_prints_batches_and_the_decision_comparison() {
    let has_gpu = common::gpu_adapter("bench_surrogate_prints_batches_and_the_decision_comparison");
    let out = mfsched(&[
        "bench",
        "surrogate",
        "--scenario",
        "paper-n2",
        "--repeats",
        "1",
        "--rows",
        "10,400",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "CPU rows/s",
        "5 candidates",
        "200 candidates",
        "table (Σk rows)",
        "every feasible cand.",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    // With an adapter the wgpu columns hold numbers, not the "-" of an absent backend.
    let table_row = text
        .lines()
        .find(|l| l.starts_with("table (Σk rows)"))
        .expect("a table row");
    assert_eq!(
        table_row.split_whitespace().any(|w| w == "-"),
        !has_gpu,
        "{text}"
    );
}

/// Runs `bench surrogate --peer` with `python3` on PATH being `fake` (a shell
/// script standing in for the numpy peer, so no Python is needed).
#[cfg(unix)]
fn bench_with_fake_peer(fake: &str, extra: &[&str]) -> Output {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let python = dir.path().join("python3");
    std::fs::write(&python, format!("#!/bin/sh\n{fake}\n")).expect("writes");
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let peer = dir.path().join("numpy_peer.py");
    let mut args = vec![
        "bench",
        "surrogate",
        "--scenario",
        "paper-n2",
        "--synthetic",
        "1",
        "--repeats",
        "1",
        "--rows",
        "10",
        "--peer",
        peer.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(&args)
        .env("PATH", dir.path())
        .output()
        .expect("the mfsched binary runs")
}

/// A stand-in peer's body: writes the JSON numpy_peer.py writes to the path
/// after --json (shell builtins only); its table path takes 0.1 ms.
#[cfg(unix)]
const FAKE_PEER_JSON: &str = r#"while [ $# -gt 0 ]; do [ "$1" = --json ] && out="$2"; shift; done
printf '%s' '{"scenario": "paper-n2", "repeats": 1,
 "candidates": {"rows": 324, "median_ms": 0.5, "rows_per_s": 648000.0},
 "mlp_batch": {"rows": 324, "median_ms": 0.25, "rows_per_s": 1296000.0},
 "table": {"rows": 27, "median_ms": 0.1},
 "machine": {"numpy": "2.3.1", "blas": "scipy-openblas 0.3.29", "blas_threads": 2,
             "loadavg_before": [0.5, 0.25, 0.125], "loadavg_after": [0.75, 0.5, 0.25]}}' > "$out""#;

#[cfg(unix)]
#[test]
fn bench_surrogate_prints_the_peers_figures_beside_its_own() {
    let out = bench_with_fake_peer(FAKE_PEER_JSON, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mfsched_row = text
        .lines()
        .find(|l| l.starts_with("mfsched CPU, 1 thr"))
        .unwrap_or_else(|| panic!("mfsched's row: {text}"));
    assert!(mfsched_row.contains("every feasible candidate"), "{text}");
    let peer_rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("numpy peer, 2 BLAS threads"))
        .collect();
    assert_eq!(peer_rows.len(), 2, "{text}");
    for row in &peer_rows {
        // rows, median ms, rows/s, then mfsched/peer as a ratio.
        assert!(
            row.contains(" 324 ") && row.trim_end().ends_with('x'),
            "{row}"
        );
    }
    assert!(
        text.contains("numpy 2.3.1, BLAS scipy-openblas 0.3.29"),
        "{text}"
    );
    assert!(
        text.contains("0.50 0.25 0.12 when the peer started"),
        "{text}"
    );
}

/// `mfsched bench policies --scenario paper-n2 --policy exact --peer …` with
/// `extra` arguments, where python3 is a stand-in whose body (after it counts
/// its run) is `fake`; returns the output and how many times the peer ran.
#[cfg(unix)]
fn bench_policies_with_fake_peer(fake: &str, extra: &[&str]) -> (Output, usize) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let calls = dir.path().join("calls");
    let python = dir.path().join("python3");
    std::fs::write(
        &python,
        format!("#!/bin/sh\necho run >> '{}'\n{fake}\n", calls.display()),
    )
    .expect("writes");
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let peer = dir.path().join("numpy_peer.py");
    let out = Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args([
            "bench",
            "policies",
            "--scenario",
            "paper-n2",
            "--policy",
            "exact",
            "--peer",
            peer.to_str().expect("utf-8"),
        ])
        .args(extra)
        .env("PATH", dir.path())
        .output()
        .expect("the mfsched binary runs");
    let runs = std::fs::read_to_string(&calls).map_or(0, |r| r.lines().count());
    (out, runs)
}

/// `bench policies --peer` runs the decisions in slices with the peer after
/// each, and reports each slice's ratio and their median.
#[cfg(unix)]
#[test]
fn bench_policies_alternates_the_decisions_with_the_peer() {
    let (out, runs) = bench_policies_with_fake_peer(
        FAKE_PEER_JSON,
        &["--decisions", "5", "--peer-rounds", "2", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(runs, 2, "one peer run per round");
    let v = json(&out);
    let rounds = v["peer_rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 2, "{v}");
    let mut ratios: Vec<f64> = rounds
        .iter()
        .map(|r| {
            let ms = r["exhaustive_table_ms"].as_f64().expect("mfsched's median");
            assert_eq!(r["peer_table_ms"].as_f64(), Some(0.1), "{r}");
            let ratio = r["peer_table_over_exhaustive_table"]
                .as_f64()
                .expect("ratio");
            assert!(ms > 0.0 && (ratio - 0.1 / ms).abs() < 1e-12, "{r}");
            ratio
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    assert_eq!(
        v["peer_table_over_exhaustive_table"].as_f64(),
        Some(ratios[1]),
        "the median of two rounds is the upper one: {v}"
    );
    // Every decision still ran, over both slices.
    let rows = v["policies"].as_array().expect("rows");
    assert!(rows.iter().all(|r| r["failed"].as_u64() == Some(0)), "{v}");
}

/// A peer that fails in its first round is not run again (a stalled one
/// would cost its timeout every round), and is one line.
#[cfg(unix)]
#[test]
fn bench_policies_runs_a_failing_peer_once() {
    let (out, runs) = bench_policies_with_fake_peer(
        "echo 'numpy_peer.py needs numpy: pip install numpy' >&2; exit 1",
        &["--decisions", "6"],
    );
    assert_eq!(runs, 1, "one run of three rounds");
    let line = the_peer_not_measured_line(&out);
    assert!(line.contains("needs numpy"), "{line}");
}

/// The one line a bench prints for a peer it could not measure (the bench
/// itself succeeded).
#[cfg(unix)]
fn the_peer_not_measured_line(out: &Output) -> String {
    assert!(out.status.success(), "{}", stderr(out));
    let text = stdout(out);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("numpy peer"))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains("not measured"), "{text}");
    lines[0].to_owned()
}

#[cfg(unix)]
#[test]
fn a_failing_or_stalled_peer_is_one_line_and_the_bench_stands() {
    let failing = bench_with_fake_peer(
        "echo 'numpy_peer.py needs numpy: pip install numpy' >&2; exit 1",
        &[],
    );
    let stalled = bench_with_fake_peer("while :; do :; done", &["--peer-timeout", "1"]);
    for (out, want) in [
        (&failing, "needs numpy: pip install numpy"),
        (&stalled, "timed out after 1 s"),
    ] {
        let line = the_peer_not_measured_line(out);
        assert!(line.contains(want), "{line}");
        let text = stdout(out);
        assert!(text.contains("every feasible cand."), "{text}");
    }
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    // The read end is dropped at once, long before the scenario's 236,196
    // configurations are enumerated and the first line is printed.
    let mut child = Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(["scenario", "show", "paper-n5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the mfsched binary runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("it exits");
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(141), "{err}");
}

#[test]
fn repro_quick_writes_both_tables_into_one_report() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = mfsched(&[
        "repro",
        "--quick",
        "--ticks",
        "2",
        "--out",
        dir.path().to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("Table I") && text.contains("Table II"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("results.json")).expect("results.json"),
    )
    .expect("valid JSON");
    assert_eq!(json["quick"], true);
    assert!(
        json["device"]
            .as_str()
            .is_some_and(|d| d.contains("simulator")),
        "{}",
        json["device"]
    );
    let curves = json["table1"]["curves"].as_array().expect("Table I curves");
    assert_eq!(curves.len(), 3, "N = 2, N = 3 and the Joint MLP at N = 2");
    let rows = json["table2"]["overall"].as_array().expect("Table II rows");
    let policies: Vec<&str> = rows.iter().filter_map(|r| r["policy"].as_str()).collect();
    assert_eq!(
        policies,
        [
            "ga",
            "exhaustive",
            "static-full",
            "static-budget-500",
            "static-budget-5000"
        ]
    );
    for row in rows {
        let ticks = row["summary"]["ticks"].as_u64();
        assert_eq!(ticks, Some(16), "8 scenarios × 2 ticks: {row}");
    }
    let md = std::fs::read_to_string(dir.path().join("repro.md")).expect("repro.md");
    for needle in [
        "Table I",
        "Table II",
        "−10.51 %",
        "≈40",
        "not a real GPU",
        "--quick",
    ] {
        assert!(md.contains(needle), "{needle}: {md}");
    }
    // The same report as one file: both charts inline, the tables rendered.
    let html = std::fs::read_to_string(dir.path().join("repro.html")).expect("repro.html");
    assert_eq!(html.matches("<svg").count(), 2, "{html}");
    assert!(
        html.contains("<table>") && !html.contains("<script"),
        "{html}"
    );
    for svg in ["table1/learning-curves.svg", "table2/latency.svg"] {
        let text = std::fs::read_to_string(dir.path().join(svg)).expect(svg);
        assert!(text.starts_with("<svg"), "{svg}");
    }
}

/// Reads `dir/results.json` of an `ab` report and checks its plots are SVG.
fn ab_results(dir: &Path, traces: &[&str]) -> serde_json::Value {
    for trace in traces {
        let svg = std::fs::read_to_string(dir.join(format!("utility-{trace}.svg"))).expect(trace);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
    let latency = std::fs::read_to_string(dir.join("latency.svg")).expect("latency.svg");
    assert!(latency.starts_with("<svg"));
    serde_json::from_slice(&std::fs::read(dir.join("results.json")).expect("results.json"))
        .expect("valid JSON")
}

#[test]
fn ab_compares_ga_with_static_budget_on_the_same_traces() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = mfsched(&[
        "ab",
        "--a",
        "ga",
        "--b",
        "static-budget:k=500",
        "--scenarios",
        "steady,bursts",
        "--ticks",
        "4",
        "--out",
        dir.path().to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("static-budget:k=500") && text.contains("real U"),
        "{text}"
    );
    let json = ab_results(dir.path(), &["steady", "bursts"]);
    let overall = json["overall"].as_array().expect("overall rows");
    assert_eq!(overall.len(), 2);
    for row in overall {
        let s = &row["summary"];
        assert_eq!(s["ticks"], 8, "{row}");
        assert!(s["mean_realised_utility"].as_f64().is_some(), "{row}");
        assert!(
            s["latency_p50_ms"].as_f64().is_some_and(|v| v > 0.0),
            "{row}"
        );
    }
    // GA is the better search of the two on the surrogate landscape.
    let gap = |k: usize| {
        overall[k]["summary"]["utility_gap_pct"]
            .as_f64()
            .expect("gap")
    };
    assert!(gap(0) <= gap(1), "ga {} vs k=500 {}", gap(0), gap(1));
}

#[test]
fn ab_compares_the_observed_and_candidate_aware_fields_under_one_policy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = mfsched(&[
        "ab",
        "--a",
        "ga",
        "--b",
        "ga",
        "--b-field",
        "candidate-aware",
        "--scenarios",
        "step-up",
        "--ticks",
        "3",
        "--deadline-ms",
        "20000",
        "--out",
        dir.path().to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json = ab_results(dir.path(), &["step-up"]);
    let policies: Vec<&str> = json["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert_eq!(
        policies,
        ["ga (observed field)", "ga (candidate-aware field)"]
    );
    assert!(
        json["predictor"]
            .as_str()
            .is_some_and(|p| p.contains("observed and candidate-aware")),
        "{}",
        json["predictor"]
    );
    for row in json["overall"].as_array().expect("rows") {
        assert_eq!(row["summary"]["failures"], 0, "{row}");
    }
    let report = std::fs::read_to_string(dir.path().join("report.md")).expect("report.md");
    assert!(report.contains("real U change %"), "{report}");
    let html = std::fs::read_to_string(dir.path().join("report.html")).expect("report.html");
    assert!(
        html.contains("real U change %") && html.contains("<svg") && !html.contains("<script"),
        "{html}"
    );
    assert!(stdout(&out).contains("**all**"), "{}", stdout(&out));
    // The same policy under the same field is refused.
    let same = mfsched(&["ab", "--a", "ga", "--b", "ga"]);
    assert!(!same.status.success());
    assert!(stderr(&same).contains("--b-field"), "{}", stderr(&same));
}

#[test]
fn the_candidate_aware_field_refuses_what_it_cannot_serve_in_one_line() {
    let one_line_failure = |args: &[&str], expected: &str| {
        let out = mfsched(args);
        let err = fails_in_one_line(&out, format_args!("{args:?}"));
        assert!(err.contains(expected), "{err}");
    };
    fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let decide = ["decide", "--scenario", "paper-n5", "--policy", "ga"];
        [&decide[..], extra].concat()
    }
    one_line_failure(
        &with(&["--predictor", "analytic", "--field", "candidate-aware"]),
        "option of --predictor meanfield",
    );
    // The shipped bundle without the profile it was trained on…
    let dir = tempfile::tempdir().expect("temp dir");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/paper-n5");
    for file in ["bundle.json", "weights.safetensors"] {
        std::fs::copy(shipped.join(file), dir.path().join(file)).expect(file);
    }
    let models = dir.path().to_str().expect("utf-8 path");
    one_line_failure(
        &with(&["--models", models, "--field", "candidate-aware"]),
        "the bundle's training profile",
    );
    // …still serves the observed field.
    let out = mfsched(&with(&["--models", models]));
    assert!(out.status.success(), "{}", stderr(&out));
    // …and with another profile beside it, refuses it by its hash.
    std::fs::copy(
        shipped.join("../paper-n4/profile.csv"),
        dir.path().join("profile.csv"),
    )
    .expect("a profile");
    one_line_failure(
        &with(&["--models", models, "--field", "candidate-aware"]),
        "is not the profile the bundle was trained on",
    );
}

/// Measurements of a scenario the simulator has no physics for, as a user
/// would bring them: the analytic stand-in's throughputs over a spread of
/// feasible joint configurations and all four regimes, written by the profile
/// writer (CSV version 2) with a provenance column of the user's own (`x-run`).
fn own_measurements(scenario_path: &str, file: &Path) {
    use mfsched_core::write_profile;
    use mfsched_core::{GpuState, WorkloadLevel};
    use mfsched_core::{Profile, ProfileRow};
    use mfsched_lab::AnalyticPredictor;
    let s = mfsched_core::load_scenario(scenario_path).expect("fixture scenario");
    let p = &s.problem;
    let space = p.space();
    let feasible = p.feasible_indices();
    let mut rows = Vec::new();
    for &index in feasible.iter().step_by(feasible.len() / 150) {
        let joint = space.tuple(index).expect("feasible index");
        for workload in WorkloadLevel::ALL {
            let state = GpuState {
                workload,
                vram_used_mib: p.vram_mib(&joint) as f64,
                utilization: 0.3 + 0.15 * workload.ordinal() as f64,
                contention: None,
            };
            let throughput = (0..p.models.len())
                .map(|i| {
                    f64::from(AnalyticPredictor::throughput(
                        p,
                        i,
                        joint[i] as usize,
                        &state,
                    ))
                })
                .collect();
            rows.push(ProfileRow {
                joint: joint.clone(),
                workload,
                state,
                throughput,
            });
        }
    }
    let profile = Profile {
        scenario: s.name.clone(),
        models: p.models.iter().map(|m| m.name.clone()).collect(),
        rows,
        solo: vec![],
    };
    write_profile(&profile, p, file).expect("write measurements");
    let written = std::fs::read_to_string(file).expect("read back");
    let mut lines = written.lines();
    let mut text = format!("{},x-run\n", lines.next().expect("header"));
    for (k, line) in lines.enumerate() {
        text += &format!("{line},run-{}\n", k / WorkloadLevel::ALL.len());
    }
    std::fs::write(file, text).expect("write the provenance column");
}

#[test]
fn a_scenario_with_kinds_and_knobs_of_its_own_is_shown_checked_trained_and_decided() {
    let scenario = format!(
        "{}/../../tests/fixtures/scenarios/speech-and-images.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = mfsched(&["scenario", "show", &scenario]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for shown in [
        "speech   requests/s",
        "beam_size (integer): 1, 2, 4",
        "scheduler (category): ddim, euler",
        "images/s",
        "VRAM-feasible         2100",
    ] {
        assert!(text.contains(shown), "{shown}: {text}");
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("measured.csv");
    own_measurements(&scenario, &data);
    let data = data.to_str().expect("utf-8 path");
    let out = mfsched(&["data", "check", data, "--scenario", &scenario]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("profile format version 2"), "{text}");
    assert!(text.contains("painter (diffusion, images/s)"), "{text}");
    assert!(text.contains("painter.scheduler"), "{text}");

    let bundle = dir.path().join("bundle");
    let bundle = bundle.to_str().expect("utf-8 path");
    let out = mfsched(&[
        "train",
        "--data",
        data,
        "--scenario",
        &scenario,
        "--out",
        bundle,
        "--epochs",
        "20",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(bundle).join("bundle.json")).expect("bundle.json"),
    )
    .expect("bundle.json is JSON");
    let painter = &meta["models"][1];
    assert_eq!(painter["kind"], "diffusion", "{painter}");
    assert_eq!(painter["unit"], "images/s", "{painter}");
    let features: Vec<&str> = painter["features"]
        .as_array()
        .expect("features")
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(
        features.contains(&"scheduler=euler") && features.contains(&"resolution/768"),
        "{features:?}"
    );

    for policy in ["exhaustive", "ga", "exact", "static-budget"] {
        let out = mfsched(&[
            "decide",
            "--scenario",
            &scenario,
            "--models",
            bundle,
            "--policy",
            policy,
            "--no-cache",
            "--json",
        ]);
        assert!(out.status.success(), "{policy}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["accepted"], true, "{policy}: {v}");
        assert_eq!(v["feasible"], true, "{policy}: {v}");
        assert_eq!(v["models"].as_array().map(Vec::len), Some(3), "{v}");
    }

    // Cross-validation on the same measurements: every method on both targets.
    let cv = dir.path().join("cv");
    let out = mfsched(&[
        "surrogate",
        "cv",
        "--data",
        data,
        "--scenario",
        &scenario,
        "--folds",
        "2",
        "--seeds",
        "1",
        "--epochs",
        "5",
        "--targets",
        "absolute,log",
        "--group-by",
        "x-run",
        "--out",
        cv.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cv.join("cv.json")).expect("cv.json"))
            .expect("cv.json is JSON");
    let results = report["report"]["results"].as_array().expect("results");
    let methods: Vec<String> = results
        .iter()
        .map(|r| format!("{}/{}", r["target"], r["method"]).replace('"', ""))
        .collect();
    for target in ["absolute", "log"] {
        for method in ["own-config-mean", "linear-field", "meanfield", "joint-mlp"] {
            assert!(
                methods.contains(&format!("{target}/{method}")),
                "{target}/{method} in {methods:?}"
            );
        }
    }
    for r in results {
        let r2 = r["overall"]["r2"]["mean"].as_f64();
        assert!(r2.is_some_and(f64::is_finite), "{r}");
        assert_eq!(r["per_model"].as_array().map(Vec::len), Some(3), "{r}");
    }
    for file in ["cv.md", "cv.svg"] {
        assert!(cv.join(file).is_file(), "{file}");
    }

    // A bundle on another target, on every row, embeds its scenario: it
    // evaluates with the scenario file gone.
    let moved = dir.path().join("speech-and-images.toml");
    std::fs::copy(&scenario, &moved).expect("copy the scenario");
    let log_bundle = dir.path().join("bundle-log");
    let out = mfsched(&[
        "train",
        "--data",
        data,
        "--scenario",
        moved.to_str().expect("utf-8 path"),
        "--out",
        log_bundle.to_str().expect("utf-8 path"),
        "--epochs",
        "20",
        "--target",
        "log",
        "--holdout",
        "0",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::remove_file(&moved).expect("remove the scenario");
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(log_bundle.join("bundle.json")).expect("bundle.json"),
    )
    .expect("bundle.json is JSON");
    assert_eq!(meta["target"], "log");
    assert_eq!(meta["format_version"], 2);
    assert!(
        meta["models"][0]["metrics"]["r2_holdout"].is_null(),
        "{meta}"
    );
    let predictions = dir.path().join("predictions.csv");
    let out = mfsched(&[
        "surrogate",
        "eval",
        "--model",
        log_bundle.to_str().expect("utf-8 path"),
        "--data",
        data,
        "--predictions",
        predictions.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("target log"), "{}", stdout(&out));
    let text = std::fs::read_to_string(&predictions).expect("predictions");
    let rows = std::fs::read_to_string(data).expect("data").lines().count() - 1;
    assert_eq!(
        text.lines().count(),
        1 + 3 * rows,
        "one line per row and model"
    );
    for line in text.lines().skip(1) {
        let predicted: f64 = line
            .rsplit(',')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number");
        assert!(predicted.is_finite() && predicted >= 0.0, "{line}");
    }

    // The daemon runs it: three ticks, every applied configuration on the grid.
    let config = dir.path().join("mfsched.toml");
    std::fs::write(
        &config,
        format!(
            "scenario = {scenario:?}\nseed = 3\n[loop]\nperiod_ms = 50\ndeadline_ms = 40\n\
             [policy]\nactive = \"exact\"\nshadows = [\"ga\"]\nbundle_dir = {bundle:?}\n\
             [sampler]\nkind = \"footprint\"\n[workload]\ntrace = \"periodic\"\n\
             [actuator]\nfile = \"applied.json\"\n[log]\npath = \"decisions.log\"\n"
        ),
    )
    .expect("write the daemon config");
    let out = Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(["run", "--config"])
        .arg(&config)
        .args(["--max-ticks", "3"])
        .current_dir(dir.path())
        .env("MFSCHED_API_TOKEN", common::TOKEN)
        .output()
        .expect("run mfsched");
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("stopped after 3 tick(s)"), "{err}");
    let applied: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("applied.json")).expect("applied.json"),
    )
    .expect("applied.json is JSON");
    let s = mfsched_core::load_scenario(&scenario).expect("fixture");
    for model in &s.problem.models {
        let setting: mfsched_core::KnobSetting =
            serde_json::from_value(applied["models"][&model.name].clone())
                .unwrap_or_else(|e| panic!("{}: {e}: {applied}", model.name));
        assert!(
            model.find_config(&setting).is_some(),
            "{} applied {setting}, which is off its grid",
            model.name
        );
    }
}

/// Help names every embedded policy, and a binary user gets the documented
/// config from the binary itself.
#[test]
fn help_names_every_embedded_policy_and_run_prints_its_config() {
    let out = mfsched(&["decide", "--help"]);
    let help = stdout(&out);
    for name in mfsched_plugin_host::embedded_plugin_names().filter(|n| *n != "utility") {
        assert!(help.contains(name), "decide --help omits {name}: {help}");
    }
    let out = mfsched(&["run", "--print-config"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), mfsched_daemon::EXAMPLE_CONFIG);
    assert!(
        !stdout(&mfsched(&["run", "--help"])).contains("examples/"),
        "run --help points at a file a binary user does not have"
    );
    let out = mfsched(&["run"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--config"), "{}", stderr(&out));
}

/// `ab` fails, with the reason, when a policy produced no valid decision on a
/// whole trace (the report is still written).
#[test]
fn ab_fails_naming_the_reason_when_a_policy_fails_every_tick() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trap = Path::new(mfsched_test_programs::TEST_PLUGINS_DIR).join("trap.wasm");
    let report = dir.path().join("ab");
    let out = mfsched(&[
        "ab",
        "--a",
        trap.to_str().expect("utf-8 path"),
        "--b",
        "exact",
        "--problem",
        "paper-n3",
        "--scenarios",
        "steady",
        "--ticks",
        "3",
        "--out",
        report.to_str().expect("utf-8 path"),
    ]);
    assert!(!out.status.success(), "{}", stdout(&out));
    // Besides the policy's own output, logged tagged per tick: one error line.
    let err = stderr(&out);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].contains("failed every one of its 3 tick(s) on 'steady'"),
        "{err}"
    );
    assert!(errors[0].contains("trapped"), "{err}");
    assert!(
        report.join("results.json").is_file(),
        "the report is written"
    );
}

/// Under an address-space limit the pooling allocator cannot reserve its
/// slots: the engine falls back to on-demand instances, says so once, and
/// decides as before.
#[test]
fn an_address_space_limit_falls_back_to_on_demand_instances() {
    let out = Command::new("sh")
        .args([
            "-c",
            "ulimit -v 16777216 && exec \"$0\" decide --scenario paper-n2 --policy exact --backend cpu",
            env!("CARGO_BIN_EXE_mfsched"),
        ])
        .output()
        .expect("sh runs");
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.matches("plugin instances from the on-demand allocator")
            .count(),
        1,
        "{err}"
    );
    assert!(stdout(&out).contains("accepted"), "{}", stdout(&out));
}

/// Issue 27, online correction on the simulator: on a card whose throughputs
/// are scaled away from the trained ones (seed 5: 40 % of the uncorrected
/// ticks break a floor), the corrected loop breaks fewer floors; every row
/// is written to results.json.
/// Margins need held-out ratios: a bundle trained on every row has none, and
/// `repro correction --floor-miss-rate` refuses it in one line naming its models.
#[test]
fn repro_correction_refuses_margins_from_a_bundle_without_held_out_rows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let csv = dir.path().join("p.csv");
    let bundle = dir.path().join("paper-n2");
    let path = |p: &Path| p.to_str().expect("utf-8 path").to_owned();
    let out = mfsched(&[
        "profile",
        "--scenario",
        "paper-n2",
        "--samples",
        "40",
        "--seed",
        "1",
        "--out",
        &path(&csv),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = mfsched(&[
        "train",
        "--data",
        &path(&csv),
        "--scenario",
        "paper-n2",
        "--holdout",
        "0",
        "--epochs",
        "5",
        "--out",
        &path(&bundle),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = mfsched(&[
        "repro",
        "correction",
        "--problem",
        "paper-n2",
        "--models",
        &path(&bundle),
        "--floor-miss-rate",
        "0.05",
        "--ticks",
        "2",
        "--seeds",
        "1",
    ]);
    let err = fails_in_one_line(&out, "margins without held-out ratios");
    assert!(
        err.contains("keeps no held-out ratios for llama3b, yolo-a"),
        "{err}"
    );
}

#[test]
fn repro_correction_breaks_fewer_floors_on_a_perturbed_card() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = mfsched(&[
        "repro",
        "correction",
        "--policy",
        "exhaustive",
        "--ticks",
        "40",
        "--seeds",
        "5",
        "--out",
        dir.path().to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("(mfsched simulator)"), "{text}");
    // Every condition twice: floors on the point prediction, then on the
    // conformal lower bound (the default --floor-miss-rate 0.05).
    let violations = |condition: &str, floors: &str| -> usize {
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| {condition} | {floors} |")))
            .unwrap_or_else(|| panic!("a row for {condition}, {floors}: {text}"));
        row.split('|')
            .nth(6)
            .and_then(|c| c.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("a count: {row}"))
    };
    let point = "on the point prediction";
    let (uncorrected, corrected) = (
        violations("perturbed card, uncorrected", point),
        violations("perturbed card, corrected", point),
    );
    assert!(uncorrected > 0, "{text}");
    assert!(corrected < uncorrected, "{text}");
    // Margins hold floors the point prediction breaks on the trained card.
    let margins = "conformal, α 0.05";
    assert!(
        violations("trained card", margins) <= violations("trained card", point),
        "{text}"
    );
    let results: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("results.json")).expect("results.json"),
    )
    .expect("JSON");
    assert_eq!(
        results["rows"].as_array().map(Vec::len),
        Some(6),
        "{results}"
    );
}

/// The contention field end to end on the simulator: its profiles carry the
/// reading, `train --field contention` learns it, the daemon serves it from
/// its sampler's reading with no tick falling back, the decision log keeps the
/// reading for `replay --policy`, and a state without one is refused rather
/// than predicted as 0.
#[test]
fn the_contention_field_is_profiled_trained_served_and_replayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf-8").to_owned();
    let (csv, bundle) = (path("p.csv"), path("bundle"));
    let out = mfsched(&[
        "profile",
        "--scenario",
        "paper-n2",
        "--seed",
        "5",
        "--samples",
        "96",
        "--out",
        &csv,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let header = std::fs::read_to_string(&csv).expect("profile");
    assert!(
        header
            .lines()
            .next()
            .expect("header")
            .contains(",contention,"),
        "{header}"
    );
    // Trains a bundle on `field` into `out`; its bundle.json.
    let train = |field: &str, out: &str| -> serde_json::Value {
        let o = mfsched(&[
            "train",
            "--data",
            &csv,
            "--scenario",
            "paper-n2",
            "--field",
            field,
            "--epochs",
            "30",
            "--out",
            out,
        ]);
        assert!(o.status.success(), "{field}: {}", stderr(&o));
        let json =
            std::fs::read_to_string(Path::new(out).join("bundle.json")).expect("bundle.json");
        serde_json::from_str(&json).expect("JSON")
    };
    let meta = train("contention", &bundle);
    assert_eq!(meta["field_features"], "contention");
    let features = meta["models"][0]["features"].as_array().expect("features");
    assert_eq!(features.last().expect("some"), "contention");
    // The training profile is kept beside the bundle (the candidate-aware
    // field fits on it; `decide --field candidate-aware` below reads it).
    assert_eq!(
        std::fs::read(dir.path().join("bundle/profile.csv")).expect("kept"),
        std::fs::read(&csv).expect("profile")
    );

    let config = dir.path().join("mfsched.toml");
    std::fs::write(
        &config,
        "scenario = \"paper-n2\"\nseed = 7\n\n[loop]\nperiod_ms = 100\ndeadline_ms = 75\n\n\
         [policy]\nactive = \"exact\"\nshadows = [\"ga\"]\nbundle_dir = \"bundle\"\n\n\
         [sampler]\nkind = \"sim\"\n\n[log]\npath = \"decisions.log\"\n\n\
         [api]\nlisten = \"127.0.0.1:0\"\n\n[workload]\ntrace = \"periodic\"\ntrace_ticks = 8\n",
    )
    .expect("config");
    let out = mfsched(&[
        "run",
        "--config",
        config.to_str().expect("utf-8"),
        "--max-ticks",
        "6",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("stopped after 6 tick(s)"), "{err}");
    let log = path("decisions.log");
    // Every tick predicted with the reading.
    assert_decided_every_tick(&log, &[("exact", "active"), ("ga", "shadow")], 6);
    // A sampler that gives no reading cannot serve the bundle: one line.
    let footprint = dir.path().join("footprint.toml");
    std::fs::write(
        &footprint,
        std::fs::read_to_string(&config)
            .expect("config")
            .replace("kind = \"sim\"", "kind = \"footprint\""),
    )
    .expect("config");
    let out = mfsched(&[
        "run",
        "--config",
        footprint.to_str().expect("utf-8"),
        "--max-ticks",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out)
            .lines()
            .any(|l| l.starts_with("error: ") && l.contains("no contention reading")),
        "{}",
        stderr(&out)
    );
    // The log keeps each tick's reading: exact decided again reproduces the run.
    let out = mfsched(&[
        "replay", &log, "--policy", "exact", "--models", &bundle, "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(r["policies"][0]["decided"], 6, "{r}");
    assert_eq!(r["policies"][0]["differ_from_ran"], 0, "{r}");

    let decide = |bundle: &str, state: &str, field: &str| {
        mfsched(&[
            "decide",
            "--scenario",
            "paper-n2",
            "--policy",
            "exact",
            "--models",
            bundle,
            "--field",
            field,
            "--state",
            state,
        ])
    };
    let reading = r#"{"workload":"high","vram_used_mib":12000,"utilization":0.8,"contention":0.6}"#;
    for field in ["observed", "candidate-aware"] {
        let out = decide(&bundle, reading, field);
        assert!(out.status.success(), "{field}: {}", stderr(&out));
    }
    let out = decide(
        &bundle,
        r#"{"workload":"high","vram_used_mib":12000,"utilization":0.8}"#,
        "observed",
    );
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("contention reading"), "{text}");

    // Both fields at once: the reading, then the co-runners' learnt factors.
    let both = path("both");
    let meta = train("contention+co-runner-factors", &both);
    assert_eq!(meta["field_features"], "contention+co-runner-factors");
    let features: Vec<&str> = meta["models"][0]["features"]
        .as_array()
        .expect("features")
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    let at = features
        .iter()
        .position(|&f| f == "contention")
        .expect("the reading");
    assert_eq!(
        features[at + 1],
        "corunners.inflicted_log_slowdown",
        "{features:?}"
    );
    assert!(meta["models"][0]["corunner_factors"].is_array());
    for field in ["observed", "candidate-aware"] {
        let out = decide(&both, reading, field);
        assert!(out.status.success(), "{field}: {}", stderr(&out));
    }
}
