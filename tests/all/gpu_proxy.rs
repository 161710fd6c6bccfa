//! GPU proxy workloads (`mfsched gpu-proxy`): two proxies, a memory-bound and
//! a compute-bound wgpu kernel, started and restarted by the process actuator
//! through a short `profile --live` on `rig/scenarios/gpu-proxy-n2.toml`,
//! each proxy's counters scraped from its own `/metrics`. `fma` runs at an
//! offered rate from a rate file, `mem` as fast as it can.
//!
//! The field comes from the host sampler over the two proxy processes: on
//! lavapipe (a software adapter) the kernels run on the CPU, so the proxies'
//! CPU time and resident memory are what the "card" does and holds. The
//! proxies run under a name of their own (a link to the binary), so the
//! profiler, also `mfsched`, is not counted among them.
//!
//! Invariants only, no timings (it runs on a busy 2-core machine): `data
//! check` accepts the profile, every row measured each model's throughput
//! above zero, and no proxy outlives the profiler. Gated on a wgpu adapter:
//! skips without one, fails then when `MFSCHED_REQUIRE_GPU_ADAPTER=1`.

use std::path::Path;
use std::time::{Duration, Instant};

use super::common;
use super::common::process::{mfsched, stderr, stdout};

/// The name the proxies run under (argv[0]'s base name), for the host sampler.
const PROXY: &str = "mfsched-gpu-proxy";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The live profile's daemon config: the process actuator starts each proxy,
/// its `/metrics` gives the load and the throughput, the host sampler the field.
fn config(dir: &Path, scenario: &Path, proxy: &Path, rate_file: &Path) -> std::path::PathBuf {
    let mut extra = String::from(
        "[workload]\nsource = \"prometheus\"\n\n[workload.prometheus]\npoll_ms = 4000\ntimeout_ms = 3000\n",
    );
    let mut process = String::from(
        "[actuator.process]\ngrace_ms = 3000\nready_timeout_ms = 60000\nbackoff_ms = 200\n",
    );
    for (model, family, paced) in [("mem", "memory", false), ("fma", "compute", true)] {
        let port = free_port();
        extra.push_str(&format!(
            "\n[workload.prometheus.models.{model}]\nmetric = \"mfsched_proxy_requests_total\"\n\
             label = \"model\"\nthroughput_metric = \"mfsched_proxy_items_total\"\n\
             scrape = \"http://127.0.0.1:{port}/metrics\"\nreference_rate = 10.0\n"
        ));
        let mut argv = vec![
            "{proxy}",
            "gpu-proxy",
            "--model",
            "{model}",
            "--family",
            family,
            "--precision",
            "{variant}",
            "--batch",
            "{batch}",
            "--workgroups",
            "{workgroups}",
            // Few steps: lavapipe runs them on the CPU.
            "--iterations",
            "32",
            "--listen",
            "127.0.0.1:{port}",
        ];
        if paced {
            argv.extend(["--rate-file", "{rate_file}"]);
        }
        process.push_str(&format!(
            "\n[actuator.process.models.{model}]\nargv = {argv:?}\n\
             env_allow = [\"PATH\", \"HOME\", \"XDG_RUNTIME_DIR\", \"WGPU_BACKEND\", \"VK_ICD_FILENAMES\"]\n\
             ready_url = \"http://127.0.0.1:{{port}}/v2/models/{{model}}/ready\"\n\
             vars = {{ proxy = {proxy:?}, port = \"{port}\", rate_file = {rate:?} }}\n",
            proxy = proxy.display().to_string(),
            rate = rate_file.display().to_string(),
        ));
    }
    let path = common::daemon_config(
        dir,
        scenario.to_str().expect("utf-8"),
        500,
        "active = \"hold\"",
        &format!("{extra}\n{process}"),
    );
    // The host sampler over the proxies (a live profile needs a measured utilisation).
    let text = std::fs::read_to_string(&path).expect("the daemon config");
    let text = text.replacen("kind = \"footprint\"", "kind = \"host\"", 1)
        + &format!(
            "\n[sampler.host]\ncpu = \"processes\"\nmemory = \"processes\"\n\
             commands = [\"{PROXY}\"]\ninclude_children = true\nmemory_total_mib = 81920\n"
        );
    std::fs::write(&path, text).expect("write the daemon config");
    path
}

#[test]
fn gpu_proxies_are_profiled_live_through_the_process_actuator() {
    // The scenario's f16 variant runs its kernels in f16.
    if !common::gpu_adapter_with(
        "gpu_proxies_are_profiled_live_through_the_process_actuator",
        mfsched_surrogate::AdapterFeatures::SHADER_F16,
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let proxy = d.join(PROXY);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_mfsched"), &proxy).expect("link");
    let rate_file = d.join("fma.rate");
    std::fs::write(&rate_file, "4\n").expect("rate file");
    let scenario = common::workspace_root().join("rig/scenarios/gpu-proxy-n2.toml");
    let config = config(d, &scenario, &proxy, &rate_file);
    let csv = d.join("live.csv");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "profile",
            "--live",
            "--config",
            config.to_str().expect("utf-8"),
            "--workload",
            "high",
            "--samples",
            "16",
            "--seed",
            "1",
            "--settle-ms",
            "500",
            "--window-ms",
            "1500",
            "--out",
            csv.to_str().expect("utf-8"),
        ]
        .map(str::to_owned)
        .into();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let plan = mfsched(
        &args(&["--dry-run"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(plan.status.success(), "{}", stderr(&plan));
    let points = stdout(&plan).lines().count();
    assert!((3..=4).contains(&points), "a short plan: {}", stdout(&plan));

    let o = mfsched(&args(&[]).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        o.status.success(),
        "profile --live: {}{}",
        stdout(&o),
        stderr(&o)
    );
    // The profiler stopped both proxies before it exited.
    let needle = proxy.display().to_string();
    let start = Instant::now();
    while !common::pids_where(|cmd| cmd.contains(needle.as_str())).is_empty()
        && start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        common::pids_where(|cmd| cmd.contains(needle.as_str())),
        Vec::<u32>::new(),
        "a proxy outlived the profile"
    );
    // Each proxy's start-up line (what runs, on which adapter) reaches the log.
    for line in [
        "gpu-proxy mem: memory kernel",
        "gpu-proxy fma: compute kernel",
    ] {
        assert!(stderr(&o).contains(line), "{line}: {}", stderr(&o));
    }

    let check = mfsched(&[
        "data",
        "check",
        csv.to_str().expect("utf-8"),
        "--scenario",
        scenario.to_str().expect("utf-8"),
    ]);
    assert!(check.status.success(), "data check: {}", stderr(&check));
    let problem = mfsched_core::load_scenario(scenario.to_str().expect("utf-8"))
        .expect("the scenario")
        .problem;
    let profile = mfsched_core::read_profile(&csv, &problem).expect("the live profile");
    assert_eq!(profile.rows.len(), points, "one row per point");
    for row in &profile.rows {
        assert!(
            row.throughput.iter().all(|t| *t > 0.0),
            "both proxies dispatched in every window: {row:?}"
        );
        assert!(
            row.state.vram_used_mib > 0.0 && row.state.utilization > 0.0,
            "the host sampler saw the proxies: {row:?}"
        );
    }
}
