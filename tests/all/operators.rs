//! What an operator lives with: the daemon's stderr tells the story of a run
//! in a few lines (one per edge of a policy's run of failures, never one per
//! tick), a configuration that cannot decide is refused at start-up naming
//! its key, and shadows are added and removed at run time through the API.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::process::{self, fails_in_one_line, mfsched, stderr, terminate};
use crate::common::{self, bearer};

fn embedded(name: &str) -> &'static [u8] {
    mfsched_plugin_host::EMBEDDED_PLUGINS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
        .expect("embedded plugin")
}

fn history(addr: SocketAddr) -> serde_json::Value {
    let (status, body) = common::http(addr, "GET", "/v1/history", None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("history JSON")
}

/// Polls `done` until it holds; a minute at most (the assertion names `what`).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The daemon's stderr lines, read on a thread so the pipe never fills.
/// `mfsched run --config CONFIG --max-ticks TICKS`.
fn run_ticks(config: &Path, ticks: u32) -> std::process::Output {
    mfsched(&[
        "run",
        "--config",
        config.to_str().expect("utf-8"),
        "--max-ticks",
        &ticks.to_string(),
    ])
}

fn collect_lines(
    err: impl BufRead + Send + 'static,
) -> (Arc<Mutex<Vec<String>>>, std::thread::JoinHandle<()>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            sink.lock().expect("lines").push(line);
        }
    });
    (lines, reader)
}

/// The policy refuses with a 20 MiB reason (forged lines and ANSI escapes in
/// it) on every burst tick, until a good build replaces its file: its run of
/// failures is one escaped, bounded `warn` line and one `info` line with the
/// count of failed ticks the decision log holds, and nothing per tick. The
/// period leaves the 20 MiB refusal its deadline (¾ of it) on a busy machine.
#[test]
fn a_policy_failing_every_tick_is_one_warn_line_then_one_recovery_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugins = common::plugin_dir(dir.path(), &[("hostile-decide", "turncoat")]);
    let file = plugins.join("turncoat.wasm");
    let config = common::daemon_config(
        dir.path(),
        "paper-n3",
        1000,
        "active = \"turncoat\"\nplugin_dir = \"plugins\"",
        "[workload]\nlevel = \"burst\"",
    );
    let (child, err, addr) = process::start_daemon(&config);
    let mut daemon = process::Killed(child);
    let (lines, reader) = collect_lines(err);
    let totals = |key: &str| {
        history(addr)["totals"]["turncoat"][key]
            .as_u64()
            .unwrap_or(0)
    };
    wait_until("turncoat failed 12 ticks", || totals("failures") >= 12);
    let tmp = plugins.join("turncoat.wasm.tmp");
    std::fs::write(&tmp, embedded("exhaustive")).expect("write");
    std::fs::rename(&tmp, &file).expect("rename");
    wait_until("turncoat answered 3 ticks", || totals("decisions") >= 3);
    assert!(terminate(&mut daemon.0).success());
    reader.join().expect("the reader ends with the daemon");
    let lines = lines.lock().expect("lines").clone();

    let log = mfsched_daemon::read_decision_log(&dir.path().join("decisions.log")).expect("log");
    let failed = log
        .records
        .iter()
        .take_while(|r| r.active.outcome.is_err())
        .count();
    assert!(failed >= 12, "{failed} failed ticks");
    assert!(
        log.records[failed..]
            .iter()
            .any(|r| r.active.outcome.is_ok())
    );
    let about: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("policy turncoat"))
        .collect();
    assert_eq!(
        about.len(),
        2,
        "one line per edge, none per tick: {about:#?}"
    );
    let (warn, recovered) = (about[0], about[1]);
    assert!(
        warn.contains("WARN")
            && warn.contains("active policy turncoat is failing")
            && warn.contains("the last valid configuration is kept")
            && warn.contains("refused to decide"),
        "{warn}"
    );
    assert!(warn.len() < 1000, "the reason is cut: {} bytes", warn.len());
    assert!(!warn.contains('\u{1b}'), "escapes are escaped: {warn}");
    assert!(
        recovered.contains("INFO")
            && recovered.contains(&format!(
                "active policy turncoat answers again after {failed} failed tick(s)"
            )),
        "{recovered}"
    );
    assert!(
        lines.len() < log.records.len(),
        "{} lines for {} ticks: {lines:#?}",
        lines.len(),
        log.records.len()
    );
}

/// `dir/mfsched.toml` for paper-n2 ticking every `period_ms`, with `policy`
/// (the `[policy]` body, `plugin_dir = "plugins"` added) and the `fairness`
/// test utility (not additive) in `dir/plugins`.
fn with_fairness(dir: &Path, period_ms: u64, policy: &str) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    std::fs::copy(
        common::test_plugin("fairness"),
        plugins.join("fairness.wasm"),
    )
    .expect("copy");
    common::daemon_config(
        dir,
        "paper-n2",
        period_ms,
        &format!("{policy}\nplugin_dir = \"plugins\""),
        "",
    )
}

