//! The production chain end to end, with a real Prometheus server: `mfsched sim
//! serve` (the simulator as model servers, vLLM's and Triton's metric names),
//! Prometheus scraping them, and `mfsched run` reading its load through PromQL
//! and actuating the servers through its webhooks. Then Prometheus is killed,
//! and one server, while the daemon runs.
//!
//! Needs the `prometheus` binary (Debian's package; `.ci/run` installs it and
//! sets `MFSCHED_REQUIRE_PROMETHEUS=1`, which turns a missing binary from a
//! skip into a failure).

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::common::{self, metric};
use mfsched_core::WorkloadLevel;

/// The simulated servers' trace step and the daemon's period.
const TICK_MS: u64 = 500;
/// step-up over 48 steps: low for 16 steps (8 s), high for 16, burst for 16.
const TRACE_STEPS: u64 = 48;
/// The PromQL rate window and Prometheus' scrape interval.
const RATE_WINDOW_S: u64 = 3;
const SCRAPE_S: u64 = 1;
/// The documented lag of the load the daemon sees (docs/production.md): the
/// rate window, one scrape interval, one poll and one tick, with room for a
/// loaded machine's late scrapes. A tick's regime must lie between the lowest
/// and the highest regime the servers ran in over this much time before it.
const LAG_MS: u64 = (RATE_WINDOW_S + SCRAPE_S) * 1000 + 2 * TICK_MS + 4000;

/// Kills the process when dropped (a failed assertion leaves nothing running).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn prometheus_binary() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("prometheus"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("MFSCHED_REQUIRE_PROMETHEUS").is_none(),
            "MFSCHED_REQUIRE_PROMETHEUS is set but no prometheus binary is on PATH"
        );
        eprintln!("skipped: no prometheus binary on PATH (Debian's package `prometheus`)");
    }
    found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// GET over plain HTTP, `None` if nothing answers.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    common::try_http(addr, "GET", path, None, &[]).ok()
}

fn spawn(args: &[&str], log: &Path) -> Running {
    let err = std::fs::File::create(log).expect("a log file");
    Running(
        Command::new(env!("CARGO_BIN_EXE_mfsched"))
            .args(args)
            .env("MFSCHED_API_TOKEN", common::TOKEN)
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn mfsched"),
    )
}

