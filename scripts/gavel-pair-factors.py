#!/usr/bin/env python3
"""What a co-runner field could carry: a probe on a Gavel profile (numpy only).

Out-of-fold slowdown R² (throughput / solo throughput) of small models of the
log-slowdown of job i beside job j, on `scripts/gavel-to-mfsched.py`'s profile,
5 folds grouped by pair (`x-pair`), seeds 1-3 (Python's shuffle of the pairs, so
the folds are not `surrogate cv`'s, only its protocol), mean ± std over seeds:

- linear field: ridge on own job one-hot + the derived state (memory, utilisation);
- own + inflicted(partner): + the partner's mean inflicted log-slowdown, learnt
  on the training folds (one number per co-runner configuration);
- own + own × inflicted: its interaction with the own job;
- additive own + partner one-hot: the same with the partner's identity;
- low-rank r: log s_ij = μ + a_i + b_j + u_i · v_j, fitted by alternating ridge
  on the training folds. The co-runner enters as (b_j, v_j): r + 1 numbers per
  configuration, which summed over co-runners would make a field whose size does
  not grow with N (the sum is an assumption for N > 2, untested here).

Usage: scripts/gavel-pair-factors.py gavel-v100.csv [--factor-ridge 0.1]   (docs/gavel.md)
"""
import argparse
import csv
import random

import numpy as np

FOLDS = 5
SEEDS = (1, 2, 3)
RIDGE = 1e-2  # per row, on standardised inputs
ITERATIONS = 60


def load(path):
    rows = list(csv.DictReader(open(path, newline="")))
    solo = {}
    for r in rows:
        a, b = r["a.variant"], r["b.variant"]
        if a and not b:
            solo[a] = float(r["a.throughput"])
        if b and not a:
            solo[b] = float(r["b.throughput"])
    pairs = [r for r in rows if r["a.variant"] and r["b.variant"]]
    jobs = {j: i for i, j in enumerate(sorted(solo))}
    own = np.array([jobs[r["a.variant"]] for r in pairs])
    partner = np.array([jobs[r["b.variant"]] for r in pairs])
    slowdown = np.array([float(r["a.throughput"]) / solo[r["a.variant"]] for r in pairs])
    state = np.array([[float(r["vram_used_mib"]), float(r["utilization"])] for r in pairs])
    group = [r["x-pair"] for r in pairs]
    return len(jobs), own, partner, slowdown, state, group


def ridge(x, t, lam):
    mu, sd = x.mean(0), x.std(0)
    sd[sd < 1e-9] = 1.0
    z = (x - mu) / sd
    w = np.linalg.solve(z.T @ z + lam * len(t) * np.eye(z.shape[1]), z.T @ (t - t.mean()))
    return lambda q: t.mean() + ((q - mu) / sd) @ w


def low_rank(n, own, partner, y, rank, seed, factor_ridge):
    rng = np.random.default_rng(seed)
    a, b = np.zeros(n), np.zeros(n)
    u = 0.1 * rng.standard_normal((n, rank))
    v = 0.1 * rng.standard_normal((n, rank))
    mu = y.mean()
    t = y - mu
    penalty = factor_ridge * np.diag([0.0] + [1.0] * rank) + 1e-9 * np.eye(rank + 1)

    def side(index, other, bias_other, factors_other):
        out_bias, out_factors = np.zeros(n), np.zeros((n, rank))
        for i in range(n):
            m = index == i
            if m.any():
                x = np.hstack([np.ones((m.sum(), 1)), factors_other[other[m]]])
                w = np.linalg.solve(x.T @ x + penalty, x.T @ (t[m] - bias_other[other[m]]))
                out_bias[i], out_factors[i] = w[0], w[1:]
        return out_bias, out_factors

    for _ in range(ITERATIONS):
        a, u = side(own, partner, b, v)
        b, v = side(partner, own, a, u)
    return lambda o, p: mu + a[o] + b[p] + (u[o] * v[p]).sum(1)


def r2(pred, true):
    return 1 - ((true - pred) ** 2).sum() / ((true - true.mean()) ** 2).sum()


def main(path, factor_ridge):
    n, own, partner, slowdown, state, group = load(path)
    y = np.log(slowdown)
    eye = np.eye(n)
    groups = sorted(set(group))
    scores = {}
    for seed in SEEDS:
        order = list(groups)
        random.Random(seed).shuffle(order)
        fold_of = {g: k % FOLDS for k, g in enumerate(order)}
        fold = np.array([fold_of[g] for g in group])
        predicted = {}
        for k in range(FOLDS):
            train, test = np.where(fold != k)[0], np.where(fold == k)[0]
            own_mean = np.array([y[train][own[train] == i].mean() if (own[train] == i).any()
                                 else y[train].mean() for i in range(n)])
            rest = y[train] - own_mean[own[train]]
            inflicted = np.array([rest[partner[train] == j].mean() if (partner[train] == j).any()
                                  else 0.0 for j in range(n)])[partner][:, None]
            inputs = {
                "linear field (own + state)": np.hstack([eye[own], state]),
                "own + inflicted(partner)": np.hstack([eye[own], inflicted]),
                "own + own x inflicted": np.hstack([eye[own], eye[own] * inflicted]),
                "additive own + partner one-hot": np.hstack([eye[own], eye[partner]]),
            }
            for name, x in inputs.items():
                fit = ridge(x[train], y[train], RIDGE)
                predicted.setdefault(name, np.zeros(len(y)))[test] = fit(x[test])
            for rank in (1, 2, 3):
                fit = low_rank(n, own[train], partner[train], y[train], rank, seed, factor_ridge)
                predicted.setdefault(f"low-rank r={rank}", np.zeros(len(y)))[test] = fit(own[test], partner[test])
        for name, p in predicted.items():
            scores.setdefault(name, []).append(r2(np.exp(p), slowdown))
    print(f"{path}: {len(y)} pair rows, {len(groups)} pairs, {FOLDS} folds grouped by pair, "
          f"seeds {SEEDS}, factor ridge {factor_ridge}")
    for name, v in scores.items():
        print(f"{name:32s} slowdown R² {np.mean(v):.3f} ± {np.std(v):.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a profile CSV from scripts/gavel-to-mfsched.py")
    parser.add_argument("--factor-ridge", type=float, default=0.1,
                        help="the ridge penalty on the low-rank factors (default 0.1)")
    args = parser.parse_args()
    main(args.profile, args.factor_ridge)
