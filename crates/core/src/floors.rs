//! Floors that hold under the surrogate's error: split-conformal margins.
//!
//! A decision enforces each model's SLA floor on a prediction. A point
//! prediction that is right on average misses the floor whenever the model
//! runs slower than predicted, which a surrogate with a slowdown R² of 0.7 does
//! often. A bundle therefore keeps, per model, the ratio measured / predicted
//! throughput on each of its held-out rows (the nets it ships never saw them).
//! For rows exchangeable with those, the k-th smallest of n such ratios with
//! k = ⌊α(n + 1)⌋, q̂, bounds a new row's ratio from below with probability at
//! least 1 − α (split conformal prediction, one-sided). A decision that keeps
//! `predicted · q̂ ≥ floor`, i.e. enforces `floor / q̂` on the prediction,
//! then misses the declared floor on a measurement in at most a share α of
//! cases. Under the relative target the ratio is the same on the slowdown: the
//! solo throughput divides the measurement and the prediction alike.
//!
//! Measured throughput is what the floors are promised on, so it is what a
//! miss is counted against ([`Floors::misses`]); the raised floors are only
//! what decisions are checked with ([`Floors::enforced`]).

use crate::domain::Problem;
use serde::{Deserialize, Serialize};

/// The miss rate α a daemon enforces its floors at unless configured.
pub const DEFAULT_MISS_RATE: f64 = 0.05;

/// A configured miss rate as margins are taken at it: `None` for 0 (floors
/// on the point prediction), `Some(α)` for α in (0, 0.5]; anything else is
/// refused with what to use. The one check every command and the daemon
/// apply to a miss rate.
pub fn miss_rate(value: f64) -> Result<Option<f64>, String> {
    if !(value.is_finite() && (0.0..=0.5).contains(&value)) {
        return Err("use a share in [0, 0.5] (0: floors on the point prediction)".to_owned());
    }
    Ok((value > 0.0).then_some(value))
}

/// The lowest lower-bound ratio a margin uses. A held-out row measured near 0
/// would otherwise raise its floor without bound (a floor no configuration
/// reaches stops every decision): below this the margin is capped, and says
/// so ([`FloorMargin::capped`]).
pub const MIN_LOWER_RATIO: f64 = 0.1;

/// What a tick does when a model's floor is above every prediction of its
/// configurations at the tick's state (no decision can meet it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutOfReach {
    /// Every decision is refused for that floor, so the last valid
    /// configuration keeps running, however far below the floor it is
    /// predicted: the strict reading of a floor.
    #[default]
    Keep,
    /// The floor is held at the edge of the model's reach for the tick
    /// ([`within_reach`]): its decisions give that model a configuration
    /// within [`REACH_BAND`] of its highest predicted throughput (the nearest
    /// to its floor) and meet every other floor. With a noisy surrogate and
    /// margins, "keep" freezes whatever ran when the floor went out of reach.
    BestEffort,
}

impl OutOfReach {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::BestEffort => "best-effort",
        }
    }
}

/// The share under a model's highest prediction down to which a floor at
/// the edge of its reach is held. Predictions that close to the best are
/// within any surrogate's error of it, and the band keeps the floor a tick
/// decides with continuous in the state: held exactly at the best prediction,
/// a floor just out of reach would let that one configuration pass and a floor
/// just within reach every configuration above it, and a state that moves
/// across the edge (a restarted server's readings do) would flip the decision
/// between them every tick (on the rig at N = 3, `gemma` was restarted 67
/// times in 113 ticks).
pub const REACH_BAND: f64 = 0.05;

/// The share under a model's highest prediction down to which the
/// configuration it runs stays allowed while its floor is held at the edge of
/// its reach: a hysteresis of twice [`REACH_BAND`]. A configuration that
/// enters at the edge changes the state it is predicted at (its own
/// footprint, the field), and on the rig at N = 3 `conv` medium, predicted
/// within 0.1 % of the edge, left and re-entered 16 times in one run as the
/// edge moved by less than that; held with a floor of one band, the next
/// tick's prediction decides whether it stays, not the band's edge.
pub const REACH_KEEP_BAND: f64 = 2.0 * REACH_BAND;