/// Configurations that cannot decide stop `mfsched run` before it writes
/// anything, in one line naming the key: exact with a utility that is not
/// additive, an unknown policy (active or shadow), an unknown utility, a
/// utility parameter the utility does not declare. The same utility with ga
/// decides.
#[test]
fn a_configuration_that_cannot_decide_is_refused_at_start_up_naming_the_key() {
    let cases: [(&str, &[&str]); 7] = [
        (
            "active = \"exact\"\nutility = \"fairness\"\nplugin_dir = \"plugins\"",
            &[
                "policy.active = 'exact' cannot decide with policy.utility = 'fairness'",
                "additive",
            ],
        ),
        (
            "active = \"nonesuch\"",
            &[
                "policy.active: policy 'nonesuch' is not loaded",
                "available are",
            ],
        ),
        (
            "active = \"ga\"\nshadows = [\"nonesuch\"]",
            &["policy.shadows: policy 'nonesuch' is not loaded"],
        ),
        (
            "active = \"ga\"\nutility = \"nonesuch\"",
            &["policy.utility = 'nonesuch'", "unknown plugin 'nonesuch'"],
        ),
        (
            "active = \"hold\"\nstart = { llama3b = \"fp16 concurrency=3\" }",
            &[
                "policy.start.llama3b: 'fp16 concurrency=3' is not one of its configurations (e.g. '",
            ],
        ),
        (
            "active = \"hold\"\nstart = { nobody = \"fp16\" }",
            &["policy.start names model 'nobody', which the scenario does not have"],
        ),
        (
            "active = \"ga\"\nutility_params = { weight = 2 }",
            &[
                "policy.utility_params: unknown parameter 'weight' for utility 'utility'; it knows: none",
            ],
        ),
    ];
    for (policy, expected) in cases {
        let dir = tempfile::tempdir().expect("temp dir");
        common::plugin_dir(dir.path(), &[("fairness", "fairness")]);
        let config = common::daemon_config(dir.path(), "paper-n2", 400, policy, "");
        let config = config.to_str().expect("utf-8");
        let out = mfsched(&[
            "--log-level",
            "error",
            "run",
            "--config",
            config,
            "--max-ticks",
            "1",
        ]);
        let line = fails_in_one_line(&out, policy);
        for part in expected {
            assert!(line.contains(part), "{policy}: {line}");
        }
        assert!(
            !dir.path().join("decisions.log").exists(),
            "{policy}: nothing written"
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let config = with_fairness(dir.path(), 400, "active = \"ga\"\nutility = \"fairness\"");
    let out = run_ticks(&config, 2);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// paper-n3-tight-floors with `qwen1.5b`'s floor out of every
/// configuration's reach, written in `dir`, under `exact` every 300 ms, with
/// `[floors]` `floors`: the daemon's config.
fn unreachable_floor(dir: &Path, floors: &str) -> PathBuf {
    let scenario = dir.join("unreachable.toml");
    let text = std::fs::read_to_string(
        common::workspace_root().join("examples/paper-n3-tight-floors.toml"),
    )
    .expect("the example scenario");
    std::fs::write(
        &scenario,
        text.replace("sla_floor = 450", "sla_floor = 1e9"),
    )
    .expect("write");
    common::daemon_config(
        dir,
        scenario.to_str().expect("utf-8"),
        300,
        "active = \"exact\"",
        &format!("[floors]\n{floors}\n"),
    )
}

/// With `[floors] out_of_reach = "keep"`, a floor no configuration is
/// predicted to meet makes the trial decision refuse: that is the state's
/// answer, not a policy that cannot decide, so the daemon starts, says so
/// once, and its ticks keep the last valid configuration while the floor
/// stays out of reach.
#[test]
fn a_floor_out_of_reach_at_the_trial_state_does_not_stop_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = unreachable_floor(dir.path(), "out_of_reach = \"keep\"");
    let out = run_ticks(&config, 2);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.matches(
            "no configuration of 'qwen1.5b' is predicted to meet its floor at the trial state"
        )
        .count(),
        1,
        "{err}"
    );
    let records = mfsched_daemon::read_decision_log(&dir.path().join("decisions.log"))
        .expect("the log")
        .records;
    assert_eq!(records.len(), 2);
    assert!(
        records.iter().all(|r| r.kept_last_valid),
        "the ticks refused too"
    );
}

/// By default (`out_of_reach = "best-effort"`) the same floor is held at the
/// model's reach tick by tick: the trial passes, every tick decides (none
/// keeps the last valid configuration), records the floor it held and counts
/// it, the other floors hold on the predictions, and one `warn` line says so
/// for the whole run of such ticks. `replay --policy exact` of the log
/// decides as the daemon did.
#[test]
fn a_floor_out_of_reach_is_decided_best_effort_by_default() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = unreachable_floor(dir.path(), "");
    let out = run_ticks(&config, 3);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("trial decision was refused"), "{err}");
    assert_eq!(
        err.matches("floor out of reach").count(),
        1,
        "one line for the run of ticks: {err}"
    );
    let log = dir.path().join("decisions.log");
    let contents = mfsched_daemon::read_decision_log(&log).expect("the log");
    assert_eq!(contents.records.len(), 3);
    let floors = &contents.floors[0].1;
    assert_eq!(floors.out_of_reach, mfsched_core::OutOfReach::BestEffort);
    for r in &contents.records {
        assert!(!r.kept_last_valid, "tick {} decided", r.tick);
        assert_eq!(r.floors_held, vec![0], "qwen1.5b's floor held");
        let Ok(p) = &r.active.outcome else {
            panic!("tick {}: {:?}", r.tick, r.active.outcome)
        };
        let predicted = p.predicted_throughput.as_ref().expect("predictions");
        for (t, floor) in predicted.iter().zip(&floors.enforced).skip(1) {
            assert!(t >= floor, "tick {}: {predicted:?}", r.tick);
        }
    }
    let replay = mfsched(&[
        "replay",
        log.to_str().expect("utf-8"),
        "--policy",
        "exact",
        "--json",
    ]);
    assert!(replay.status.success(), "{}", stderr(&replay));
    let results: serde_json::Value = serde_json::from_slice(&replay.stdout).expect("replay's JSON");
    assert!(
        results["floors"]
            .as_str()
            .is_some_and(|f| f.contains("best effort out of reach")),
        "{results}"
    );
    assert_eq!(
        results["policies"][0]["differ_from_ran"], 0,
        "replayed as decided: {results}"
    );
}

/// `policy.start`: the daemon starts from the named configurations (what the
/// servers run), so `hold` keeps them from the first tick; an unnamed model
/// starts in its least-memory configuration.
#[test]
fn the_daemon_starts_from_the_configurations_policy_start_names() {
    let dir = tempfile::tempdir().expect("temp dir");
    let start = "fp16 concurrency=4 skip_rate=0.25";
    let config = common::daemon_config(
        dir.path(),
        "paper-n2",
        300,
        &format!("active = \"hold\"\nstart = {{ llama3b = \"{start}\" }}"),
        "",
    );
    let out = run_ticks(&config, 3);
    assert!(out.status.success(), "{}", stderr(&out));
    let problem = mfsched_core::load_scenario("paper-n2")
        .expect("bundled")
        .problem;
    let records = mfsched_daemon::read_decision_log(&dir.path().join("decisions.log"))
        .expect("the log")
        .records;
    assert_eq!(records.len(), 3);
    for r in &records {
        assert_eq!(
            problem.models[0].knobs(r.applied[0] as usize).to_string(),
            start
        );
        assert_eq!(r.applied[1], problem.current[1], "yolo-a: least memory");
        assert!(r.changed_models.is_empty(), "hold changes nothing");
    }
}

