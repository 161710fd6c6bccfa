//! Issue 26: nothing from outside crashes, stalls or poisons mfsched. Each
//! test feeds one hostile input and asserts what must hold whatever the
//! machine's load: a clear refusal (one line naming the file or key) or a
//! bounded, recorded recovery, and nothing half-written.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use crate::common::{
    self,
    process::{Killed, fails_in_one_line, mfsched, stderr},
};

fn utf8(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// A second daemon on the same decision log refuses to start, naming the
/// first one's pid; the first one's log stays intact.
#[test]
fn a_second_daemon_on_the_same_log_is_refused_naming_the_holder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = common::daemon_config(dir.path(), "paper-n3", 100, "active = \"hold\"", "");
    let (child, _err, _addr) = common::process::start_daemon(&config);
    let pid = child.id();
    let first = Killed(child);
    let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "2"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("is in use"), "{err}");
    assert!(err.contains(&format!("pid {pid}")), "{err}");
    drop(first);
    let log = mfsched_daemon::read_decision_log(&dir.path().join("decisions.log")).expect("log");
    assert!(log.skipped.is_empty() && log.torn.is_none(), "{log:?}");
}

/// A start refused for its configuration writes nothing to the decision log
/// (no file, so no run record).
#[test]
fn a_refused_start_writes_no_run_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases = [
        ("[api]\nlisten = \"0.0.0.0:0\"", "not a loopback address"),
        ("[api]\nauth_reads = true", "auth_reads needs a token"),
        ("[api]\ntoken_file = \"missing-token\"", "api.token_file"),
    ];
    for (api, says) in cases {
        let config = common::daemon_config(dir.path(), "paper-n3", 100, "active = \"hold\"", "");
        // The helper's [api] table is replaced by the case's.
        let text = std::fs::read_to_string(&config).expect("config");
        let text = text.replace("[api]\nlisten = \"127.0.0.1:0\"", api);
        std::fs::write(&config, text).expect("write");
        let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "1"]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{says}: {err}");
        assert!(err.contains(says), "{says}: {err}");
        assert!(
            !dir.path().join("decisions.log").exists(),
            "{says}: the log was written"
        );
    }
}

/// Log frames with valid checksums that lie: a string claiming 2⁴⁰ bytes is
/// a record that does not decode (no allocation), and a stretch of valid-looking
/// headers each claiming megabytes is given up on within the scan budget;
/// replay reports both, and a daemon starts on such a log.
#[test]
fn forged_decision_log_frames_are_refused_without_allocating_or_stalling() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = common::daemon_config(dir.path(), "paper-n3", 50, "active = \"hold\"", "");
    let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = dir.path().join("decisions.log");
    let mut bytes = std::fs::read(&log).expect("log");
    let frame = |payload: &[u8]| {
        let mut f = b"\xF5MFR".to_vec();
        f.extend((payload.len() as u32).to_le_bytes());
        f.extend(crc32fast::hash(payload).to_le_bytes());
        let header = crc32fast::hash(&f);
        f.extend(header.to_le_bytes());
        f.extend(payload);
        f
    };
    // Entry::Run (variant 0), u64 unix_ms 1, then the scenario string's length
    // as a varint u64 (251 = 0xfd then 8 bytes LE): 2⁴⁰.
    let mut forged = vec![0u8, 1, 0xfd];
    forged.extend((1u64 << 40).to_le_bytes());
    forged.extend([b'x'; 16]);
    bytes.extend(frame(&forged));
    // 200,000 headers whose checksums hold, each claiming 1 MiB the file has.
    let claim = 1u32 << 20;
    let mut header = b"\xF5MFR".to_vec();
    header.extend(claim.to_le_bytes());
    header.extend(0u32.to_le_bytes());
    let crc = crc32fast::hash(&header);
    header.extend(crc.to_le_bytes());
    for _ in 0..200_000 {
        bytes.extend(&header);
    }
    bytes.extend(vec![0u8; 2 << 20]);
    std::fs::write(&log, &bytes).expect("write");
    let replay = mfsched(&["replay", utf8(&log)]);
    let text = format!("{}{}", common::process::stdout(&replay), stderr(&replay));
    assert!(
        text.contains("gave up"),
        "{}",
        &text[..text.len().min(4000)]
    );
    let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "1"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("moved to"), "{err}");
    let kept = dir.path().join("decisions.log.unreadable");
    assert_eq!(std::fs::read(&kept).expect("kept whole"), bytes);
    let fresh = mfsched_daemon::read_decision_log(&log).expect("a new log");
    assert_eq!(fresh.records.len(), 1);
    assert_eq!(fresh.records[0].tick, 2, "tick numbers go on");
}