/// Under [`OutOfReach::BestEffort`], the floors a tick decides with: each of
/// `floors` held at `(1 − REACH_BAND)` times its model's highest finite
/// prediction in `table` (every model's configurations at the tick's state,
/// laid out by [`crate::table_offsets`]) where that is lower: every floor out
/// of reach, and those within [`REACH_BAND`] of its edge; and the models so
/// held. A held model's `running` configuration (its index in the model's
/// grid) predicted under that edge but within [`REACH_KEEP_BAND`] of the
/// highest holds the floor at its own prediction instead, so it may stay. A
/// floor well within reach is unchanged, and a model with no finite
/// prediction keeps its floor.
pub fn within_reach(
    floors: &[f64],
    table: &[f32],
    offsets: &[usize],
    running: &[u32],
) -> (Vec<f64>, Vec<usize>) {
    let mut held = Vec::new();
    let within = floors
        .iter()
        .enumerate()
        .map(|(m, &floor)| {
            let predictions = offsets
                .get(m..m + 2)
                .and_then(|r| table.get(r[0]..r[1]))
                .unwrap_or_default();
            let reach = predictions
                .iter()
                .filter(|t| t.is_finite())
                .map(|&t| f64::from(t))
                .fold(None, |best: Option<f64>, t| {
                    Some(best.map_or(t, |b| b.max(t)))
                });
            let Some(reach) = reach else {
                return floor;
            };
            let edge = reach * (1.0 - REACH_BAND);
            if edge >= floor {
                return floor;
            }
            held.push(m);
            let incumbent = running
                .get(m)
                .and_then(|&c| predictions.get(c as usize))
                .map(|&t| f64::from(t))
                .filter(|t| t.is_finite());
            match incumbent {
                Some(kept) if kept < edge && kept >= reach * (1.0 - REACH_KEEP_BAND) => kept,
                _ => edge,
            }
        })
        .collect();
    (within, held)
}

/// The joint spaces up to which [`met_together`] predicts every
/// configuration within the card's memory; a larger one is walked.
pub const JOINT_SEARCH_MAX: u64 = 4096;

/// Under [`OutOfReach::BestEffort`] and a field in which a model's prediction
/// depends on the others' configurations (the candidate-aware field):
/// `floors` each within its own model's reach ([`within_reach`], the others
/// as they run) need not be met together, and a tick whose floors no joint
/// configuration meets refuses every decision and keeps the last valid one
/// (on the real-server rig at N = 3, the active policy's decision in 94 % of
/// ticks). This looks for a joint configuration within the card's memory
/// that meets them together: first among those one model's configuration
/// away from `problem.current`, then among all of them where the joint space
/// has at most [`JOINT_SEARCH_MAX`], else by walking, one model's
/// configuration at a time, to the one that misses the floors least (the
/// least sum of relative shortfalls; staying wins ties), at most one step
/// per model. `predict` gives every model's predictions (a row each) of
/// joint candidates. Where none is found, each floor missed by the
/// configuration that misses them least is held at (1 − [`REACH_BAND`])
/// times its prediction there, as [`within_reach`] holds a floor at its
/// model's edge, so at least that configuration meets the floors the tick
/// decides with. A walk is not a search: it can end short (two models that
/// must move together) while a configuration further away meets every
/// floor, and then holds those floors lower than they had to be. Returns
/// the floors and the models so held.
pub fn met_together<E>(
    problem: &Problem,
    floors: &[f64],
    mut predict: impl FnMut(&[u64]) -> Result<Vec<f32>, E>,
) -> Result<(Vec<f64>, Vec<usize>), E> {
    let models = problem.models.len();
    let unchanged = (floors.to_vec(), Vec::new());
    if models == 0 || floors.len() != models {
        return Ok(unchanged);
    }
    let mut least = least_missed(
        problem,
        floors,
        one_step(problem, &problem.current),
        &mut predict,
    )?;
    if least.as_ref().is_some_and(|l| l.missed > 0.0) {
        if problem.space().size() <= JOINT_SEARCH_MAX {
            let mut every = vec![problem.current.clone()];
            problem.for_each_feasible(|c| {
                if c != problem.current.as_slice() {
                    every.push(c.to_vec());
                }
            });
            least = least_missed(problem, floors, every, &mut predict)?;
        } else {
            // At most one step per model, the first taken above.
            for _ in 1..models {
                let Some(here) = least.take() else {
                    break;
                };
                if here.missed == 0.0 {
                    least = Some(here);
                    break;
                }
                let step = one_step(problem, &here.config);
                match least_missed(problem, floors, step, &mut predict)? {
                    Some(next) if next.missed < here.missed => least = Some(next),
                    _ => {
                        least = Some(here);
                        break;
                    }
                }
            }
        }
    }
    let Some(Least { missed, row, .. }) = least else {
        return Ok(unchanged);
    };
    if missed == 0.0 {
        return Ok(unchanged);
    }
    let mut held = Vec::new();
    let within = floors
        .iter()
        .zip(&row)
        .enumerate()
        .map(|(m, (&floor, &t))| {
            let t = f64::from(t);
            if t >= floor {
                return floor;
            }
            held.push(m);
            t * (1.0 - REACH_BAND)
        })
        .collect();
    Ok((within, held))
}