/// `POST /v1/policies/active`, as the issue 29 trial found it: making a
/// shadow active promotes it out of the shadows in one step (one log line),
/// and a policy that cannot decide with the daemon's utility (exact beside a
/// utility that is not additive) is refused with 409 naming why, the active
/// policy staying, as a start-up with it is refused.
#[test]
fn a_shadow_made_active_is_promoted_and_one_that_cannot_decide_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = with_fairness(
        dir.path(),
        200,
        "active = \"ga\"\nshadows = [\"exhaustive\"]\nutility = \"fairness\"",
    );
    let (child, err, addr) = process::start_daemon(&config);
    let mut daemon = process::Killed(child);
    let (lines, reader) = collect_lines(err);
    let (auth, token) = bearer();
    let activate = |policy: &str| {
        common::http_with(
            addr,
            "POST",
            "/v1/policies/active",
            Some(&format!(r#"{{"policy":"{policy}"}}"#)),
            &[(auth, &token)],
        )
    };
    let policies = || {
        let (status, body) = common::http(addr, "GET", "/v1/policies", None);
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).expect("JSON")
    };
    let (status, body) = activate("exact");
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("policy 'exact' cannot decide") && body.contains("additive"),
        "{body}"
    );
    assert_eq!(policies()["active"], "ga");
    let (status, body) = activate("exhaustive");
    assert_eq!(status, 200, "{body}");
    let now = policies();
    assert_eq!(now["active"], "exhaustive", "{now}");
    assert_eq!(now["shadows"], serde_json::json!([]), "{now}");
    wait_until("a tick decided by exhaustive alone", || {
        history(addr)["ticks"].as_array().is_some_and(|t| {
            t.last().is_some_and(|t| {
                t["policies"].as_array().is_some_and(|p| p.len() == 1)
                    && t["policies"][0]["policy"] == "exhaustive"
            })
        })
    });
    assert!(terminate(&mut daemon.0).success());
    reader.join().expect("the reader ends with the daemon");
    let lines = lines.lock().expect("lines").clone();
    let switches: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("active policy:"))
        .collect();
    assert_eq!(switches.len(), 1, "{lines:#?}");
    assert!(
        switches[0].contains("ga → exhaustive, promoted from the shadows"),
        "{}",
        switches[0]
    );
}

/// `POST` and `DELETE /v1/policies/shadows`: with the token only, a shadow
/// is asked from the next tick on and recorded in each tick's record, the
/// change is one log line and a history event, and a removed shadow stays in
/// the history the dashboard lists.
#[test]
fn shadows_are_added_and_removed_at_run_time_with_the_token() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = common::daemon_config(dir.path(), "paper-n2", 200, "active = \"ga\"", "");
    let (child, err, addr) = process::start_daemon(&config);
    let mut daemon = process::Killed(child);
    let (lines, reader) = collect_lines(err);
    let (auth, token) = bearer();
    let change = |method: &str, policy: &str, headers: &[(&str, &str)]| {
        common::http_with(
            addr,
            method,
            "/v1/policies/shadows",
            Some(&format!(r#"{{"policy":"{policy}"}}"#)),
            headers,
        )
    };
    let (status, _) = change("POST", "exhaustive", &[]);
    assert_eq!(status, 401, "changes need the token");
    let (status, body) = change("POST", "exhaustive", &[(auth, &token)]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""shadows":["exhaustive"]"#), "{body}");
    for (policy, why) in [
        ("ga", "the active one"),
        ("nonesuch", "no policy 'nonesuch'"),
    ] {
        let (status, body) = change("POST", policy, &[(auth, &token)]);
        assert_eq!(status, 400, "{body}");
        assert!(body.contains(why), "{body}");
    }
    let shadow_ticks = |h: &serde_json::Value| {
        h["ticks"]
            .as_array()
            .map(|ticks| {
                ticks
                    .iter()
                    .filter(|t| t["policies"].as_array().is_some_and(|p| p.len() == 2))
                    .count()
            })
            .unwrap_or(0)
    };
    wait_until("exhaustive shadowed 3 ticks", || {
        shadow_ticks(&history(addr)) >= 3
    });
    let (status, body) = change("DELETE", "exhaustive", &[(auth, &token)]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""shadows":[]"#), "{body}");
    let (status, body) = change("DELETE", "exhaustive", &[(auth, &token)]);
    assert_eq!(status, 404, "{body}");
    let after = history(addr)["ticks"].as_array().map_or(0, Vec::len);
    wait_until("two ticks without the shadow", || {
        history(addr)["ticks"].as_array().map_or(0, Vec::len) >= after + 2
    });
    let h = history(addr);
    let kinds: Vec<&str> = h["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["shadow-added", "shadow-removed"], "{h}");
    assert_eq!(h["shadows"], serde_json::json!([]));
    assert!(h["totals"]["exhaustive"]["decisions"].as_u64() >= Some(3));
    assert!(terminate(&mut daemon.0).success());
    reader.join().expect("the reader ends with the daemon");

    let log = mfsched_daemon::read_decision_log(&dir.path().join("decisions.log")).expect("log");
    let shadowed = log
        .records
        .iter()
        .filter(|r| r.shadows.iter().any(|s| s.policy == "exhaustive"))
        .count();
    assert!(shadowed >= 3, "the decision log records the shadow's ticks");
    let last = log.records.last().expect("ticks");
    assert!(last.shadows.is_empty(), "removed from the next tick on");
    let lines = lines.lock().expect("lines").clone();
    let changes: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("shadow policy"))
        .collect();
    assert_eq!(changes.len(), 2, "{lines:#?}");
    assert!(changes[0].contains("shadow policy added: exhaustive"));
    assert!(changes[1].contains("shadow policy removed: exhaustive"));
}

/// The README's `curl` lines (continuations joined), for the API.
fn readme_curls() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("README.md");
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in readme.lines() {
        let line = line.trim();
        if current.is_empty() && !line.starts_with("curl ") {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                commands.push(std::mem::take(&mut current));
            }
        }
    }
    commands
}

/// Every `curl` of the README works as written against a running daemon
/// (with its port): the JSON content type is there, and without it the API
/// answers 415 with a JSON refusal saying what to send.
#[test]
fn the_readme_api_examples_work_as_written() {
    let curls = readme_curls();
    assert!(curls.len() >= 3, "{curls:#?}");
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("MFSCHED_REQUIRE_CURL").is_none(),
            "MFSCHED_REQUIRE_CURL is set and curl is missing"
        );
        eprintln!("skipped: curl is not installed (apt-get install curl)");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let config = common::daemon_config(dir.path(), "paper-n2", 300, "active = \"ga\"", "");
    let (child, err, addr) = process::start_daemon(&config);
    let _daemon = process::Killed(child);
    let (_lines, _reader) = collect_lines(err);
    let run = |command: &str| {
        let command = command.replace("127.0.0.1:9464", &addr.to_string());
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{command} -s -o /dev/null -w '%{{http_code}}'"))
            .env("MFSCHED_API_TOKEN", common::TOKEN)
            .output()
            .expect("sh runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for command in &curls {
        assert!(
            command.contains("-H 'Content-Type: application/json'"),
            "{command}"
        );
        assert_eq!(run(command), "200", "{command}");
    }
    let bare = curls[0].replace("-H 'Content-Type: application/json'", "");
    assert_eq!(run(&bare), "415", "{bare}");
    // The refusal is JSON like every other, and says what to send.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} -s",
            bare.replace("127.0.0.1:9464", &addr.to_string())
        ))
        .env("MFSCHED_API_TOKEN", common::TOKEN)
        .output()
        .expect("sh runs");
    let refusal: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON refusal");
    assert!(
        refusal["error"]
            .as_str()
            .is_some_and(|e| e.contains("send the header Content-Type: application/json")),
        "{refusal}"
    );
    let (status, policies) = common::http(addr, "GET", "/v1/policies", None);
    assert_eq!(status, 200);
    let policies: serde_json::Value = serde_json::from_str(&policies).expect("JSON");
    assert_eq!(policies["active"], "exhaustive", "{policies}");
    assert_eq!(policies["shadows"], serde_json::json!([]), "{policies}");
}

