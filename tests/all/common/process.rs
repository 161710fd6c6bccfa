//! Running the `mfsched` binary as a user would.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Output, Stdio};

/// A child process killed (and waited for) when dropped, by a failed assertion too.
#[derive(Debug)]
pub struct Killed(pub Child);

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
    let mut child = Command::new(env!("CARGO_BIN_EXE_mfsched"))
        .args(["run", "--config"])
        .arg(config)
        .env("MFSCHED_API_TOKEN", super::TOKEN)
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
