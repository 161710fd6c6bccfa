//! Profiling runs on the simulator: every point of a sampling plan measured,
//! `repeats` measurements averaged per row.

use anyhow::Result;
use mfsched_core::Problem;
use mfsched_core::{Profile, ProfileRow, SamplingPlan};

use crate::sim::Simulator;

/// Measures every point of `plan` on the simulator, `repeats` measurements averaged
/// per row. `progress(done, total)` is called after each row.
pub fn run(
    sim: &mut Simulator,
    problem: &Problem,
    scenario: &str,
    plan: &SamplingPlan,
    repeats: u32,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Profile> {
    let points = plan.points(problem, seed)?;
    let total = points.len();
    let mut rows = Vec::with_capacity(total);
    for (done, (joint, workload)) in points.into_iter().enumerate() {
        let m = sim.measure(&joint, workload, repeats);
        rows.push(ProfileRow {
            joint,
            workload,
            state: m.state,
            throughput: m.throughput,
        });
        progress(done + 1, total);
    }
    Ok(Profile {
        scenario: scenario.to_string(),
        models: problem.models.iter().map(|m| m.name.clone()).collect(),
        rows,
        solo: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::DEFAULT_PROFILE_REPEATS;
    use mfsched_core::load_scenario;
    use mfsched_core::{GpuState, WorkloadLevel};

    fn paper_n2_profile(seed: u64) -> (Problem, Profile) {
        let problem = load_scenario("paper-n2").expect("bundled").problem;
        let mut sim = Simulator::new(&problem, seed).expect("physics");
        let profile = run(
            &mut sim,
            &problem,
            "paper-n2",
            &SamplingPlan::for_problem(&problem, None),
            DEFAULT_PROFILE_REPEATS,
            seed,
            &mut |_, _| {},
        )
        .expect("profile");
        (problem, profile)
    }

    #[test]
    fn paper_n2_profiles_to_the_published_648_rows() {
        let (_, profile) = paper_n2_profile(1);
        assert_eq!(profile.rows.len(), 648);
        for w in WorkloadLevel::ALL {
            assert_eq!(profile.rows.iter().filter(|r| r.workload == w).count(), 162);
        }
        assert_eq!(profile.models, ["llama3b", "yolo-a"]);
    }

    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        let row = |t: f64| ProfileRow {
            joint: vec![0],
            workload: WorkloadLevel::Low,
            state: GpuState {
                workload: WorkloadLevel::Low,
                vram_used_mib: 0.0,
                utilization: 0.0,
                contention: None,
            },
            throughput: vec![t],
        };
        let profile = Profile {
            scenario: "x".into(),
            models: vec!["m".into()],
            rows: [40.0, 10.0, 30.0, 20.0, 50.0].map(row).to_vec(),
            solo: vec![],
        };
        assert_eq!(profile.throughput_quantile(0, 0.0), 10.0);
        assert_eq!(profile.throughput_quantile(0, 0.25), 20.0);
        assert_eq!(profile.throughput_quantile(0, 0.5), 30.0);
        assert_eq!(profile.throughput_quantile(0, 0.625), 35.0);
        assert_eq!(profile.throughput_quantile(0, 1.0), 50.0);
        let empty = Profile {
            rows: vec![],
            ..profile
        };
        assert!(empty.throughput_quantile(0, 0.25).is_nan());
    }

    #[test]
    fn throughput_ranges_are_per_variant() {
        let (problem, profile) = paper_n2_profile(2);
        let ranges = profile.throughput_ranges(&problem);
        assert_eq!(ranges.len(), 2);
        assert_eq!(ranges[0].len(), 2, "llama3b: fp16, awq");
        assert_eq!(ranges[1].len(), 3, "yolo-a: n, s, m");
        for (i, model) in problem.models.iter().enumerate() {
            for (v, range) in ranges[i].iter().enumerate() {
                let values: Vec<f64> = profile
                    .rows
                    .iter()
                    .filter(|r| model.configs[r.joint[i] as usize].variant == v)
                    .map(|r| r.throughput[i])
                    .collect();
                assert_eq!(
                    range.min,
                    values.iter().copied().fold(f64::INFINITY, f64::min)
                );
                assert_eq!(range.max, values.iter().copied().fold(0.0, f64::max));
                assert!(range.min < range.max);
            }
        }
        // YOLO11n is faster than YOLO11m in every sense.
        assert!(ranges[1][0].max > ranges[1][2].max);
    }

    #[test]
    fn write_then_read_gives_the_same_profile() {
        for (name, samples) in [("paper-n2", None), ("paper-n4", Some(40))] {
            let problem = load_scenario(name).expect("bundled").problem;
            let mut sim = Simulator::new(&problem, 4).expect("physics");
            let plan = SamplingPlan::for_problem(&problem, samples);
            let profile = run(
                &mut sim,
                &problem,
                name,
                &plan,
                DEFAULT_PROFILE_REPEATS,
                4,
                &mut |_, _| {},
            )
            .expect("profile");
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("p.csv");
            mfsched_core::write_profile(&profile, &problem, &path).expect("write");
            let back = mfsched_core::read_profile(&path, &problem).expect("read back");
            assert_eq!(back, profile, "{name}");
            // Only the file itself is left: the temporary was renamed.
            assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1);
        }
    }
}