/// The joint configuration of [`met_together`]'s candidates that misses the
/// floors least, its predictions and how far it misses.
struct Least {
    missed: f64,
    row: Vec<f32>,
    config: Vec<u32>,
}

/// `at`, then each configuration one model's configuration away from it.
fn one_step(problem: &Problem, at: &[u32]) -> Vec<Vec<u32>> {
    let mut steps = vec![at.to_vec()];
    for (m, model) in problem.models.iter().enumerate() {
        for c in (0..model.grid_size() as u32).filter(|&c| c != at[m]) {
            let mut next = at.to_vec();
            next[m] = c;
            steps.push(next);
        }
    }
    steps
}

/// Of `configs` within the card's memory, the first that misses `floors`
/// least, as `predict` predicts them.
fn least_missed<E>(
    problem: &Problem,
    floors: &[f64],
    configs: Vec<Vec<u32>>,
    predict: &mut impl FnMut(&[u64]) -> Result<Vec<f32>, E>,
) -> Result<Option<Least>, E> {
    let space = problem.space();
    let (configs, indices): (Vec<Vec<u32>>, Vec<u64>) = configs
        .into_iter()
        .filter(|c| problem.check_feasible(c).is_ok())
        .filter_map(|c| space.index(&c).map(|index| (c, index)))
        .unzip();
    let rows = predict(&indices)?;
    Ok(rows
        .chunks_exact(problem.models.len())
        .zip(configs)
        .filter_map(|(row, config)| shortfall(floors, row).map(|missed| (missed, row, config)))
        .fold(
            None,
            |best: Option<Least>, (missed, row, config)| match best {
                Some(b) if b.missed <= missed => Some(b),
                _ => Some(Least {
                    missed,
                    row: row.to_vec(),
                    config,
                }),
            },
        ))
}

/// The sum of a row's relative shortfalls under `floors` (0 where it meets
/// every one), `None` when a prediction is not finite.
fn shortfall(floors: &[f64], row: &[f32]) -> Option<f64> {
    row.iter().all(|t| t.is_finite()).then(|| {
        row.iter()
            .zip(floors)
            .filter(|&(_, &floor)| floor > 0.0)
            .map(|(&t, &floor)| ((floor - f64::from(t)) / floor).max(0.0))
            .sum()
    })
}

/// One model's margin: its floor is enforced on the prediction multiplied by
/// `ratio`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FloorMargin {
    /// q̂ in (0, 1]: never above 1, so a surrogate that underpredicts keeps its
    /// floor where it is declared rather than lowering it.
    pub ratio: f64,
    /// The held-out rows q̂ was taken from.
    pub rows: usize,
    /// Fewer than 1/α − 1 rows: no order statistic gives the guarantee, and the
    /// smallest ratio is used.
    pub short: bool,
    /// q̂ was below [`MIN_LOWER_RATIO`] and was raised to it.
    pub capped: bool,
}

