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
        let radices: Vec<u32> = problem
            .models
            .iter()
            .map(|m| m.configs.len() as u32)
            .collect();
        let mut strides = vec![0u64; radices.len()];
        let mut size = 1u64;
        for i in (0..radices.len()).rev() {
            strides[i] = size;
            size = size.saturating_mul(u64::from(radices[i]));
        }
        let vram: Vec<Vec<u32>> = problem
            .models
            .iter()
            .map(|m| m.configs.iter().map(|c| c.vram_mib).collect())
            .collect();
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
            cap: u64::from(problem.card.vram_mib),
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
        let mut suffix_min = vec![0u64; n + 1];
        for i in (0..n).rev() {
            suffix_min[i] = suffix_min[i + 1] + self.min_vram[i];
        }
        self.walk(0, 0, 0, &suffix_min, &mut out);
        out
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
