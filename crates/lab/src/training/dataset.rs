//! Training matrices from profiles: one per predictor.
//!
//! A MeanField predictor for model i sees `[local features of λᵢ | state]` and
//! learns model i's throughput. The Joint-MLP baseline sees every model's local
//! features (the whole joint configuration) plus the state, so its input grows
//! with N; it is trained one net per output.

use mfsched_core::Problem;
use mfsched_core::Profile;
use mfsched_surrogate::{
    CorunnerTables, FieldFeatures, local_len, local_table, push_corunner_sums, push_field_state,
};

/// One predictor's training data: `rows × width` inputs (row-major), the
/// measured throughput, and the model's own configuration on each row (what a
/// target other than the absolute one needs to encode and decode).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelData {
    pub width: usize,
    pub x: Vec<f32>,
    pub y: Vec<f32>,
    pub configs: Vec<u32>,
}

impl ModelData {
    pub fn rows(&self) -> usize {
        self.y.len()
    }

    /// The rows at `indices`, in that order.
    pub fn subset(&self, indices: &[usize]) -> ModelData {
        let mut x = Vec::with_capacity(indices.len() * self.width);
        for &r in indices {
            x.extend_from_slice(&self.x[r * self.width..(r + 1) * self.width]);
        }
        ModelData {
            width: self.width,
            x,
            y: indices.iter().map(|&r| self.y[r]).collect(),
            configs: indices.iter().map(|&r| self.configs[r]).collect(),
        }
    }
}

/// Which inputs a predictor sees (one home: `features`, which bundles record).
pub use mfsched_surrogate::Layout;

/// One training matrix per model, rows in profile order, under the observed field.
pub fn build(problem: &Problem, profile: &Profile, layout: Layout) -> Vec<ModelData> {
    build_with(problem, profile, layout, FieldFeatures::Observed, None)
        .expect("the observed field reads every row")
}

/// As [`build`], under `field`: every row's state is followed by its
/// contention reading where the field has it (an error naming the first row
/// without one), then by the sums over the co-runners of what `tables` give
/// their configurations (`push_corunner_sums`; a co-runner field without its
/// tables is an error).
pub fn build_with(
    problem: &Problem,
    profile: &Profile,
    layout: Layout,
    field: FieldFeatures,
    tables: Option<&CorunnerTables>,
) -> anyhow::Result<Vec<ModelData>> {
    let corunners = match (field.has_corunner_tables(), tables) {
        (false, _) => None,
        (true, Some(t)) => Some(t),
        (true, None) => anyhow::bail!("the {field} field needs its co-runner tables"),
    };
    let sums = field.corunner_names().len();
    let tables: Vec<Vec<f32>> = problem.models.iter().map(local_table).collect();
    let local_lens: Vec<usize> = problem.models.iter().map(local_len).collect();
    let joint_local: usize = local_lens.iter().sum();
    let mut state = Vec::with_capacity(field.width());
    let mut out: Vec<ModelData> = local_lens
        .iter()
        .map(|&len| {
            let width = match layout {
                Layout::MeanField => len,
                Layout::Joint => joint_local,
            } + field.width();
            ModelData {
                width,
                x: Vec::with_capacity(profile.rows.len() * width),
                y: Vec::with_capacity(profile.rows.len()),
                configs: Vec::with_capacity(profile.rows.len()),
            }
        })
        .collect();
    let local = |m: usize, c: u32| {
        let len = local_lens[m];
        &tables[m][c as usize * len..(c as usize + 1) * len]
    };
    for (k, row) in profile.rows.iter().enumerate() {
        state.clear();
        push_field_state(problem, field, &row.state, &mut state)
            .map_err(|e| anyhow::anyhow!("co-location row {}: {e}", k + 1))?;
        for (i, data) in out.iter_mut().enumerate() {
            match layout {
                Layout::MeanField => data.x.extend_from_slice(local(i, row.joint[i])),
                Layout::Joint => {
                    for (m, &c) in row.joint.iter().enumerate() {
                        data.x.extend_from_slice(local(m, c));
                    }
                }
            }
            data.x.extend_from_slice(&state);
            if let Some(tables) = corunners {
                push_corunner_sums(tables, sums, i, &row.joint, &mut data.x);
            }
            data.y.push(row.throughput[i] as f32);
            data.configs.push(row.joint[i]);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::ProfileRow;
    use mfsched_core::load_scenario;
    use mfsched_core::{GpuState, WorkloadLevel};
    use mfsched_surrogate::{input_row, push_local, push_state};

    #[test]
    fn rows_are_the_feature_layout_and_targets() {
        let problem = load_scenario("paper-n2").expect("bundled").problem;
        let state = GpuState {
            workload: WorkloadLevel::Burst,
            vram_used_mib: 6144.0,
            utilization: 0.9,
            contention: None,
        };
        let profile = Profile {
            scenario: "paper-n2".into(),
            models: vec!["llama3b".into(), "yolo-a".into()],
            rows: vec![ProfileRow {
                joint: vec![5, 7],
                workload: WorkloadLevel::Burst,
                state,
                throughput: vec![321.0, 45.5],
            }],
            solo: vec![],
        };
        let mf = build(&problem, &profile, Layout::MeanField);
        assert_eq!(mf[0].x, input_row(&problem, 0, 5, &state));
        assert_eq!(mf[1].x, input_row(&problem, 1, 7, &state));
        assert_eq!((mf[0].y[0], mf[1].y[0]), (321.0, 45.5));
        let joint = build(&problem, &profile, Layout::Joint);
        let mut expected = Vec::new();
        push_local(&problem.models[0], 5, &mut expected);
        push_local(&problem.models[1], 7, &mut expected);
        push_state(&problem, &state, &mut expected);
        assert_eq!(joint[0].x, expected);
        assert_eq!(joint[1].x, expected);
        assert_eq!(joint[1].subset(&[0, 0]).rows(), 2);

        // The contention field: the reading follows the state, and a row
        // without one is an error naming it.
        let contention = FieldFeatures::Contention;
        let err = build_with(&problem, &profile, Layout::MeanField, contention, None)
            .expect_err("no reading");
        assert!(err.to_string().contains("co-location row 1"), "{err}");
        let mut measured = profile.clone();
        measured.rows[0].state.contention = Some(0.25);
        let mf =
            build_with(&problem, &measured, Layout::MeanField, contention, None).expect("read");
        let mut expected = input_row(&problem, 0, 5, &state);
        expected.push(0.25);
        assert_eq!(mf[0].x, expected);
        assert_eq!(mf[0].width, expected.len());
    }
}
