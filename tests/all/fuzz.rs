//! A bounded fuzz pass over the readers of outside files: scenarios, profile
//! CSVs, model bundles and decision logs. Each target starts from a corpus of
//! valid and invalid inputs kept in the tree (the fixtures, the bundled
//! scenarios, a shipped bundle, a log written here) and applies seeded
//! mutations (bit flips, cuts, splices, repeated stretches, hostile numbers).
//! Every case must be read or refused with an error: no panic, no abort, no
//! unbounded allocation (the limits of docs/limits.md hold). The cases are
//! deterministic (one seed per case); `MFSCHED_FUZZ_CASES` sets how many per
//! target (CI's bound: the default). The regressions found so far are replayed
//! first (tests/fixtures/fuzz/regressions.txt: target and case number).

use mfsched_rng::Rng;
use std::path::Path;

fn cases() -> u64 {
    std::env::var("MFSCHED_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
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

/// Runs `read` on the corpus, the regressions of `target` and `cases()`
/// mutations; returns (accepted, refused).
fn fuzz(target: &str, corpus: &[Vec<u8>], text: bool, read: impl Fn(&[u8]) -> bool) -> (u64, u64) {
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
    for case in regressions.into_iter().chain(0..cases()) {
        let mut rng = Rng::derive(case, 26);
        let seed = &corpus[rng.below(corpus.len() as u64) as usize];
        let input = mutate(seed, &mut rng, text);
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&input)))
            .unwrap_or_else(|_| {
                panic!("{target}: case {case} panicked (add it to regressions.txt)")
            });
        count(ok);
    }
    println!(
        "fuzz {target}: {} inputs, {accepted} read, {refused} refused",
        accepted + refused
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

fn fixtures(sub: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
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

#[test]
fn fuzz_the_bundle_reader() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bundle = mfsched_surrogate::embedded_bundle("paper-n2")
        .expect("shipped")
        .expect("parses");
    bundle.write(dir.path()).expect("write");
    let meta = std::fs::read(dir.path().join("bundle.json")).expect("meta");
    let weights = std::fs::read(dir.path().join("weights.safetensors")).expect("weights");
    let scenario = mfsched_core::load_scenario("paper-n2").expect("bundled");
    // The metadata as text, then the weights as bytes.
    fuzz("bundle-meta", std::slice::from_ref(&meta), true, |m| {
        mfsched_surrogate::Bundle::from_bytes(m, &weights)
            .and_then(|b| b.checked(&scenario))
            .is_ok()
    });
    fuzz(
        "bundle-weights",
        std::slice::from_ref(&weights),
        false,
        |w| {
            mfsched_surrogate::Bundle::from_bytes(&meta, w)
                .and_then(|b| b.checked(&scenario))
                .is_ok()
        },
    );
}

#[test]
fn fuzz_the_decision_log_reader() {
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
    let log = std::fs::read(dir.path().join("decisions.log")).expect("log");
    let (read, _) = fuzz("declog", &[log], false, |bytes| {
        mfsched_daemon::parse_decision_log(bytes).is_ok()
    });
    assert!(
        read > 0,
        "a mutated log mostly still reads (records skipped)"
    );
}