#[test]
fn the_daemon_follows_the_load_prometheus_reports_and_survives_losing_it() {
    let Some(prometheus) = prometheus_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (sim_log, prom_log, run_log) = (
        d.join("sim.log"),
        d.join("prometheus.log"),
        d.join("run.log"),
    );
    let logs = [sim_log.as_path(), prom_log.as_path(), run_log.as_path()];

    // 1. The simulated model servers, on free ports.
    let (trace_steps, tick_ms) = (TRACE_STEPS.to_string(), TICK_MS.to_string());
    let (_sim, servers) = sim_serve(
        d,
        "trace",
        &[
            "--trace",
            "step-up",
            "--trace-ticks",
            &trace_steps,
            "--tick-ms",
            &tick_ms,
            "--seed",
            "5",
        ],
        &sim_log,
    );
    let problem = mfsched_core::load_scenario("paper-n2")
        .expect("bundled")
        .problem;
    assert_eq!(servers.len(), problem.models.len());

    // 2. A real Prometheus scraping them every second.
    let prom_addr: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("address");
    let targets: Vec<String> = servers.values().map(|a| format!("'{a}'")).collect();
    std::fs::write(
        d.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n\
             scrape_configs:\n  - job_name: sim\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .expect("prometheus.yml");
    let prom_err = std::fs::File::create(&prom_log).expect("log");
    let mut prom = Running(
        Command::new(&prometheus)
            .arg(format!(
                "--config.file={}",
                d.join("prometheus.yml").display()
            ))
            .arg(format!("--storage.tsdb.path={}", d.join("tsdb").display()))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(prom_err)
            .spawn()
            .expect("spawn prometheus"),
    );
    common::wait_for(Duration::from_secs(90), "Prometheus ready", &logs, || {
        get(prom_addr, "/-/ready").filter(|(s, _)| *s == 200)
    });

    // 3. The daemon: load through PromQL, configurations to the servers.
    let mut extra = format!(
        "[workload]\nsource = \"prometheus\"\n\n[workload.prometheus]\nurl = \"http://{prom_addr}\"\n\
         timeout_ms = 400\nstale_ms = 3000\nsafe_level = \"high\"\nrate_window = \"{RATE_WINDOW_S}s\"\n"
    );
    for m in &problem.models {
        extra.push_str(&format!(
            "\n[workload.prometheus.models.{}]\npreset = \"{}\"\nreference_rate = 10.0\n",
            m.name,
            preset(m)
        ));
    }
    extra
        .push_str("\n[actuator.webhook]\ntimeout_ms = 300\nretries = 0\n[actuator.webhook.urls]\n");
    extra.push_str(&webhook_urls(&servers));
    let config = common::daemon_config(d, "paper-n2", TICK_MS, "active = \"exact\"", &extra);
    let mut run = spawn(
        &["run", "--config", config.to_str().expect("utf-8")],
        &run_log,
    );
    let api: SocketAddr = common::wait_for(
        Duration::from_secs(120),
        "the daemon listening",
        &logs,
        || {
            let text = std::fs::read_to_string(&run_log).ok()?;
            let (_, rest) = text.split_once("listening on http://")?;
            rest.split_whitespace().next()?.parse().ok()
        },
    );
    let any_server = *servers.values().next().expect("a server");
    let sim_state = |addr: SocketAddr| -> serde_json::Value {
        let (status, body) = get(addr, "/sim/state").expect("the simulated server answers");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("JSON")
    };

    // Healthy: the whole trace (low, high, burst) plays once, from a cycle that
    // starts at least one lag after the daemon listens (its first tick waits
    // for the first readings, and a loaded machine starts it late).
    let listening = now_ms();
    let state = sim_state(any_server);
    let started = state["started_unix_ms"].as_u64().expect("started");
    let trace: Vec<WorkloadLevel> =
        mfsched_core::generate_trace("step-up", TRACE_STEPS as usize, 5)
            .expect("trace")
            .levels;
    let checked_from = listening + LAG_MS;
    let first_cycle = (checked_from - started)
        .div_ceil(TICK_MS)
        .div_ceil(TRACE_STEPS)
        * TRACE_STEPS;
    let last_step = first_cycle + TRACE_STEPS + LAG_MS.div_ceil(TICK_MS) + 1;
    common::wait_for(
        Duration::from_secs(300),
        "a whole trace cycle played",
        &logs,
        || (sim_state(any_server)["tick"].as_u64()? > last_step).then_some(()),
    );
    let healthy_until = now_ms();

    // While healthy, every model's throughput counter (the preset's) is read
    // with its load: the servers' throughput is in /metrics and the dashboard's
    // history, a rate above zero for each model.
    let (status, body) = get(api, "/metrics").expect("the API answers");
    assert_eq!(status, 200, "{body}");
    for m in &problem.models {
        let served = metric(
            &body,
            &format!("mfsched_measured_throughput{{model=\"{}\"}}", m.name),
        );
        assert!(served.is_some_and(|t| t > 0.0), "{}: {body}", m.name);
    }
    let (status, body) = get(api, "/v1/history").expect("the API answers");
    assert_eq!(status, 200, "{body}");
    let history: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let last = history["ticks"]
        .as_array()
        .and_then(|t| t.last())
        .expect("ticks in the history");
    let measured = last["measured_throughput"].as_array().expect("per model");
    assert_eq!(measured.len(), problem.models.len(), "{last}");
    assert!(
        measured.iter().all(|t| t.as_f64().is_some_and(|t| t > 0.0)),
        "{last}"
    );

    // Prometheus dies: readings fail, the last one stands in for stale_ms, then
    // the safe level. (Counted from here: a first tick the first readings
    // did not come in time for decides on the safe level too.)
    let metrics_page = || get(api, "/metrics").map(|(_, b)| b).unwrap_or_default();
    let fallbacks = |page: &str, kind: &str| {
        metric(
            page,
            &format!("mfsched_load_fallback_ticks_total{{kind=\"{kind}\"}}"),
        )
        .unwrap_or(0.0)
    };
    let before = metrics_page();
    let (safe_before, held_before) = (fallbacks(&before, "safe"), fallbacks(&before, "held"));
    let _ = prom.0.kill();
    let _ = prom.0.wait();
    common::wait_for(
        Duration::from_secs(60),
        "safe-level ticks after Prometheus died",
        &logs,
        || {
            let page = metrics_page();
            (fallbacks(&page, "safe") >= safe_before + 3.0
                && fallbacks(&page, "held") >= held_before + 1.0)
                .then_some(())
        },
    );
    let page = metrics_page();
    assert!(
        metric(&page, "mfsched_load_read_failures_total{model=").is_some_and(|f| f > 0.0),
        "{page}"
    );
    assert_eq!(
        metric(&page, "mfsched_workload_level"),
        Some(2.0),
        "the safe level (high): {page}"
    );

    // One server dies too; the daemon keeps ticking.
    let (victim, victim_addr) = servers
        .iter()
        .next()
        .map(|(m, a)| (m.clone(), *a))
        .expect("a server");
    let (status, _) = common::http(victim_addr, "POST", "/sim/stop", None);
    assert_eq!(status, 204);
    let ticks_then = metric(&metrics_page(), "mfsched_ticks_total").expect("ticks");
    common::wait_for(
        Duration::from_secs(60),
        "ticks after a server died",
        &logs,
        || (metric(&metrics_page(), "mfsched_ticks_total")? >= ticks_then + 4.0).then_some(()),
    );

    // Stop the daemon as an operator would.
    let exit = common::process::terminate(&mut run.0);
    let mut run_text = String::new();
    std::fs::File::open(&run_log)
        .and_then(|mut f| f.read_to_string(&mut run_text))
        .expect("run log");
    assert!(exit.success(), "the daemon ended badly: {run_text}");

    let log =
        mfsched_daemon::read_decision_log(&d.join("decisions.log")).expect("the decision log");
    let records = &log.records;
    assert!(records.len() > 20, "{} ticks", records.len());
    // The first tick decided on the load read (a reading that failed since
    // stands in: held), not on the safe level, unless no reading came within
    // stale_ms, which the daemon said.
    let first = &records[0];
    assert!(
        first.load.fallback.as_deref() != Some("safe") || run_text.contains("models read within"),
        "tick {} decided on a {:?} load without waiting: {run_text}",
        first.tick,
        first.load.fallback
    );
    assert!(
        run_text.contains("for every model's first reading before the first tick"),
        "{run_text}"
    );
    // Nothing invalid was ever applied.
    for r in records {
        problem
            .check_feasible(&r.applied)
            .unwrap_or_else(|e| panic!("tick {} applied {:?}: {e}", r.tick, r.applied));
    }
    // The regime followed the trace within the documented lag, from one lag
    // after the daemon started until Prometheus died.
    let trace_level = |unix_ms: u64| -> Option<usize> {
        let step = unix_ms.checked_sub(started)? / TICK_MS;
        Some(trace[(step % TRACE_STEPS) as usize].ordinal())
    };
    let mut checked = 0;
    let mut seen = std::collections::BTreeSet::new();
    for r in records.iter().filter(|r| r.unix_ms >= checked_from) {
        if r.unix_ms + LAG_MS > healthy_until {
            break;
        }
        let band: Vec<usize> = (r.unix_ms.saturating_sub(LAG_MS)..=r.unix_ms)
            .step_by(100)
            .filter_map(trace_level)
            .collect();
        let (lo, hi) = (
            band.iter().min().copied().unwrap_or(0),
            band.iter().max().copied().unwrap_or(3),
        );
        let level = r.state.workload.ordinal();
        assert!(
            (lo..=hi).contains(&level),
            "tick {} decided for {} while the servers ran regimes {lo}..={hi} over the {LAG_MS} ms before",
            r.tick,
            r.state.workload
        );
        seen.insert(level);
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} healthy ticks checked");
    eprintln!(
        "{} ticks; {checked} checked against the trace, regimes seen {seen:?}",
        records.len()
    );
    assert!(
        seen.contains(&WorkloadLevel::Low.ordinal())
            && seen.contains(&WorkloadLevel::Burst.ordinal()),
        "the daemon saw the load rise from low to burst: {seen:?}"
    );
    // The servers run what was applied: every live server reports the last
    // applied configuration, and no server refused a configuration.
    let last = records.last().expect("records");
    let state = sim_state(
        servers
            .iter()
            .find(|(m, _)| **m != victim)
            .map(|(_, a)| *a)
            .expect("a live server"),
    );
    for (i, m) in problem.models.iter().enumerate() {
        let s = &state["models"][i];
        assert_eq!(s["name"], m.name.as_str());
        assert_eq!(s["refused"], 0, "{s}");
        if m.name != victim {
            assert_eq!(
                s["config"].as_u64(),
                Some(u64::from(last.applied[i])),
                "{} runs what was applied last",
                m.name
            );
        }
    }
    let changes: usize = records.iter().map(|r| r.changed_models.len()).sum();
    assert!(changes > 0, "the load changed and the decisions with it");

    // Realised utility over the whole trace cycle: what the daemon applied,
    // scored on the simulator's noise-free throughput under the regime the
    // servers ran, beside the closed-loop harness deciding exact on the same
    // trace with the regime known (its own state each tick, no lag).
    let cycle_ms = |step: u64| started + step * TICK_MS;
    let in_cycle: Vec<_> = records
        .iter()
        .filter(|r| {
            r.unix_ms >= cycle_ms(first_cycle) && r.unix_ms < cycle_ms(first_cycle + TRACE_STEPS)
        })
        .collect();
    assert!(
        in_cycle.len() >= TRACE_STEPS as usize / 2,
        "{} ticks in the cycle",
        in_cycle.len()
    );
    let (daemon, harness) = realised_utilities(&in_cycle, |unix_ms| {
        // A decision runs for the period after it.
        let step = (unix_ms + TICK_MS / 2 - started) / TICK_MS;
        trace[(step % TRACE_STEPS) as usize]
    });
    let shortfall = (harness - daemon) / harness.abs();
    eprintln!(
        "realised utility per tick over one cycle: daemon {daemon:.4}, closed-loop harness {harness:.4} ({:+.2} %)",
        -100.0 * shortfall
    );
    assert!(
        shortfall <= REALISED_TOLERANCE,
        "the daemon realised {daemon:.4} per tick, the harness {harness:.4}: more than {} % short",
        100.0 * REALISED_TOLERANCE
    );
}

/// How far below the closed-loop harness the daemon's realised utility may be
/// (docs/production.md): the harness knows each tick's regime, the daemon reads
/// it through Prometheus up to a lag later.
const REALISED_TOLERANCE: f64 = 0.05;

/// Mean realised utility per tick of the daemon's applied decisions (regime
/// from `level_at`) and of the harness deciding exact on the same trace.
fn realised_utilities(
    records: &[&mfsched_daemon::TickRecord],
    level_at: impl Fn(u64) -> WorkloadLevel,
) -> (f64, f64) {
    use mfsched_lab::{Harness, PolicySpec, Summary};
    use mfsched_plugin_host::Scorer;
    use mfsched_plugin_host::wit;
    use mfsched_plugin_host::{CompileCache, PluginEngine, PluginLimits};
    use mfsched_plugin_host::{resolve_policy, resolve_utility};
    use std::sync::Arc;

    let engine = Arc::new(
        PluginEngine::new(PluginLimits::default(), CompileCache::Default).expect("engine"),
    );
    let utility = resolve_utility(&engine, "utility", None).expect("utility");
    let scenario = mfsched_core::load_scenario("paper-n2").expect("bundled");
    let served = mfsched_surrogate::serve(
        &scenario,
        mfsched_surrogate::ServeOptions {
            models: None,
            backend: mfsched_surrogate::BackendChoice::Cpu,
            field: mfsched_core::Field::Observed,
        },
    )
    .expect("the embedded bundle");
    let problem = served.problem.clone();
    let sim = mfsched_lab::Simulator::new(&problem, 5).expect("simulator");
    let mut scorer = Scorer::new(Arc::clone(&engine), Arc::clone(&utility));
    let mut lifted = problem.clone();
    lifted.sla_floors.iter_mut().for_each(|f| *f = 0.0);
    let mut sum = 0.0;
    for r in records {
        lifted.current = r.previous.clone().expect("a version 3 record");
        let truth: Vec<f32> = sim
            .expected_throughput(&r.applied, level_at(r.unix_ms))
            .iter()
            .map(|&t| t as f32)
            .collect();
        let index = problem.space().index(&r.applied).expect("in the space");
        let deadline = Instant::now() + Duration::from_secs(5);
        sum += scorer
            .score(&wit::Problem::from(&lifted), &[index], &truth, deadline)
            .expect("scored")[0];
    }
    let daemon = sum / records.len() as f64;
    let harness = Harness::new(
        Arc::clone(&engine),
        utility,
        Arc::clone(&served.predictor),
        problem,
    );
    let exact = PolicySpec {
        label: "exact".into(),
        plugin: resolve_policy(&engine, "exact", None).expect("exact"),
        params: vec![],
        predictor: None,
    };
    let trace = mfsched_core::generate_trace("step-up", TRACE_STEPS as usize, 5).expect("trace");
    let runs = harness
        .run(&exact, &[], &trace, 5, || {})
        .expect("the closed loop");
    (daemon, Summary::of(&runs[0].ticks).mean_realised_utility)
}

/// Starts `sim serve` on paper-n2 with `args` (its workload, tick and seed)
/// on free ports; returns it and its servers' addresses by model. `name`
/// names its ports file.
fn sim_serve(
    dir: &Path,
    name: &str,
    args: &[&str],
    log: &Path,
) -> (Running, BTreeMap<String, SocketAddr>) {
    let ports_file = dir.join(format!("ports-{name}.json"));
    // A file left by an earlier server of the same name names dead ports.
    let _ = std::fs::remove_file(&ports_file);
    let mut all = vec!["sim", "serve", "--scenario", "paper-n2"];
    all.extend(args);
    all.extend([
        "--port-base",
        "0",
        "--ports-file",
        ports_file.to_str().expect("utf-8"),
    ]);
    let sim = spawn(&all, log);
    let servers = common::wait_for(
        Duration::from_secs(60),
        "sim serve listening",
        &[log],
        || {
            let text = std::fs::read_to_string(&ports_file).ok()?;
            let ports: BTreeMap<String, String> = serde_json::from_str(&text).ok()?;
            ports
                .into_iter()
                .map(|(m, a)| Some((m, a.parse().ok()?)))
                .collect()
        },
    );
    (sim, servers)
}

/// The preset that reads what `sim serve` serves for `model`.
fn preset(model: &mfsched_core::Model) -> &'static str {
    mfsched_lab::MetricsFormat::for_kind(&model.kind).as_str()
}

