//! A bounded fuzz pass over the readers of outside files: scenarios, profile
//! CSVs, model bundles and decision logs, run by proptest. Each target starts
//! from a corpus kept in the tree (tests/fixtures/fuzz/README.md says which
//! files); a case is one corpus input and one to four edits of it (bit flips,
//! cuts, repeated stretches, deletions, bytes, hostile numbers). Every case
//! must be read or refused with an error: no panic, no abort, no unbounded
//! allocation (the limits of docs/limits.md hold). A failing case shrinks to
//! a minimal one, and its seed is written to the target's
//! `tests/fixtures/fuzz/<target>.proptest-regressions`, replayed first on
//! every later run (commit it with the fix).
//!
//! The cases are seeded (batch k of a target always draws the same ones). A
//! target runs batches for `MFSCHED_FUZZ_SECONDS` (default 10; at least
//! [`MIN_CASES`] cases), or exactly `MFSCHED_FUZZ_CASES` cases when that is
//! set. How many ran is printed: `cargo test fuzz_ -- --nocapture`.

use mfsched_rng::Rng;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, FileFailurePersistence, RngAlgorithm, TestRng, TestRunner};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The fewest cases a target runs, however slow the machine.
const MIN_CASES: u64 = 100;

/// Cases per proptest run; a target runs batches until its bound.
const BATCH: u64 = 256;

/// When a target stops: after a fixed number of cases, or once its time is
/// spent (and [`MIN_CASES`] ran).
enum Bound {
    Cases(u64),
    Time(Duration),
}

impl Bound {
    fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok()?.parse::<u64>().ok();
        match var("MFSCHED_FUZZ_CASES") {
            Some(n) => Self::Cases(n),
            None => Self::Time(Duration::from_secs(
                var("MFSCHED_FUZZ_SECONDS").unwrap_or(10),
            )),
        }
    }

    /// How many cases the next batch runs (0: done).
    fn next_batch(&self, cases: u64, started: Instant) -> u64 {
        match *self {
            Self::Cases(n) => n.saturating_sub(cases).min(BATCH),
            Self::Time(t) if cases >= MIN_CASES && started.elapsed() >= t => 0,
            Self::Time(_) => BATCH,
        }
    }
}

/// Numbers a reader must not trust.
const HOSTILE_NUMBERS: &[&str] = &[
    "nan",
    "inf",
    "-inf",
    "-1",
    "-1000",
    "0",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "1e308",
    "-1.7e308",
    "99999999999999999999",
];

/// One edit of an input; positions are indices into it as it stands.
#[derive(Debug, Clone)]
enum Edit {
    FlipBit {
        at: Index,
        bit: u8,
    },
    Cut {
        at: Index,
    },
    /// The stretch of `len` bytes at `at`, repeated `times` more times.
    Repeat {
        at: Index,
        len: u8,
        times: u8,
    },
    Delete {
        at: Index,
        len: u8,
    },
    SetByte {
        at: Index,
        value: u8,
    },
    /// The number at or after `at` replaced with one of [`HOSTILE_NUMBERS`].
    HostileNumber {
        at: Index,
        which: Index,
    },
}

fn edit(text: bool) -> BoxedStrategy<Edit> {
    let bytes = prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Edit::FlipBit { at, bit }),
        any::<Index>().prop_map(|at| Edit::Cut { at }),
        (any::<Index>(), 1u8..64, 1u8..9).prop_map(|(at, len, times)| Edit::Repeat {
            at,
            len,
            times
        }),
        (any::<Index>(), 1u8..32).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<Index>(), any::<u8>()).prop_map(|(at, value)| Edit::SetByte { at, value }),
    ];
    if text {
        prop_oneof![
            5 => bytes,
            1 => (any::<Index>(), any::<Index>())
                .prop_map(|(at, which)| Edit::HostileNumber { at, which }),
        ]
        .boxed()
    } else {
        bytes.boxed()
    }
}

