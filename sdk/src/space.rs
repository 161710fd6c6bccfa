//! The joint space as a policy sees it: the same mixed-radix numbering and VRAM
//! rule as the host's `domain::JointSpace` and `Problem::check_feasible`.

use crate::types::Problem;

/// Radices, strides and per-configuration VRAM of a problem.
#[derive(Debug, Clone)]
pub struct Space {
    radices: Vec<u32>,
    strides: Vec<u64>,
    vram: Vec<Vec<u32>>,
    min_vram: Vec<u64>,
    offsets: Vec<usize>,
    cap: u64,
    size: u64,
}

impl Space {
    pub fn new(problem: &Problem) -> Self {
        Self::from_vram(
            problem
                .models
                .iter()
                .map(|m| m.configs.iter().map(|c| c.vram_mib).collect())
                .collect(),
            u64::from(problem.card.vram_mib),
        )
    }

    /// The space of models whose local configurations need `vram[i][c]` MiB,
    /// on a card of `cap` MiB.
    pub fn from_vram(vram: Vec<Vec<u32>>, cap: u64) -> Self {
        let radices: Vec<u32> = vram.iter().map(|v| v.len() as u32).collect();
        let mut strides = vec![0u64; radices.len()];
        let mut size = 1u64;
        for i in (0..radices.len()).rev() {
            strides[i] = size;
            size = size.saturating_mul(u64::from(radices[i]));
        }
        let min_vram = vram
            .iter()
            .map(|v| u64::from(v.iter().copied().min().unwrap_or(0)))
            .collect();
        let mut offsets = vec![0usize];
        for &r in &radices {
            offsets.push(offsets.last().copied().unwrap_or(0) + r as usize);
        }
        Self {
            radices,
            strides,
            vram,
            min_vram,
            offsets,
            cap,
            size,
        }
    }

    /// Number of models N.
    pub fn models(&self) -> usize {
        self.radices.len()
    }

    pub fn radix(&self, model: usize) -> u32 {
        self.radices[model]
    }

    /// Size of the whole joint space, feasible or not.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Where model `i`'s block starts in a `predict-table` buffer.
    pub fn table_offset(&self, model: usize) -> usize {
        self.offsets[model]
    }

    /// The least VRAM any configuration of `model` needs, MiB.
    pub fn least_vram(&self, model: usize) -> u64 {
        self.min_vram[model]
    }

    pub fn vram_of(&self, model: usize, config: u32) -> u32 {
        self.vram[model][config as usize]
    }

    pub fn index(&self, tuple: &[u32]) -> u64 {
        tuple
            .iter()
            .zip(&self.strides)
            .map(|(&c, &s)| u64::from(c) * s)
            .sum()
    }

    /// The digits of `index` (two divisions per model: see [`Odometer`] for
    /// walking many ascending indices).
    pub fn decode(&self, index: u64, tuple: &mut [u32]) {
        for ((t, &s), &r) in tuple.iter_mut().zip(&self.strides).zip(&self.radices) {
            *t = ((index / s) % u64::from(r)) as u32;
        }
    }

    pub fn vram_mib(&self, tuple: &[u32]) -> u64 {
        tuple
            .iter()
            .enumerate()
            .map(|(i, &c)| u64::from(self.vram[i][c as usize]))
            .sum()
    }

    pub fn fits(&self, tuple: &[u32]) -> bool {
        self.vram_mib(tuple) <= self.cap
    }

    /// A configuration's score when it is the sum of its models' `terms` (laid
    /// out like a `predict-table` buffer), in model order; negative infinity
    /// when it does not fit in memory.
    pub fn sum_terms(&self, terms: &[f64], tuple: &[u32]) -> f64 {
        if !self.fits(tuple) {
            return f64::NEG_INFINITY;
        }
        self.terms_of(terms, tuple)
    }

    /// The sum of a configuration's `terms` in model order, whether or not it
    /// fits in memory: [`Space::sum_terms`] without the memory check, for a
    /// caller that knows the configuration fits.
    pub fn terms_of(&self, terms: &[f64], tuple: &[u32]) -> f64 {
        tuple.iter().enumerate().fold(0.0, |sum, (i, &c)| {
            sum + terms[self.offsets[i] + c as usize]
        })
    }