/// The header and the rows of paper-n2's bundled profile, to build profiles from.
fn bundled_profile() -> (String, Vec<String>) {
    let text =
        std::fs::read_to_string(common::workspace_root().join("models/paper-n2/profile.csv"))
            .expect("the bundled profile");
    let mut lines = text.lines().map(str::to_owned);
    let header = lines.next().expect("a header");
    (header, lines.collect())
}

/// Files named inside inputs go through the capped reader: a daemon config
/// naming /dev/zero as its scenario or its log is refused in one line.
#[test]
fn files_named_inside_inputs_are_never_read_unbounded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = common::daemon_config(dir.path(), "/dev/zero", 100, "active = \"hold\"", "");
    let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "1"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("a character device"), "{err}");
    let config = common::daemon_config(dir.path(), "paper-n3", 100, "active = \"hold\"", "");
    let text = std::fs::read_to_string(&config)
        .expect("config")
        .replace("path = \"decisions.log\"", "path = \"/dev/zero\"");
    std::fs::write(&config, text).expect("write");
    let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "1"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    let out = mfsched(&["replay", "/dev/zero"]);
    let err = fails_in_one_line(&out, "replay /dev/zero");
    assert!(err.contains("a character device"), "{err}");
    // A profile whose `scenario` cell names /dev/zero: the device is not read,
    // and the file is checked against the bundled scenario with its models.
    let (header, rows) = bundled_profile();
    let row = rows[0].replacen(",paper-n2,", ",/dev/zero,", 1);
    let csv = dir.path().join("dev-zero-cell.csv");
    std::fs::write(&csv, format!("{header}\n{row}\n")).expect("write");
    let out = mfsched(&["data", "check", utf8(&csv)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.contains("the file names '/dev/zero', which is not a known scenario"),
        "{text}"
    );
}

/// paper-n2's shipped bundle (version 1: it names its scenario) copied to
/// `dir/paper-n2/` with `edit` applied to its `bundle.json`; returns `dir`.
fn edited_bundle(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) -> std::path::PathBuf {
    let shipped = common::workspace_root().join("models/paper-n2");
    let bundle = dir.join("paper-n2");
    std::fs::create_dir_all(&bundle).expect("mkdir");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(shipped.join("bundle.json")).expect("meta"))
            .expect("JSON");
    edit(&mut meta);
    std::fs::write(
        bundle.join("bundle.json"),
        serde_json::to_vec(&meta).expect("JSON"),
    )
    .expect("write");
    std::fs::copy(
        shipped.join("weights.safetensors"),
        bundle.join("weights.safetensors"),
    )
    .expect("copy");
    dir.to_path_buf()
}