/// `bench policies --policy exact` beyond exhaustive search's reach: exact is
/// the reference, measured once and listed once.
#[test]
fn bench_policies_lists_the_reference_once_when_it_is_asked_for() {
    let out = mfsched(&[
        "bench",
        "policies",
        "--scenario",
        "scale-n16",
        "--decisions",
        "1",
        "--policy",
        "exact",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let names: Vec<&str> = v["policies"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["policy"].as_str())
        .collect();
    assert_eq!(names, ["exact"], "{v}");
}

/// `decide`'s table: every column starts where its header does, whatever
/// the length of the model names and knob settings.
#[test]
fn decide_aligns_its_table_columns() {
    for scenario in ["paper-n3", "paper-n5"] {
        let out = mfsched(&["decide", "--scenario", scenario, "--policy", "exact"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = process::stdout(&out);
        let lines: Vec<&str> = text.lines().collect();
        let header = lines
            .iter()
            .position(|l| l.starts_with("model "))
            .expect("the table header");
        let rows: Vec<&str> = lines[header..]
            .iter()
            .take_while(|l| !l.is_empty())
            .copied()
            .collect();
        assert!(rows.len() > 2, "{text}");
        let decision_at = rows[0].find("decision").expect("decision column");
        for row in &rows {
            assert_eq!(
                row.chars().count(),
                rows[0].chars().count(),
                "right-aligned numbers end together:\n{text}"
            );
            let before: String = row.chars().take(decision_at).collect();
            assert!(
                before.ends_with(' ')
                    && !row
                        .chars()
                        .nth(decision_at)
                        .is_some_and(char::is_whitespace),
                "{row:?} does not start its decision at column {decision_at}:\n{text}"
            );
        }
    }
}

/// The WIT says whether a local configuration's memory includes the model's
/// runtime overhead, and the host's numbers agree: the running configuration's
/// memory is the sum of its local configurations' `vram-mib`.
#[test]
fn the_wit_says_local_memory_includes_the_runtime_overhead() {
    let out = mfsched(&["plugins", "wit"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let wit = process::stdout(&out);
    let at = wit.find("vram-mib: u32,").expect("local-config.vram-mib");
    assert!(
        wit[..at]
            .rsplit("///")
            .take(5)
            .any(|l| l.contains("`runtime-overhead-mib` included")),
        "{}",
        &wit[at.saturating_sub(400)..at]
    );
    let problem = mfsched_core::load_scenario("paper-n2")
        .expect("bundled")
        .problem;
    for m in &problem.models {
        let least_weights = m.variants.iter().map(|v| v.weights_mib).min().unwrap_or(0);
        for c in &m.configs {
            assert!(
                c.vram_mib >= m.runtime_overhead_mib + least_weights,
                "{}",
                m.name
            );
        }
    }
}

/// `plugins check` says how far the decision is from the optimum of its own
/// problem (exact's, with the embedded additive utility): exact is at it, and
/// the number is there for any other search.
#[test]
fn plugins_check_prints_the_gap_to_the_optimum() {
    for (stem, exact) in [
        ("mfsched_plugin_exact", true),
        ("mfsched_plugin_static_budget", false),
    ] {
        let file = Path::new(mfsched_test_programs::TEST_PLUGINS_DIR)
            .join("../wasm32-wasip2/release")
            .join(format!("{stem}.wasm"));
        let out = mfsched(&["plugins", "check", file.to_str().expect("utf-8")]);
        let text = process::stdout(&out);
        assert!(out.status.success(), "{text}{}", stderr(&out));
        let line = text
            .lines()
            .find(|l| l.starts_with("ok    optimum on paper-n5: exact reaches utility "))
            .unwrap_or_else(|| panic!("{stem}: no optimum line: {text}"));
        let gap: f64 = line
            .split("this decision is ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|g| g.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(gap >= 0.0, "{line}");
        if exact {
            assert_eq!(gap, 0.0, "{line}");
        }
    }
}

/// `replay` names the utility each tick was scored with: a line when it
/// changes, and in `--summary` one row per policy per utility (a mean is never
/// taken across a change) with the utilities listed by hash.
#[test]
fn replay_names_the_utility_each_tick_was_scored_with() {
    let dir = tempfile::tempdir().expect("temp dir");
    common::plugin_dir(dir.path(), &[("fairness", "fairness")]);
    // Two daemon runs appending to one log: the published utility, then fairness.
    for utility in ["utility", "fairness"] {
        let config = common::daemon_config(
            dir.path(),
            "paper-n2",
            100,
            &format!("active = \"ga\"\nutility = \"{utility}\"\nplugin_dir = \"plugins\""),
            "",
        );
        let out = run_ticks(&config, 3);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let log = dir.path().join("decisions.log");
    let log = log.to_str().expect("utf-8");
    let out = mfsched(&["replay", log]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let named: Vec<&str> = text.lines().filter(|l| l.starts_with("utility ")).collect();
    assert_eq!(named.len(), 2, "{text}");
    assert!(named[0].starts_with("utility utility@"), "{text}");
    assert!(named[1].starts_with("utility fairness@"), "{text}");
    let ticks: Vec<&str> = text.lines().filter(|l| l.starts_with("tick ")).collect();
    assert_eq!(ticks.len(), 6, "{text}");
    // Each change comes right before the first tick scored with it.
    let at = |needle: &str| text.lines().position(|l| l.starts_with(needle));
    assert_eq!(
        at("utility fairness@"),
        at(ticks[3]).map(|i| i - 1),
        "{text}"
    );

    let out = mfsched(&["replay", log, "--summary"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for row in ["ga [u1]", "ga [u2]"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row {row}: {text}"));
        assert!(line.contains(" 3 "), "three decisions each: {line}");
    }
    assert!(
        text.contains("utilities (from tick, scored with)"),
        "{text}"
    );
    let listed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("u1 ") || l.starts_with("u2 "))
        .collect();
    assert_eq!(listed.len(), 2, "{text}");
    assert!(listed[0].contains("utility@"), "{text}");
    assert!(listed[1].contains("fairness@"), "{text}");
}

/// The file actuator pointed into a directory that is not there: its run of
/// failed writes is one `warn` line with the reason, however many changes
/// fail, and one `info` line with the count once the directory exists and a
/// write succeeds; the daemon decides throughout. (The file is written on a
/// change only; a switch of the active policy makes one.)
#[test]
fn a_failing_actuator_is_one_warn_line_then_one_recovery_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    let target = out.join("config.json");
    let config = common::daemon_config(
        dir.path(),
        "paper-n3",
        100,
        "active = \"ga\"",
        &format!("[actuator]\nfile = \"{}\"", target.display()),
    );
    let (child, err, addr) = process::start_daemon(&config);
    let mut daemon = process::Killed(child);
    let (lines, reader) = collect_lines(err);
    let counter = |name: &str| {
        let (_, body) = common::http(addr, "GET", "/metrics", None);
        body.lines()
            .find(|l| l.starts_with(&format!("{name}{{actuator=\"file\"}} ")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (auth, token) = bearer();
    let switch = |policy: &str| {
        let (status, body) = common::http_with(
            addr,
            "POST",
            "/v1/policies/active",
            Some(&format!(r#"{{"policy":"{policy}"}}"#)),
            &[(auth, &token)],
        );
        assert_eq!(status, 200, "{body}");
    };
    let ticks = || {
        let (_, body) = common::http(addr, "GET", "/metrics", None);
        body.lines()
            .find_map(|l| l.strip_prefix("mfsched_ticks_total "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // ga's first two ticks each change the configuration (the running one,
    // then a better one), so two writes fail; then it holds.
    wait_until("two failed writes", || {
        counter("mfsched_actuator_failures_total") >= 2
    });
    let after = ticks() + 5;
    wait_until("five more ticks", || ticks() >= after);
    let failed = counter("mfsched_actuator_failures_total");
    std::fs::create_dir(&out).expect("mkdir");
    // static-budget moves away from ga's configuration: a change, a write.
    switch("static-budget");
    wait_until("a write", || counter("mfsched_actuator_sent_total") >= 1);
    assert!(terminate(&mut daemon.0).success());
    reader.join().expect("reader");
    let lines = lines.lock().expect("lines").clone();
    let failing: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("actuator.file: delivery failed"))
        .collect();
    assert_eq!(
        failing.len(),
        1,
        "one line for {failed} failed writes: {lines:#?}"
    );
    assert!(failing[0].contains("WARN"), "{}", failing[0]);
    assert!(
        failing[0].contains("config.json"),
        "the reason names the file: {}",
        failing[0]
    );
    let recovered: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("actuator.file: delivered again after"))
        .collect();
    assert_eq!(recovered.len(), 1, "{lines:#?}");
    assert!(recovered[0].contains("INFO"), "{}", recovered[0]);
    let count: u64 = recovered[0]
        .split("delivered again after ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(
        count >= 2 && count == failed,
        "{count} of {failed}: {}",
        recovered[0]
    );
}

/// paper-n2's model names.
fn paper_n2_models() -> Vec<String> {
    mfsched_core::load_scenario("paper-n2")
        .expect("bundled")
        .problem
        .models
        .iter()
        .map(|m| m.name.clone())
        .collect()
}

/// A `[workload]` reading every model of `models` from `page` (polled every
/// 100 ms): its requests from `requests`, and its throughput from
/// `throughput` where one is given.
fn scraped_load(
    page: SocketAddr,
    models: &[String],
    requests: &str,
    throughput: Option<&str>,
) -> String {
    let mut workload =
        "[workload]\nsource = \"prometheus\"\n\n[workload.prometheus]\npoll_ms = 100\ntimeout_ms = 80\n"
            .to_owned();
    for m in models {
        workload.push_str(&format!(
            "\n[workload.prometheus.models.{m}]\nmetric = \"{requests}\"\nlabel = \"\"\n\
             scrape = \"http://{page}/metrics\"\nreference_rate = 10.0\n"
        ));
        if let Some(t) = throughput {
            workload.push_str(&format!("throughput_metric = \"{t}\"\n"));
        }
    }
    workload
}

/// Each of `models` has exactly one line among `lines` that mentions it and
/// `about`: a `warn` line saying `says`.
fn one_warn_line_per_model(lines: &[String], models: &[String], about: &str, says: &str) {
    for m in models {
        let found: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains(about) && l.contains(&format!("model={m}")))
            .collect();
        assert_eq!(found.len(), 1, "{m}: {lines:#?}");
        assert!(
            found[0].contains("WARN") && found[0].contains(says),
            "{}",
            found[0]
        );
    }
}

/// Issue 26, item 11: a request counter that goes down on every scrape (a
/// server restarting in a loop, or a gauge named as a counter) is counted as
/// a failed reading of that model and said in one `warn` line naming it,
/// never one per scrape.
#[test]
fn a_counter_going_down_on_every_scrape_is_one_warn_line_per_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    let page =
        common::metrics_page(|n| format!("falling_requests_total {}\n", 1_000_000 - 10 * n as i64));
    let models = paper_n2_models();
    let workload = scraped_load(page, &models, "falling_requests_total", None);
    let config = common::daemon_config(dir.path(), "paper-n2", 100, "active = \"hold\"", &workload);
    let (child, err, addr) = process::start_daemon(&config);
    let mut daemon = process::Killed(child);
    let (lines, reader) = collect_lines(err);
    let failures = |model: &str| {
        let (_, page) = common::http(addr, "GET", "/metrics", None);
        common::metric(
            &page,
            &format!("mfsched_load_read_failures_total{{model=\"{model}\"}}"),
        )
        .unwrap_or(0.0)
    };
    wait_until("every model's counter went down 3 times", || {
        models.iter().all(|m| failures(m) >= 3.0)
    });
    assert!(terminate(&mut daemon.0).success());
    reader.join().expect("the reader ends with the daemon");
    let lines = lines.lock().expect("lines").clone();
    one_warn_line_per_model(
        &lines,
        &models,
        "went down",
        "falling_requests_total went down",
    );
}

/// exhaustive deciding paper-n2 every 100 ms in `dir`, every model's load
/// and throughput scraped from a page whose counters grow with time: 10
/// requests/s (a high load) and 0.01 tokens or frames per second, a
/// fraction of anything the surrogate predicts; floors on the conformal
/// bound at α 0.05. Returns the models, the
/// API's address, the daemon and its stderr.
fn slow_servers(
    dir: &Path,
) -> (
    Vec<String>,
    SocketAddr,
    process::Killed,
    std::io::BufReader<std::process::ChildStderr>,
) {
    let start = Instant::now();
    let page = common::metrics_page(move |_| {
        let t = start.elapsed().as_secs_f64();
        format!(
            "slow_requests_total {}\nslow_tokens_total {}\n",
            10.0 * t,
            0.01 * t
        )
    });
    let models = paper_n2_models();
    let workload = scraped_load(
        page,
        &models,
        "slow_requests_total",
        Some("slow_tokens_total"),
    );
    // Floors on the conformal bound (off by default), for the floors tests.
    let extra = format!("{workload}\n[floors]\nmiss_rate = 0.05\n");
    let config = common::daemon_config(dir, "paper-n2", 100, "active = \"exhaustive\"", &extra);
    let (child, err, addr) = process::start_daemon(&config);
    (models, addr, process::Killed(child), err)
}

/// Issue 27, online correction: servers whose measured throughput is a
/// fraction of what the surrogate predicts. The daemon corrects the running
/// configurations' predictions toward the measurements (bounded), raises the
/// drift gauge for every model, and says so in one `warn` line per model,
/// never one per tick.
#[test]
fn measured_throughput_far_below_the_prediction_is_corrected_and_one_drift_line_per_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (models, addr, mut daemon, err) = slow_servers(dir.path());
    let (lines, reader) = collect_lines(err);
    let gauge = |name: &str, model: &str| {
        let (_, page) = common::http(addr, "GET", "/metrics", None);
        common::metric(&page, &format!("{name}{{model=\"{model}\"}}"))
    };
    wait_until("every model drifts", || {
        models
            .iter()
            .all(|m| gauge("mfsched_prediction_drift", m) == Some(1.0))
    });
    // Ticks go on after the alarm: it is not raised again.
    let ticks = |page: &str| common::metric(page, "mfsched_ticks_total").unwrap_or(0.0);
    let now = ticks(&common::http(addr, "GET", "/metrics", None).1);
    wait_until("10 more ticks", || {
        ticks(&common::http(addr, "GET", "/metrics", None).1) >= now + 10.0
    });
    for m in &models {
        let factor = gauge("mfsched_prediction_correction", m).expect("a factor");
        assert!((0.25..0.5).contains(&factor), "{m}: factor {factor}");
        let ratio = gauge("mfsched_measured_over_predicted", m).expect("a ratio");
        assert!(ratio < 0.5, "{m}: measured / predicted {ratio}");
        assert_eq!(
            gauge("mfsched_prediction_drift_alarms_total", m),
            Some(1.0),
            "{m}"
        );
    }
    assert!(terminate(&mut daemon.0).success());
    reader.join().expect("the reader ends with the daemon");
    let lines = lines.lock().expect("lines").clone();
    one_warn_line_per_model(
        &lines,
        &models,
        "prediction drift",
        "decisions use corrected predictions",
    );
}

/// Servers under load that serve nothing: every reading of their throughput
/// is 0, which the online correction cannot learn a ratio from. It skips
/// them, counts them in `mfsched_correction_rejected_readings_total`, and
/// corrects nothing.
#[test]
fn readings_the_correction_cannot_use_are_counted_not_learnt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let start = Instant::now();
    let page = common::metrics_page(move |_| {
        format!(
            "stuck_requests_total {}\nstuck_tokens_total 0\n",
            10.0 * start.elapsed().as_secs_f64()
        )
    });
    let models = paper_n2_models();
    let workload = scraped_load(
        page,
        &models,
        "stuck_requests_total",
        Some("stuck_tokens_total"),
    );
    let config = common::daemon_config(
        dir.path(),
        "paper-n2",
        100,
        "active = \"exhaustive\"",
        &workload,
    );
    let (child, err, addr) = process::start_daemon(&config);
    let mut daemon = process::Killed(child);
    let (_lines, reader) = collect_lines(err);
    let rejected = |page: &str| common::metric(page, "mfsched_correction_rejected_readings_total");
    wait_until("10 readings rejected", || {
        rejected(&common::http(addr, "GET", "/metrics", None).1).is_some_and(|n| n >= 10.0)
    });
    let (_, page) = common::http(addr, "GET", "/metrics", None);
    for m in &models {
        assert_eq!(
            common::metric(
                &page,
                &format!("mfsched_prediction_correction{{model=\"{m}\"}}")
            ),
            None,
            "{m}: nothing learnt, no factor\n{page}"
        );
    }
    assert!(terminate(&mut daemon.0).success());
    reader.join().expect("the reader ends with the daemon");
}

/// A server that serves 2 requests/s (4 items/s) whatever it is offered (its
/// page carries a card's DCGM readings too), behind a gateway whose page
/// counts 30 arrivals/s on each paper-n2 model's frontend (`a`, `b`) and on
/// one that is no model's. Returns the models, the server's address, and the
/// `[workload]` reading each model's load from the server's counter, then the
/// same reading it where requests arrive (`arrivals`).
fn saturated_behind_a_gateway() -> (Vec<String>, SocketAddr, String, String) {
    let start = Instant::now();
    let server = common::metrics_page(move |_| {
        let t = start.elapsed().as_secs_f64();
        format!(
            "served_total {}\nitems_total {}\n\
             DCGM_FI_DEV_FB_USED{{gpu=\"0\"}} 1000\nDCGM_FI_DEV_GPU_UTIL{{gpu=\"0\"}} 50\n",
            2.0 * t,
            4.0 * t
        )
    });
    let gateway = common::metrics_page(move |_| {
        let t = start.elapsed().as_secs_f64();
        ["a", "b", "admin"]
            .iter()
            .map(|p| format!("gateway_requests_total{{proxy=\"{p}\"}} {}\n", 30.0 * t))
            .collect::<String>()
    });
    let models = paper_n2_models();
    let served = scraped_load(server, &models, "served_total", Some("items_total"));
    let mut arrivals = served.clone();
    for (m, frontend) in models.iter().zip(["a", "b"]) {
        arrivals.push_str(&format!(
            "\n[workload.prometheus.models.{m}.arrivals]\nscrape = \"http://{gateway}/metrics\"\n\
             metric = \"gateway_requests_total\"\nlabel = \"proxy\"\nserved_name = \"{frontend}\"\n"
        ));
    }
    (models, server, served, arrivals)
}

/// Issue 25, the load behind saturated servers: a server that serves 2
/// requests/s whatever it is offered, behind a gateway that counts the 30
/// requests/s that arrive for it. With `arrivals` naming the gateway's page
/// the daemon reads the offered load there (ratio 3, burst), and the
/// throughput still from the server's own counter.
#[test]
fn the_offered_load_is_read_where_requests_arrive_and_the_throughput_where_they_are_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (models, _, _, workload) = saturated_behind_a_gateway();
    let config = common::daemon_config(dir.path(), "paper-n2", 100, "active = \"hold\"", &workload);
    let (child, err, addr) = process::start_daemon(&config);
    let mut daemon = process::Killed(child);
    let (_lines, reader) = collect_lines(err);
    let page = || common::http(addr, "GET", "/metrics", None).1;
    wait_until("a load ratio and every model's throughput read", || {
        let page = page();
        common::metric(&page, "mfsched_load_ratio").is_some()
            && models.iter().all(|m| {
                common::metric(
                    &page,
                    &format!("mfsched_measured_throughput{{model=\"{m}\"}}"),
                )
                .is_some()
            })
    });
    let page = page();
    let ratio = common::metric(&page, "mfsched_load_ratio").expect("a ratio");
    // 30 requests/s over a reference of 10: the served 2 would read 0.2.
    assert!((2.5..3.5).contains(&ratio), "load ratio {ratio}\n{page}");
    for m in &models {
        let served = common::metric(
            &page,
            &format!("mfsched_measured_throughput{{model=\"{m}\"}}"),
        )
        .expect("a throughput");
        assert!(
            (3.0..5.0).contains(&served),
            "{m}: throughput {served}\n{page}"
        );
    }
    assert!(terminate(&mut daemon.0).success());
    reader.join().expect("the reader ends with the daemon");
}

/// `profile --live` reads the offered load where `arrivals` says too: a
/// server saturated at 2 requests/s behind a gateway counting 30 arrivals/s
/// for each model is profiled at burst with every row in that regime, and
/// each row's throughput is what the server served (4 items/s).
#[test]
fn profile_live_checks_the_regime_on_the_arrivals() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, server, served, arrivals) = saturated_behind_a_gateway();
    let card = format!("http://{server}/metrics");
    let profile = |workload: &str, name: &str| {
        let config =
            common::daemon_config(dir.path(), "paper-n2", 1000, "active = \"hold\"", workload);
        let out = dir.path().join(name);
        let o = mfsched(&[
            "profile",
            "--live",
            "--config",
            config.to_str().expect("utf-8"),
            "--workload",
            "burst",
            "--samples",
            "4",
            "--seed",
            "1",
            "--settle-ms",
            "10",
            "--window-ms",
            "300",
            "--gpu-metrics",
            &card,
            "--out",
            out.to_str().expect("utf-8"),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        (String::from_utf8_lossy(&o.stdout).into_owned(), out)
    };
    // The served counter alone reads 0.2 of the reference: low, not burst.
    let (out, _) = profile(&served, "served.csv");
    assert!(
        out.contains("measured 1 rows") && out.contains("1 row(s) saw a load outside"),
        "{out}"
    );
    let (arrived, csv) = profile(&arrivals, "arrivals.csv");
    assert!(arrived.contains("0 row(s) saw a load outside"), "{arrived}");
    let problem = mfsched_core::load_scenario("paper-n2")
        .expect("bundled")
        .problem;
    let rows = mfsched_core::read_profile(&csv, &problem)
        .expect("the profile")
        .rows;
    assert!(!rows.is_empty());
    for r in &rows {
        for &t in &r.throughput {
            assert!((3.0..5.0).contains(&t), "throughput {t}: {r:?}");
        }
    }
}

/// Issue 27, calibrated floors: with `[floors] miss_rate = 0.05` decisions
/// hold each floor on the split-conformal lower bound of the prediction from
/// the bundle's held-out ratios. The daemon exports both floors,
/// shows both on the API, counts the ticks its servers
/// measured under a declared floor (these servers are under every one), and
/// records the floors in its log.
#[test]
fn floors_are_enforced_on_the_conformal_bound_and_measured_misses_are_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (models, addr, mut daemon, err) = slow_servers(dir.path());
    let (_lines, reader) = collect_lines(err);
    let floor = |page: &str, model: &str, kind: &str| {
        common::metric(
            page,
            &format!("mfsched_sla_floor{{model=\"{model}\",kind=\"{kind}\"}}"),
        )
        .unwrap_or_else(|| panic!("{model} {kind} floor:\n{page}"))
    };
    let misses = |page: &str, model: &str| {
        common::metric(
            page,
            &format!("mfsched_measured_floor_misses_total{{model=\"{model}\"}}"),
        )
        .unwrap_or(0.0)
    };
    wait_until("every model measured under its floor 5 times", || {
        let (_, page) = common::http(addr, "GET", "/metrics", None);
        models.iter().all(|m| misses(&page, m) >= 5.0)
    });
    let (_, page) = common::http(addr, "GET", "/metrics", None);
    let (_, history) = common::http(addr, "GET", "/v1/history", None);
    let history: serde_json::Value = serde_json::from_str(&history).expect("JSON");
    for (i, m) in models.iter().enumerate() {
        let (declared, enforced) = (floor(&page, m, "declared"), floor(&page, m, "enforced"));
        assert!(
            declared > 0.0 && enforced > declared,
            "{m}: {declared} → {enforced}"
        );
        // The margin of a surrogate with R² ≈ 0.99: a few per cent.
        assert!(enforced < 1.5 * declared, "{m}: {declared} → {enforced}");
        let api = &history["models"][i];
        assert_eq!(api["floor"].as_f64(), Some(declared), "{api}");
        assert_eq!(api["enforced_floor"].as_f64(), Some(enforced), "{api}");
    }
    assert!(terminate(&mut daemon.0).success());
    reader.join().expect("the reader ends with the daemon");
    let contents =
        mfsched_daemon::read_decision_log(&dir.path().join("decisions.log")).expect("log");
    assert_eq!(contents.floors.len(), 1, "{:?}", contents.floors);
    let (first, record) = &contents.floors[0];
    assert_eq!((*first, record.miss_rate), (0, Some(0.05)));
    for (i, m) in models.iter().enumerate() {
        assert_eq!(record.declared[i], floor(&page, m, "declared"), "{m}");
        assert_eq!(record.enforced[i], floor(&page, m, "enforced"), "{m}");
    }
}

/// Issue 27, online correction in the decision log: a daemon whose servers
/// measure a fraction of the predicted throughput corrects its predictions
/// and, under a constant load and state, moves off the configuration it
/// measured (uncorrected it would hold it); the log records what was
/// measured and how it corrected, so `replay --policy` of the policy that ran
/// reproduces every decision.
#[test]
fn replay_corrects_as_the_daemon_did() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, addr, mut daemon, err) = slow_servers(dir.path());
    let (_lines, reader) = collect_lines(err);
    let log = dir.path().join("decisions.log");
    wait_until(
        "the correction moved the daemon off its first configuration",
        || {
            let (_, page) = common::http(addr, "GET", "/metrics", None);
            common::metric(&page, "mfsched_ticks_total").unwrap_or(0.0) >= 20.0
                && mfsched_daemon::read_decision_log(&log).is_ok_and(|l| {
                    l.records
                        .iter()
                        .skip(1)
                        .any(|r| !r.changed_models.is_empty())
                })
        },
    );
    assert!(terminate(&mut daemon.0).success());
    reader.join().expect("the reader ends with the daemon");
    let contents = mfsched_daemon::read_decision_log(&log).expect("log");
    assert!(
        contents
            .measured
            .iter()
            .any(|m| m.correction.is_some() && m.throughput.iter().all(Option::is_some)),
        "{:?}",
        contents.measured
    );
    // `replay LOG --policy exhaustive --json` with `more` arguments.
    let replay = |more: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "replay",
            log.to_str().expect("utf-8"),
            "--policy",
            "exhaustive",
            "--json",
        ];
        args.extend_from_slice(more);
        let out = mfsched(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str(&process::stdout(&out)).expect("JSON")
    };
    let r = replay(&[]);
    assert_eq!(r["policies"][0]["differ_from_ran"], 0, "{r}");
    assert!(r["ticks"].as_u64() >= Some(20), "{r}");
    // The report says it replayed the correction, and what scored the rows.
    assert_eq!(r["corrected"], true, "{r}");
    assert_eq!(r["ran"]["label"], "ran (exhaustive)", "{r}");
    // Decided again under the floors the daemon enforced (else decisions
    // would differ), and what ran measured under its declared floors.
    assert_eq!(
        r["floors"], "conformal, α 0.05, best effort out of reach (as the log recorded)",
        "{r}"
    );
    // These servers are under every floor: every tick that measured misses.
    assert_eq!(
        r["ran"]["measured_floor_misses"].as_u64(),
        Some(contents.measured.len() as u64),
        "{r}"
    );
    assert_eq!(
        r["policies"][0]["measured_floor_misses"],
        serde_json::Value::Null
    );
    // Replayed on the point prediction instead: the label says so, and what
    // ran is still measured against the same declared floors.
    let point = replay(&["--floor-miss-rate", "0"]);
    assert_eq!(
        point["floors"], "on the point prediction, best effort out of reach (--floor-miss-rate)",
        "{point}"
    );
    assert_eq!(
        point["ran"]["measured_floor_misses"], r["ran"]["measured_floor_misses"],
        "{point}"
    );
    assert!(
        r["scored_with"]
            .as_str()
            .is_some_and(|u| u.starts_with("utility@")),
        "{r}"
    );
}
