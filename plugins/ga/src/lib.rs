//! The published genetic algorithm over joint configurations.
//!
//! Genome: one integer gene per model, its local configuration index. Each
//! generation keeps the elites, breeds the rest from parents picked by
//! tournament (or linear rank) selection with uniform crossover and per-gene
//! mutation, and repairs every child: a gene whose predicted throughput is
//! under the model's SLA floor is redrawn among the genes that meet it (when
//! any does), then, while the genome is over the card's VRAM, random models
//! move to cheaper configurations (floor-meeting ones first). The best genome
//! found is then polished by steepest ascent over one- and two-gene changes.
//! Fitness is the host's utility; every distinct genome is scored once (when
//! the utility is not additive). Under the observed
//! field the predictions come from the surrogate table (the field held fixed
//! during search, as published) and, when the utility is additive, a genome's
//! fitness is the sum of its genes' utility terms (summed again rather than
//! looked up: cheaper); under a candidate-aware
//! field each generation's new genomes go through the host's batched joint
//! `predict` (the floor-meeting repair still reads the table: it is a
//! heuristic, the utility has the last word). The seed comes from the host.

use mfsched_sdk::params::spec;
use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};
use mfsched_sdk::{Landscape, Params, Rng, Space, surrogate};
use std::collections::HashMap;

struct Ga;

/// The search settings, parsed from the parameters.
struct Settings {
    population: usize,
    generations: usize,
    patience: usize,
    tournament: usize,
    rank_selection: bool,
    crossover: f64,
    mutation: f64,
    elites: usize,
    polish: usize,
}

impl Settings {
    fn parse(p: &Params, models: usize) -> Result<Self, String> {
        let population = p.u64_in("population", 4, 100_000)? as usize;
        let mutation = match p.raw("mutation") {
            Some("auto") | None => (2.0 / models.max(1) as f64).min(1.0),
            Some(_) => p.f64_in("mutation", 0.0, 1.0)?,
        };
        Ok(Self {
            population,
            generations: p.u64_in("generations", 0, 100_000)? as usize,
            patience: p.u64_in("patience", 0, 100_000)? as usize,
            tournament: p.u64_in("tournament", 1, population as u64)? as usize,
            rank_selection: p.choice("selection", &["tournament", "rank"])? == "rank",
            crossover: p.f64_in("crossover", 0.0, 1.0)?,
            mutation,
            elites: p.u64_in("elites", 0, population as u64 - 1)? as usize,
            polish: p.u64_in("polish", 0, 10_000)? as usize,
        })
    }
}

impl mfsched_sdk::Guest for Ga {
    fn name() -> String {
        "genetic algorithm".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        vec![
            spec("population", "24", "genomes per generation"),
            spec("generations", "40", "generations after the initial one"),
            spec(
                "patience",
                "15",
                "stop after this many generations without improvement (0: never)",
            ),
            spec(
                "selection",
                "tournament",
                "parent selection: tournament or rank",
            ),
            spec("tournament", "3", "contestants per tournament"),
            spec(
                "crossover",
                "0.9",
                "probability that two parents are crossed (uniform crossover)",
            ),
            spec(
                "mutation",
                "auto",
                "per-gene mutation probability (auto: 2/N)",
            ),
            spec(
                "elites",
                "2",
                "best genomes copied unchanged into the next generation",
            ),
            spec(
                "polish",
                "16",
                "steepest-ascent rounds over single-gene changes from the best genome (0: none)",
            ),
        ]
    }

    fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
        let params = Params::parse(params, Self::parameters())?;
        let space = Space::new(&problem);
        let settings = Settings::parse(&params, space.models())?;
        let mut rng = Rng::new(params.seed()?);
        let min_tuple: Vec<u32> = (0..space.models()).map(|i| cheapest(&space, i)).collect();
        if !space.fits(&min_tuple) {
            return Err("no joint configuration fits in the card's VRAM".into());
        }
        let table = surrogate::predict_table(state);
        let allowed = floor_meeting_genes(&space, &table, &problem.sla_floors);
        let landscape = Landscape::with_table(state, table);
        let allowed_genes = allowed
            .iter()
            .map(|ok| (0..ok.len() as u32).filter(|&c| ok[c as usize]).collect())
            .collect();
        let mut search = Search {
            space: &space,
            landscape: &landscape,
            allowed,
            allowed_genes,
            cache: HashMap::new(),
            summed: 0,
        };
        Ok(search.run(&problem.current, &settings, &mut rng))
    }
}