/// Items 4 and 10 through the commands: a version 1 bundle whose scenario
/// is `/dev/zero` is refused without reading the device; a bundle whose
/// embedded scenario has other models than its own is refused by `decide`
/// and by `run` (which writes nothing), as `eval` refuses it.
#[test]
fn bundles_naming_a_device_or_disagreeing_with_their_scenario_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A bundle without its own scenario text names the scenario to load.
    let device = edited_bundle(&dir.path().join("device"), |m| {
        m["scenario"] = "/dev/zero".into();
        m.as_object_mut()
            .expect("an object")
            .remove("scenario_toml");
    })
    .join("paper-n2");
    let profile = common::workspace_root().join("tests/fixtures/profiles/good.csv");
    let out = mfsched(&[
        "surrogate",
        "eval",
        "--model",
        utf8(&device),
        "--data",
        utf8(&profile),
    ]);
    let err = fails_in_one_line(&out, "a bundle naming /dev/zero");
    assert!(err.contains("a character device"), "{err}");

    let n3 = mfsched_core::BUNDLED_SCENARIOS
        .iter()
        .find(|(n, _)| *n == "paper-n3")
        .map(|(_, t)| *t)
        .expect("bundled");
    let models = edited_bundle(&dir.path().join("other"), |m| {
        m["scenario_toml"] = n3.into();
    });
    let disagrees = "against its own embedded scenario 'paper-n3'";
    let out = mfsched(&[
        "decide",
        "--scenario",
        "paper-n2",
        "--policy",
        "exhaustive",
        "--models",
        utf8(&models),
    ]);
    let err = fails_in_one_line(&out, "decide");
    assert!(err.contains(disagrees), "{err}");
    let config = common::daemon_config(
        dir.path(),
        "paper-n2",
        100,
        &format!(
            "active = \"exhaustive\"\nbundle_dir = \"{}\"",
            utf8(&models)
        ),
        "",
    );
    let out = mfsched(&["run", "--config", utf8(&config), "--max-ticks", "1"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(disagrees), "{err}");
    assert!(!dir.path().join("decisions.log").exists(), "{err}");
}

/// Item 13 through the API: the outside text a component brings (its file
/// name, the metadata it declares, its refusals' reasons: markup, ANSI
/// escapes, forged lines, 20 MiB) reaches `/v1/policies` and `/v1/history`
/// escaped and cut, or not at all.
#[test]
fn outside_text_reaches_the_api_escaped_and_cut() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugin dir");
    let hostile = "<img src=x onerror=alert(5)>\u{1b}[31m";
    let test_plugins = Path::new(mfsched_test_programs::TEST_PLUGINS_DIR);
    std::fs::copy(
        test_plugins.join("noisy.wasm"),
        plugins.join(format!("{hostile}.wasm")),
    )
    .expect("copy");
    let mut turncoat = std::fs::read(test_plugins.join("hostile-decide.wasm")).expect("built");
    turncoat.extend(common::custom_section("version", hostile.as_bytes()));
    turncoat.extend(common::custom_section(
        "authors",
        format!("{hostile}\nok passed{}", "x".repeat(1 << 20)).as_bytes(),
    ));
    std::fs::write(plugins.join("turncoat.wasm"), turncoat).expect("write");
    let config = common::daemon_config(
        dir.path(),
        "paper-n3",
        200,
        "active = \"turncoat\"\nplugin_dir = \"plugins\"",
        "[workload]\nlevel = \"burst\"",
    );
    let (child, _err, addr) = common::process::start_daemon(&config);
    let _daemon = Killed(child);
    let (key, token) = common::bearer();
    let get = |path: &str| {
        let (status, body) = common::http_with(addr, "GET", path, None, &[(key, &token)]);
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str::<serde_json::Value>(&body).expect("JSON")
    };
    common::wait_for(Duration::from_secs(60), "3 refused ticks", &[], || {
        (get("/v1/history")["totals"]["turncoat"]["failures"].as_u64() >= Some(3)).then_some(())
    });
    let policies = get("/v1/policies");
    assert_eq!(policies["active"], "turncoat", "{policies}");
    let available = policies["available"].as_array().expect("names");
    assert!(
        available
            .iter()
            .all(|n| n.as_str().is_some_and(|n| !n.contains("<img"))),
        "a name with escapes is no policy: {policies}"
    );
    assert!(
        policies["metadata"]["turncoat"]["version"]
            .as_str()
            .is_some_and(|v| v.contains("\\u{1b}[31m")),
        "{policies}"
    );
    for (path, answer) in [
        ("/v1/policies", policies),
        ("/v1/history", get("/v1/history")),
    ] {
        let mut strings = Vec::new();
        every_string(&answer, &mut strings);
        assert!(!strings.is_empty(), "{path}");
        for s in strings {
            assert!(!s.chars().any(char::is_control), "{path}: {s:?}");
            assert!(s.len() <= 8192, "{path}: a string of {} bytes", s.len());
        }
    }
}

