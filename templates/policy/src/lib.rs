//! {{name}}: an mfsched policy — greedy coordinate ascent on one table of
//! predictions.
//!
//! The host serves every model's predicted throughput for every local
//! configuration in one `predict-table` call (the aggregate GPU state is held
//! fixed during a decision, so that is all a search needs). Starting from the
//! running configuration and from the leanest one that meets every SLA floor,
//! the policy changes one model at a time to its best local configuration,
//! scored by the host's utility (`Landscape`), until no single change improves.
//!
//! Replace `decide` with your own search; keep it deterministic for a given
//! `seed` parameter and within the deadline (`mfsched plugins test` tells).

use mfsched_sdk::params::spec;
use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};
use mfsched_sdk::{Landscape, Params, Rng, Space, surrogate};

struct Policy;

impl mfsched_sdk::Guest for Policy {
    fn name() -> String {
        "{{name}} (greedy coordinate ascent)".to_string()
    }

    fn parameters() -> Vec<ParamSpec> {
        vec![spec(
            "rounds",
            "8",
            "most passes over the models; each pass moves every model to its best configuration given the others",
        )]
    }

    fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
        let params = Params::parse(params, Self::parameters())?;
        let rounds = params.u64_in("rounds", 1, 1000)?;
        let space = Space::new(&problem);
        if problem.current.len() != space.models() {
            return Err("the running configuration does not have one entry per model".into());
        }
        // The host always passes `seed`; here it only orders the models, but
        // any randomness must come from it so equal seeds give equal decisions.
        let mut rng = Rng::new(params.seed()?);
        let mut order: Vec<usize> = (0..space.models()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        // One `predict-table` call serves the lean start and the search.
        let table = surrogate::predict_table(state);
        let lean = leanest(&problem, &space, &table);
        let search = Search {
            space: &space,
            landscape: Landscape::with_table(state, table),
        };

        let mut evaluated = 0;
        let mut best: Option<(f64, Vec<u32>)> = None;
        for start in [problem.current.clone(), lean] {
            let (score, config) = search.ascend(start, &order, rounds, &mut evaluated);
            if best.as_ref().is_none_or(|(b, _)| score > *b) {
                best = Some((score, config));
            }
        }
        match best {
            Some((score, config)) if score > f64::NEG_INFINITY => Ok(Decision {
                config,
                candidates_evaluated: evaluated,
            }),
            _ => {
                Err("no configuration reached meets every SLA floor within the card's VRAM".into())
            }
        }
    }
}

/// Each model at its smallest configuration predicted at or above its SLA
/// floor (the smallest of all when none is): with the field held fixed a
/// model's floor depends on its own configuration only, so this start meets
/// every floor and fits the card whenever any configuration does.
fn leanest(problem: &Problem, space: &Space, table: &[f32]) -> Vec<u32> {
    (0..space.models())
        .map(|i| {
            let floor = problem.sla_floors.get(i).copied().unwrap_or(0.0);
            let vram = |c: &u32| space.vram_of(i, *c);
            let meets = |c: &u32| f64::from(table[space.table_offset(i) + *c as usize]) >= floor;
            (0..space.radix(i))
                .filter(meets)
                .min_by_key(vram)
                .or_else(|| (0..space.radix(i)).min_by_key(vram))
                .unwrap_or(0)
        })
        .collect()
}

/// The joint space of one problem and how candidates are scored in it.
struct Search<'a> {
    space: &'a Space,
    landscape: Landscape,
}

impl Search<'_> {
    /// Coordinate ascent from `config`: the best score reached and where.
    fn ascend(
        &self,
        mut config: Vec<u32>,
        order: &[usize],
        rounds: u64,
        evaluated: &mut u64,
    ) -> (f64, Vec<u32>) {
        let mut best = self.landscape.score(self.space, &[self.space.index(&config)])[0];
        *evaluated += 1;
        for _ in 0..rounds {
            let mut improved = false;
            for &i in order {
                let mut next = config.clone();
                let candidates: Vec<u64> = (0..self.space.radix(i))
                    .map(|c| {
                        next[i] = c;
                        self.space.index(&next)
                    })
                    .collect();
                let scores = self.landscape.score(self.space, &candidates);
                *evaluated += candidates.len() as u64;
                for (c, score) in scores.into_iter().enumerate() {
                    if score > best {
                        best = score;
                        config[i] = c as u32;
                        improved = true;
                    }
                }
            }
            if !improved {
                break;
            }
        }
        (best, config)
    }
}

mfsched_sdk::export_policy!(Policy);
