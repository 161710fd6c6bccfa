//! The numpy peer of `mfsched bench surrogate` (`bench/numpy_peer.py`): the same
//! inference in numpy/OpenBLAS, run as a subprocess in the same command so its
//! figures stand beside mfsched's under the same machine load. It is a
//! reference point, never a dependency: no test needs Python or numpy, and a
//! peer that cannot run is one line in the report, not a failed benchmark.

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The interpreter the peer runs under (looked up on `PATH`).
pub const PYTHON: &str = "python3";

/// How the peer is run.
#[derive(Debug, Clone)]
pub struct PeerRun {
    /// The peer script.
    pub script: PathBuf,
    /// The scenario TOML for its `--scenario` (its own default when `None`).
    pub scenario_toml: Option<PathBuf>,
    /// Timed runs per path (its `--repeats`), as mfsched's.
    pub repeats: usize,
    /// The peer is killed past this.
    pub timeout: Duration,
}

/// One of the peer's timed paths (its JSON's `candidates` and `mlp_batch`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PeerTiming {
    pub rows: u64,
    pub median_ms: f64,
    pub rows_per_s: f64,
}

/// The peer's table-then-exhaustive path (its JSON's `table`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PeerTable {
    /// Σk: the rows through the MLPs.
    pub rows: u64,
    pub median_ms: f64,
}

/// The machine as the peer saw it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PeerMachine {
    pub numpy: String,
    pub blas: String,
    /// Threads OpenBLAS runs with, when the peer could ask it.
    pub blas_threads: Option<u64>,
    pub loadavg_before: [f64; 3],
    pub loadavg_after: [f64; 3],
}

/// What the peer measured (the part of its `--json` document the report uses).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PeerFigures {
    pub scenario: String,
    pub repeats: usize,
    /// Path A: every VRAM-feasible candidate's rows through the MLPs, then the
    /// additive utility and its argmax.
    pub candidates: PeerTiming,
    /// One MLP over one batch of as many rows.
    pub mlp_batch: PeerTiming,
    /// Path B: the Σk-row table, then an exhaustive sum over the candidates.
    pub table: PeerTable,
    pub machine: PeerMachine,
}

impl PeerFigures {
    pub fn parse(json: &str) -> Result<Self> {
        serde_json::from_str(json).context("the peer's JSON is not what numpy_peer.py writes")
    }

    /// `2 BLAS threads`, or `BLAS threads unknown`.
    pub fn blas_threads_label(&self) -> String {
        match self.machine.blas_threads {
            Some(1) => "1 BLAS thread".to_string(),
            Some(t) => format!("{t} BLAS threads"),
            None => "BLAS threads unknown".to_string(),
        }
    }
}

/// Runs the peer: `python3 SCRIPT --repeats R --json TMP [--scenario TOML]`,
/// its stdout discarded, killed after `timeout`. The error says why it gave no
/// figures in one line: it could not start, timed out, or failed (with the
/// last line it wrote to stderr).
pub fn run(peer: &PeerRun) -> Result<PeerFigures> {
    let json = tempfile::Builder::new()
        .prefix("mfsched-peer-")
        .suffix(".json")
        .tempfile()
        .context("cannot create a temporary file for the peer's JSON")?;
    let mut stderr = tempfile::tempfile().context("cannot create a file for the peer's stderr")?;
    let mut command = Command::new(PYTHON);
    command
        .arg(&peer.script)
        .arg("--repeats")
        .arg(peer.repeats.to_string())
        .arg("--json")
        .arg(json.path());
    if let Some(toml) = &peer.scenario_toml {
        command.arg("--scenario").arg(toml);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr.try_clone()?)
        .spawn()
        .with_context(|| format!("cannot run {PYTHON}"))?;
    let what = format!("{PYTHON} {}", peer.script.display());
    let deadline = Instant::now() + peer.timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            // Already exited or not, the peer is over; reap it either way.
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} timed out after {} s", peer.timeout.as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if !status.success() {
        let mut text = String::new();
        stderr.seek(SeekFrom::Start(0))?;
        stderr.read_to_string(&mut text)?;
        let last = text.lines().rev().find(|l| !l.trim().is_empty());
        bail!(
            "{what} failed ({status}){}",
            last.map_or_else(String::new, |l| format!(": {}", l.trim()))
        );
    }
    let text = std::fs::read_to_string(json.path())
        .with_context(|| format!("{what} wrote no JSON to {}", json.path().display()))?;
    PeerFigures::parse(&text).with_context(|| what.clone())
}