impl FloorMargin {
    /// The split-conformal lower ratio of `ratios` (measured / predicted, any
    /// order; non-finite values count as 0, a miss) at miss rate `miss_rate`
    /// in (0, 1). `None` without a ratio.
    pub fn conformal(ratios: &[f32], miss_rate: f64) -> Option<Self> {
        if ratios.is_empty() || !(miss_rate > 0.0 && miss_rate < 1.0) {
            return None;
        }
        let mut sorted: Vec<f64> = ratios
            .iter()
            .map(|&r| {
                if r.is_finite() {
                    f64::from(r).max(0.0)
                } else {
                    0.0
                }
            })
            .collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let k = (miss_rate * (n + 1) as f64).floor() as usize;
        let q = sorted[k.clamp(1, n) - 1];
        Some(Self {
            ratio: q.clamp(MIN_LOWER_RATIO, 1.0),
            rows: n,
            short: k == 0,
            capped: q < MIN_LOWER_RATIO,
        })
    }

    /// What the floor is multiplied by on the prediction it is enforced on.
    pub fn factor(&self) -> f64 {
        1.0 / self.ratio
    }
}

/// Every model's floor as declared and as decisions enforce it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Floors {
    /// Per model, the floor the scenario (or the bundle's profile) sets: what
    /// measured throughput is held to.
    pub declared: Vec<f64>,
    /// Per model, the floor decisions are checked with: the declared one
    /// divided by its margin's ratio.
    enforced: Vec<f64>,
    /// The miss rate the margins are taken at; `None`: floors enforced on the
    /// point prediction.
    pub miss_rate: Option<f64>,
    /// Per model; `None` where no margin applies (margins off, or the bundle
    /// holds no held-out ratios for the model).
    pub margins: Vec<Option<FloorMargin>>,
    /// What a tick does when a floor is out of every configuration's reach.
    pub out_of_reach: OutOfReach,
}

impl Floors {
    /// Floors enforced on the point prediction.
    pub fn point(declared: Vec<f64>) -> Self {
        let margins = vec![None; declared.len()];
        Self {
            enforced: declared.clone(),
            declared,
            miss_rate: None,
            margins,
            out_of_reach: OutOfReach::Keep,
        }
    }

    fn with_margins(
        declared: Vec<f64>,
        miss_rate: Option<f64>,
        margins: Vec<Option<FloorMargin>>,
    ) -> Self {
        let enforced = declared
            .iter()
            .zip(&margins)
            .map(|(&f, m)| m.map_or(f, |m| f / m.ratio))
            .collect();
        Self {
            declared,
            enforced,
            miss_rate,
            margins,
            out_of_reach: OutOfReach::Keep,
        }
    }

    /// Floors enforced on the split-conformal lower bound at `miss_rate` from
    /// each model's held-out ratios (`held_out[i]`, `None` where the bundle
    /// has none: that model's floor stays on the point prediction).
    pub fn conformal(declared: Vec<f64>, held_out: &[Option<Vec<f32>>], miss_rate: f64) -> Self {
        let margins = (0..declared.len())
            .map(|i| {
                held_out
                    .get(i)
                    .and_then(Option::as_ref)
                    .and_then(|r| FloorMargin::conformal(r, miss_rate))
            })
            .collect();
        Self::with_margins(declared, Some(miss_rate), margins)
    }

    /// Floors as a decision log recorded them: the enforced floors exactly
    /// as recorded where one is a finite number at or above its declared
    /// floor (else the declared one), each margin the ratio of the two.
    pub fn as_recorded(declared: Vec<f64>, enforced: &[f64], miss_rate: Option<f64>) -> Self {
        let (enforced, margins) = declared
            .iter()
            .enumerate()
            .map(|(i, &d)| match enforced.get(i) {
                Some(&e) if e.is_finite() && d > 0.0 && e > d => (
                    e,
                    Some(FloorMargin {
                        ratio: d / e,
                        rows: 0,
                        short: false,
                        capped: false,
                    }),
                ),
                _ => (d, None),
            })
            .unzip();
        Self {
            declared,
            enforced,
            miss_rate,
            margins,
            out_of_reach: OutOfReach::Keep,
        }
    }

    /// These floors, held at a model's reach where out of it (`BestEffort`) or not.
    pub fn with_out_of_reach(mut self, out_of_reach: OutOfReach) -> Self {
        self.out_of_reach = out_of_reach;
        self
    }

    /// How decisions enforce these floors, for reports: "conformal, α 0.05"
    /// or "on the point prediction".
    pub fn label(&self) -> String {
        let enforced = self.miss_rate.map_or_else(
            || "on the point prediction".to_owned(),
            |a| format!("conformal, α {a}"),
        );
        match self.out_of_reach {
            OutOfReach::Keep => enforced,
            OutOfReach::BestEffort => format!("{enforced}, best effort out of reach"),
        }
    }

