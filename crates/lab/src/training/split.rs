//! Stratified splits of a profile: hold-out sets, k folds, nested training subsets.
//!
//! A row's stratum is its workload regime and every model's variant (the
//! published stratification: model type, variant, workload level). Rows are
//! dealt round-robin across strata, so each fold or subset holds the strata in
//! proportion even when there are more strata than rows per fold. Every draw
//! comes from the seeded RNG.

use mfsched_core::Problem;
use mfsched_core::Profile;
use mfsched_rng::Rng;
use std::collections::BTreeMap;

/// Stratum of every row: (workload ordinal, variant of model 0, variant of model 1, …).
pub fn strata(problem: &Problem, profile: &Profile) -> Vec<Vec<usize>> {
    profile
        .rows
        .iter()
        .map(|r| {
            std::iter::once(r.workload.ordinal())
                .chain(
                    r.joint
                        .iter()
                        .zip(&problem.models)
                        .map(|(&c, m)| m.configs[c as usize].variant),
                )
                .collect()
        })
        .collect()
}

/// Fisher–Yates, from the seeded RNG.
pub(super) fn shuffle<T>(items: &mut [T], rng: &mut Rng) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// The given rows in a stratified order: strata visited round-robin (in a
/// shuffled stratum order), rows within a stratum shuffled. Any prefix of the
/// result is a stratified sample, so prefixes make nested training subsets.
pub fn stratified_order(rows: &[usize], strata: &[Vec<usize>], rng: &mut Rng) -> Vec<usize> {
    let mut groups: BTreeMap<&[usize], Vec<usize>> = BTreeMap::new();
    for &r in rows {
        groups.entry(&strata[r]).or_default().push(r);
    }
    let mut groups: Vec<Vec<usize>> = groups.into_values().collect();
    for g in &mut groups {
        shuffle(g, rng);
    }
    shuffle(&mut groups, rng);
    let mut out = Vec::with_capacity(rows.len());
    let longest = groups.iter().map(Vec::len).max().unwrap_or(0);
    for k in 0..longest {
        out.extend(groups.iter().filter_map(|g| g.get(k)));
    }
    out
}

/// Fold number (0..k) of every row, stratified: each stratum's rows (shuffled)
/// are dealt to consecutive folds, continuing where the previous stratum
/// stopped, so every stratum and every fold is balanced to ±1 row.
pub fn stratified_folds(strata: &[Vec<usize>], k: usize, rng: &mut Rng) -> Vec<usize> {
    let k = k.max(1);
    let mut groups: BTreeMap<&[usize], Vec<usize>> = BTreeMap::new();
    for (r, s) in strata.iter().enumerate() {
        groups.entry(s).or_default().push(r);
    }
    let mut fold = vec![0; strata.len()];
    let mut next = 0;
    for mut rows in groups.into_values() {
        shuffle(&mut rows, rng);
        for r in rows {
            fold[r] = next % k;
            next += 1;
        }
    }
    fold
}

/// Every row's group as a number, in order of first appearance (each row its
/// own group where `groups` is empty).
pub fn group_ids(groups: &[String], rows: usize) -> Vec<usize> {
    if groups.is_empty() {
        return (0..rows).collect();
    }
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    groups
        .iter()
        .map(|g| {
            let next = ids.len();
            *ids.entry(g.as_str()).or_insert(next)
        })
        .collect()
}

/// Fold number (0..k) of every row, grouped: rows with the same group key always
/// share a fold (both orders of a measured pair, one run's repeats), so no group
/// is ever on both sides of a split. Groups are shuffled, then each goes to the
/// fold with the fewest rows so far (ties: the lowest fold), which balances the
/// folds to within the largest group.
pub fn group_folds(groups: &[String], k: usize, rng: &mut Rng) -> Vec<usize> {
    let k = k.max(1);
    let mut members: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (r, g) in groups.iter().enumerate() {
        members.entry(g).or_default().push(r);
    }
    let mut members: Vec<Vec<usize>> = members.into_values().collect();
    shuffle(&mut members, rng);
    let mut sizes = vec![0usize; k];
    let mut fold = vec![0; groups.len()];
    for rows in members {
        let f = (0..k).min_by_key(|&f| sizes[f]).expect("k ≥ 1");
        sizes[f] += rows.len();
        for r in rows {
            fold[r] = f;
        }
    }
    fold
}

/// A stratified (train, held-out) split with about `fraction` of the rows held out.
pub fn holdout(strata: &[Vec<usize>], fraction: f64, rng: &mut Rng) -> (Vec<usize>, Vec<usize>) {
    let all: Vec<usize> = (0..strata.len()).collect();
    let order = stratified_order(&all, strata, rng);
    let held = ((strata.len() as f64 * fraction).round() as usize).min(strata.len());
    // Every k-th row of the stratified order is held out, spreading it over strata.
    let mut is_held = vec![false; strata.len()];
    for j in 0..held {
        let pos = ((j as f64 + 0.5) * strata.len() as f64 / held as f64) as usize;
        is_held[order[pos.min(order.len() - 1)]] = true;
    }
    (0..strata.len()).partition(|&r| !is_held[r])
}