/// `[actuator.webhook.urls]` pointing every model at its simulated server.
fn webhook_urls(servers: &BTreeMap<String, SocketAddr>) -> String {
    servers
        .iter()
        .map(|(m, a)| format!("{m} = \"http://{a}/config\"\n"))
        .collect()
}

#[test]
fn profile_live_measures_the_plan_through_the_actuators_and_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let problem = mfsched_core::load_scenario("paper-n2")
        .expect("bundled")
        .problem;
    let out = d.join("live.csv");
    let profile = |config: &Path, level: &str, gpu: SocketAddr, extra: &[&str]| {
        let mut args = vec![
            "profile",
            "--live",
            "--config",
            config.to_str().expect("utf-8"),
            "--workload",
            level,
            "--samples",
            "16",
            "--seed",
            "2",
            "--settle-ms",
            "300",
            "--window-ms",
            "1000",
        ];
        let gpu = format!("http://{gpu}/metrics");
        args.extend(["--gpu-metrics", &gpu]);
        args.extend(extra);
        common::process::mfsched(&args)
    };
    let out_arg = ["--out", out.to_str().expect("utf-8")];
    // (what sim serve holds, what the profile is told): the last run is told
    // the wrong regime, into another file.
    for (level, told) in [
        ("medium", "medium"),
        ("low", "low"),
        ("medium", "medium"),
        ("low", "high"),
    ] {
        let log = d.join(format!("sim-{level}.log"));
        let (_sim, servers) = sim_serve(
            d,
            level,
            &["--level", level, "--tick-ms", "100", "--seed", "3"],
            &log,
        );
        let mut extra =
            "[workload]\nsource = \"prometheus\"\n\n[workload.prometheus]\ntimeout_ms = 400\n"
                .to_owned();
        for m in &problem.models {
            extra.push_str(&format!(
                "\n[workload.prometheus.models.{}]\npreset = \"{}\"\nscrape = \"http://{}/metrics\"\nreference_rate = 10.0\n",
                m.name,
                preset(m),
                servers[&m.name]
            ));
        }
        extra.push_str("\n[actuator.webhook]\ntimeout_ms = 300\n[actuator.webhook.urls]\n");
        extra.push_str(&webhook_urls(&servers));
        let config = common::daemon_config(d, "paper-n2", 1000, "active = \"hold\"", &extra);
        let gpu = *servers.values().next().expect("a server");
        let wrong = d.join("told-wrong.csv");
        let out_args: Vec<&str> = if level == told {
            out_arg.to_vec()
        } else {
            vec!["--out", wrong.to_str().expect("utf-8")]
        };
        let rows_before = mfsched_core::read_profile(&out, &problem).map_or(0, |p| p.rows.len());
        let dry = profile(
            &config,
            told,
            gpu,
            &[out_args.as_slice(), &["--dry-run"]].concat(),
        );
        assert!(dry.status.success(), "{}", common::process::stderr(&dry));
        let o = profile(&config, told, gpu, &out_args);
        let (stdout, stderr) = (common::process::stdout(&o), common::process::stderr(&o));
        assert!(o.status.success(), "{stderr}");
        // The stratified plan of 16 points holds 4 per regime; a rerun of a
        // regime already in the file measures nothing.
        let planned = if level == told && rows_before == 8 {
            0
        } else {
            4
        };
        assert_eq!(
            common::process::stdout(&dry).lines().count(),
            planned,
            "dry run of {told}: {}",
            common::process::stderr(&dry)
        );
        assert!(
            stdout.contains(&format!("measured {planned} rows at {told} load")),
            "{told}: {stdout}"
        );
        if level != told {
            // Told high while the servers see low load: every row is flagged.
            assert!(
                stdout.contains("4 row(s) saw a load outside"),
                "{told}: {stdout}"
            );
        }
    }
    let check = common::process::mfsched(&[
        "data",
        "check",
        out.to_str().expect("utf-8"),
        "--scenario",
        "paper-n2",
    ]);
    assert!(
        check.status.success(),
        "{}",
        common::process::stderr(&check)
    );
    let measured = mfsched_core::read_profile(&out, &problem).expect("the live profile");
    assert_eq!(measured.rows.len(), 8);
    let plan = mfsched_core::SamplingPlan::Stratified { samples: 16 }
        .points(&problem, 2)
        .expect("plan");
    for row in &measured.rows {
        assert!(
            plan.iter()
                .any(|(j, w)| *j == row.joint && *w == row.workload),
            "a row off the plan: {row:?}"
        );
        assert!(row.throughput.iter().all(|t| *t > 0.0), "{row:?}");
        assert!(row.state.vram_used_mib > 0.0 && (0.0..=1.0).contains(&row.state.utilization));
    }
    let low = measured
        .rows
        .iter()
        .filter(|r| r.workload == WorkloadLevel::Low)
        .count();
    assert_eq!(low, 4);
}

