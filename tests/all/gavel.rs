//! The public Gavel measurements (../shared/data/gavel, MIT) through
//! `scripts/gavel-to-mfsched.py` and mfsched: conversion, validation, and
//! cross-validation on real co-location data (docs/gavel.md).
//!
//! The data lives beside the checkout, never in it; without it (or without
//! python3) each test prints why and returns. CARGO_MANIFEST_DIR is
//! crates/mfsched, so the repository root is `../..` and the data
//! `../../../shared/data/gavel/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::process::{mfsched, stderr, stdout};

/// The documented v100 counts: 26 jobs at scale factor 1; 330 unordered pairs
/// measured, 24 of them a job with itself (one row each) and 306 of two jobs (two
/// rows each): 24 + 2 · 306 = 636 co-location rows; 2 · 26 = 52 solo rows.
const V100_PAIR_ROWS: usize = 636;
const V100_SOLO_ROWS: usize = 52;
const HEADER: &str = "format_version,scenario,vram_used_mib,utilization,a.variant,a.throughput,\
                      b.variant,b.throughput,x-pair,x-source";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn gavel_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/gavel/simulation_throughputs.json")
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// The data and python3 are there; otherwise prints why the test skips.
fn gavel_inputs(test: &str) -> Option<PathBuf> {
    let data = gavel_data();
    if !data.is_file() {
        eprintln!(
            "skipping {test}: {} is absent (the Gavel data lives in ../shared beside the checkout)",
            data.display()
        );
        return None;
    }
    match Command::new("python3").arg("--version").output() {
        Ok(o) if o.status.success() => Some(data),
        _ => {
            eprintln!("skipping {test}: python3 is not available");
            None
        }
    }
}

fn convert(data: &Path, gpu: &str, out: &Path) -> Output {
    Command::new("python3")
        .arg(repo_root().join("scripts/gavel-to-mfsched.py"))
        .arg("--data")
        .arg(data)
        .args(["--gpu", gpu, "--out"])
        .arg(out)
        .output()
        .expect("python3 runs the conversion script")
}

#[test]
fn gavel_conversion_writes_a_loadable_scenario_and_the_documented_profile_rows() {
    let test = "gavel_conversion_writes_a_loadable_scenario_and_the_documented_profile_rows";
    let Some(data) = gavel_inputs(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = convert(&data, "v100", dir.path());
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let summary = stdout(&out);
    assert_eq!(summary.trim().lines().count(), 1, "{summary}");
    assert!(
        summary.contains(&format!("26 jobs, {V100_PAIR_ROWS} pair rows")),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("{V100_SOLO_ROWS} solo rows")),
        "{summary}"
    );

    let toml = dir.path().join("gavel-v100.toml");
    let csv = dir.path().join("gavel-v100.csv");
    assert!(toml.is_file(), "no {}", toml.display());
    assert!(csv.is_file(), "no {}", csv.display());

    // The scenario loads: 26 variants, two slots.
    let show = mfsched(&["scenario", "show", path_str(&toml)]);
    assert!(show.status.success(), "{}", stderr(&show));
    let text = stdout(&show);
    assert!(text.contains("scenario  gavel-v100"), "{text}");
    assert!(text.contains("joint configurations  676"), "{text}");

    // The profile: the header, then co-location rows and solo rows.
    let body = std::fs::read_to_string(&csv).expect("read the profile");
    let mut lines = body.lines();
    assert_eq!(lines.next(), Some(HEADER));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 10), "a row without 10 cells");
    let solo = rows
        .iter()
        .filter(|r| r[4].is_empty() || r[6].is_empty())
        .count();
    assert_eq!(rows.len() - solo, V100_PAIR_ROWS);
    assert_eq!(solo, V100_SOLO_ROWS);
    for r in &rows {
        assert_eq!(r[0], "2");
        assert_eq!(r[1], "gavel-v100.toml");
        assert_eq!(r[9], "gavel v100");
        let util: f64 = r[3].parse().expect("utilization is a number");
        assert!((0.0..=1.0).contains(&util), "{r:?}");
        // A solo row leaves the idle model's variant and throughput empty.
        assert_eq!(r[4].is_empty(), r[5].is_empty(), "{r:?}");
        assert_eq!(r[6].is_empty(), r[7].is_empty(), "{r:?}");
        assert!(!(r[4].is_empty() && r[6].is_empty()), "{r:?}");
        // x-pair is the sorted pair of variants, the same on both orders.
        let mut pair: Vec<&str> = [r[4], r[6]].into_iter().filter(|v| !v.is_empty()).collect();
        pair.sort_unstable();
        assert_eq!(r[8], pair.join("|"), "{r:?}");
    }

    // Deterministic: a second run writes the same bytes.
    let again = tempfile::tempdir().expect("tempdir");
    let out2 = convert(&data, "v100", again.path());
    assert!(out2.status.success(), "{}", stderr(&out2));
    for name in ["gavel-v100.toml", "gavel-v100.csv"] {
        assert_eq!(
            std::fs::read(dir.path().join(name)).expect("first"),
            std::fs::read(again.path().join(name)).expect("second"),
            "{name} differs between two runs"
        );
    }

    // mfsched reads it: no workload column (one regime), solo rows apart.
    let check = mfsched(&[
        "data",
        "check",
        path_str(&csv),
        "--scenario",
        path_str(&toml),
    ]);
    assert!(
        check.status.success(),
        "{}{}",
        stdout(&check),
        stderr(&check)
    );
    let text = stdout(&check);
    assert!(
        text.contains(&format!("rows      {V100_PAIR_ROWS} co-location")),
        "{text}"
    );
    assert!(
        text.contains("solo      a 26 rows (26 configurations), b 26 rows (26 configurations)"),
        "{text}"
    );
}

