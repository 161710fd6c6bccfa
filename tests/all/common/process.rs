//! Running the `mfsched` binary as a user would.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Output, Stdio};

/// A child process killed (and waited for) when dropped, by a failed assertion too.
#[derive(Debug)]
pub struct Killed(pub Child);

/// Sends SIGTERM, as an operator (or systemd) stops the daemon.
pub fn sigterm(child: &Child) {
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill -TERM {}", child.id());
}

/// SIGTERM, then the exit: the daemon stops after its tick in progress.
pub fn terminate(child: &mut Child) -> std::process::ExitStatus {
    sigterm(child);
    child.wait().expect("the process exits")
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn mfsched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(args)
        .output()
        .expect("the mfsched binary runs")
}

/// A memory figure of a running process, KiB: `field` of /proc/PID/status
/// (`VmRSS`, the resident set now; `VmHWM`, its peak so far). `None` once the
/// process has exited.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// [`mfsched`], and the peak resident set it reached (KiB), read from its
/// /proc status until it exits: a lower bound of the true peak, exact while
/// memory only grows.
pub fn mfsched_peak_rss(args: &[&str]) -> (Output, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the mfsched binary runs");
    let mut peak = 0;
    while child.try_wait().expect("wait").is_none() {
        if let Some(kib) = status_kib(child.id(), "VmHWM") {
            peak = peak.max(kib);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    (child.wait_with_output().expect("its output"), peak)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A command that failed with exactly one line on stderr (how bad input is
/// reported): that line. `context` says which case, in the panic message.
pub fn fails_in_one_line(o: &Output, context: impl std::fmt::Display) -> String {
    let err = stderr(o);
    assert!(!o.status.success(), "{context}: succeeded; stderr: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{context}: {err}");
    err
}

/// `mfsched run --config CONFIG` with the test API token, its stderr piped:
/// the child, its stderr read up to the line saying where the API listens
/// (the rest stays readable), and that address.
pub fn start_daemon(config: &Path) -> (Child, BufReader<ChildStderr>, SocketAddr) {
    start_daemon_with(config, &[])
}

/// [`start_daemon`] with more environment variables.
pub fn start_daemon_with(
    config: &Path,
    env: &[(&str, &Path)],
) -> (Child, BufReader<ChildStderr>, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(["run", "--config"])
        .arg(config)
        .env("MFSCHED_API_TOKEN", super::TOKEN)
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn mfsched run");
    let mut err = BufReader::new(child.stderr.take().expect("piped"));
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if !matches!(err.read_line(&mut line), Ok(n) if n > 0) {
            let _ = child.kill();
            let status = child.wait();
            panic!("run exited before listening: {status:?}");
        }
        if let Some((_, a)) = line.trim().split_once("listening on http://") {
            break a
                .split_whitespace()
                .next()
                .unwrap_or("")
                .parse()
                .expect("an address");
        }
    };
    (child, err, addr)
}