    /// The floors decisions are checked with: each declared floor divided by
    /// its margin's ratio.
    pub fn enforced(&self) -> &[f64] {
        &self.enforced
    }

    /// The models whose measured throughput (`None`: not measured) is under
    /// their declared floor.
    pub fn misses(&self, measured: &[Option<f64>]) -> Vec<usize> {
        self.declared
            .iter()
            .zip(measured)
            .enumerate()
            .filter(|(_, (floor, t))| t.is_some_and(|t| t < **floor))
            .map(|(i, _)| i)
            .collect()
    }

    /// The names of the models a margin was asked for but cannot be given to
    /// (the bundle holds no held-out ratios for them), comma-joined; `None`
    /// when there are none.
    pub fn uncalibrated_names(&self, problem: &Problem) -> Option<String> {
        let names: Vec<&str> = self
            .uncalibrated()
            .into_iter()
            .map(|i| problem.models[i].name.as_str())
            .collect();
        (!names.is_empty()).then(|| names.join(", "))
    }

    /// The indices of [`Floors::uncalibrated_names`]' models.
    fn uncalibrated(&self) -> Vec<usize> {
        if self.miss_rate.is_none() {
            return Vec::new();
        }
        (0..self.margins.len())
            .filter(|&i| self.margins[i].is_none())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lower_ratio_is_the_floor_of_alpha_n_plus_one_th_smallest() {
        // 99 ratios 0.505 .. 0.995, unsorted: k = ⌊0.05 · 100⌋ = 5, the
        // fifth smallest.
        let ratios: Vec<f32> = (1..=99).rev().map(|i| 0.5 + i as f32 / 200.0).collect();
        let m = FloorMargin::conformal(&ratios, 0.05).expect("ratios");
        assert!((m.ratio - 0.525).abs() < 1e-6, "{m:?}");
        assert_eq!((m.rows, m.short, m.capped), (99, false, false));
        assert!((m.factor() - 1.0 / 0.525).abs() < 1e-4);
        // α 0.2: k = 20.
        let m = FloorMargin::conformal(&ratios, 0.2).expect("ratios");
        assert!((m.ratio - 0.6).abs() < 1e-6, "{m:?}");
    }

    #[test]
    fn miss_rates_are_zero_for_point_floors_or_up_to_a_half() {
        assert_eq!(miss_rate(0.0), Ok(None));
        assert_eq!(miss_rate(0.05), Ok(Some(0.05)));
        assert_eq!(miss_rate(0.5), Ok(Some(0.5)));
        for bad in [-0.1, 0.7, f64::NAN, f64::INFINITY] {
            assert!(miss_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn short_capped_and_above_one_ratios_are_said_and_bounded() {
        // 10 rows cannot give 1 − α = 95 %: the smallest is used, and said.
        let m = FloorMargin::conformal(&[0.9; 10], 0.05).expect("ratios");
        assert!(m.short && (m.ratio - 0.9).abs() < 1e-6, "{m:?}");
        // A row measured at 0 (and a NaN one) cap the margin instead of making
        // the floor unreachable.
        let mut ratios = vec![1.0_f32; 40];
        ratios[0] = 0.0;
        ratios[1] = f32::NAN;
        let m = FloorMargin::conformal(&ratios, 0.05).expect("ratios");
        assert!(m.capped && m.ratio == MIN_LOWER_RATIO, "{m:?}");
        // A surrogate that always underpredicts does not lower the floor.
        let m = FloorMargin::conformal(&[1.5; 40], 0.05).expect("ratios");
        assert_eq!(m.ratio, 1.0);
        assert_eq!(FloorMargin::conformal(&[], 0.05), None);
        assert_eq!(FloorMargin::conformal(&[1.0], 0.0), None);
    }

    #[test]
    fn the_margin_covers_one_minus_alpha_of_new_rows() {
        // Exchangeable ratios: calibrate on 200, check on 20 000 more from the
        // same law. The guarantee is ≥ 1 − α; split conformal with n = 200 is
        // within a point or two above it.
        let mut rng = mfsched_rng::Rng::new(11);
        let mut draw =
            |n: usize| -> Vec<f32> { (0..n).map(|_| (0.15 * rng.normal()).exp() as f32).collect() };
        let alpha = 0.05;
        let mut coverage = Vec::new();
        for _ in 0..20 {
            let m = FloorMargin::conformal(&draw(200), alpha).expect("ratios");
            let fresh = draw(1000);
            let covered = fresh.iter().filter(|&&r| f64::from(r) >= m.ratio).count();
            coverage.push(covered as f64 / fresh.len() as f64);
        }
        let mean = coverage.iter().sum::<f64>() / coverage.len() as f64;
        assert!((0.94..=0.975).contains(&mean), "mean coverage {mean}");
    }

    #[test]
    fn a_floor_above_every_prediction_is_held_at_the_models_reach() {
        // Two models of 3 and 2 configurations.
        let offsets = [0, 3, 5];
        let table = [4.0_f32, 9.0, 6.0, 2.0, 3.0];
        let edge = |reach: f64| reach * (1.0 - REACH_BAND);
        // Each model runs its first configuration (4.0, 2.0): far from the edges.
        let running = [0, 0];
        // Both well within reach: unchanged.
        assert_eq!(
            within_reach(&[8.0, 2.5], &table, &offsets, &running),
            (vec![8.0, 2.5], vec![])
        );
        // The second out of reach: held at the edge of its best prediction,
        // which then passes the floor check; the first untouched.
        let (floors, held) = within_reach(&[8.0, 5.0], &table, &offsets, &running);
        assert_eq!((floors, held), (vec![8.0, edge(3.0)], vec![1]));
        // Within reach but inside the band: held at the edge too, so the floor
        // is continuous across the edge of reach.
        let (floors, held) = within_reach(&[8.9, 2.5], &table, &offsets, &running);
        assert_eq!((floors, held), (vec![edge(9.0), 2.5], vec![0]));
        // NaN predictions do not count as reach; a model with none keeps its floor.
        let nan = [f32::NAN, f32::NAN, f32::NAN, f32::NAN, 1.0];
        assert_eq!(
            within_reach(&[8.0, 5.0], &nan, &offsets, &running),
            (vec![8.0, edge(1.0)], vec![1])
        );
    }

    /// A field in which each of two models' throughput rises with its own
    /// configuration index and falls with the other's: `predict` for
    /// [`met_together`].
    fn rivals(problem: &Problem) -> impl FnMut(&[u64]) -> Result<Vec<f32>, ()> + '_ {
        let space = problem.space();
        move |indices| {
            let mut joint = [0, 0];
            Ok(indices
                .iter()
                .flat_map(|&k| {
                    space.decode(k, &mut joint);
                    let [a, b] = joint.map(|c| c as f32);
                    [(1.0 + a) * 4.0 - 2.0 * b, (1.0 + b) * 4.0 - 2.0 * a]
                })
                .collect())
        }
    }

    /// Two models of `configs` configurations each, both running their first.
    fn two_rivals(configs: usize) -> Problem {
        let mut problem = crate::load_scenario("paper-n3").expect("bundled").problem;
        problem.models.truncate(2);
        for m in &mut problem.models {
            let first = m.configs[0].clone();
            m.configs = vec![first; configs];
        }
        problem.current = vec![0, 0];
        problem.sla_floors.truncate(2);
        problem
    }

    #[test]
    fn floors_met_together_stand_and_the_others_are_held_where_missed_least() {
        // (a, b) predicts (4 + 4a − 2b, 4 + 4b − 2a): (0, 0) gives (4, 4),
        // (1, 1) gives (6, 6), (2, 2) gives (8, 8).
        let p = two_rivals(3);
        // No single step from (0, 0) meets 5 and 5 ((1, 0): (8, 2); (0, 1):
        // (2, 8)); the whole space is searched, (1, 1) does: both stand.
        let together = met_together(&p, &[5.0, 5.0], rivals(&p));
        assert_eq!(together, Ok((vec![5.0, 5.0], vec![])));
        // Nothing meets 9 and 9; (2, 2) misses them least (2/9 in all): both
        // held at the band under its (8, 8).
        let edge = |t: f64| t * (1.0 - REACH_BAND);
        let together = met_together(&p, &[9.0, 9.0], rivals(&p));
        assert_eq!(together, Ok((vec![edge(8.0), edge(8.0)], vec![0, 1])));
        // Only the floor missed is held: (2, 2) misses 7 and 9 by 1/9.
        let together = met_together(&p, &[7.0, 9.0], rivals(&p));
        assert_eq!(together, Ok((vec![7.0, edge(8.0)], vec![1])));
        // A predictor that fails says so; NaN rows do not count.
        assert_eq!(
            met_together(&p, &[5.0, 5.0], |_| Err::<Vec<f32>, _>(7)),
            Err(7)
        );
        let nan = met_together(&p, &[5.0, 5.0], |i: &[u64]| {
            Ok::<_, ()>(vec![f32::NAN; 2 * i.len()])
        });
        assert_eq!(nan, Ok((vec![5.0, 5.0], vec![])));
    }

    #[test]
    fn a_joint_space_too_large_to_search_is_walked_one_step_per_model() {
        // 65 × 65 > JOINT_SEARCH_MAX.
        let p = two_rivals(65);
        assert!(p.space().size() > JOINT_SEARCH_MAX);
        let edge = |t: f64| t * (1.0 - REACH_BAND);
        // 9 and 9: (1, 0) misses least one step away (8/9), then (1, 2)
        // (5/9: (4, 10)); two steps for two models, and the first floor is
        // held under its 4.
        let walked = met_together(&p, &[9.0, 9.0], rivals(&p));
        assert_eq!(walked, Ok((vec![edge(4.0), 9.0], vec![0])));
        // The walk's limit, as documented: 5 and 5 are met at (1, 1), two
        // steps away, but every single step misses them more than staying.
        let walked = met_together(&p, &[5.0, 5.0], rivals(&p));
        assert_eq!(walked, Ok((vec![edge(4.0), edge(4.0)], vec![0, 1])));
    }

    #[test]
    fn the_configuration_a_held_model_runs_may_stay_within_the_keep_band() {
        // One model: its best 10.0, the edge of its reach 9.5.
        let offsets = [0, 4];
        let table = [10.0_f32, 9.3, 8.95, 8.0];
        let at = |running: u32| within_reach(&[20.0], &table, &offsets, &[running]);
        // Running 9.3 (under the edge, within the keep band): the floor is
        // held at 9.3, so it stays allowed, and nothing under it is.
        assert_eq!(at(1), (vec![f64::from(9.3_f32)], vec![0]));
        // Running the best or 8.95 (out of the keep band, 9.0): at the edge,
        // so 8.95 is left and 9.3 is not entered.
        let edge = 10.0 * (1.0 - REACH_BAND);
        assert_eq!(at(0), (vec![edge], vec![0]));
        assert_eq!(at(2), (vec![edge], vec![0]));
        // A floor within reach keeps its value whatever runs.
        assert_eq!(
            within_reach(&[8.5], &table, &offsets, &[3]),
            (vec![8.5], vec![])
        );
        // A running index out of the table (a stale configuration): the edge.
        assert_eq!(at(9), (vec![edge], vec![0]));
    }

    #[test]
    fn floors_are_enforced_raised_and_missed_on_the_declared_value() {
        let held_out = vec![Some(vec![0.8_f32; 40]), None];
        let floors = Floors::conformal(vec![10.0, 4.0], &held_out, 0.05);
        let enforced = floors.enforced();
        assert!(
            (enforced[0] - 12.5).abs() < 1e-5 && enforced[1] == 4.0,
            "{enforced:?}"
        );
        assert_eq!(floors.uncalibrated(), vec![1]);
        // Measured 11 passes the declared 10 though the decision held it to 12.5.
        assert_eq!(floors.misses(&[Some(11.0), Some(3.9)]), vec![1]);
        assert_eq!(floors.misses(&[Some(9.0), None]), vec![0]);
        let recorded = Floors::as_recorded(vec![10.0, 4.0], enforced, Some(0.05));
        assert_eq!(recorded.enforced(), enforced, "exactly as recorded");
        assert_eq!(recorded.label(), "conformal, α 0.05");
        let point = Floors::point(vec![10.0, 4.0]);
        assert_eq!(point.label(), "on the point prediction");
        assert_eq!(point.enforced(), [10.0, 4.0]);
        assert!(point.uncalibrated().is_empty());
    }
}