/// Grouped cross-validation on the measured pairs, relative target: the
/// surrogate explains more of the slowdown than the own-configuration mean
/// (solo × the job's mean slowdown). The comparison with the linear field and
/// the other targets, over three seeds, is in docs/gavel.md.
#[test]
fn on_the_gavel_pairs_meanfield_explains_more_slowdown_than_the_own_configuration_mean() {
    let test =
        "on_the_gavel_pairs_meanfield_explains_more_slowdown_than_the_own_configuration_mean";
    let Some(data) = gavel_inputs(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = convert(&data, "v100", dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let cv = dir.path().join("cv");
    let out = mfsched(&[
        "surrogate",
        "cv",
        "--data",
        path_str(&dir.path().join("gavel-v100.csv")),
        "--scenario",
        path_str(&dir.path().join("gavel-v100.toml")),
        "--folds",
        "5",
        "--group-by",
        "x-pair",
        "--seeds",
        "1",
        "--targets",
        "relative",
        "--no-joint",
        "--out",
        path_str(&cv),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    println!("{}", stdout(&out));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cv.join("cv.json")).expect("cv.json"))
            .expect("cv.json is JSON");
    assert_eq!(report["report"]["rows"], V100_PAIR_ROWS);
    assert_eq!(
        report["report"]["groups"], 330,
        "one group per measured pair"
    );
    let slowdown_r2 = |method: &str| {
        report["report"]["results"]
            .as_array()
            .expect("results")
            .iter()
            .find(|r| r["method"] == method)
            .and_then(|r| r["overall"]["r2_relative"]["mean"].as_f64())
            .unwrap_or_else(|| panic!("no slowdown R² for {method}"))
    };
    let (meanfield, own) = (slowdown_r2("meanfield"), slowdown_r2("own-config-mean"));
    assert!(
        meanfield > own + 0.1,
        "MeanField {meanfield:.3} vs own-configuration mean {own:.3}"
    );
}

/// The CLI on foreign data: a grouped learning curve with the co-runner
/// fields and the pressure baseline, exported folds and out-of-fold
/// predictions; `train` with a grouped hold-out, each co-runner field and the
/// Joint MLP, each scored by `surrogate eval` on the slowdown, and the
/// co-runner bundles served to `decide`. Few epochs: this
/// checks the plumbing; docs/gavel.md has the measurement.
#[test]
fn on_the_gavel_pairs_the_cli_gives_learning_curves_exports_and_slowdown_scores() {
    let test = "on_the_gavel_pairs_the_cli_gives_learning_curves_exports_and_slowdown_scores";
    let Some(data) = gavel_inputs(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = convert(&data, "v100", dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = dir.path().join("gavel-v100.csv");
    let toml = dir.path().join("gavel-v100.toml");
    let (cv, export) = (dir.path().join("cv"), dir.path().join("export"));
    let out = mfsched(&[
        "surrogate",
        "cv",
        "--data",
        path_str(&csv),
        "--scenario",
        path_str(&toml),
        "--folds",
        "5",
        "--group-by",
        "x-pair",
        "--seeds",
        "1",
        "--targets",
        "relative",
        "--fields",
        "observed,co-runner-solo,co-runner-factors",
        "--train-sizes",
        "20,80",
        "--epochs",
        "20",
        "--export",
        path_str(&export),
        "--out",
        path_str(&cv),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Not a terminal: progress comes as plain lines.
    assert!(stderr(&out).contains("nets ("), "{}", stderr(&out));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cv.join("cv.json")).expect("cv.json"))
            .expect("cv.json is JSON");
    let results = report["report"]["results"].as_array().expect("results");
    let labels: Vec<String> = results
        .iter()
        .map(|r| format!("{}/{}", r["method"], r["field"]).replace('"', ""))
        .collect();
    for want in [
        "own-config-mean/observed",
        "pressure/observed",
        "linear-field/co-runner-solo",
        "meanfield/observed",
        "meanfield/co-runner-solo",
        "linear-field/co-runner-factors",
        "meanfield/co-runner-factors",
        "joint-mlp/observed",
    ] {
        assert!(labels.iter().any(|l| l == want), "{want} in {labels:?}");
    }
    let curve = report["report"]["learning_curve"]
        .as_array()
        .expect("curve");
    assert_eq!(
        curve.len(),
        2 * results.len(),
        "every method at n = 20 and 80"
    );
    let slowdown = |method: &str| {
        results
            .iter()
            .find(|r| r["method"] == method)
            .and_then(|r| r["overall"]["r2_relative"]["mean"].as_f64())
            .unwrap_or_else(|| panic!("no slowdown R² for {method}"))
    };
    assert!(
        slowdown("pressure") > slowdown("own-config-mean"),
        "the co-runner's factor explains slowdown the own mean cannot"
    );
    let linear_slowdown = |field: &str| {
        results
            .iter()
            .find(|r| r["method"] == "linear-field" && r["field"] == field)
            .and_then(|r| r["overall"]["r2_relative"]["mean"].as_f64())
            .unwrap_or_else(|| panic!("no slowdown R² for the linear field on {field}"))
    };
    assert!(
        linear_slowdown("co-runner-factors") > linear_slowdown("observed"),
        "the learnt co-runner factors say what the state cannot (no net: no epochs involved)"
    );
    assert!(cv.join("cv-curve.svg").is_file());

    // Folds: both orders of a pair in one fold; one prediction per row and model.
    let folds = std::fs::read_to_string(export.join("folds.csv")).expect("folds.csv");
    let mut fold_of_group = std::collections::BTreeMap::new();
    for line in folds.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        let fold = fold_of_group
            .entry(cells[2].to_string())
            .or_insert(cells[3]);
        assert_eq!(*fold, cells[3], "group {} straddles folds", cells[2]);
    }
    assert_eq!(folds.lines().count(), 1 + V100_PAIR_ROWS);
    assert_eq!(fold_of_group.len(), 330);
    let predictions =
        std::fs::read_to_string(export.join("predictions.csv")).expect("predictions.csv");
    assert_eq!(
        predictions.lines().count(),
        1 + results.len() * V100_PAIR_ROWS * 2
    );

    // train: grouped hold-out, each co-runner field; eval scores the slowdown.
    for (name, extra) in [
        ("solo-field", ["--field", "co-runner-solo"]),
        ("factors-field", ["--field", "co-runner-factors"]),
        ("joint", ["--model", "joint"]),
    ] {
        let bundle = dir.path().join(name);
        let mut args = vec![
            "train",
            "--data",
            path_str(&csv),
            "--scenario",
            path_str(&toml),
            "--out",
            path_str(&bundle),
            "--epochs",
            "20",
            "--group-by",
            "x-pair",
        ];
        args.extend(extra);
        let out = mfsched(&args);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        assert!(stdout(&out).contains("R² slowdown"), "{}", stdout(&out));
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(bundle.join("bundle.json")).expect("bundle.json"),
        )
        .expect("bundle.json is JSON");
        if name == "factors-field" {
            // A row per configuration of the model's 26 jobs, rank + 1 numbers each.
            let factors = meta["models"][1]["corunner_factors"]
                .as_array()
                .expect("corunner_factors");
            assert_eq!(factors.len(), 26);
            assert!(
                factors
                    .iter()
                    .all(|f| f.as_array().is_some_and(|f| f.len() == 3))
            );
        }
        let metrics = &meta["models"][0]["metrics"];
        assert!(metrics["r2_slowdown_holdout"].is_f64(), "{name}: {metrics}");
        assert!(metrics["mape_holdout"].is_f64(), "{name}: {metrics}");
        let out = mfsched(&[
            "surrogate",
            "eval",
            "--model",
            path_str(&bundle),
            "--data",
            path_str(&csv),
        ]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(
            text.contains("solo throughput (for the slowdown): the file's solo rows"),
            "{text}"
        );
        let mean_slowdown: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("mean"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name}: a mean line with the slowdown: {text}"));
        assert!(mean_slowdown.is_finite(), "{text}");
        // The scheduler serves the co-runner fields (on the CPU, the
        // co-runners of the running configuration); a Joint MLP is one clear
        // line.
        let out = mfsched(&[
            "decide",
            "--scenario",
            path_str(&toml),
            "--policy",
            "exact",
            "--models",
            path_str(&bundle),
        ]);
        if name == "joint" {
            assert!(
                !out.status.success(),
                "{name}: served a bundle it cannot compute"
            );
            assert!(
                stderr(&out).contains("cannot serve"),
                "{name}: {}",
                stderr(&out)
            );
        } else {
            assert!(out.status.success(), "{name}: {}", stderr(&out));
            assert!(
                stdout(&out).contains("outcome            accepted"),
                "{name}: {}",
                stdout(&out)
            );
        }
    }
}

#[test]
fn gavel_conversion_refuses_an_unknown_gpu_with_one_line_naming_the_known_ones() {
    let test = "gavel_conversion_refuses_an_unknown_gpu_with_one_line_naming_the_known_ones";
    let Some(data) = gavel_inputs(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = convert(&data, "a100", dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("unknown gpu 'a100' (known: k80, p100, v100)"),
        "{err}"
    );
    assert!(!dir.path().join("gavel-a100.csv").exists());
}