/// `input` with `edits` applied in order.
fn apply(input: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = input.to_vec();
    for e in edits {
        if out.is_empty() {
            out.push(b'x');
        }
        let len = out.len();
        match e {
            Edit::FlipBit { at, bit } => out[at.index(len)] ^= 1 << bit,
            Edit::Cut { at } => out.truncate(at.index(len)),
            Edit::Repeat { at, len: n, times } => {
                let at = at.index(len);
                let stretch = out[at..(at + usize::from(*n)).min(len)].to_vec();
                for _ in 0..*times {
                    out.splice(at..at, stretch.iter().copied());
                }
            }
            Edit::Delete { at, len: n } => {
                let at = at.index(len);
                out.drain(at..(at + usize::from(*n)).min(len));
            }
            Edit::SetByte { at, value } => out[at.index(len)] = *value,
            Edit::HostileNumber { at, which } => {
                let at = at.index(len);
                let Some(start) = out[at..].iter().position(u8::is_ascii_digit) else {
                    continue;
                };
                let start = at + start;
                let end = out[start..]
                    .iter()
                    .position(|b| !(b.is_ascii_digit() || *b == b'.'))
                    .map_or(out.len(), |e| start + e);
                let n = HOSTILE_NUMBERS[which.index(HOSTILE_NUMBERS.len())];
                out.splice(start..end, n.bytes());
            }
        }
    }
    out
}

/// Batch `batch` of `target`'s seed: the same cases on every run.
fn seed(target: &str, batch: u64) -> [u8; 32] {
    // FNV-1a of the target's name picks its stream.
    let stream = target.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut rng = Rng::derive(batch, stream);
    let mut seed = [0u8; 32];
    for chunk in seed.chunks_exact_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    seed
}

/// Runs `read` on the corpus, then on edited corpus inputs in batches until
/// [`Bound::from_env`]'s bound (the target's persisted failures first in
/// each); returns (accepted, refused). A panic in `read` fails the test with
/// the minimal input proptest shrank it to.
fn fuzz(target: &str, corpus: &[Vec<u8>], text: bool, read: impl Fn(&[u8]) -> bool) -> (u64, u64) {
    assert!(!corpus.is_empty(), "{target}: an empty corpus");
    let (accepted, refused) = (Cell::new(0u64), Cell::new(0u64));
    let count = |ok: bool| {
        let c = if ok { &accepted } else { &refused };
        c.set(c.get() + 1);
    };
    for input in corpus {
        count(read(input));
    }
    let regressions: &'static str = Box::leak(
        fixtures(&format!("fuzz/{target}.proptest-regressions"))
            .to_str()
            .expect("a UTF-8 path")
            .to_owned()
            .into_boxed_str(),
    );
    let strategy = (any::<Index>(), prop::collection::vec(edit(text), 1..=4));
    let (bound, started) = (Bound::from_env(), Instant::now());
    let (mut cases, mut batch) = (0, 0);
    loop {
        let n = bound.next_batch(cases, started);
        if n == 0 {
            break;
        }
        let mut config = Config::with_cases(n as u32);
        config.failure_persistence = Some(Box::new(FileFailurePersistence::Direct(regressions)));
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed(target, batch));
        let mut runner = TestRunner::new_with_rng(config, rng);
        let result = runner.run(&strategy, |(which, edits)| {
            count(read(&apply(&corpus[which.index(corpus.len())], &edits)));
            Ok(())
        });
        if let Err(e) = result {
            panic!("{target}, batch {batch}: {e}");
        }
        cases += n;
        batch += 1;
    }
    println!(
        "fuzz {target}: {} corpus inputs, {cases} cases ({batch} batches) in {:.1} s: {} read, {} refused",
        corpus.len(),
        started.elapsed().as_secs_f64(),
        accepted.get(),
        refused.get()
    );
    (accepted.get(), refused.get())
}

fn files(dir: &Path, ext: &str) -> Vec<Vec<u8>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .expect("corpus dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| std::fs::read(p).expect("corpus file"))
        .collect()
}

fn fixtures(sub: &str) -> PathBuf {
    crate::common::workspace_root()
        .join("tests/fixtures")
        .join(sub)
}

#[test]
fn fuzz_the_scenario_reader() {
    let mut corpus = files(&fixtures("scenarios"), "toml");
    corpus.extend(
        mfsched_core::BUNDLED_SCENARIOS
            .iter()
            .map(|(_, t)| t.as_bytes().to_vec()),
    );
    let (read, _) = fuzz("scenario", &corpus, true, |bytes| {
        std::str::from_utf8(bytes)
            .is_ok_and(|text| mfsched_core::parse_scenario(text, mfsched_core::BUNDLED_ZOO).is_ok())
    });
    assert!(read > 0, "some mutations still parse");
}

