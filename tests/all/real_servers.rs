//! The actuators on real inference servers: MLServer (PyPI `mlserver`) serving
//! ONNX models through ONNX Runtime (`rig/mlserver/onnx_runtime.py`), the
//! models made by `rig/models/make_onnx.py` (random weights, fp32 and int8).
//!
//! Two models, `mlp` and `conv`, each on an MLServer of its own, both pinned
//! to core 0 (`taskset`) so they contend. A small live profile through the
//! v2-repository actuator (`mfsched profile --live`, load from the servers' own
//! `model_infer_request_success_total`), a bundle trained on it, then a daemon
//! run of at least 20 ticks with `mlp` through the v2-repository actuator (the
//! server the test started) and `conv` through the process actuator (a server
//! the daemon starts), while a bounded load loop on 127.0.0.1 drives both.
//! `conv`'s server is killed mid-run. Invariants only: what a server reports
//! serving (repository index, the runtime's metadata) is always a
//! configuration the daemon applied, and at the end the one it applies; every
//! model's measured throughput is above zero; the killed server is restarted,
//! counted, and the loop keeps ticking; the daemon's exit stops its server.
//!
//! Needs a Python venv with `mlserver onnxruntime onnx`:
//! `MFSCHED_REAL_SERVERS_VENV`, else `target/real-servers-venv`. `.ci/run`
//! makes it and sets `MFSCHED_REQUIRE_REAL_SERVERS=1`, which turns a missing
//! venv from a one-line skip into a failure.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::common;
use super::common::process::Killed;

const PERIOD_MS: u64 = 500;
/// Every wait of the test is bounded by this.
const LIMIT: Duration = Duration::from_secs(90);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn venv() -> Option<PathBuf> {
    let dir = std::env::var_os("MFSCHED_REAL_SERVERS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/real-servers-venv"));
    if dir.join("bin/mlserver").is_file() && dir.join("bin/python").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("MFSCHED_REQUIRE_REAL_SERVERS").is_none(),
        "MFSCHED_REQUIRE_REAL_SERVERS is set but {} has no bin/mlserver (.ci/run makes the venv)",
        dir.display()
    );
    eprintln!(
        "skipped: no MLServer venv at {} (python3 -m venv DIR && DIR/bin/pip install mlserver onnxruntime onnx; or set MFSCHED_REAL_SERVERS_VENV)",
        dir.display()
    );
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One MLServer's ports.
#[derive(Debug, Clone, Copy)]
struct Ports {
    http: u16,
    grpc: u16,
    metrics: u16,
}

impl Ports {
    fn new() -> Self {
        Self {
            http: free_port(),
            grpc: free_port(),
            metrics: free_port(),
        }
    }
    fn http(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.http))
    }
    fn metrics(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.metrics))
    }
}

/// The program and arguments that pin a command to core 0, where `taskset`
/// exists (util-linux); the command alone elsewhere.
fn pinned(argv: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    if Path::new("/usr/bin/taskset").is_file() {
        out.extend(["/usr/bin/taskset", "-c", "0"].map(str::to_owned));
    }
    out.extend(argv.iter().map(|s| s.to_string()));
    out
}