/// Every string in `value`, keys included.
fn every_string<'a>(value: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match value {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(items) => items.iter().for_each(|v| every_string(v, out)),
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                out.push(k);
                every_string(v, out);
            }
        }
        _ => {}
    }
}

/// Item 13, hostile structure: a scenario or a config nested 200,000 deep is
/// refused in one short line (the parser's own rendering quoted the whole
/// 400 KB line); item 4, a sparse 8 GiB component is refused by `plugins
/// check` before it is read.
#[test]
fn deep_nesting_and_huge_components_are_refused_in_one_short_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let deep = dir.path().join("deep.toml");
    std::fs::write(
        &deep,
        format!(
            "name = \"n\"\nx = {}{}\n",
            "[".repeat(200_000),
            "]".repeat(200_000)
        ),
    )
    .expect("write");
    for args in [
        vec!["scenario", "show", utf8(&deep)],
        vec![
            "run",
            "--sampler",
            "sim",
            "--config",
            utf8(&deep),
            "--max-ticks",
            "1",
        ],
    ] {
        let out = mfsched(&args);
        let err = fails_in_one_line(&out, format!("{args:?}"));
        assert!(err.contains("line 2: "), "{args:?}: {err}");
        assert!(err.len() < 2048, "{args:?}: {} bytes", err.len());
    }
    let sparse = dir.path().join("sparse.wasm");
    std::fs::File::create(&sparse)
        .and_then(|f| f.set_len(8 << 30))
        .expect("a sparse file");
    let out = mfsched(&["plugins", "check", utf8(&sparse)]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("has 8589934592 bytes, over the 64 MiB a component may have"),
        "{text}{}",
        stderr(&out)
    );
}

/// Every API answer, refusals included, says `nosniff`.
#[test]
fn api_answers_carry_nosniff() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = common::daemon_config(dir.path(), "paper-n3", 100, "active = \"hold\"", "");
    let (child, _err, addr) = common::process::start_daemon(&config);
    let _daemon = Killed(child);
    for (method, path) in [
        ("GET", "/v1/state"),
        ("GET", "/healthz"),
        ("POST", "/v1/policies/active"),
    ] {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("the answer");
        let head = response
            .split("\r\n\r\n")
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        assert!(
            head.contains("x-content-type-options: nosniff"),
            "{method} {path}: {head}"
        );
    }
}

/// A policy file whose name carries markup and an ANSI escape: `plugins list`
/// and `plugins check` show it escaped, and it is refused as a policy name.
#[test]
fn a_plugin_file_name_with_escapes_never_reaches_the_terminal_raw() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugin dir");
    let hostile = plugins.join("<img src=x onerror=alert(5)>\u{1b}[31m.wasm");
    let noisy = Path::new(mfsched_test_programs::TEST_PLUGINS_DIR).join("noisy.wasm");
    std::fs::copy(&noisy, &hostile).expect("copy");
    for args in [
        vec!["plugins", "list", "--plugin-dir", utf8(&plugins)],
        vec!["plugins", "check", utf8(&hostile)],
    ] {
        let out = mfsched(&args);
        let text = format!("{}{}", common::process::stdout(&out), stderr(&out));
        assert!(!text.contains('\u{1b}'), "{args:?}: raw escape in {text:?}");
        assert!(text.contains("\\u{1b}[31m"), "{args:?}: {text}");
        assert!(text.contains("no control character"), "{args:?}: {text}");
    }
}

