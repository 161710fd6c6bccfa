//! Third-party policy development, end to end through the binary: `plugins
//! check`, `plugins new`, the WIT version rule. The two slow builds (the Rust
//! template crate, the componentize-py policy) are `#[ignore]`d here and run by
//! `.ci/run` with `cargo test --test all thirdparty -- --ignored`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::custom_section;
use crate::common::process::{fails_in_one_line, mfsched, stderr, stdout};

/// A bundled component as a file, as a third party would ship one.
fn bundled_file(stem: &str) -> PathBuf {
    Path::new(mfsched_test_programs::TEST_PLUGINS_DIR)
        .join("../wasm32-wasip2/release")
        .join(format!("{stem}.wasm"))
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

#[test]
fn a_component_of_the_previous_wit_version_is_rejected_at_load_naming_both_versions() {
    let file = crate::common::test_plugin("wit-0-1-0");
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n5",
        "--policy",
        path_str(&file),
    ]);
    let err = fails_in_one_line(&out, "");
    assert!(
        err.contains("built against mfsched:scheduler@0.1.0"),
        "{err}"
    );
    assert!(err.contains("this host (mfsched:scheduler@0.4.0)"), "{err}");
    assert!(err.contains("mfsched:scheduler@0.4.x"), "{err}");

    let out = mfsched(&["plugins", "check", path_str(&file)]);
    assert!(!out.status.success());
    let text = stdout(&out);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("ERROR")).collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(errors[0].contains("mfsched:scheduler@0.1.0"), "{text}");
}

/// A utility of the WIT before utilities declared parameters (0.2.0) is
/// refused at load, naming the file, both versions and the utility SDK.
#[test]
fn a_utility_of_wit_0_2_is_refused_naming_the_file_and_the_version_it_needs() {
    let file = crate::common::test_plugin("wit-0-2-0-utility");
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n5",
        "--policy",
        "exact",
        "--utility",
        path_str(&file),
    ]);
    let err = fails_in_one_line(&out, "");
    assert!(err.contains("wit-0-2-0-utility.wasm"), "{err}");
    assert!(
        err.contains("built against mfsched:scheduler@0.2.0"),
        "{err}"
    );
    assert!(err.contains("this host (mfsched:scheduler@0.4.0)"), "{err}");
    assert!(err.contains("mfsched-utility-sdk"), "{err}");
}