/// MLServer's settings through its environment: loopback only, inference in
/// the server process (no worker pool), metrics in a folder of its own.
fn mlserver_env(ports: Ports, metrics_dir: &Path) -> Vec<(String, String)> {
    [
        (
            "PYTHONPATH",
            root().join("rig/mlserver").display().to_string(),
        ),
        ("MLSERVER_HOST", "127.0.0.1".to_owned()),
        ("MLSERVER_HTTP_PORT", ports.http.to_string()),
        ("MLSERVER_GRPC_PORT", ports.grpc.to_string()),
        ("MLSERVER_METRICS_PORT", ports.metrics.to_string()),
        ("MLSERVER_PARALLEL_WORKERS", "0".to_owned()),
        ("MLSERVER_METRICS_DIR", metrics_dir.display().to_string()),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .into()
}

fn start_mlserver(venv: &Path, repo: &Path, ports: Ports, log: &Path) -> Killed {
    let metrics_dir = repo.join(".metrics");
    std::fs::create_dir_all(&metrics_dir).expect("metrics dir");
    let mlserver = venv.join("bin/mlserver");
    let argv = pinned(&[
        mlserver.to_str().expect("utf-8"),
        "start",
        repo.to_str().expect("utf-8"),
    ]);
    let err = std::fs::File::create(log).expect("log file");
    Killed(
        Command::new(&argv[0])
            .args(&argv[1..])
            .envs(mlserver_env(ports, &metrics_dir))
            .current_dir(repo)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start mlserver"),
    )
}

fn get(addr: SocketAddr, path: &str) -> Option<String> {
    match common::try_http(addr, "GET", path, None, &[]) {
        Ok((200, body)) => Some(body),
        _ => None,
    }
}

fn post(addr: SocketAddr, path: &str, body: &str) -> Option<String> {
    match common::try_http(
        addr,
        "POST",
        path,
        Some(body),
        &[("content-type", "application/json")],
    ) {
        Ok((200, body)) => Some(body),
        _ => None,
    }
}

/// A sample's value on a `/metrics` page: the sum of the lines starting so.
fn metric(page: &str, line_start: &str) -> Option<f64> {
    let values: Vec<f64> = page
        .lines()
        .filter(|l| l.starts_with(line_start))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// What a server reports serving for `model`: (version from the repository
/// index, the ONNX file and threads from the runtime's metadata).
fn serving(addr: SocketAddr, model: &str) -> Option<(String, String, i64)> {
    let index: serde_json::Value =
        serde_json::from_str(&post(addr, "/v2/repository/index", "{}")?).ok()?;
    let entry = index
        .as_array()?
        .iter()
        .find(|e| e["name"] == model && e["state"] == "READY")?;
    let version = entry["version"].as_str()?.to_owned();
    let meta: serde_json::Value =
        serde_json::from_str(&get(addr, &format!("/v2/models/{model}"))?).ok()?;
    let p = &meta["parameters"];
    Some((
        version,
        p["uri"].as_str()?.to_owned(),
        p["threads"].as_i64()?,
    ))
}

/// A configuration as (variant, threads).
type Served = (String, i64);

fn as_served(server: &(String, String, i64), model: &str) -> Option<Served> {
    let (version, uri, threads) = server;
    // The settings name the file after the variant: both must agree.
    (uri == &format!("{model}-s-{version}.onnx")).then(|| (version.clone(), *threads))
}

/// Closed-loop inference requests to one server until `stop`, bounded by
/// `LIMIT`: fast and slow phases of 4 s so the load regime moves.
fn load_loop(
    addr: SocketAddr,
    model: &'static str,
    body: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut ok = 0;
        while !stop.load(Ordering::Relaxed) && start.elapsed() < LIMIT * 4 {
            if post(addr, &format!("/v2/models/{model}/infer"), &body).is_some() {
                ok += 1;
            }
            let fast = (start.elapsed().as_secs() / 4).is_multiple_of(2);
            std::thread::sleep(Duration::from_millis(if fast { 10 } else { 60 }));
        }
        ok
    })
}

fn infer_body(shape: &[usize]) -> String {
    let n: usize = shape.iter().product();
    let data: Vec<String> = (0..n)
        .map(|i| format!("{:.2}", (i % 7) as f64 / 7.0))
        .collect();
    format!(
        "{{\"inputs\":[{{\"name\":\"input\",\"shape\":{shape:?},\"datatype\":\"FP32\",\"data\":[{}]}}]}}",
        data.join(",")
    )
}

const SCENARIO: &str = r#"name = "real-onnx"
description = "Two ONNX models on MLServer (the actuators' real-server test)."

[card]
name = "host memory"
vram_mib = 2048

[families.onnx-mlp]
kind = "mlp"
unit = "requests/s"
runtime_overhead_mib = 150
variants = [
  { name = "fp32", weights_mib = 4, quality = 1.0 },
  { name = "int8", weights_mib = 1, quality = 0.97 },
]
knobs = [{ name = "threads", values = [1, 2], vram_mib = [0, 8] }]

[families.onnx-conv]
kind = "vision"
unit = "requests/s"
runtime_overhead_mib = 150
variants = [
  { name = "fp32", weights_mib = 1, quality = 1.0 },
  { name = "int8", weights_mib = 1, quality = 0.96 },
]
knobs = [{ name = "threads", values = [1, 2], vram_mib = [0, 8] }]

[[models]]
name = "mlp"
family = "onnx-mlp"
sla_floor = 0.0

[[models]]
name = "conv"
family = "onnx-conv"
sla_floor = 0.0
"#;