/// The TOML the peer should read for `scenario` (a file path, or a bundled
/// name): the path itself when it is a file, else `scenarios/NAME.toml` of the
/// checkout the peer script sits in (`bench/` beside `scenarios/`), when there.
pub fn scenario_toml(script: &Path, scenario: &str) -> Option<PathBuf> {
    let path = Path::new(scenario);
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let repo = script
        .canonicalize()
        .ok()?
        .parent()?
        .parent()?
        .to_path_buf();
    let bundled = repo.join("scenarios").join(format!("{scenario}.toml"));
    bundled.is_file().then_some(bundled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape `bench/numpy_peer.py --json` writes (trimmed: the parser
    /// ignores what the report does not use).
    const SAMPLE: &str = r#"{
      "scenario": "paper-n5",
      "repeats": 5,
      "candidates": {"median_ms": 126.0, "min_ms": 120.0, "max_ms": 140.0,
                     "runs_ms": [126.0], "rows": 393660, "rows_per_s": 3124285.7},
      "table": {"median_ms": 9.5, "min_ms": 9.0, "max_ms": 10.0, "runs_ms": [9.5],
                "rows": 63, "candidates": 78732},
      "mlp_batch": {"median_ms": 129.0, "min_ms": 128.0, "max_ms": 131.0,
                    "runs_ms": [129.0], "rows": 393660, "rows_per_s": 3051627.9},
      "machine": {"cpus": 2, "arch": "x86_64", "python": "3.12.3",
                  "loadavg_before": [1.5, 1.2, 1.0], "loadavg_after": [1.7, 1.3, 1.0],
                  "numpy": "2.3.1", "blas": "scipy-openblas 0.3.29", "blas_threads": 2}
    }"#;

    #[test]
    fn the_peers_json_is_read() {
        let p = PeerFigures::parse(SAMPLE).expect("parses");
        assert_eq!(p.scenario, "paper-n5");
        assert_eq!(p.candidates.rows, 393_660);
        assert_eq!(p.mlp_batch.median_ms, 129.0);
        assert_eq!(p.table.rows, 63);
        assert_eq!(p.machine.loadavg_after, [1.7, 1.3, 1.0]);
        assert_eq!(p.blas_threads_label(), "2 BLAS threads");
        let err = PeerFigures::parse("{}").expect_err("not the peer's");
        assert!(format!("{err:#}").contains("numpy_peer.py"), "{err:#}");
    }

    #[test]
    fn a_peer_that_cannot_start_says_so() {
        let peer = PeerRun {
            script: PathBuf::from("/nonexistent/numpy_peer.py"),
            scenario_toml: None,
            repeats: 1,
            timeout: Duration::from_secs(30),
        };
        // Without python3 it cannot start; with it, the script is missing.
        let err = format!("{:#}", run(&peer).expect_err("no such script"));
        assert!(
            err.contains("cannot run python3") || err.contains("failed"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    #[test]
    fn bundled_names_map_to_the_checkouts_scenarios() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let script = repo.join("bench/numpy_peer.py");
        let toml = scenario_toml(&script, "paper-n5").expect("beside bench/");
        assert!(
            toml.ends_with("scenarios/paper-n5.toml"),
            "{}",
            toml.display()
        );
        assert_eq!(scenario_toml(&script, "no-such-scenario"), None);
        let file = repo.join("scenarios/paper-n2.toml");
        assert_eq!(
            scenario_toml(&script, file.to_str().expect("utf-8")),
            Some(file)
        );
    }
}