    pub fn cap_mib(&self) -> u64 {
        self.cap
    }

    /// Every VRAM-feasible joint index, ascending: a depth-first walk that
    /// never enters a subtree whose cheapest completion is over the cap.
    pub fn feasible_indices(&self) -> Vec<u64> {
        let n = self.models();
        let mut out = Vec::new();
        if n == 0 {
            return out;
        }
        self.walk(0, 0, 0, &self.suffix_min(), &mut out);
        out
    }

    /// The best VRAM-feasible joint index when a candidate scores the sum of
    /// its models' `terms` (laid out like a `predict-table` buffer), with its
    /// score and how many feasible candidates it covered; the first in index
    /// order on ties; `None` when nothing fits.
    ///
    /// Every feasible candidate is covered, meeting in the middle. The last
    /// models form a block: every combination of their configurations, summed
    /// once and sorted by VRAM, each with the best block sum among it and
    /// every cheaper one (the lowest index on ties). The models before the
    /// block are walked like [`Space::feasible_indices`], with the partial
    /// sums carried down, and each prefix takes its best completion with one
    /// search by the VRAM left. The split is chosen to make the walk and the
    /// block about the same work (paper-n5: 324 prefixes against a block of
    /// 729, where summing every candidate visits 78,732).
    ///
    /// The winner's score is summed afresh in model order, so it has the bits
    /// a sum of every candidate gives it. The comparison adds a prefix's sum
    /// to a block's: where two candidates' scores differ by less than that
    /// rounding, either may win (their scores are equal to the last bits).
    pub fn best_by_terms(&self, terms: &[f64]) -> Option<Best> {
        self.best_by_terms_split(terms, self.block_start())
    }

    /// Where the block of [`Space::best_by_terms`] starts: the split that
    /// minimises the prefixes walked plus the block's size, each times the
    /// logarithm of the block (a search per prefix, a sort of the block),
    /// with at most [`MAX_BLOCK`] combinations in the block.
    fn block_start(&self) -> usize {
        let n = self.models();
        let mut best = (f64::INFINITY, n.saturating_sub(1));
        let mut block = 1u64;
        for start in (0..n).rev() {
            block = block.saturating_mul(u64::from(self.radices[start]));
            if block > MAX_BLOCK {
                break;
            }
            let prefixes: f64 = self.radices[..start]
                .iter()
                .map(|&r| f64::from(r))
                .product();
            let log = (block as f64).log2().max(1.0);
            let cost = (prefixes + block as f64) * log;
            if cost < best.0 {
                best = (cost, start);
            }
        }
        best.1
    }

    /// [`Space::best_by_terms`] with the block starting at model `start`
    /// (`start < N`).
    fn best_by_terms_split(&self, terms: &[f64], start: usize) -> Option<Best> {
        let n = self.models();
        if n == 0 || start >= n || terms.len() < self.offsets[n] {
            return None;
        }
        let mut walk = TermsWalk {
            space: self,
            levels: (0..start)
                .map(|i| {
                    self.vram[i]
                        .iter()
                        .zip(&terms[self.offsets[i]..self.offsets[i + 1]])
                        .map(|(&v, &t)| (u64::from(v), t))
                        .collect()
                })
                .collect(),
            completions: Completions::new(self, terms, start),
            suffix_min: self.suffix_min(),
            best_index: NONE_YET,
            best_score: f64::NEG_INFINITY,
            scored: 0,
        };
        walk.visit(0, 0, 0, 0.0);
        if walk.best_index == NONE_YET {
            return None;
        }
        let mut tuple = vec![0u32; n];
        self.decode(walk.best_index, &mut tuple);
        Some(Best {
            index: walk.best_index,
            score: self.sum_terms(terms, &tuple),
            scored: walk.scored,
        })
    }

    /// Per depth, the least VRAM the models from it on can need.
    fn suffix_min(&self) -> Vec<u64> {
        let n = self.models();
        let mut suffix_min = vec![0u64; n + 1];
        for i in (0..n).rev() {
            suffix_min[i] = suffix_min[i + 1] + self.min_vram[i];
        }
        suffix_min
    }