/// A page standing in for the model servers' and the card's metrics (not a
/// server): the request and token counters at `counter(n)` on the n-th page,
/// and a DCGM card with `fb_used_mib` in use at 50 % utilisation.
fn counter_page(counter: fn(usize) -> String, fb_used_mib: &'static str) -> std::net::SocketAddr {
    common::metrics_page(move |n| {
        let v = counter(n);
        format!(
            "hostile_requests_total {v}\nhostile_tokens_total {v}\n\
             DCGM_FI_DEV_FB_USED{{gpu=\"0\"}} {fb_used_mib}\nDCGM_FI_DEV_GPU_UTIL{{gpu=\"0\"}} 50\n"
        )
    })
}

/// Counters 10 higher on every page: a steady load.
fn rising(n: usize) -> String {
    (10 * n).to_string()
}

/// `profile --live` of paper-n2's plan at low load (`samples` points, 10 ms
/// settle, 50 ms windows), every model's load, throughput and the card read
/// from `page`, `actuators` added to the config: its output and the CSV's path.
fn profile_live(
    d: &Path,
    page: std::net::SocketAddr,
    samples: &str,
    actuators: &str,
) -> (std::process::Output, std::path::PathBuf) {
    let mut extra =
        "[workload]\nsource = \"prometheus\"\n\n[workload.prometheus]\ntimeout_ms = 400\n"
            .to_owned();
    for m in &paper_n2().models {
        extra.push_str(&format!(
            "\n[workload.prometheus.models.{}]\nmetric = \"hostile_requests_total\"\nlabel = \"\"\n\
             throughput_metric = \"hostile_tokens_total\"\nscrape = \"http://{page}/metrics\"\nreference_rate = 10.0\n",
            m.name
        ));
    }
    extra.push_str(actuators);
    let config = common::daemon_config(d, "paper-n2", 1000, "active = \"hold\"", &extra);
    let out = d.join("live.csv");
    let o = mfsched(&[
        "profile",
        "--live",
        "--config",
        utf8(&config),
        "--workload",
        "low",
        "--samples",
        samples,
        "--seed",
        "1",
        "--settle-ms",
        "10",
        "--window-ms",
        "50",
        "--gpu-metrics",
        &format!("http://{page}/metrics"),
        "--out",
        utf8(&out),
    ]);
    (o, out)
}

fn paper_n2() -> mfsched_core::Problem {
    mfsched_core::load_scenario("paper-n2")
        .expect("bundled")
        .problem
}

/// Whatever CSV a run left reads back, and holds no row.
fn no_row_written(out: &Path) {
    if out.exists() {
        let read = mfsched_core::read_profile(out, &paper_n2()).expect("the file reads back");
        assert!(read.rows.is_empty(), "{:?}", read.rows);
    }
}

/// Item 8: `profile --live` writes a point only when its readings make a row
/// the reader accepts. A DCGM page reporting 1e9 MiB in use (far above the
/// card) makes every window's state unreadable: every point is reported and
/// skipped, the run ends, and whatever file it leaves reads back.
#[test]
fn profile_live_skips_readings_that_are_not_a_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (o, out) = profile_live(dir.path(), counter_page(rising, "1e9"), "8", "");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(text.contains("measured 0 rows"), "{text}");
    assert!(text.contains("point(s) skipped"), "{text}");
    assert!(
        stderr(&o).contains("not a profile row, skipped"),
        "{}",
        stderr(&o)
    );
    no_row_written(&out);
}

/// Item 8, counters of ±1.7e308: the first page says −1.7e308, every later
/// one +1.7e308, so the first model's counter never goes down but its rate
/// over the window is infinite, which no profile row may hold. The point is
/// reported and skipped; nothing the reader would refuse is written.
#[test]
fn profile_live_skips_a_point_whose_counters_overflow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let huge = |n: usize| if n == 0 { "-1.7e308" } else { "1.7e308" }.to_owned();
    let (o, out) = profile_live(dir.path(), counter_page(huge, "1000"), "4", "");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        text.contains("measured 0 rows") && text.contains("1 point(s) skipped"),
        "{text}"
    );
    assert!(
        stderr(&o).contains("not a profile row, skipped"),
        "{}",
        stderr(&o)
    );
    no_row_written(&out);
}