#[test]
fn plugins_check_passes_a_sound_policy_and_a_sound_utility() {
    let out = mfsched(&[
        "plugins",
        "check",
        path_str(&bundled_file("mfsched_plugin_ga")),
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("ok    policy world of mfsched:scheduler@0.4.0"),
        "{text}"
    );
    assert!(text.contains("accepted (VRAM"), "{text}");
    assert!(text.contains("deterministic"), "{text}");
    assert!(!text.contains("ERROR"), "{text}");

    let out = mfsched(&[
        "plugins",
        "check",
        path_str(&bundled_file("mfsched_plugin_utility")),
        "--scenario",
        "paper-n3",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("ok    utility world"), "{text}");
    assert!(text.contains("over the card's VRAM is excluded"), "{text}");
    assert!(
        text.contains("terms: additive; the terms of") && text.contains("add up to their scores"),
        "{text}"
    );
    assert!(
        text.contains("ga decides with this utility on paper-n3"),
        "{text}"
    );
}

#[test]
fn plugins_check_refuses_a_utility_whose_terms_are_not_numbers() {
    let out = mfsched(&[
        "plugins",
        "check",
        path_str(&crate::common::test_plugin("bad-terms")),
        "--scenario",
        "paper-n3",
    ]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let text = stdout(&out);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("ERROR")).collect();
    assert!(
        errors
            .iter()
            .any(|l| l.contains("terms:") && l.contains("the term NaN")),
        "{text}"
    );
}

#[test]
fn plugins_check_says_what_is_wrong_one_line_per_finding() {
    let cases = [
        (crate::common::test_plugin("trap"), "the policy trapped"),
        (
            crate::common::test_plugin("out-of-range"),
            "the decision was rejected",
        ),
        (
            crate::common::workspace_root().join("tests/fixtures/plugins/corrupt.wasm"),
            "not a valid Wasm component",
        ),
    ];
    for (file, expected) in cases {
        let out = mfsched(&["plugins", "check", path_str(&file)]);
        assert!(!out.status.success(), "{}", file.display());
        let text = stdout(&out);
        let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("ERROR")).collect();
        assert_eq!(errors.len(), 1, "{text}");
        assert!(errors[0].contains(expected), "{}: {text}", file.display());
        let err = stderr(&out);
        assert!(err.contains("1 check(s) failed"), "{err}");
    }
    let out = mfsched(&["plugins", "check", "no/such/policy.wasm"]);
    let err = fails_in_one_line(&out, "");
    assert!(err.contains("no such component file"), "{err}");
}

#[test]
fn plugins_new_writes_a_standalone_crate_on_the_sdk_of_the_hosts_wit() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let crate_dir = dir.path().join("fast-greedy");
    let out = mfsched(&[
        "plugins",
        "new",
        "fast-greedy",
        "--dir",
        path_str(&crate_dir),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("target/wasm32-wasip2/release/fast_greedy.wasm"),
        "{}",
        stdout(&out)
    );
    for file in ["Cargo.toml", "src/lib.rs", "README.md", ".gitignore"] {
        assert!(crate_dir.join(file).is_file(), "{file} missing");
    }
    // The crate depends on this checkout's SDK, whose bindings come from the
    // host's own WIT.
    let sdk = std::fs::canonicalize(crate::common::workspace_root().join("sdk")).expect("the SDK");
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("written");
    assert!(
        manifest.contains(&format!("mfsched-sdk = {{ path = \"{}\" }}", sdk.display())),
        "{manifest}"
    );
    let wit = std::fs::read_to_string(sdk.join("wit/scheduler.wit")).expect("the SDK's WIT");
    let ours = std::fs::read_to_string(crate::common::workspace_root().join("wit/scheduler.wit"))
        .expect("exists");
    assert_eq!(wit, ours, "the SDK generates from the host's WIT");
    assert!(
        !crate_dir.join("wit").exists(),
        "no copy of the WIT to drift"
    );

    let out = mfsched(&["plugins", "new", "Fast Greedy"]);
    let err = fails_in_one_line(&out, "");
    assert!(err.contains("not a usable crate name"), "{err}");
}

/// Runs cargo for a guest crate without the outer build's flags and wrappers.
fn guest_cargo(dir: &Path, target_dir: &Path) -> Output {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(dir)
        .args(["build", "--target", "wasm32-wasip2", "--release"])
        .env("CARGO_TARGET_DIR", target_dir);
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
    ] {
        cmd.env_remove(var);
    }
    cmd.output().expect("cargo runs")
}