/// A grouped (train, held-out) split: whole groups are held out, in a seeded
/// order, until the held-out rows are as close as they get to `fraction` of
/// all rows, so no group (both orders of a measured pair) is on both sides.
pub fn group_holdout(groups: &[String], fraction: f64, rng: &mut Rng) -> (Vec<usize>, Vec<usize>) {
    let mut members: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (r, g) in groups.iter().enumerate() {
        members.entry(g).or_default().push(r);
    }
    let mut members: Vec<Vec<usize>> = members.into_values().collect();
    shuffle(&mut members, rng);
    let want = groups.len() as f64 * fraction;
    let mut is_held = vec![false; groups.len()];
    let mut held = 0usize;
    for rows in members {
        // Take the group only if that brings the count closer to the share.
        if (held as f64 + rows.len() as f64 - want).abs() >= (held as f64 - want).abs() {
            continue;
        }
        held += rows.len();
        for r in rows {
            is_held[r] = true;
        }
    }
    (0..groups.len()).partition(|&r| !is_held[r])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 workloads × 2 variants, unevenly filled.
    fn toy_strata() -> Vec<Vec<usize>> {
        let mut s = Vec::new();
        for w in 0..4 {
            for v in 0..2 {
                for _ in 0..(10 + 5 * v + w) {
                    s.push(vec![w, v]);
                }
            }
        }
        s
    }

    #[test]
    fn folds_partition_and_balance_every_stratum() {
        let s = toy_strata();
        let folds = stratified_folds(&s, 5, &mut Rng::new(1));
        assert_eq!(folds, stratified_folds(&s, 5, &mut Rng::new(1)), "seeded");
        let sizes: Vec<usize> = (0..5)
            .map(|f| folds.iter().filter(|&&x| x == f).count())
            .collect();
        let (lo, hi) = (
            sizes.iter().min().expect("5"),
            sizes.iter().max().expect("5"),
        );
        assert!(hi - lo <= 1, "{sizes:?}");
        for w in 0..4 {
            let rows: Vec<usize> = (0..s.len()).filter(|&r| s[r][0] == w).collect();
            for f in 0..5 {
                let n = rows.iter().filter(|&&r| folds[r] == f).count();
                let share = rows.len() as f64 / 5.0;
                assert!(
                    (n as f64 - share).abs() <= 2.0,
                    "workload {w} fold {f}: {n} of {}",
                    rows.len()
                );
            }
        }
    }

    #[test]
    fn groups_never_straddle_folds_and_folds_stay_balanced() {
        let groups: Vec<String> = (0..100).map(|r| format!("g{}", r / 2)).collect();
        let folds = group_folds(&groups, 5, &mut Rng::new(4));
        assert_eq!(folds, group_folds(&groups, 5, &mut Rng::new(4)), "seeded");
        for r in (0..100).step_by(2) {
            assert_eq!(folds[r], folds[r + 1], "both rows of group {}", r / 2);
        }
        for f in 0..5 {
            assert_eq!(folds.iter().filter(|&&x| x == f).count(), 20);
        }
    }

    #[test]
    fn a_grouped_holdout_keeps_groups_whole_at_the_asked_share() {
        let groups: Vec<String> = (0..100).map(|r| format!("g{}", r / 2)).collect();
        let (train, test) = group_holdout(&groups, 0.2, &mut Rng::new(5));
        assert_eq!(train.len() + test.len(), 100);
        assert_eq!(test.len(), 20);
        for r in &test {
            assert!(test.contains(&(r ^ 1)), "row {r}'s mirror is held out too");
        }
        assert_eq!(group_holdout(&groups, 0.0, &mut Rng::new(5)).1.len(), 0);
    }

    #[test]
    fn prefixes_cover_strata_before_repeating_them() {
        let s = toy_strata();
        let rows: Vec<usize> = (0..s.len()).collect();
        let order = stratified_order(&rows, &s, &mut Rng::new(2));
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, rows, "a permutation");
        let first: std::collections::BTreeSet<&Vec<usize>> =
            order[..8].iter().map(|&r| &s[r]).collect();
        assert_eq!(first.len(), 8, "the first 8 rows hit all 8 strata");
    }

    #[test]
    fn holdout_takes_the_asked_share_spread_over_strata() {
        let s = toy_strata();
        let (train, test) = holdout(&s, 0.2, &mut Rng::new(3));
        assert_eq!(train.len() + test.len(), s.len());
        assert_eq!(test.len(), (s.len() as f64 * 0.2).round() as usize);
        for w in 0..4 {
            assert!(
                test.iter().any(|&r| s[r][0] == w),
                "workload {w} held out too"
            );
        }
        assert_eq!(holdout(&s, 0.0, &mut Rng::new(3)).1.len(), 0);
    }
}