/// Item 8, a webhook that hangs: `profile --live` measures a point only once
/// the webhooks it changed have answered. A webhook server that accepts and
/// never answers outlasts the settle time (its timeout and retry do): the run
/// stops at point 1, naming the model and why, and writes no row.
#[test]
fn profile_live_writes_no_point_a_hanging_webhook_never_took() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A webhook server that takes every connection and never answers.
    let hang = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let hang_addr = hang.local_addr().expect("addr");
    std::thread::spawn(move || {
        let held: Vec<_> = hang.incoming().collect();
        drop(held);
    });
    let hung_model = paper_n2().models[0].name.clone();
    let webhook = format!(
        "\n[actuator.webhook]\ntimeout_ms = 300\nretries = 1\n\n[actuator.webhook.urls]\n\
         {hung_model} = \"http://{hang_addr}/config\"\n"
    );
    // A sane card page: every window would make a row.
    let (o, out) = profile_live(dir.path(), counter_page(rising, "1000"), "4", &webhook);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&format!("point 1: {hung_model} did not take configuration")),
        "{err}"
    );
    assert!(err.contains("no answer within 300 ms"), "{err}");
    no_row_written(&out);
}

/// Item 5, a long profile: `data check` streams the file, holding no row. A
/// file of 200,000 rows peaks no higher than one of 1,000 rows, give or take
/// what the allocator keeps (before, every row was held and summarised into
/// more: ≈ 830 bytes a row, about 160 MiB here; ten million rows took 8 GB).
#[test]
fn data_check_streams_a_long_profile_in_bounded_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (header, rows) = bundled_profile();
    let write = |name: &str, n: usize| {
        let path = dir.path().join(name);
        let mut text = String::with_capacity(n * 110);
        text.push_str(&header);
        text.push('\n');
        for row in rows.iter().cycle().take(n) {
            text.push_str(row);
            text.push('\n');
        }
        std::fs::write(&path, text).expect("write the profile");
        path
    };
    let short = write("short.csv", 1_000);
    let long = write("long.csv", 200_000);
    let (o, short_peak) = common::process::mfsched_peak_rss(&["data", "check", utf8(&short)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (o, long_peak) = common::process::mfsched_peak_rss(&["data", "check", utf8(&long)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("rows      200000 co-location"), "{text}");
    assert!(
        long_peak < short_peak + 32 * 1024,
        "200,000 rows peaked at {long_peak} KiB, 1,000 rows at {short_peak} KiB"
    );
}

/// `component` with `extra` more functions (each empty, of a type appended
/// for them) in its largest core module: a component that is large to compile
/// and does what the original does.
fn with_empty_functions(component: &[u8], extra: u32) -> Vec<u8> {
    fn leb(bytes: &[u8], mut at: usize) -> (u32, usize) {
        let (mut value, mut shift) = (0u32, 0);
        loop {
            let byte = bytes[at];
            at += 1;
            value |= u32::from(byte & 0x7f) << shift;
            shift += 7;
            if byte < 0x80 {
                return (value, at);
            }
        }
    }
    fn enc(value: u32, out: &mut Vec<u8>) {
        common::leb128(u64::from(value), out);
    }
    /// (id, body) of each section after the 8-byte preamble.
    fn sections(bytes: &[u8]) -> Vec<(u8, &[u8])> {
        let mut out = Vec::new();
        let mut at = 8;
        while at < bytes.len() {
            let (len, body) = leb(bytes, at + 1);
            out.push((bytes[at], &bytes[body..body + len as usize]));
            at = body + len as usize;
        }
        out
    }
    fn encode(preamble: &[u8], sections: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut out = preamble[..8].to_vec();
        for (id, body) in sections {
            out.push(*id);
            enc(body.len() as u32, &mut out);
            out.extend_from_slice(body);
        }
        out
    }
    let outer: Vec<(u8, Vec<u8>)> = sections(component)
        .into_iter()
        .map(|(id, b)| (id, b.to_vec()))
        .collect();
    let largest = (0..outer.len())
        .filter(|&i| outer[i].0 == 1)
        .max_by_key(|&i| outer[i].1.len())
        .expect("a core module");
    let module = outer[largest].1.clone();
    let mut new_type = 0;
    let inner: Vec<(u8, Vec<u8>)> = sections(&module)
        .into_iter()
        .map(|(id, body)| {
            let (count, rest) = leb(body, 0);
            let mut out = Vec::new();
            match id {
                // Types: one more, `[] -> []`.
                1 => {
                    new_type = count;
                    enc(count + 1, &mut out);
                    out.extend_from_slice(&body[rest..]);
                    out.extend_from_slice(&[0x60, 0, 0]);
                }
                // Functions: `extra` more of that type.
                3 => {
                    enc(count + extra, &mut out);
                    out.extend_from_slice(&body[rest..]);
                    for _ in 0..extra {
                        enc(new_type, &mut out);
                    }
                }
                // Code: an empty body for each (no locals, `end`).
                10 => {
                    enc(count + extra, &mut out);
                    out.extend_from_slice(&body[rest..]);
                    for _ in 0..extra {
                        out.extend_from_slice(&[2, 0, 0x0b]);
                    }
                }
                _ => out.extend_from_slice(body),
            }
            (id, out)
        })
        .collect();
    let mut outer = outer;
    outer[largest].1 = encode(&module, &inner);
    encode(component, &outer)
}

/// Item 15, memory after a large compile: the compiler's threads free what
/// they allocated, and the daemon hands those pages back (`malloc_trim`). A
/// 50,000-function policy hot-reloaded into a running daemon leaves it within
/// 128 MiB of where it was (before: about 300 MiB more, kept until exit).
#[test]
fn memory_returns_after_a_large_compile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugin dir");
    let config = common::daemon_config(
        dir.path(),
        "paper-n3",
        500,
        "active = \"hold\"\nshadows = []\nplugin_dir = \"plugins\"",
        "",
    );
    // A compilation cache of its own: a component compiled by an earlier run
    // would be loaded from the cache, not compiled.
    let cache = dir.path().join("cache");
    let (child, _daemon_err, addr) =
        common::process::start_daemon_with(&config, &[("XDG_CACHE_HOME", &cache)]);
    let daemon = Killed(child);
    let pid = daemon.0.id();
    // A few ticks first: the baseline is the daemon at work.
    common::wait_for(Duration::from_secs(300), "two ticks", &[], || {
        let (_, metrics) = common::http(addr, "GET", "/metrics", None);
        let ticks = metrics
            .lines()
            .find_map(|l| l.strip_prefix("mfsched_ticks_total "))
            .and_then(|n| n.trim().parse::<u64>().ok());
        (ticks >= Some(2)).then_some(())
    });
    let before = common::process::status_kib(pid, "VmRSS").expect("the daemon's VmRSS");
    let ga = mfsched_plugin_host::EMBEDDED_PLUGINS
        .iter()
        .find(|(name, _)| *name == "ga")
        .expect("the embedded GA")
        .1;
    let big = with_empty_functions(ga, 50_000);
    let staged = dir.path().join("big.wasm");
    std::fs::write(&staged, &big).expect("write the component");
    std::fs::rename(&staged, plugins.join("big.wasm")).expect("drop it in");
    common::wait_for(Duration::from_secs(600), "the reload of big", &[], || {
        let (_, policies) = common::http(addr, "GET", "/v1/policies", None);
        policies.contains("\"big\"").then_some(())
    });
    let after = common::process::status_kib(pid, "VmRSS").expect("the daemon's VmRSS");
    assert!(
        after < before + 128 * 1024,
        "resident {before} KiB before the compile, {after} KiB after"
    );
}
