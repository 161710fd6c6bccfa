//! The sandbox promise, attacked: hostile components (`tests/plugins/hostile-*`)
//! and hostile files. Each test asserts what must hold whatever the machine's
//! load: the host answers, bounds what it keeps and prints, escapes what it
//! shows, and never applies an invalid configuration.

use std::path::Path;

use crate::common::process::{mfsched, stderr, stdout};

fn utf8(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// No line a person reads may be forged into a success line by plugin text.
fn assert_no_forged_line(text: &str) {
    for line in text.lines() {
        let l = line.trim_start();
        assert!(
            !l.starts_with("ok    passed") && !l.contains('\u{1b}'),
            "forged or raw line: {line:?}"
        );
    }
}

fn decide_with(mode: &str, deadline_ms: &str) -> std::process::Output {
    mfsched(&[
        "decide",
        "--scenario",
        "paper-n3",
        "--policy",
        utf8(&crate::common::test_plugin("hostile-decide")),
        "--param",
        &format!("mode={mode}"),
        "--deadline-ms",
        deadline_ms,
    ])
}

#[test]
fn a_huge_refusal_is_cut_to_one_escaped_line() {
    let out = decide_with("refuse", "5000");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.len() < 16 << 10, "{} bytes on stderr", err.len());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("refused to decide"), "{err}");
    assert!(err.contains("more bytes"), "the cut is said: {err}");
    assert_no_forged_line(&err);
    assert_no_forged_line(&stdout(&out));
}

#[test]
fn plugin_output_is_captured_capped_and_tagged() {
    let out = decide_with("print", "20000");
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    // 32 MiB printed; each stream keeps 64 KiB per call, the rest is counted.
    assert!(err.len() < 1 << 20, "{} bytes on stderr", err.len());
    assert!(
        err.contains("mfsched::plugin"),
        "tagged: {}",
        &err[..err.len().min(2000)]
    );
    assert!(err.contains("chatty"));
    assert!(
        err.contains("over the per-call cap were dropped"),
        "counted"
    );
}

#[test]
fn host_work_in_a_predict_call_ends_at_the_deadline() {
    let out = decide_with("predict", "300");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("deadline"), "{err}");
    assert!(err.contains("running configuration was kept"), "{err}");
}

#[test]
fn a_predict_call_over_the_candidate_cap_is_refused_before_any_work() {
    let out = decide_with("flood", "20000");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("candidates in one call, the most is"), "{err}");
}

/// The one range check of the predict path: a candidate past the joint space
/// is the policy's misuse, named with the space's size, and nothing is applied.
#[test]
fn a_predict_call_with_a_candidate_outside_the_space_is_a_misuse() {
    let out = decide_with("outside", "20000");
    assert!(!out.status.success());
    let err = stderr(&out);
    let size = mfsched_core::load_scenario("paper-n3")
        .expect("bundled")
        .problem
        .space()
        .size();
    assert!(
        err.contains(&format!(
            "misused the host interface: predict: candidate {size} is not a joint configuration (the space has {size})"
        )),
        "{err}"
    );
    assert!(err.contains("running configuration was kept"), "{err}");
}

#[test]
fn a_bloated_self_description_is_refused_at_load_in_one_line() {
    let out = mfsched(&[
        "plugins",
        "check",
        utf8(&crate::common::test_plugin("hostile-describe")),
    ]);
    assert!(!out.status.success());
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.len() < 16 << 10, "{} bytes", text.len());
    assert!(text.contains("`name` returned"), "{text}");
    assert_no_forged_line(&text);
}