/// `sampler.kind = "dcgm"`: the daemon reads the card off a DCGM exporter's
/// page (here `sim serve`'s, which names the simulated card's readings as the
/// exporter does, DRAM active included). Every tick's sample comes from the
/// page while it answers; once it stops, ticks go on unmeasured (the sample
/// says why), none fails.
#[test]
fn the_dcgm_sampler_reads_the_card_off_an_exporters_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let log = d.join("sim.log");
    let (sim, servers) = sim_serve(
        d,
        "dcgm",
        &["--level", "medium", "--tick-ms", "100", "--seed", "3"],
        &log,
    );
    let page = *servers.values().next().expect("a server");
    let extra = format!(
        "[sampler.dcgm]\nurl = \"http://{page}/metrics\"\npoll_ms = 1000\ntimeout_ms = 1000\nstale_ms = 5000\n"
    );
    let config = common::daemon_config(d, "paper-n2", 500, "active = \"hold\"", &extra);
    let run = |ticks: &str| {
        let o = common::process::mfsched(&[
            "run",
            "--config",
            config.to_str().expect("utf-8"),
            "--sampler",
            "dcgm",
            "--max-ticks",
            ticks,
        ]);
        assert!(o.status.success(), "{}", common::process::stderr(&o));
        mfsched_daemon::read_decision_log(&d.join("decisions.log"))
            .expect("the decision log")
            .records
    };
    let records = run("6");
    assert_eq!(records.len(), 6);
    // The poller reads the page when the sampler starts, before the daemon
    // has loaded its predictor: every tick finds a reading younger than 5 s
    // unless a read outlasts its timeout, which the sample would say.
    let read: Vec<_> = records
        .iter()
        .filter(|r| r.sample.source == "dcgm")
        .collect();
    assert!(
        !read.is_empty(),
        "no tick read the page: {:?}",
        records[0].sample
    );
    for r in &records {
        assert!(
            r.sample.source == "dcgm" || r.sample.source.contains("stale_ms"),
            "tick {}: {}",
            r.tick,
            r.sample.source
        );
    }
    for r in read {
        let s = &r.sample;
        let (vram, util, contention) = (
            s.vram_used_mib.expect("memory"),
            s.utilization.expect("utilisation"),
            s.contention.expect("DRAM active"),
        );
        assert!(vram > 0.0 && (0.0..=1.0).contains(&util) && (0.0..=1.0).contains(&contention));
        // The tick decided with what the page said (the reading averaged over
        // time: one reading so far gives itself).
        assert_eq!((r.state.vram_used_mib, r.state.utilization), (vram, util));
        assert!(r.state.contention.is_some_and(|c| (0.0..=1.0).contains(&c)));
    }
    // The exporter gone: the next run's ticks are unmeasured, and the run ends
    // as asked.
    drop(sim);
    let records = run("3");
    let after = &records[records.len() - 3..];
    for r in after {
        assert!(
            r.sample.source.starts_with("failed:") && r.sample.source.contains("stale_ms"),
            "tick {}: {}",
            r.tick,
            r.sample.source
        );
        assert_eq!(r.sample.utilization, None);
    }
}