/// The configuration of model `i` that needs the least VRAM.
fn cheapest(space: &Space, i: usize) -> u32 {
    (0..space.radix(i))
        .min_by_key(|&c| space.vram_of(i, c))
        .unwrap_or(0)
}

/// Per model, the local configurations predicted at or above its floor; all
/// of them when none is (the utility then scores every genome −∞ anyway).
fn floor_meeting_genes(space: &Space, table: &[f32], floors: &[f64]) -> Vec<Vec<bool>> {
    (0..space.models())
        .map(|i| {
            let floor = floors.get(i).copied().unwrap_or(0.0);
            let ok: Vec<bool> = (0..space.radix(i) as usize)
                .map(|c| f64::from(table[space.table_offset(i) + c]) >= floor)
                .collect();
            if ok.contains(&true) {
                ok
            } else {
                vec![true; ok.len()]
            }
        })
        .collect()
}

struct Search<'a> {
    space: &'a Space,
    landscape: &'a Landscape,
    /// `allowed[i][c]`: gene c of model i meets the model's floor.
    allowed: Vec<Vec<bool>>,
    /// Per model, the genes it allows, for uniform draws without a scan.
    allowed_genes: Vec<Vec<u32>>,
    /// Fitness of every genome scored so far, by joint index.
    cache: HashMap<u64, f64>,
    /// Genomes scored from summed terms (repeats included).
    summed: u64,
}