#[test]
fn fuzz_the_profile_reader() {
    let problem = mfsched_core::load_scenario("paper-n2")
        .expect("bundled")
        .problem;
    let corpus = files(&fixtures("profiles"), "csv");
    let (read, _) = fuzz("profile", &corpus, true, |bytes| {
        mfsched_core::read_profile_bytes(bytes, Path::new("fuzz.csv"), &problem)
            .map_err(|e| {
                let line = e.to_string();
                assert_eq!(line.lines().count(), 1, "one error line: {line:?}");
            })
            .is_ok()
    });
    assert!(read > 0);
}

/// Every bundle directory under `root` (those holding a `bundle.json`):
/// its metadata and weights.
fn bundles(root: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("bundle dir")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|d| d.join("bundle.json").is_file())
        .collect();
    dirs.sort();
    dirs.iter()
        .map(|d| {
            let read = |f: &str| std::fs::read(d.join(f)).expect("a bundle file");
            (read("bundle.json"), read("weights.safetensors"))
        })
        .collect()
}

/// A bundle read as `surrogate eval --model` reads one: parsed, then checked
/// against the scenario it names (or embeds).
fn read_bundle(meta: &[u8], weights: &[u8]) -> bool {
    mfsched_surrogate::Bundle::from_bytes(meta, weights)
        .and_then(|b| {
            let scenario = b.scenario()?;
            b.checked(&scenario)
        })
        .is_ok()
}

#[test]
fn fuzz_the_bundle_reader() {
    // The shipped bundles and the broken ones the CLI tests use.
    let mut corpus = bundles(&crate::common::workspace_root().join("models"));
    corpus.extend(bundles(&fixtures("bundles")));
    let (metas, weights): (Vec<_>, Vec<_>) = corpus.iter().cloned().unzip();
    // A mutated metadata file is read with the weights of the shipped bundle
    // for the scenario it still names (else the first), and the other way
    // round: so most cases get past the first check.
    let weights_for = |meta: &[u8]| {
        let named = serde_json::from_slice::<serde_json::Value>(meta)
            .ok()
            .and_then(|m| m["scenario"].as_str().map(str::to_owned));
        corpus
            .iter()
            .find(|(m, _)| {
                serde_json::from_slice::<serde_json::Value>(m)
                    .is_ok_and(|m| named.as_deref().is_some_and(|n| m["scenario"] == n))
            })
            .map_or(&corpus[0].1, |(_, w)| w)
    };
    let (read, _) = fuzz("bundle-meta", &metas, true, |m| {
        read_bundle(m, weights_for(m))
    });
    assert!(read > 0, "some mutated metadata still reads");
    let (read, _) = fuzz("bundle-weights", &weights, false, |w| {
        corpus
            .iter()
            .find(|(_, cw)| cw.len() == w.len())
            .is_some_and(|(m, _)| read_bundle(m, w))
    });
    assert!(read > 0, "some mutated weights still read");
}

#[test]
fn fuzz_the_decision_log_reader() {
    // The logs kept in the tree (written by earlier builds: a reader must
    // take old logs) and one this build writes now.
    let mut corpus = files(&fixtures("fuzz/corpus/declog"), "log");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = crate::common::daemon_config(dir.path(), "paper-n3", 20, "active = \"hold\"", "");
    let out = crate::common::process::mfsched(&[
        "run",
        "--config",
        config.to_str().expect("utf-8"),
        "--max-ticks",
        "6",
    ]);
    assert!(
        out.status.success(),
        "{}",
        crate::common::process::stderr(&out)
    );
    corpus.push(std::fs::read(dir.path().join("decisions.log")).expect("log"));
    for (i, log) in corpus.iter().enumerate() {
        let read = mfsched_daemon::parse_decision_log(log).expect("a corpus log reads");
        assert!(!read.records.is_empty(), "corpus log {i} holds records");
    }
    let (read, _) = fuzz("declog", &corpus, false, |bytes| {
        mfsched_daemon::parse_decision_log(bytes).is_ok()
    });
    assert!(
        read > 0,
        "a mutated log mostly still reads (records skipped)"
    );
}