#[test]
#[ignore = "builds the template crate with cargo (minutes on 2 cores); run by .ci/run"]
fn a_policy_from_the_template_builds_passes_check_and_test_and_runs_in_ab_against_ga() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let crate_dir = dir.path().join("my-policy");
    let out = mfsched(&["plugins", "new", "my-policy", "--dir", path_str(&crate_dir)]);
    assert!(out.status.success(), "{}", stderr(&out));
    // A target directory that outlives the test, so reruns reuse the SDK's build.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("template-target");
    let built = guest_cargo(&crate_dir, &target);
    assert!(built.status.success(), "{}", stderr(&built));
    let component = target.join("wasm32-wasip2/release/my_policy.wasm");

    let out = mfsched(&["plugins", "check", path_str(&component)]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("accepted (VRAM"), "{}", stdout(&out));

    // On the states of a log the daemon wrote.
    let config = crate::common::daemon_config(dir.path(), "paper-n3", 400, "active = \"ga\"", "");
    let out = mfsched(&["run", "--config", path_str(&config), "--max-ticks", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = dir.path().join("decisions.log");
    let out = mfsched(&[
        "plugins",
        "test",
        path_str(&component),
        "--log",
        path_str(&log),
        "--scenario",
        "paper-n3",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("3 of 3 states deterministic"),
        "{}",
        stdout(&out)
    );

    let report = dir.path().join("ab");
    let out = mfsched(&[
        "ab",
        "--a",
        path_str(&component),
        "--b",
        "ga",
        "--scenarios",
        "steady,bursts",
        "--ticks",
        "12",
        "--out",
        path_str(&report),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let results: serde_json::Value = serde_json::from_slice(
        &std::fs::read(report.join("results.json")).expect("ab writes results.json"),
    )
    .expect("results.json is JSON");
    let text = results.to_string();
    assert!(text.contains("my_policy.wasm"), "{text}");
    assert!(text.contains("\"ga\""), "{text}");
}

/// Builds `examples/EXAMPLE` with its `build.sh` (`hint`: what it needs),
/// checks the component (it must call itself `title`) and decides with it on
/// paper-n5: accepted, feasible, floors met. Returns the component and the
/// compile cache both commands shared, for more.
fn build_check_and_decide(example: &str, title: &str, hint: &str) -> (PathBuf, PathBuf) {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let component = tmp.join(format!("{example}.wasm"));
    let built =
        Command::new(crate::common::workspace_root().join(format!("examples/{example}/build.sh")))
            .arg(&component)
            .output()
            .expect("the build script runs");
    assert!(
        built.status.success(),
        "{example} did not build ({hint}): {}{}",
        stdout(&built),
        stderr(&built)
    );
    // One compilation for every command: the later ones load from the cache.
    let cache = tmp.join(format!("{example}-cache"));
    let out = mfsched(&[
        "plugins",
        "check",
        path_str(&component),
        "--cache-dir",
        path_str(&cache),
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains(&format!("calls itself \"{title}\"")),
        "{}",
        stdout(&out)
    );
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n5",
        "--policy",
        path_str(&component),
        "--json",
        "--cache-dir",
        path_str(&cache),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["accepted"], true, "{v}");
    assert_eq!(v["feasible"], true, "{v}");
    assert_eq!(v["floors_met"], true, "{v}");
    (component, cache)
}

#[test]
#[ignore = "needs componentize-py on PATH and compiles an 18 MB component; run by .ci/run"]
fn the_python_policy_runs_under_the_host_and_is_validated() {
    build_check_and_decide(
        "python-greedy",
        "python greedy (componentize-py)",
        "pip install componentize-py==0.25.1",
    );
}

/// The clock reader answers by the parity of the hour: every answer is valid
/// and two runs a moment apart agree, so `plugins check` finds every decision
/// it sees accepted; `plugins test` moves the policy's clocks between runs and
/// must report it as not deterministic.
#[test]
fn plugins_test_catches_a_policy_that_reads_the_clock() {
    let file = crate::common::test_plugin("clock-reader");
    let out = mfsched(&[
        "plugins",
        "check",
        path_str(&file),
        "--scenario",
        "paper-n3",
    ]);
    assert!(stdout(&out).contains("accepted (VRAM"), "{}", stdout(&out));

    let out = mfsched(&["plugins", "test", path_str(&file), "--scenario", "paper-n3"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let text = stdout(&out);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("ERROR")).collect();
    assert_eq!(errors.len(), 4, "one per workload level: {text}");
    assert!(
        errors.iter().all(|l| l.contains("not deterministic")),
        "{text}"
    );
    assert!(
        text.contains("4 state(s) × 5 runs: 20 of 20 decisions valid, 0 of 4 states deterministic"),
        "{text}"
    );
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("4 finding(s)"), "{err}");
}

/// `plugins test --log` scores with the utility the daemon scored with (a
/// component of its plugin directory here), unless the command names one.
#[test]
fn plugins_test_on_a_log_scores_with_the_logs_utility() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let plugins = crate::common::plugin_dir(dir.path(), &[("fairness", "fairness")]);
    let config = crate::common::daemon_config(
        dir.path(),
        "paper-n2",
        400,
        "active = \"ga\"\nutility = \"fairness\"\nplugin_dir = \"plugins\"",
        "",
    );
    let out = mfsched(&["run", "--config", path_str(&config), "--max-ticks", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = dir.path().join("decisions.log");
    let test = |extra: &[&str]| {
        let mut args = vec![
            "plugins",
            "test",
            "ga",
            "--log",
            path_str(&log),
            "--plugin-dir",
            path_str(&plugins),
        ];
        args.extend(extra);
        let out = mfsched(&args);
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        stdout(&out)
    };
    let logged = test(&[]);
    assert!(logged.contains("scored with fairness@"), "{logged}");
    let named = test(&["--utility", "utility"]);
    assert!(named.contains("scored with utility@"), "{named}");
}

/// A bounded daemon run writes a decision log; `plugins test` reads it back
/// (the daemon's own reader) and passes a bundled policy on every recorded
/// state, on the scenario the log records. A log of another scenario and a bad
/// fixture line are one clear line.
#[test]
fn plugins_test_passes_a_bundled_policy_on_a_log_written_by_run() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = crate::common::daemon_config(dir.path(), "paper-n3", 400, "active = \"ga\"", "");
    let out = mfsched(&["run", "--config", path_str(&config), "--max-ticks", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = dir.path().join("decisions.log");
    let ga = bundled_file("mfsched_plugin_ga");
    let out = mfsched(&[
        "plugins",
        "test",
        path_str(&ga),
        "--log",
        path_str(&log),
        "--scenario",
        "paper-n3",
        "--runs",
        "6",
    ]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    for tick in 0..3 {
        assert!(text.contains(&format!("\ntick {tick} ")), "{text}");
    }
    assert!(
        text.contains("3 state(s) × 6 runs: 18 of 18 decisions valid, 3 of 3 states deterministic"),
        "{text}"
    );
    assert!(!text.contains("ERROR"), "{text}");

    // Without --scenario, the scenario the log records; another one is refused.
    let out = mfsched(&["plugins", "test", path_str(&ga), "--log", path_str(&log)]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("scenario paper-n3"),
        "{}",
        stdout(&out)
    );
    let out = mfsched(&[
        "plugins",
        "test",
        path_str(&ga),
        "--log",
        path_str(&log),
        "--scenario",
        "paper-n5",
    ]);
    let err = fails_in_one_line(&out, "");
    assert!(
        err.contains("tick 0") && err.contains("scenario paper-n5"),
        "{err}"
    );

    let states = dir.path().join("states.jsonl");
    std::fs::write(
        &states,
        "{\"workload\":\"high\",\"vram_used_mib\":9000,\"utilization\":0.7}\n\n{\"workload\":\"huge\",\"vram_used_mib\":1,\"utilization\":0.5}\n",
    )
    .expect("write the states");
    let out = mfsched(&["plugins", "test", "ga", "--states", path_str(&states)]);
    let err = fails_in_one_line(&out, "");
    assert!(err.contains("states.jsonl:3"), "{err}");

    let out = mfsched(&["plugins", "test", "ga", "--runs", "2"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--runs"), "{}", stderr(&out));
}

/// `plugins wit` prints the package an author builds against; with --out it
/// writes the text and the encoded package, which decodes to the same package.
#[test]
fn plugins_wit_prints_and_writes_the_package() {
    let ours = std::fs::read_to_string(crate::common::workspace_root().join("wit/scheduler.wit"))
        .expect("exists");
    let out = mfsched(&["plugins", "wit"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), ours);

    let dir = tempfile::tempdir().expect("a temporary directory");
    let target = dir.path().join("wit");
    let out = mfsched(&["plugins", "wit", "--out", path_str(&target)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(target.join("scheduler.wit")).expect("written"),
        ours
    );
    let encoded = std::fs::read(target.join("mfsched-scheduler-0.4.0.wasm")).expect("written");
    assert_eq!(encoded, mfsched_plugin_host::WIT_PACKAGE_ENCODED);
    assert!(
        stdout(&out).contains("mfsched-scheduler-0.4.0.wasm"),
        "{}",
        stdout(&out)
    );
}

#[test]
#[ignore = "needs Node.js and `npm ci` in examples/js-greedy, and compiles a 12 MB component; run by .ci/run"]
fn the_javascript_policy_runs_under_the_host_and_is_validated() {
    let (component, cache) = build_check_and_decide(
        "js-greedy",
        "javascript greedy (componentize-js)",
        "npm ci in examples/js-greedy",
    );
    let cache = path_str(&cache);

    // A bad parameter throws a TypeError, not a string: the example turns
    // every exception into a refusal that keeps its message.
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n5",
        "--policy",
        path_str(&component),
        "--param",
        "rounds=many",
        "--json",
        "--cache-dir",
        cache,
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["accepted"], false, "{v}");
    let reason = v["reason"].as_str().expect("a reason");
    assert!(
        reason.contains("refused to decide: TypeError: parameter rounds=many"),
        "{reason}"
    );
}

/// A trap is reported with what the guest last printed to stderr: for a Rust
/// policy, its panic message.
#[test]
fn a_trap_is_reported_with_the_guests_last_words() {
    let out = mfsched(&[
        "plugins",
        "check",
        path_str(&crate::common::test_plugin("trap")),
    ]);
    assert!(!out.status.success());
    let text = stdout(&out);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("ERROR")).collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(errors[0].contains("the policy trapped"), "{text}");
    assert!(
        errors[0].contains("its stderr ended with:")
            && errors[0].contains("this test plugin traps on purpose"),
        "{text}"
    );
}

/// Beside its hash, `plugins list` shows the version and authors a
/// component declares (the sections `wasm-tools metadata add` writes).
#[test]
fn plugins_list_shows_the_metadata_a_component_declares() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut bytes = std::fs::read(bundled_file("mfsched_plugin_exact")).expect("built");
    bytes.extend(custom_section("version", b"1.2.3"));
    bytes.extend(custom_section("authors", b"Ada Lovelace\n"));
    std::fs::write(dir.path().join("tagged.wasm"), &bytes).expect("write");
    let out = mfsched(&[
        "plugins",
        "list",
        "--plugin-dir",
        path_str(dir.path()),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let tagged = rows
        .as_array()
        .expect("a list")
        .iter()
        .find(|r| r["name"] == "tagged")
        .expect("the file is listed");
    assert_eq!(tagged["metadata"]["version"], "1.2.3", "{tagged}");
    assert_eq!(tagged["metadata"]["authors"], "Ada Lovelace", "{tagged}");
    let out = mfsched(&["plugins", "list", "--plugin-dir", path_str(dir.path())]);
    assert!(
        stdout(&out).contains("1.2.3 by Ada Lovelace)"),
        "{}",
        stdout(&out)
    );
}

/// The daemon's `/v1/policies` names each component by its hash and, where it
/// declares any, by its name, version and authors; so do the decision log and
/// `replay`, for the component that answered.
#[test]
fn the_daemon_api_and_log_show_the_metadata_a_component_declares() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("mkdir");
    let mut bytes = std::fs::read(bundled_file("mfsched_plugin_exact")).expect("built");
    bytes.extend(custom_section("version", b"1.2.3"));
    bytes.extend(custom_section("authors", b"Ada Lovelace\n"));
    std::fs::write(plugins.join("tagged.wasm"), &bytes).expect("write");
    let config = crate::common::daemon_config(
        dir.path(),
        "paper-n2",
        200,
        "active = \"tagged\"\nplugin_dir = \"plugins\"",
        "",
    );
    let (mut child, _, addr) = crate::common::process::start_daemon(&config);
    let (status, body) = crate::common::http(addr, "GET", "/v1/policies", None);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(json["active"], "tagged", "{json}");
    assert_eq!(json["metadata"]["tagged"]["version"], "1.2.3", "{json}");
    assert_eq!(
        json["metadata"]["tagged"]["authors"], "Ada Lovelace",
        "{json}"
    );
    assert!(
        json["components"]["tagged"]
            .as_str()
            .is_some_and(|h| h.len() == 64),
        "{json}"
    );
    // The embedded components declare nothing: no entry, not an empty one.
    assert!(json["metadata"].get("ga").is_none(), "{json}");

    let config = config.to_str().expect("utf-8 path");
    let out = mfsched(&["run", "--config", config, "--max-ticks", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = dir.path().join("decisions.log");
    let log = log.to_str().expect("utf-8 path");
    let out = mfsched(&["replay", log, "--summary"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let sha = json["components"]["tagged"].as_str().expect("hash");
    let described = format!("{sha}  tagged  1.2.3 by Ada Lovelace");
    assert!(
        stdout(&out).lines().any(|l| l == described),
        "{}",
        stdout(&out)
    );
    let out = mfsched(&["replay", log, "--policy", "exact", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let replayed: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let recorded = &replayed["recorded_components"];
    assert_eq!(recorded.as_array().map(Vec::len), Some(1), "{replayed}");
    assert_eq!(recorded[0]["identity"]["sha256"], sha, "{replayed}");
    assert_eq!(
        recorded[0]["identity"]["metadata"]["version"], "1.2.3",
        "{replayed}"
    );
    assert_eq!(replayed["replayed_components"][0]["policy"], "exact");
}

/// The template's utility declares one parameter, `throughput-weight`: the
/// user sets it per run (`--utility-param`, `policy.utility_params`), the host
/// refuses a key it does not declare, the utility refuses a value it cannot
/// use, and a hot-swapped build of it in a running daemon keeps the
/// parameters the running one was given (a build that does not declare them
/// is refused, the running one kept).
#[test]
#[ignore = "builds the utility template crate with cargo (minutes on 2 cores); run by .ci/run"]
fn a_utility_from_the_template_builds_passes_check_decides_with_exact_and_ga_and_hot_swaps() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let crate_dir = dir.path().join("my-utility");
    let out = mfsched(&[
        "plugins",
        "new",
        "my-utility",
        "--utility",
        "--dir",
        path_str(&crate_dir),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let sdk = std::fs::canonicalize(crate::common::workspace_root().join("sdk/utility"))
        .expect("the SDK");
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("written");
    assert!(
        manifest.contains(&format!(
            "mfsched-utility-sdk = {{ path = \"{}\" }}",
            sdk.display()
        )),
        "{manifest}"
    );
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("template-target");
    let built = guest_cargo(&crate_dir, &target);
    assert!(built.status.success(), "{}", stderr(&built));
    let component = target.join("wasm32-wasip2/release/my_utility.wasm");

    let out = mfsched(&["plugins", "check", path_str(&component)]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(text.contains("ok    utility world"), "{text}");
    assert!(
        text.contains("ok    parameters: throughput-weight=1.0"),
        "{text}"
    );
    assert!(text.contains("terms: additive"), "{text}");
    // `plugins list` shows the flag that sets a utility's parameter.
    let out = mfsched(&[
        "plugins",
        "list",
        "--plugin-dir",
        path_str(component.parent().expect("a directory")),
    ]);
    assert!(
        stdout(&out).contains("--utility-param throughput-weight=1.0"),
        "{}",
        stdout(&out)
    );
    let out = mfsched(&[
        "plugins",
        "check",
        path_str(&component),
        "--param",
        "throughput-weight=0.25",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("terms: additive"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("ok    parameters: throughput-weight=1.0 (checked with 0.25)"),
        "{}",
        stdout(&out)
    );
    let out = mfsched(&[
        "plugins",
        "check",
        path_str(&component),
        "--param",
        "weight=0.25",
    ]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(
            "ERROR unknown parameter 'weight' for utility 'my_utility'; it knows: throughput-weight"
        ),
        "{}",
        stdout(&out)
    );

    let decide = |policy: &str, param: &str| {
        mfsched(&[
            "decide",
            "--scenario",
            "paper-n5",
            "--policy",
            policy,
            "--utility",
            path_str(&component),
            "--utility-param",
            param,
        ])
    };
    let mut chosen = Vec::new();
    for policy in ["exact", "ga"] {
        for weight in ["1", "0"] {
            let out = decide(policy, &format!("throughput-weight={weight}"));
            let text = stdout(&out);
            assert!(out.status.success(), "{policy}: {text}{}", stderr(&out));
            // decide names the utility it scored with by its file's name, and
            // the parameters it was called with.
            assert!(
                text.contains(&format!(
                    "utility    my_utility, throughput-weight={weight}\n"
                )),
                "{text}"
            );
            assert!(
                text.contains("outcome            accepted"),
                "{policy}: {text}"
            );
            let utility = text
                .lines()
                .find_map(|l| l.strip_prefix("predicted utility  "))
                .map(str::to_owned);
            chosen.push((policy, weight, utility));
        }
    }
    // The weight reaches the utility: exact's optimum under w = 0 (quality
    // only) is not scored like the one under w = 1.
    assert_ne!(chosen[0].2, chosen[1].2, "{chosen:?}");
    let out = decide("exact", "throughput-weight=2");
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("parameter 'throughput-weight' must be in [0, 1], got 2"),
        "{err}"
    );
    assert!(err.contains("my_utility"), "{err}");
    let out = decide("exact", "weight=1");
    let err = fails_in_one_line(&out, "");
    assert!(
        err.contains(
            "--utility-param: unknown parameter 'weight' for utility 'my_utility'; it knows: throughput-weight"
        ),
        "{err}"
    );

    // A daemon given a value the utility refuses does not start, the
    // refusal naming policy.utility_params (before, a plugin policy's
    // self-check failed on it first and was blamed in its own name).
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugin dir");
    let file = plugins.join("my_utility.wasm");
    std::fs::copy(&component, &file).expect("copy");
    let refused = crate::common::daemon_config(
        dir.path(),
        "paper-n3",
        300,
        "active = \"ga\"\nutility = \"my_utility\"\nutility_params = { throughput-weight = 2 }\nplugin_dir = \"plugins\"",
        "",
    );
    let out = mfsched(&[
        "--log-level",
        "error",
        "run",
        "--config",
        path_str(&refused),
        "--max-ticks",
        "1",
    ]);
    let line = fails_in_one_line(&out, "an out-of-range utility parameter");
    assert!(
        line.contains("policy.utility_params (throughput-weight=2): utility 'my_utility' cannot score with them")
            && line.contains("must be in [0, 1], got 2"),
        "{line}"
    );

    // In a running daemon under exact, with the parameter set in the
    // configuration (a TOML number): a new build of the utility is
    // hot-swapped in with the same parameters; the embedded utility, which
    // declares none, is refused in its place.
    let config = crate::common::daemon_config(
        dir.path(),
        "paper-n3",
        300,
        "active = \"exact\"\nutility = \"my_utility\"\nutility_params = { throughput-weight = 0.5 }\nplugin_dir = \"plugins\"",
        "",
    );
    let (child, err, addr) = crate::common::process::start_daemon(&config);
    let mut daemon = crate::common::process::Killed(child);
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        err.lines().map_while(Result::ok).collect::<Vec<String>>()
    });
    let events = || {
        let (_, body) = crate::common::http(addr, "GET", "/v1/history", None);
        let h: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let messages: Vec<String> = h["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|e| e["message"].as_str().map(str::to_owned))
            .collect();
        (messages, h["totals"]["exact"]["decisions"].as_u64())
    };
    let wait_for = |what: &str, done: &dyn Fn(&[String], Option<u64>) -> bool| {
        let start = std::time::Instant::now();
        loop {
            let (messages, decisions) = events();
            if done(&messages, decisions) {
                return;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "{what}: {messages:#?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    // A second build: the same code with a custom section, so another hash.
    let mut rebuilt = std::fs::read(&component).expect("built");
    rebuilt.extend(custom_section("version", b"0.1.1"));
    let tmp = plugins.join("my_utility.wasm.tmp");
    std::fs::write(&tmp, &rebuilt).expect("write");
    std::fs::rename(&tmp, &file).expect("rename");
    wait_for("the swap", &|m, d| {
        m.iter()
            .any(|m| m.contains("my_utility replaced by my_utility.wasm"))
            && d >= Some(3)
    });
    // The dashboard names the utility each tick was scored with, parameters
    // included: the swapped-in build kept them.
    let (_, body) = crate::common::http(addr, "GET", "/v1/history", None);
    let history: serde_json::Value = serde_json::from_str(&body).expect("history JSON");
    let scored = history["ticks"]
        .as_array()
        .and_then(|t| t.last())
        .and_then(|t| t["utility"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        scored.starts_with("my_utility@") && scored.ends_with(" (throughput-weight=0.5)"),
        "{scored}"
    );
    let embedded = mfsched_plugin_host::EMBEDDED_PLUGINS
        .iter()
        .find(|(n, _)| *n == "utility")
        .map(|(_, b)| *b)
        .expect("the embedded utility");
    std::fs::write(&tmp, embedded).expect("write");
    std::fs::rename(&tmp, &file).expect("rename");
    wait_for("the refusal", &|m, _| {
        m.iter().any(|m| {
            m.contains("my_utility.wasm rejected, the running plugin kept")
                && m.contains("unknown parameter 'throughput-weight' for utility 'my_utility'")
        })
    });
    let (_, before) = events();
    wait_for("decisions after the refusal", &|_, d| {
        d >= before.map(|b| b + 2)
    });
    assert!(crate::common::process::terminate(&mut daemon.0).success());
    let lines = reader.join().expect("reader");
    assert!(
        lines.iter().any(|l| l.contains("swapped in 'my_utility'")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("is failing")),
        "exact decides with the template's utility: {lines:#?}"
    );
}