impl Search<'_> {
    fn run(&mut self, current: &[u32], s: &Settings, rng: &mut Rng) -> Decision {
        let n = self.space.models();
        let mut population: Vec<Vec<u32>> = Vec::with_capacity(s.population);
        // Seed with the running configuration (if it is a valid genome): a
        // search that never does worse than staying put.
        if current.len() == n
            && current
                .iter()
                .enumerate()
                .all(|(i, &c)| c < self.space.radix(i))
        {
            let mut g = current.to_vec();
            self.repair(&mut g, rng);
            population.push(g);
        }
        if let Landscape::Terms { terms } = self.landscape {
            for mut g in self.priced_genomes(terms) {
                if population.len() >= s.population / 2 {
                    break;
                }
                self.repair(&mut g, rng);
                if !population.contains(&g) {
                    population.push(g);
                }
            }
        }
        while population.len() < s.population {
            let mut g: Vec<u32> = (0..n).map(|i| self.random_gene(i, rng)).collect();
            self.repair(&mut g, rng);
            population.push(g);
        }
        let mut fitness = self.score(&population);
        let (mut best, mut best_fit) = best_of(&population, &fitness);
        let mut stale = 0usize;
        for _ in 0..s.generations {
            let order = ranking(&fitness);
            let mut next: Vec<Vec<u32>> = order
                .iter()
                .take(s.elites)
                .map(|&i| population[i].clone())
                .collect();
            while next.len() < s.population {
                let a = &population[self.select(&fitness, &order, s, rng)];
                let b = &population[self.select(&fitness, &order, s, rng)];
                let mut child = a.clone();
                if rng.bernoulli(s.crossover) {
                    for (gene, &other) in child.iter_mut().zip(b.iter()) {
                        if rng.bernoulli(0.5) {
                            *gene = other;
                        }
                    }
                }
                for (i, gene) in child.iter_mut().enumerate() {
                    if rng.bernoulli(s.mutation) {
                        *gene = self.random_gene(i, rng);
                    }
                }
                self.repair(&mut child, rng);
                next.push(child);
            }
            population = next;
            fitness = self.score(&population);
            let (gen_best, gen_fit) = best_of(&population, &fitness);
            if gen_fit > best_fit {
                best = gen_best;
                best_fit = gen_fit;
                stale = 0;
            } else {
                stale += 1;
                if s.patience > 0 && stale >= s.patience {
                    break;
                }
            }
        }
        let (best, _) = self.polish(best, best_fit, s.polish);
        Decision {
            config: best,
            candidates_evaluated: self.cache.len() as u64 + self.summed,
        }
    }

    /// Fitness of each genome. Summed terms cost less than a cache lookup, so
    /// they are summed every time; otherwise only genomes never seen before go
    /// to the host.
    fn score(&mut self, population: &[Vec<u32>]) -> Vec<f64> {
        if let Landscape::Terms { terms } = self.landscape {
            self.summed += population.len() as u64;
            return population
                .iter()
                .map(|g| self.space.sum_terms(terms, g))
                .collect();
        }
        let indices: Vec<u64> = population.iter().map(|g| self.space.index(g)).collect();
        let mut fresh: Vec<u64> = indices
            .iter()
            .copied()
            .filter(|i| !self.cache.contains_key(i))
            .collect();
        fresh.sort_unstable();
        fresh.dedup();
        if !fresh.is_empty() {
            let scores = self.landscape.score(self.space, &fresh);
            for (i, s) in fresh.into_iter().zip(scores) {
                self.cache
                    .insert(i, if s.is_nan() { f64::NEG_INFINITY } else { s });
            }
        }
        indices.iter().map(|i| self.cache[i]).collect()
    }

    fn select(&self, fitness: &[f64], order: &[usize], s: &Settings, rng: &mut Rng) -> usize {
        if s.rank_selection {
            // Linear ranking: the best of P genomes has weight P, the worst 1.
            let p = order.len() as u64;
            let mut ticket = rng.below(p * (p + 1) / 2);
            for (rank, &i) in order.iter().enumerate() {
                let weight = p - rank as u64;
                if ticket < weight {
                    return i;
                }
                ticket -= weight;
            }
            order[0]
        } else {
            let mut winner = rng.below(fitness.len() as u64) as usize;
            for _ in 1..s.tournament {
                let c = rng.below(fitness.len() as u64) as usize;
                if fitness[c] > fitness[winner] {
                    winner = c;
                }
            }
            winner
        }
    }

    /// Seeds from the Lagrangian relaxation of an additive landscape: at a
    /// price `λ` per MiB every model independently takes its floor-meeting
    /// gene with the highest `term − λ·VRAM` (the cheaper one on ties), so the
    /// VRAM the genome needs falls as the price rises. The cheapest price at
    /// which it fits (found by bisection) and prices around it give genomes on
    /// the trade-off frontier: the trades a tight card needs (one model gives
    /// up memory that two others use better), which random mutation and the
    /// polish's two-gene changes rarely make. One genome per price, best price
    /// first (several prices may give the same one); those over the cap are
    /// left to `repair`.
    fn priced_genomes(&self, terms: &[f64]) -> Vec<Vec<u32>> {
        let space = self.space;
        let at_price = |price: f64| -> Vec<u32> {
            (0..space.models())
                .map(|i| {
                    let value = |c: u32| {
                        terms[space.table_offset(i) + c as usize]
                            - price * f64::from(space.vram_of(i, c))
                    };
                    let genes = &self.allowed_genes[i];
                    genes
                        .iter()
                        .copied()
                        .filter(|&c| terms[space.table_offset(i) + c as usize].is_finite())
                        .reduce(|best, c| {
                            let (v, b) = (value(c), value(best));
                            let cheaper = space.vram_of(i, c) < space.vram_of(i, best);
                            if v > b || (v == b && cheaper) {
                                c
                            } else {
                                best
                            }
                        })
                        .unwrap_or(genes[0])
                })
                .collect()
        };
        // At this price no MiB is worth any term difference: every model
        // takes its cheapest floor-meeting gene.
        let finite = terms.iter().copied().filter(|t| t.is_finite());
        let spread =
            finite.clone().fold(f64::NEG_INFINITY, f64::max) - finite.fold(f64::INFINITY, f64::min);
        if !spread.is_finite() {
            return Vec::new();
        }
        let (mut low, mut high) = (0.0, spread.max(0.0) + 1.0);
        if space.fits(&at_price(low)) {
            high = low;
        }
        for _ in 0..PRICE_BISECTIONS {
            if high - low <= high * 1e-9 {
                break;
            }
            let mid = 0.5 * (low + high);
            if space.fits(&at_price(mid)) {
                high = mid;
            } else {
                low = mid;
            }
        }
        // Several prices may give one genome: the caller skips any already in
        // the population (a fitting genome's repair draws nothing from the rng,
        // so a skipped duplicate changes nothing else).
        PRICE_FACTORS
            .iter()
            .map(|factor| at_price(high * factor))
            .chain([at_price(low)])
            .collect()
    }

    /// A uniformly random floor-meeting gene of model `i`.
    fn random_gene(&self, i: usize, rng: &mut Rng) -> u32 {
        let ok = &self.allowed_genes[i];
        ok[rng.below(ok.len() as u64) as usize]
    }

    /// Local search from the best genome, at most `rounds` improvements: each
    /// round scores every single-gene change that fits in memory (one batch);
    /// when none improves, every two-gene change (one model gives up memory
    /// another takes: the trade a tight card needs and random mutation rarely
    /// makes); when none of those does, every refill (one model gives up
    /// memory that several others take), and takes the best while it improves.
    fn polish(&mut self, mut genome: Vec<u32>, mut fit: f64, rounds: usize) -> (Vec<u32>, f64) {
        for _ in 0..rounds {
            let improved = self
                .best_neighbour(&genome, 1, fit)
                .or_else(|| self.best_neighbour(&genome, 2, fit))
                .or_else(|| self.best_refill(&genome, fit));
            match improved {
                Some((better, better_fit)) => {
                    genome = better;
                    fit = better_fit;
                }
                None => break,
            }
        }
        (genome, fit)
    }

    /// The best genome `genes` changes away, if it beats `fit`.
    fn best_neighbour(
        &mut self,
        genome: &[u32],
        genes: usize,
        fit: f64,
    ) -> Option<(Vec<u32>, f64)> {
        if let Landscape::Terms { terms } = self.landscape {
            // Summed as they are enumerated, nothing materialised: the same
            // first best as scoring the whole list (thousands of two-gene
            // neighbours, each its own allocation, were most of a polish).
            let (space, mut seen) = (self.space, 0u64);
            let mut best: Option<(Vec<u32>, f64)> = None;
            self.each_neighbour(genome, genes, |g| {
                seen += 1;
                let f = space.terms_of(terms, g);
                if best.as_ref().is_none_or(|&(_, b)| f > b) {
                    best = Some((g.to_vec(), f));
                }
            });
            self.summed += seen;
            return best.filter(|&(_, f)| f > fit);
        }
        let mut neighbours = Vec::new();
        self.each_neighbour(genome, genes, |g| neighbours.push(g.to_vec()));
        let fitness = self.score(&neighbours);
        let k = best_index(&fitness).filter(|&k| fitness[k] > fit)?;
        Some((neighbours[k].clone(), fitness[k]))
    }

    /// The best refill of `genome`, if it beats `fit`: one model moves to a
    /// cheaper configuration and the memory it frees goes, greedily, to the
    /// others (round by round each takes the best single-gene upgrade that
    /// fits and improves, of any model but the one that gave memory up). Every
    /// model and every cheaper configuration of it is one chain; the chains
    /// advance in lockstep, one batch per round. This makes the trades where
    /// two or more models must grow for one to shrink, which no one- or
    /// two-gene change makes (the greedy knapsack's blind spot: the item with
    /// the best ratio is too big).
    fn best_refill(&mut self, genome: &[u32], fit: f64) -> Option<(Vec<u32>, f64)> {
        let space = self.space;
        let mut chains: Vec<(usize, Vec<u32>)> = Vec::new();
        for (i, &gene) in genome.iter().enumerate() {
            let now = space.vram_of(i, gene);
            for c in (0..space.radix(i)).filter(|&c| space.vram_of(i, c) < now) {
                let mut g = genome.to_vec();
                g[i] = c;
                chains.push((i, g));
            }
        }
        let starts: Vec<Vec<u32>> = chains.iter().map(|(_, g)| g.clone()).collect();
        let mut scores = self.score(&starts);
        let mut active: Vec<usize> = (0..chains.len()).collect();
        for _ in 0..genome.len() {
            let mut batch: Vec<Vec<u32>> = Vec::new();
            let mut owner: Vec<usize> = Vec::new();
            for &k in &active {
                let (gave, g) = &chains[k];
                let mut next = g.clone();
                for j in (0..next.len()).filter(|j| j != gave) {
                    let now = space.vram_of(j, g[j]);
                    for c in (0..space.radix(j)).filter(|&c| space.vram_of(j, c) > now) {
                        next[j] = c;
                        if space.fits(&next) {
                            batch.push(next.clone());
                            owner.push(k);
                        }
                    }
                    next[j] = g[j];
                }
            }
            if batch.is_empty() {
                break;
            }
            let batch_scores = self.score(&batch);
            let mut best: Vec<Option<usize>> = vec![None; chains.len()];
            for (b, &k) in owner.iter().enumerate() {
                let beats = best[k].map_or(scores[k], |o| batch_scores[o]);
                if batch_scores[b] > beats {
                    best[k] = Some(b);
                }
            }
            let moves: Vec<(usize, usize)> =
                active.iter().filter_map(|&k| Some((k, best[k]?))).collect();
            active = moves.iter().map(|&(k, _)| k).collect();
            for (k, b) in moves {
                chains[k].1.clone_from(&batch[b]);
                scores[k] = batch_scores[b];
            }
        }
        let k = best_index(&scores).filter(|&k| scores[k] > fit)?;
        Some((chains[k].1.clone(), scores[k]))
    }

    /// Calls `visit` with every genome that differs from `genome` in exactly
    /// `genes` (1 or 2) models and fits in memory, in one fixed order. Whether
    /// a neighbour fits is the genome's VRAM with the changed models' swapped
    /// (integers: the same answer as summing it afresh).
    fn each_neighbour(&self, genome: &[u32], genes: usize, mut visit: impl FnMut(&[u32])) {
        let space = self.space;
        let n = genome.len();
        let cap = space.cap_mib();
        let used = space.vram_mib(genome);
        let mut g = genome.to_vec();
        for i in 0..n {
            let without_i = used - u64::from(space.vram_of(i, genome[i]));
            for ci in (0..space.radix(i)).filter(|&c| c != genome[i]) {
                g[i] = ci;
                let with_ci = without_i + u64::from(space.vram_of(i, ci));
                if genes == 1 {
                    if with_ci <= cap {
                        visit(&g);
                    }
                    continue;
                }
                for j in i + 1..n {
                    let without_j = with_ci - u64::from(space.vram_of(j, genome[j]));
                    for cj in (0..space.radix(j)).filter(|&c| c != genome[j]) {
                        if without_j + u64::from(space.vram_of(j, cj)) <= cap {
                            g[j] = cj;
                            visit(&g);
                        }
                    }
                    g[j] = genome[j];
                }
            }
            g[i] = genome[i];
        }
    }

    /// Redraws genes under their floor, then moves random models to strictly
    /// cheaper configurations (floor-meeting ones when there are) until the
    /// genome fits; each step lowers the VRAM, so it ends (the all-cheapest
    /// genome fits).
    fn repair(&self, genome: &mut [u32], rng: &mut Rng) {
        let space = self.space;
        for (i, gene) in genome.iter_mut().enumerate() {
            if !self.allowed[i][*gene as usize] {
                *gene = self.random_gene(i, rng);
            }
        }
        while !space.fits(genome) {
            let reducible: Vec<usize> = (0..genome.len())
                .filter(|&i| u64::from(space.vram_of(i, genome[i])) > space.least_vram(i))
                .collect();
            let Some(&i) = reducible.get(rng.below(reducible.len().max(1) as u64) as usize) else {
                return;
            };
            let now = space.vram_of(i, genome[i]);
            let cheaper: Vec<u32> = (0..space.radix(i))
                .filter(|&c| space.vram_of(i, c) < now)
                .collect();
            let cheaper_ok: Vec<u32> = cheaper
                .iter()
                .copied()
                .filter(|&c| self.allowed[i][c as usize])
                .collect();
            let pool = if cheaper_ok.is_empty() {
                &cheaper
            } else {
                &cheaper_ok
            };
            genome[i] = pool[rng.below(pool.len() as u64) as usize];
        }
    }
}

/// Bisection steps for the price at which the priced genome fits.
const PRICE_BISECTIONS: usize = 48;
/// Prices around the fitting one that seed the population, as factors of it.
const PRICE_FACTORS: [f64; 6] = [1.0, 1.1, 1.25, 1.5, 2.0, 3.0];

/// Population indices, best first (stable on ties).
fn ranking(fitness: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..fitness.len()).collect();
    order.sort_by(|&a, &b| fitness[b].total_cmp(&fitness[a]));
    order
}

fn best_of(population: &[Vec<u32>], fitness: &[f64]) -> (Vec<u32>, f64) {
    let i = ranking(fitness)[0];
    (population[i].clone(), fitness[i])
}

/// Index of the highest fitness (the first on ties); `None` when empty.
fn best_index(fitness: &[f64]) -> Option<usize> {
    (0..fitness.len()).reduce(|b, k| if fitness[k] > fitness[b] { k } else { b })
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::Ga;
    mfsched_sdk::export_policy!(Ga);
}