    fn walk(&self, depth: usize, used: u64, index: u64, suffix_min: &[u64], out: &mut Vec<u64>) {
        for (c, &v) in self.vram[depth].iter().enumerate() {
            let total = used + u64::from(v);
            if total + suffix_min[depth + 1] > self.cap {
                continue;
            }
            let idx = index + c as u64 * self.strides[depth];
            if depth + 1 == self.models() {
                out.push(idx);
            } else {
                self.walk(depth + 1, total, idx, suffix_min, out);
            }
        }
    }
}

/// The outcome of [`Space::best_by_terms`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Best {
    pub index: u64,
    pub score: f64,
    /// Feasible candidates scored.
    pub scored: u64,
}

/// No candidate seen yet (no joint index is this large: the space's size is).
const NONE_YET: u64 = u64::MAX;

/// Most combinations in the block of [`Space::best_by_terms`] (a few MiB), when
/// the block is more than the last model.
const MAX_BLOCK: u64 = 1 << 16;

/// Every combination of the block's configurations (the models from `start`
/// on) by VRAM, each with the best block sum among it and every cheaper one:
/// the best completion of any prefix.
struct Completions {
    /// Ascending.
    vram: Vec<u64>,
    /// `best[k]`: among the `k + 1` cheapest, the highest block sum and its
    /// block index (the part of the joint index the block's digits make; the
    /// lowest on ties).
    best: Vec<(f64, u64)>,
    /// `first[k]`: the lowest block index among the `k + 1` cheapest (what
    /// wins when the prefix's sum is −∞ and so every completion ties).
    first: Vec<u64>,
}

impl Completions {
    fn new(space: &Space, terms: &[f64], start: usize) -> Self {
        // Every combination's block sum (added in model order), the block's
        // last model fastest, and its sort key: VRAM in the high bits, the
        // block index in the low ones (unique, so an unstable sort of plain
        // integers orders by VRAM, then index). The index takes as many bits
        // as the block needs (at most 32: one model's grid), the VRAM the
        // rest (a block's total is far below 2^32 MiB).
        let combos: u64 = (start..space.models())
            .map(|i| u64::from(space.radices[i]))
            .product();
        let index_bits = (u64::BITS - combos.saturating_sub(1).leading_zeros()).max(1);
        let index_mask = (1u64 << index_bits) - 1;
        let mut sums = vec![0.0f64];
        let mut keys = vec![0u64];
        for i in start..space.models() {
            let model_terms = &terms[space.offsets[i]..space.offsets[i + 1]];
            let mut next_sums = Vec::with_capacity(sums.len() * model_terms.len());
            let mut next_keys = Vec::with_capacity(sums.len() * model_terms.len());
            for (&sum, &key) in sums.iter().zip(&keys) {
                for (&v, &t) in space.vram[i].iter().zip(model_terms) {
                    next_sums.push(sum + t);
                    next_keys.push(key + (u64::from(v) << index_bits));
                }
            }
            sums = next_sums;
            keys = next_keys;
        }
        // A combination's position is its block index: the block ends with
        // the last model, whose stride is 1, so the positions count in the
        // joint index's own mixed radix.
        for (position, key) in keys.iter_mut().enumerate() {
            *key = (*key & !index_mask) | position as u64;
        }
        keys.sort_unstable();
        let mut best: Vec<(f64, u64)> = Vec::with_capacity(keys.len());
        let mut first: Vec<u64> = Vec::with_capacity(keys.len());
        for &key in &keys {
            let index = key & index_mask;
            let t = sums[index as usize];
            first.push(first.last().map_or(index, |&f| f.min(index)));
            let keep = best
                .last()
                .filter(|&&(b, bi)| b > t || (b == t && bi < index))
                .copied();
            best.push(keep.unwrap_or((t, index)));
        }
        Self {
            vram: keys.iter().map(|&k| k >> index_bits).collect(),
            best,
            first,
        }
    }

    /// How many combinations fit in `room` MiB, and the best completion of a
    /// prefix summing to `sum` among them: its block sum and block index.
    fn within(&self, room: u64, sum: f64) -> (usize, Option<(f64, u64)>) {
        let fit = self.vram.partition_point(|&v| v <= room);
        let best = fit.checked_sub(1).map(|k| {
            if sum == f64::NEG_INFINITY {
                (f64::NEG_INFINITY, self.first[k])
            } else {
                self.best[k]
            }
        });
        (fit, best)
    }
}

