//! {{name}}: an mfsched policy — greedy coordinate ascent on one table of
//! predictions.
//!
//! The host serves every model's predicted throughput for every local
//! configuration in one `predict-table` call (the aggregate GPU state is held
//! fixed during a decision, so that is all a search needs). Starting from the
//! running configuration and from the leanest one that meets every SLA floor,
//! the policy changes one model at a time to its best local configuration,
//! scored by the host's utility (`objective::evaluate`), until no single
//! change improves.
//!
//! Replace `decide` with your own search; keep it deterministic for a given
//! `seed` parameter and within the deadline (`mfsched plugins check` tells).

wit_bindgen::generate!({
    world: "policy",
    path: "wit",
});

use mfsched::scheduler::objective;
use mfsched::scheduler::surrogate;

/// Rounds over all models when the `rounds` parameter is not given.
const DEFAULT_ROUNDS: u32 = 8;

struct Policy;

impl Guest for Policy {
    fn name() -> String {
        "{{name}} (greedy coordinate ascent)".to_string()
    }

    fn parameters() -> Vec<ParamSpec> {
        vec![ParamSpec {
            name: "rounds".to_string(),
            default_value: DEFAULT_ROUNDS.to_string(),
            description: "most passes over the models; each pass moves every model to its best configuration given the others".to_string(),
        }]
    }

    fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
        let rounds: u32 = parse_param(&params, "rounds")?.unwrap_or(DEFAULT_ROUNDS);
        // The host always passes `seed`; here it only orders the models, but
        // any randomness must come from it so equal seeds give equal decisions.
        let seed: u64 = parse_param(&params, "seed")?.unwrap_or(0);
        let search = Search::new(&problem, state)?;
        let mut order: Vec<usize> = (0..problem.models.len()).collect();
        shuffle(&mut order, seed);

        let mut evaluated = 0;
        let mut best: Option<(f64, Vec<u32>)> = None;
        for start in [problem.current.clone(), search.leanest(&problem)] {
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

/// The joint space of one problem with the predictions of one state.
struct Search {
    /// Grid size of each model (the radix of its digit).
    sizes: Vec<u32>,
    /// Mixed-radix stride of each model: the last model varies fastest.
    strides: Vec<u64>,
    /// Where each model's grid starts in `table`.
    offsets: Vec<usize>,
    table: Vec<f32>,
}

impl Search {
    fn new(problem: &Problem, state: GpuState) -> Result<Self, String> {
        let sizes: Vec<u32> = problem
            .models
            .iter()
            .map(|m| m.configs.len() as u32)
            .collect();
        if problem.current.len() != sizes.len() {
            return Err("the running configuration does not have one entry per model".into());
        }
        let mut strides = vec![1u64; sizes.len()];
        for i in (0..sizes.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * u64::from(sizes[i + 1]);
        }
        let mut offsets = Vec::with_capacity(sizes.len());
        let mut total = 0usize;
        for &k in &sizes {
            offsets.push(total);
            total += k as usize;
        }
        let table = surrogate::predict_table(state);
        if table.len() != total {
            return Err(format!(
                "predict-table returned {} values for {total} local configurations",
                table.len()
            ));
        }
        Ok(Self {
            sizes,
            strides,
            offsets,
            table,
        })
    }

    /// Each model at its smallest configuration predicted at or above its SLA
    /// floor (the smallest of all when none is): with the field held fixed a
    /// model's floor depends on its own configuration only, so this start
    /// meets every floor and fits the card whenever any configuration does.
    fn leanest(&self, problem: &Problem) -> Vec<u32> {
        problem
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let floor = problem.sla_floors.get(i).copied().unwrap_or(0.0);
                let vram = |c: &u32| m.configs[*c as usize].vram_mib;
                let meets = |c: &u32| f64::from(self.table[self.offsets[i] + *c as usize]) >= floor;
                (0..self.sizes[i])
                    .filter(meets)
                    .min_by_key(vram)
                    .or_else(|| (0..self.sizes[i]).min_by_key(vram))
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Scores joint configurations with the host's utility.
    fn score(&self, configs: &[Vec<u32>]) -> Vec<f64> {
        let mut indices = Vec::with_capacity(configs.len());
        let mut predictions = Vec::with_capacity(configs.len() * self.sizes.len());
        for config in configs {
            indices.push(
                config
                    .iter()
                    .zip(&self.strides)
                    .map(|(&c, &s)| u64::from(c) * s)
                    .sum(),
            );
            predictions.extend(
                config
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| self.table[self.offsets[i] + c as usize]),
            );
        }
        objective::evaluate(&indices, &predictions)
    }

    /// Coordinate ascent from `config`: the best score reached and where.
    fn ascend(
        &self,
        mut config: Vec<u32>,
        order: &[usize],
        rounds: u32,
        evaluated: &mut u64,
    ) -> (f64, Vec<u32>) {
        let mut best = self.score(std::slice::from_ref(&config))[0];
        *evaluated += 1;
        for _ in 0..rounds {
            let mut improved = false;
            for &i in order {
                let candidates: Vec<Vec<u32>> = (0..self.sizes[i])
                    .map(|c| {
                        let mut next = config.clone();
                        next[i] = c;
                        next
                    })
                    .collect();
                let scores = self.score(&candidates);
                *evaluated += candidates.len() as u64;
                for (candidate, score) in candidates.into_iter().zip(scores) {
                    if score > best {
                        best = score;
                        config = candidate;
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

/// A parameter's value, parsed; `None` when absent.
fn parse_param<T: std::str::FromStr>(params: &[Param], key: &str) -> Result<Option<T>, String> {
    match params.iter().find(|p| p.key == key) {
        None => Ok(None),
        Some(p) => p
            .value
            .parse()
            .map(Some)
            .map_err(|_| format!("parameter {key}={}: not a valid value", p.value)),
    }
}

/// Fisher–Yates with SplitMix64: a few lines instead of a dependency.
fn shuffle(items: &mut [usize], seed: u64) {
    let mut state = seed;
    for i in (1..items.len()).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        items.swap(i, (z % (i as u64 + 1)) as usize);
    }
}

export!(Policy);
