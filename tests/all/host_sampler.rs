//! The host sampler on this machine's real `/proc` (Linux): a busy child
//! process is found by PID, its CPU time shows as utilisation and its resident
//! set as memory, and once it is gone sampling goes on without it. Bounded:
//! the child is killed on every path, the wait for its first CPU tick is capped.

use std::process::{Child, Command};
use std::time::Duration;

use mfsched_core::WorkloadLevel;
use mfsched_daemon::HostSamplerConfig;
use mfsched_daemon::{HostSampler, Sampler};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_host_sampler_measures_a_real_process_and_survives_its_exit() {
    if !std::path::Path::new("/proc/stat").is_file() {
        eprintln!("skipped: no /proc/stat here (the host sampler reads Linux's /proc)");
        return;
    }
    let scenario = mfsched_core::load_scenario("paper-n2").expect("bundled");
    let problem = &scenario.problem;
    let mut child = Killed(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("sh runs"),
    );
    let pid = child.0.id();
    let config = HostSamplerConfig {
        pids: vec![pid],
        include_children: false,
        ..HostSamplerConfig::default()
    };
    let mut sampler = HostSampler::new(&config).expect("this machine's /proc");
    let mut sample = || {
        sampler
            .sample(problem, &problem.current, WorkloadLevel::Medium)
            .expect("a sample")
    };
    // CPU time is counted in 10 ms ticks: sample until the child has run one.
    let mut busy = None;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        let s = sample();
        assert_eq!(s.source, "host");
        let u = s.utilization.expect("a delta after the first reading");
        assert!((0.0..=1.0).contains(&u), "utilisation {u}");
        assert_eq!(s.processes.len(), 1, "{s:?}");
        assert_eq!(s.processes[0].pid, pid);
        assert!(
            s.vram_used_mib.is_some_and(|m| m > 0.0),
            "a running shell holds memory: {s:?}"
        );
        assert!(s.vram_total_mib.is_some_and(|t| t > 0.0), "MemTotal: {s:?}");
        if u > 0.0 {
            busy = Some(u);
            break;
        }
    }
    assert!(
        busy.is_some(),
        "a busy loop never showed a CPU tick in 10 s"
    );
    let _ = child.0.kill();
    let _ = child.0.wait();
    let gone = sample();
    assert!(gone.processes.is_empty(), "{gone:?}");
    assert_eq!(gone.vram_used_mib, Some(0.0), "no server holds nothing");
    assert_eq!(
        gone.utilization,
        Some(0.0),
        "a vanished process adds no time"
    );
}