/// The state of one [`Space::best_by_terms`] walk.
struct TermsWalk<'a> {
    space: &'a Space,
    /// Per model before the block, per configuration: (VRAM, term).
    levels: Vec<Vec<(u64, f64)>>,
    completions: Completions,
    suffix_min: Vec<u64>,
    best_index: u64,
    best_score: f64,
    scored: u64,
}

impl TermsWalk<'_> {
    fn visit(&mut self, depth: usize, used: u64, index: u64, sum: f64) {
        let cap = self.space.cap;
        if depth == self.levels.len() {
            // The block: its best combination in the room left.
            let (fit, best) = self.completions.within(cap.saturating_sub(used), sum);
            self.scored += fit as u64;
            if let Some((t, block_index)) = best {
                let score = sum + t;
                if score > self.best_score || self.best_index == NONE_YET {
                    self.best_score = score;
                    self.best_index = index + block_index;
                }
            }
            return;
        }
        let stride = self.space.strides[depth];
        let rest = self.suffix_min[depth + 1];
        for c in 0..self.levels[depth].len() {
            let (v, t) = self.levels[depth][c];
            let total = used + v;
            if total + rest <= cap {
                self.visit(depth + 1, total, index + c as u64 * stride, sum + t);
            }
        }
    }
}

/// Walks joint indices keeping each one's digits. Moving up adds the difference
/// in mixed radix from the last digit, which divides only on a carry; the
/// feasible set is ascending and mostly dense in its last digits, so a walk
/// over it costs about one addition per step where decoding each index costs
/// two divisions per model. Moving down decodes afresh.
#[derive(Debug, Clone)]
pub struct Odometer<'s> {
    space: &'s Space,
    index: u64,
    tuple: Vec<u32>,
}

impl<'s> Odometer<'s> {
    /// At index 0 (every model at its first configuration).
    pub fn new(space: &'s Space) -> Self {
        Self {
            space,
            index: 0,
            tuple: vec![0; space.models()],
        }
    }

    /// The digits of the current index.
    pub fn tuple(&self) -> &[u32] {
        &self.tuple
    }

