//! End-to-end tests: they run the `mfsched` binary as a user would.

use std::process::{Command, Output};

fn mfsched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(args)
        .output()
        .expect("the mfsched binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

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
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("unknown scenario 'paper-n9'"), "{err}");
}

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Copies a daemon config fixture into `dir` (its relative paths then land there).
fn daemon_config(dir: &Path, fixture: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/daemon")
        .join(fixture);
    let dst = dir.join("mfsched.toml");
    std::fs::copy(&src, &dst).expect("copy the fixture");
    dst
}

#[test]
fn run_serves_the_api_and_stops_cleanly_on_sigterm_with_a_replayable_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = daemon_config(dir.path(), "fast-footprint.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(["run", "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn mfsched run");
    let mut daemon_err = BufReader::new(child.stderr.take().expect("piped"));
    let mut line = String::new();
    let addr: SocketAddr = loop {
        line.clear();
        assert!(
            daemon_err.read_line(&mut line).expect("stderr") > 0,
            "run exited before listening"
        );
        if let Some(a) = line.trim().strip_prefix("listening on http://") {
            break a.parse().expect("an address");
        }
    };
    // Let a few ticks run.
    std::thread::sleep(std::time::Duration::from_millis(400));
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
    let (status, policies) = common::http(addr, "GET", "/v1/policies", None);
    assert_eq!(status, 200);
    assert!(policies.contains("\"active\":\"hold\""), "{policies}");
    let (status, decision) = common::http(addr, "GET", "/v1/decision", None);
    assert_eq!(status, 200);
    assert!(decision.contains("applied_knobs"), "{decision}");
    let (status, refused) = common::http(
        addr,
        "POST",
        "/v1/policies/active",
        Some(r#"{"policy":"no-such-policy"}"#),
    );
    assert_eq!(status, 400, "{refused}");

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = child.wait().expect("wait");
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
    assert_eq!(stdout(&out).lines().count(), 5, "{}", stdout(&out));
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
fn an_unknown_config_key_is_one_clear_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = daemon_config(dir.path(), "unknown-key.toml");
    let out = mfsched(&["run", "--config", config.to_str().expect("utf-8 path")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
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
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
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
fn decide_text_names_the_stand_in_predictor_and_the_outcome() {
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
    assert!(text.contains("not the MeanField surrogate"), "{text}");
    assert!(text.contains("burst load"), "{text}");
    assert!(text.contains("population=16"), "{text}");
    assert!(text.contains("outcome            accepted"), "{text}");
}

#[test]
fn a_hostile_policy_file_fails_within_the_deadline_with_one_line() {
    let spin = format!("{}/spin.wasm", env!("MFSCHED_TEST_PLUGINS"));
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
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
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
        assert!(!out.status.success(), "{extra:?}");
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "{extra:?}: {err}");
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
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/plugins");
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
        assert!(line.contains("mfsched:scheduler@0.1.0"), "{line}");
    }
    assert!(text.contains("corrupt.wasm: cannot load"), "{text}");
    assert!(text.contains("--param population=48"), "{text}");
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
    assert_eq!(rows.len(), 6);
    assert_eq!(rows[0]["gap_p50_pct"].as_f64(), Some(0.0), "{v}");
    for r in rows {
        assert_eq!(r["failed"], 0, "{r}");
        assert!(r["latency_p50_ms"].as_f64().is_some_and(|l| l > 0.0), "{r}");
        assert!(r["gap_p50_pct"].as_f64().is_some_and(|g| g >= 0.0), "{r}");
    }
}