/// The model's settings file as a TOML table (MLServer's `model-settings.json`).
fn settings_table(key: &str, model: &str, repo: &Path) -> String {
    format!(
        "[{key}.settings_file]\npath = {path:?}\n[{key}.settings_file.content]\nname = \"{{model}}\"\n\
         implementation = \"onnx_runtime.OnnxModel\"\n[{key}.settings_file.content.parameters]\n\
         uri = \"{model}-s-{{variant}}.onnx\"\nversion = \"{{variant}}\"\nextra = {{ threads = \"{{threads}}\" }}\n",
        path = repo.join(model).join("model-settings.json")
    )
}

fn load_section(servers: &[(&str, Ports)]) -> String {
    let mut s = "[workload]\nsource = \"prometheus\"\n\n[workload.prometheus]\ntimeout_ms = 400\n"
        .to_owned();
    for (model, ports) in servers {
        s.push_str(&format!(
            "\n[workload.prometheus.models.{model}]\nmetric = \"model_infer_request_success_total\"\n\
             label = \"model\"\nthroughput_metric = \"model_infer_request_success_total\"\n\
             scrape = \"http://{}/metrics\"\nreference_rate = 40.0\n",
            ports.metrics()
        ));
    }
    s
}

fn v2_section(model: &str, ports: Ports, repo: &Path) -> String {
    let key = format!("actuator.v2_repository.models.{model}");
    format!(
        "[{key}]\nurl = \"http://{}\"\nversion = \"{{variant}}\"\n{}",
        ports.http(),
        settings_table(&key, model, repo)
    )
}

/// Puts a daemon config written by `common::daemon_config` on the host
/// sampler: the field is the MLServers' own CPU time on the core they are
/// pinned to and the memory they hold, as a CPU host measures it (a live
/// profile needs a measured utilisation; the footprint sampler has none).
fn on_the_host_sampler(config: &Path) {
    let text = std::fs::read_to_string(config).expect("the daemon config");
    assert!(text.contains("kind = \"footprint\""), "{text}");
    let text = text.replacen("kind = \"footprint\"", "kind = \"host\"", 1)
        + "\n[sampler.host]\ncpu = \"processes\"\nmemory = \"processes\"\ncpus = \"0\"\n\
           commands = [\"mlserver\"]\ninclude_children = true\nmemory_total_mib = 2048\n";
    std::fs::write(config, text).expect("write the daemon config");
}