    /// Moves to `index` (inside the space) and returns the first model whose
    /// digit may have changed: models before it kept theirs, so sums over
    /// them stay valid. N when the index did not move.
    pub fn seek(&mut self, index: u64) -> usize {
        let n = self.tuple.len();
        if index < self.index {
            self.space.decode(index, &mut self.tuple);
            self.index = index;
            return 0;
        }
        let mut carry = index - self.index;
        self.index = index;
        let mut first = n;
        for i in (0..n).rev() {
            if carry == 0 {
                break;
            }
            let radix = u64::from(self.space.radix(i));
            let digit = u64::from(self.tuple[i]) + carry;
            if digit < radix {
                self.tuple[i] = digit as u32;
                carry = 0;
            } else {
                self.tuple[i] = (digit % radix) as u32;
                carry = digit / radix;
            }
            first = i;
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> Space {
        Space::from_vram(
            vec![vec![5, 9, 2], vec![1, 1], vec![7, 3, 4, 6], vec![2, 8, 1]],
            20,
        )
    }

    #[test]
    fn the_odometer_agrees_with_decoding_ascending_sparse_and_backwards() {
        let space = space();
        let mut decoded = vec![0u32; space.models()];
        let mut odometer = Odometer::new(&space);
        let steps: Vec<u64> = (0..space.size())
            .chain((0..space.size()).step_by(7))
            .chain([space.size() - 1, 3, 3, 40])
            .collect();
        let mut previous = decoded.clone();
        for index in steps {
            let first = odometer.seek(index);
            space.decode(index, &mut decoded);
            assert_eq!(odometer.tuple(), decoded, "index {index}");
            assert_eq!(
                previous[..first],
                decoded[..first],
                "models before {first} kept their digits at {index}"
            );
            previous.clone_from(&decoded);
        }
    }

    #[test]
    fn the_best_by_terms_is_the_argmax_over_the_feasible_set() {
        let space = space();
        let terms: Vec<f64> = (0..12).map(|k| ((k * 37) % 11) as f64 - 4.5).collect();
        let mut tuple = vec![0u32; space.models()];
        let feasible = space.feasible_indices();
        let score = |i: u64, tuple: &mut Vec<u32>| {
            space.decode(i, tuple);
            tuple.iter().enumerate().fold(0.0, |s, (m, &c)| {
                s + terms[space.table_offset(m) + c as usize]
            })
        };
        let mut expected: Option<(u64, f64)> = None;
        for &i in &feasible {
            let s = score(i, &mut tuple);
            if expected.is_none_or(|(_, b)| s > b) {
                expected = Some((i, s));
            }
        }
        let best = space.best_by_terms(&terms).expect("something fits");
        assert_eq!(Some((best.index, best.score)), expected);
        assert_eq!(best.scored, feasible.len() as u64);
        assert!(space.best_by_terms(&terms[..5]).is_none(), "short terms");
        assert!(
            Space::from_vram(vec![vec![30]], 20)
                .best_by_terms(&[1.0])
                .is_none()
        );
    }

    /// Against summing every feasible candidate, on many caps, with tied and
    /// −∞ terms (exact in binary, so rounding decides no tie).
    #[test]
    fn the_best_by_terms_matches_a_brute_force_sum_with_ties() {
        let vram = vec![
            vec![5, 9, 2, 2],
            vec![1, 1, 4],
            vec![7, 3, 4, 6, 3],
            vec![2, 8, 1, 1],
        ];
        let tied: Vec<f64> = (0..16)
            .map(|k| match k % 5 {
                0 => f64::NEG_INFINITY,
                r => f64::from(r / 2) * 0.5,
            })
            .collect();
        // The first model under its floor everywhere: every candidate is −∞.
        let mut hopeless = tied.clone();
        hopeless[..4].fill(f64::NEG_INFINITY);
        for (terms, cap) in [4, 9, 12, 15, 20, 28]
            .into_iter()
            .flat_map(|cap| [(&tied, cap), (&hopeless, cap)])
        {
            let space = Space::from_vram(vram.clone(), cap);
            let mut tuple = vec![0u32; space.models()];
            let mut expected: Option<(u64, f64)> = None;
            let feasible = space.feasible_indices();
            for &i in &feasible {
                space.decode(i, &mut tuple);
                let s = space.sum_terms(terms, &tuple);
                if expected.is_none_or(|(_, b)| s > b) {
                    expected = Some((i, s));
                }
            }
            for start in 0..space.models() {
                let best = space.best_by_terms_split(terms, start);
                let at = format!("cap {cap}, block from model {start}");
                assert_eq!(best.map(|b| (b.index, b.score)), expected, "{at}");
                assert_eq!(best.map_or(0, |b| b.scored), feasible.len() as u64, "{at}");
            }
            assert_eq!(
                space.best_by_terms(terms),
                space.best_by_terms_split(terms, space.block_start())
            );
        }
    }

    /// A last model larger than any block: its index takes more bits of the
    /// sort key than a block's would.
    #[test]
    fn the_best_by_terms_handles_a_model_larger_than_a_block() {
        let big = (2 * MAX_BLOCK + 4_464) as u32;
        let vram = vec![vec![3, 1, 2], (0..big).map(|c| c % 97).collect()];
        let terms: Vec<f64> = (0..3 + big)
            .map(|k| f64::from((k * 7_919) % 1_013) * 0.25)
            .collect();
        let space = Space::from_vram(vram, 60);
        let mut tuple = vec![0u32; 2];
        let mut expected: Option<(u64, f64)> = None;
        for &i in &space.feasible_indices() {
            space.decode(i, &mut tuple);
            let s = space.sum_terms(&terms, &tuple);
            if expected.is_none_or(|(_, b)| s > b) {
                expected = Some((i, s));
            }
        }
        assert_eq!(space.block_start(), 1);
        let best = space.best_by_terms(&terms).expect("something fits");
        assert_eq!(Some((best.index, best.score)), expected);
    }

    #[test]
    fn feasible_indices_are_every_fitting_index_ascending() {
        let space = space();
        let mut tuple = vec![0u32; space.models()];
        let brute: Vec<u64> = (0..space.size())
            .filter(|&i| {
                space.decode(i, &mut tuple);
                space.fits(&tuple)
            })
            .collect();
        assert_eq!(space.feasible_indices(), brute);
        assert!(!brute.is_empty() && brute.len() < space.size() as usize);
    }
}
