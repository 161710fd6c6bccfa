//! A bounded fuzz pass over the readers of outside files: scenarios, profile
//! CSVs, model bundles and decision logs. Each target starts from a corpus
//! kept in the tree (tests/fixtures/fuzz/README.md says which files) and
//! applies seeded mutations (bit flips, cuts, splices, repeated stretches,
//! hostile numbers). Every case must be read or refused with an error: no
//! panic, no abort, no unbounded allocation (the limits of docs/limits.md
//! hold).
//!
//! Case `n` of a target is always the same input (its seed is `n`), so a
//! finding replays by number. A target runs the regressions found so far
//! (tests/fixtures/fuzz/regressions.txt: target and case number), then cases
//! 0, 1, 2, … for `MFSCHED_FUZZ_SECONDS` (default 10; at least
//! [`MIN_CASES`]), or exactly `MFSCHED_FUZZ_CASES` cases when that is set.
//! How many ran is printed: `cargo test fuzz_ -- --nocapture`.

use mfsched_rng::Rng;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The fewest mutated cases a target runs, however slow the machine.
const MIN_CASES: u64 = 100;

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

    fn done(&self, cases: u64, started: Instant) -> bool {
        match *self {
            Self::Cases(n) => cases >= n,
            Self::Time(t) => cases >= MIN_CASES && started.elapsed() >= t,
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

/// One mutation of `input`, chosen by `rng`.
fn mutate(input: &[u8], rng: &mut Rng, text: bool) -> Vec<u8> {
    let mut out = input.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        if out.is_empty() {
            out.push(b'x');
        }
        let len = out.len() as u64;
        let at = rng.below(len) as usize;
        match rng.below(if text { 6 } else { 5 }) {
            0 => out[at] ^= 1 << rng.below(8),
            1 => out.truncate(at),
            2 => {
                let end = (at + 1 + rng.below(64) as usize).min(out.len());
                let stretch = out[at..end].to_vec();
                for _ in 0..=rng.below(8) {
                    out.splice(at..at, stretch.iter().copied());
                }
            }
            3 => {
                let end = (at + rng.below(32) as usize).min(out.len());
                out.drain(at..end);
            }
            4 => out[at] = rng.below(256) as u8,
            _ => {
                // Replace the number at or after `at` with a hostile one.
                let Some(start) = out[at..].iter().position(u8::is_ascii_digit) else {
                    continue;
                };
                let start = at + start;
                let end = out[start..]
                    .iter()
                    .position(|b| !(b.is_ascii_digit() || *b == b'.'))
                    .map_or(out.len(), |e| start + e);
                let n = HOSTILE_NUMBERS[rng.below(HOSTILE_NUMBERS.len() as u64) as usize];
                out.splice(start..end, n.bytes());
            }
        }
    }
    out
}

/// Runs `read` on the corpus, the regressions of `target` and the mutated
/// cases [`Bound::from_env`] allows; returns (accepted, refused).
fn fuzz(target: &str, corpus: &[Vec<u8>], text: bool, read: impl Fn(&[u8]) -> bool) -> (u64, u64) {
    assert!(!corpus.is_empty(), "{target}: an empty corpus");
    let regressions: Vec<u64> = include_str!("../fixtures/fuzz/regressions.txt")
        .lines()
        .filter_map(|l| {
            let (t, case) = l.split_once(' ')?;
            (t == target).then(|| case.trim().parse().ok())?
        })
        .collect();
    let (mut accepted, mut refused) = (0, 0);
    let mut count = |ok: bool| if ok { accepted += 1 } else { refused += 1 };
    for input in corpus {
        count(read(input));
    }
    let run = |case: u64| {
        let mut rng = Rng::derive(case, 26);
        let seed = &corpus[rng.below(corpus.len() as u64) as usize];
        let input = mutate(seed, &mut rng, text);
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&input))).unwrap_or_else(
            |_| panic!("{target}: case {case} panicked (add `{target} {case}` to regressions.txt)"),
        )
    };
    for &case in &regressions {
        count(run(case));
    }
    let (bound, started) = (Bound::from_env(), Instant::now());
    let mut cases = 0;
    while !bound.done(cases, started) {
        count(run(cases));
        cases += 1;
    }
    println!(
        "fuzz {target}: {} corpus inputs, {} regressions, cases 0..{cases} in {:.1} s: {accepted} read, {refused} refused",
        corpus.len(),
        regressions.len(),
        started.elapsed().as_secs_f64()
    );
    (accepted, refused)
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