/// The plugin passes the start-up self-check (medium load), then refuses with
/// 20 MiB at burst load on every tick: the daemon records every tick with the
/// reason cut, its log stays small, and it exits cleanly. The period is long
/// so that building the refusal fits its deadline (¾ of it) on a busy machine:
/// the test is of what the daemon does with the refusal, not of its speed.
#[test]
fn the_daemon_survives_a_policy_that_turns_hostile() {
    let dir = tempfile::tempdir().expect("temp dir");
    crate::common::plugin_dir(dir.path(), &[("hostile-decide", "turncoat")]);
    let config = crate::common::daemon_config(
        dir.path(),
        "paper-n3",
        1500,
        "active = \"turncoat\"\nplugin_dir = \"plugins\"",
        "[workload]\nlevel = \"burst\"",
    );
    let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "4"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log_path = dir.path().join("decisions.log");
    let size = std::fs::metadata(&log_path).expect("log").len();
    assert!(size < 64 << 10, "the log holds {size} bytes for 4 ticks");
    let log = mfsched_daemon::read_decision_log(&log_path).expect("log");
    assert_eq!(log.records.len(), 4);
    let sha = mfsched_core::sha256_hex(
        &std::fs::read(crate::common::test_plugin("hostile-decide")).expect("component"),
    );
    for r in &log.records {
        assert_eq!(
            r.active.component.as_deref(),
            Some(sha.as_str()),
            "the log names the build that decided"
        );
        let failure = r.active.outcome.as_ref().expect_err("refused");
        assert!(failure.message.contains("refused to decide"), "{failure:?}");
        assert!(failure.message.len() < 8 << 10);
        assert!(r.kept_last_valid);
    }
    let replay = mfsched(&["replay", utf8(&log_path)]);
    assert!(replay.status.success());
    assert_no_forged_line(&stdout(&replay));
    // One line per tick, after the one naming the utility they were scored with.
    assert_eq!(stdout(&replay).lines().count(), 5, "one line per tick");
    assert_eq!(
        stdout(&replay)
            .lines()
            .filter(|l| l.starts_with("tick "))
            .count(),
        4,
        "one line per tick"
    );
    assert!(stdout(&replay).contains(&format!("turncoat@{}", &sha[..12])));
}

/// Files no component can be: a FIFO (which would block a reader forever),
/// a symlink to /dev/zero (which would never end), a huge sparse file. Each
/// is refused with its reason at start-up; the daemon runs on.
#[test]
fn hostile_files_in_the_plugin_directory_are_refused_without_blocking() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugin dir");
    let made = std::process::Command::new("mkfifo")
        .arg(plugins.join("fifo.wasm"))
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", plugins.join("zero.wasm")).expect("symlink");
    let big = std::fs::File::create(plugins.join("big.wasm")).expect("create");
    big.set_len(mfsched_plugin_host::MAX_COMPONENT_BYTES + 1)
        .expect("sparse");
    let config = crate::common::daemon_config(
        dir.path(),
        "paper-n3",
        400,
        "active = \"hold\"\nplugin_dir = \"plugins\"",
        "",
    );
    let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "2"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("a FIFO"), "{err}");
    assert!(err.contains("a character device"), "{err}");
    assert!(err.contains("MiB a component may have"), "{err}");
}

/// The start-up self-check runs components off the daemon's async runtime, as
/// hot reload does: a policy that prints and reads stdin on every call (and
/// in `name()`), one that panics in `name()` and one that panics in `decide`,
/// all in the plugin directory, do not stop the daemon starting. The printing
/// one is offered and ticks (its lines captured and tagged), the panicking
/// ones are refused in one line each.
#[test]
fn printing_or_panicking_components_at_start_up_do_not_stop_the_daemon() {
    let dir = tempfile::tempdir().expect("temp dir");
    crate::common::plugin_dir(
        dir.path(),
        &[
            ("noisy", "noisy"),
            ("panic-name", "panic-name"),
            ("trap", "trap"),
        ],
    );
    let config = crate::common::daemon_config(
        dir.path(),
        "paper-n3",
        400,
        "active = \"noisy\"\nplugin_dir = \"plugins\"",
        "",
    );
    let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "3"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("Cannot start a runtime"), "{err}");
    assert!(
        err.contains("noisy: deciding for 3 models"),
        "captured: {err}"
    );
    assert!(err.contains("panic-name.wasm not loaded"), "{err}");
    assert!(err.contains("plugin trap not loaded"), "{err}");
    assert_no_forged_line(&err);
    let log = mfsched_daemon::read_decision_log(&dir.path().join("decisions.log")).expect("log");
    assert_eq!(log.records.len(), 3);
    for r in &log.records {
        assert_eq!(r.active.policy, "noisy");
        assert!(r.active.outcome.is_ok(), "{:?}", r.active.outcome);
    }
}