#[test]
fn real_servers_are_profiled_and_reconfigured_through_v2_repository_and_process() {
    let Some(venv) = venv() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (repo_a, repo_b) = (d.join("repo-a"), d.join("repo-b"));
    for (repo, model) in [(&repo_a, "mlp"), (&repo_b, "conv")] {
        let out = repo.join(model);
        let made = Command::new(venv.join("bin/python"))
            .arg(root().join("rig/models/make_onnx.py"))
            .args([
                "--out",
                out.to_str().expect("utf-8"),
                "--family",
                model,
                "--size",
                "s",
                "--int8",
            ])
            .output()
            .expect("make_onnx.py runs");
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        // The generator's listing would look like a model folder to MLServer.
        std::fs::remove_file(out.join("models.json")).expect("listing");
    }
    let scenario = d.join("real-onnx.toml");
    std::fs::write(&scenario, SCENARIO).expect("scenario");
    let problem = mfsched_core::load_scenario(scenario.to_str().expect("utf-8"))
        .expect("the scenario loads")
        .problem;
    let (ports_a, ports_b) = (Ports::new(), Ports::new());
    let (log_a, log_b) = (d.join("mlserver-a.log"), d.join("mlserver-b.log"));
    let server_a = start_mlserver(&venv, &repo_a, ports_a, &log_a);
    let stop = Arc::new(AtomicBool::new(false));
    let bodies = [
        ("mlp", infer_body(&[4, 256]), ports_a),
        ("conv", infer_body(&[1, 3, 32, 32]), ports_b),
    ];

    // 1. A small live profile, both models through the v2-repository actuator
    //    (conv on an MLServer the test starts for it).
    let profile_csv = d.join("live.csv");
    {
        let server_b = start_mlserver(&venv, &repo_b, ports_b, &log_b);
        for (_, _, ports) in &bodies {
            common::wait_for(LIMIT, "an MLServer answers", &[&log_a, &log_b], || {
                get(ports.http(), "/v2/health/ready")
            });
        }
        let loads: Vec<_> = bodies
            .iter()
            .map(|(m, body, ports)| load_loop(ports.http(), m, body.clone(), Arc::clone(&stop)))
            .collect();
        let extra = format!(
            "{}\n[actuator.v2_repository]\nready_timeout_ms = 30000\n{}\n{}",
            load_section(&[("mlp", ports_a), ("conv", ports_b)]),
            v2_section("mlp", ports_a, &repo_a),
            v2_section("conv", ports_b, &repo_b)
        );
        let profile_dir = d.join("profile");
        std::fs::create_dir_all(&profile_dir).expect("dir");
        let config = common::daemon_config(
            &profile_dir,
            scenario.to_str().expect("utf-8"),
            PERIOD_MS,
            "active = \"hold\"",
            &extra,
        );
        on_the_host_sampler(&config);
        for level in ["low", "high"] {
            let o = common::process::mfsched(&[
                "profile",
                "--live",
                "--config",
                config.to_str().expect("utf-8"),
                "--workload",
                level,
                "--samples",
                "32",
                "--seed",
                "1",
                "--settle-ms",
                "1000",
                "--window-ms",
                "700",
                "--out",
                profile_csv.to_str().expect("utf-8"),
            ]);
            assert!(
                o.status.success(),
                "profile --live at {level}: {}",
                common::process::stderr(&o)
            );
        }
        stop.store(true, Ordering::Relaxed);
        for l in loads {
            l.join().expect("load loop");
        }
        drop(server_b);
    }
    let measured = mfsched_core::read_profile(&profile_csv, &problem).expect("the live profile");
    assert_eq!(measured.rows.len(), 16, "8 points per regime");
    for row in &measured.rows {
        assert!(
            row.throughput.iter().all(|t| *t > 0.0),
            "every model served: {row:?}"
        );
    }

    // 2. A bundle trained on it.
    let bundle = d.join("bundle");
    let o = common::process::mfsched(&[
        "train",
        "--data",
        profile_csv.to_str().expect("utf-8"),
        "--scenario",
        scenario.to_str().expect("utf-8"),
        "--out",
        bundle.to_str().expect("utf-8"),
        "--seed",
        "1",
        "--epochs",
        "100",
        "--holdout",
        "0",
    ]);
    assert!(o.status.success(), "train: {}", common::process::stderr(&o));

    // 3. The daemon: mlp through v2-repository (server A), conv through the
    //    process actuator (it starts server B itself).
    let metrics_b = repo_b.join(".metrics");
    let argv = pinned(&["{mlserver}", "start", "{repo}"]);
    let env: Vec<String> = mlserver_env(ports_b, &metrics_b)
        .into_iter()
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect();
    let process_key = "actuator.process.models.conv";
    let extra = format!(
        "{load}\n[actuator]\ndowntime_as_cost = true\n\n[actuator.v2_repository]\nready_timeout_ms = 30000\n{v2}\n\
         [actuator.process]\ngrace_ms = 3000\nready_timeout_ms = 60000\nbackoff_ms = 200\n\n\
         [{process_key}]\nargv = {argv:?}\nenv_allow = [\"PATH\", \"HOME\", \"LANG\"]\ncwd = {cwd:?}\n\
         ready_url = \"http://{http}/v2/models/{{model}}/versions/{{variant}}/ready\"\n\
         env = {{ {env} }}\nvars = {{ mlserver = {mlserver:?}, repo = {cwd:?} }}\n{settings}",
        load = load_section(&[("mlp", ports_a), ("conv", ports_b)]),
        v2 = v2_section("mlp", ports_a, &repo_a),
        argv = argv,
        cwd = repo_b.display().to_string(),
        http = ports_b.http(),
        env = env.join(", "),
        mlserver = venv.join("bin/mlserver").display().to_string(),
        settings = settings_table(process_key, "conv", &repo_b),
    );
    let run_dir = d.join("run");
    std::fs::create_dir_all(&run_dir).expect("dir");
    let policy = format!(
        "active = \"exact\"\nbundle_dir = {:?}",
        bundle.display().to_string()
    );
    let config = common::daemon_config(
        &run_dir,
        scenario.to_str().expect("utf-8"),
        PERIOD_MS,
        &policy,
        &extra,
    );
    on_the_host_sampler(&config);
    let daemon_log = run_dir.join("daemon.log");
    let err = std::fs::File::create(&daemon_log).expect("log");
    let daemon = Killed(
        Command::new(env!("CARGO_BIN_EXE_mfsched"))
            .args(["run", "--config", config.to_str().expect("utf-8")])
            .env("MFSCHED_API_TOKEN", common::TOKEN)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn mfsched run"),
    );
    let logs = [daemon_log.as_path(), log_a.as_path()];
    let api: SocketAddr = common::wait_for(LIMIT, "the daemon listens", &logs, || {
        let text = std::fs::read_to_string(&daemon_log).ok()?;
        let at = text.split("listening on http://").nth(1)?;
        at.split_whitespace().next()?.parse().ok()
    });
    let ticks = || get(api, "/metrics").and_then(|p| metric(&p, "mfsched_ticks_total "));
    // What the daemon applies now, as (variant, threads) per model.
    let applied = || -> Option<Vec<Served>> {
        let v: serde_json::Value = serde_json::from_str(&get(api, "/v1/decision")?).ok()?;
        ["mlp", "conv"]
            .iter()
            .map(|m| {
                let k = &v["applied_knobs"][m];
                Some((
                    k["variant"].as_str()?.to_owned(),
                    k["knobs"]["threads"].as_i64()?,
                ))
            })
            .collect()
    };
    let servers = [("mlp", ports_a), ("conv", ports_b)];
    let mut seen: Vec<BTreeSet<Served>> = vec![BTreeSet::new(), BTreeSet::new()];
    let observe = |seen: &mut Vec<BTreeSet<Served>>| -> Option<Vec<Served>> {
        let now: Option<Vec<Served>> = servers
            .iter()
            .map(|(m, p)| serving(p.http(), m).as_ref().and_then(|s| as_served(s, m)))
            .collect();
        for (i, (m, p)) in servers.iter().enumerate() {
            if let Some(s) = serving(p.http(), m) {
                let served = as_served(&s, m)
                    .unwrap_or_else(|| panic!("{m}: the settings and the file disagree: {s:?}"));
                seen[i].insert(served);
            }
        }
        now
    };
    stop.store(false, Ordering::Relaxed);
    common::wait_for(LIMIT, "both models serve", &logs, || observe(&mut seen));
    let loads: Vec<_> = bodies
        .iter()
        .map(|(m, body, ports)| load_loop(ports.http(), m, body.clone(), Arc::clone(&stop)))
        .collect();
    common::wait_for(LIMIT, "8 ticks", &logs, || ticks().filter(|t| *t >= 8.0));
    observe(&mut seen);

    // Kill conv's server: the process actuator restarts and counts it. A kill
    // that lands while the actuator is starting conv for a new configuration
    // is that reconfiguration failing (counted as a failure, the previous
    // configuration started again), not a crash of a serving process: kill
    // again, only while conv answers ready, until a restart is counted.
    let repo_b_text = repo_b.display().to_string();
    let restarts = || {
        get(api, "/metrics")
            .and_then(|p| metric(&p, "mfsched_actuator_restarts_total{model=\"conv\"}"))
    };
    let ticks_at_kill = ticks().expect("ticks");
    let mut last_kill: Option<Instant> = None;
    let mut kills = 0;
    common::wait_for(
        LIMIT,
        "a restart of conv's server is counted",
        &logs,
        || {
            if restarts().is_some_and(|c| c >= 1.0) {
                return Some(());
            }
            let due = last_kill.is_none_or(|t| t.elapsed() > Duration::from_secs(5));
            if due && serving(ports_b.http(), "conv").is_some() {
                for pid in mlservers_with(&repo_b_text) {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
                last_kill = Some(Instant::now());
                kills += 1;
            }
            None
        },
    );
    eprintln!("conv's server killed {kills} time(s) before a restart was counted");
    common::wait_for(LIMIT, "conv serves again", &logs, || {
        observe(&mut seen);
        serving(ports_b.http(), "conv")
    });
    common::wait_for(LIMIT, "22 ticks, ticking on after the kill", &logs, || {
        observe(&mut seen);
        ticks().filter(|t| *t >= 22.0 && *t > ticks_at_kill + 4.0)
    });
    // What the servers report is what the daemon applies (once no
    // reconfiguration is in flight).
    common::wait_for(
        LIMIT,
        "the servers serve what the daemon applies",
        &logs,
        || {
            let on_servers = observe(&mut seen)?;
            (applied()? == on_servers).then_some(())
        },
    );
    // Every model's server reports a throughput above zero. A restarted
    // server's counters start again from zero, and a rate needs two reads of
    // them: wait for the daemon's next reads rather than take the first page.
    for m in ["mlp", "conv"] {
        let what = format!("{m}'s measured throughput above zero");
        common::wait_for(LIMIT, &what, &logs, || {
            let page = get(api, "/metrics")?;
            metric(
                &page,
                &format!("mfsched_measured_throughput{{model=\"{m}\""),
            )
            .filter(|t| *t > 0.0)
        });
    }
    stop.store(true, Ordering::Relaxed);
    for l in loads {
        assert!(
            l.join().expect("load loop") > 0,
            "the load loop got answers"
        );
    }

    // The daemon's exit stops the server it started.
    let mut daemon = daemon;
    common::process::sigterm(&daemon.0);
    let status = common::wait_for(LIMIT, "the daemon exits", &logs, || {
        daemon.0.try_wait().ok().flatten()
    });
    assert!(status.success(), "{status}");
    assert!(
        mlservers_with(&repo_b_text).is_empty(),
        "conv's server outlived the daemon"
    );
    drop(server_a);

    // The log: every applied configuration valid, every server-reported one
    // applied at some tick, each reconfiguration's downtime measured.
    let log = mfsched_daemon::read_decision_log(&run_dir.join("decisions.log"))
        .expect("the decision log");
    assert!(log.records.len() >= 22, "{} ticks", log.records.len());
    let mut applied_sets: Vec<BTreeSet<Served>> = vec![BTreeSet::new(), BTreeSet::new()];
    for r in &log.records {
        assert!(
            problem.check_feasible(&r.applied).is_ok(),
            "tick {} applied an invalid configuration {:?}",
            r.tick,
            r.applied
        );
        for (i, &c) in r.applied.iter().enumerate() {
            let k = problem.models[i].knobs(c as usize);
            let threads = match k.knobs["threads"] {
                mfsched_core::KnobValue::Integer(t) => t,
                ref other => panic!("threads is {other:?}"),
            };
            applied_sets[i].insert((k.variant, threads));
        }
    }
    for (i, (m, _)) in servers.iter().enumerate() {
        let initial = problem.models[i].knobs(problem.current[i] as usize);
        let mut allowed = applied_sets[i].clone();
        if let mfsched_core::KnobValue::Integer(t) = initial.knobs["threads"] {
            allowed.insert((initial.variant, t));
        }
        assert!(
            seen[i].is_subset(&allowed),
            "{m}: served {:?}, applied {allowed:?}",
            seen[i]
        );
        let reconfigs: Vec<_> = log
            .reconfigurations
            .iter()
            .filter(|r| r.model as usize == i)
            .collect();
        assert!(!reconfigs.is_empty(), "{m}: no reconfiguration recorded");
        for r in reconfigs {
            assert!(r.downtime_ms > 0.0, "{r:?}");
            if r.error.is_none() {
                assert_eq!(r.serving, Some(r.to), "{r:?}");
            }
        }
    }
    // The costs the ticks were decided with: with `downtime_as_cost`, each
    // model's measured downtime as a share of the period, at most 1, once
    // both models were reconfigured. Replayed on the log, `exact` decides
    // as the daemon's did, at every tick where it decided.
    let priced = log.costs.last().expect("the costs are recorded");
    assert_ne!(priced.costs, problem.reconfig, "measured costs: {priced:?}");
    for c in &priced.costs {
        for cost in [c.variant_switch, c.knob_change] {
            assert!((0.0..=1.0).contains(&cost), "{priced:?}");
        }
    }
    let replay = common::process::mfsched(&[
        "replay",
        run_dir.join("decisions.log").to_str().expect("utf-8"),
        "--policy",
        "exact",
        "--models",
        bundle.to_str().expect("utf-8"),
        "--json",
    ]);
    assert!(
        replay.status.success(),
        "{}",
        common::process::stderr(&replay)
    );
    let r: serde_json::Value =
        serde_json::from_slice(&replay.stdout).expect("replay --json answers JSON");
    for t in r["decisions"].as_array().expect("decisions") {
        if !t["ran"].is_null() {
            assert_eq!(t["policies"][0], t["ran"], "exact replayed: {t}");
        }
    }
}

/// The pids of MLServer processes whose command line holds `needle`.
fn mlservers_with(needle: &str) -> Vec<u32> {
    common::pids_where(|cmd| cmd.contains(needle) && cmd.contains("mlserver"))
}
