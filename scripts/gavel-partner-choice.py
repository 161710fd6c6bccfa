#!/usr/bin/env python3
"""Does a better slowdown R² choose better co-runners? A decision on Gavel's data.

For every job A of a Gavel profile (`scripts/gavel-to-mfsched.py`), pick the
partner B that a predictor says gives the largest combined normalised
throughput, s_A + s_B (each job's throughput over its solo throughput, the
quantity Gavel's space-sharing policies maximise), among the partners measured
beside A. The predictions are `surrogate cv --export`'s out-of-fold ones, so no
predictor saw the pair it ranks. Scored on the measured throughputs:

- regret: the best measured s_A + s_B over A's partners minus the chosen one's,
  mean over the jobs and seeds (0: always the best partner);
- hits: the share of jobs whose chosen partner is the measured best;
- for reference, a partner chosen at random (the mean over A's partners).

And a harder decision, closer to a scheduler's: pair up a set of jobs drawn at
random (every job must run; each pair shares one GPU), choosing the perfect
matching with the largest predicted total, scored likewise against the best
matching measured.

Usage: scripts/gavel-partner-choice.py gavel-v100.csv EXPORT_DIR   (docs/gavel.md)
where EXPORT_DIR is `mfsched surrogate cv ... --export EXPORT_DIR`'s output.
Standard library only.
"""
import argparse
import csv
import random
import statistics
from collections import defaultdict


def load_profile(path):
    solo, pairs = {}, []
    for r in csv.DictReader(open(path, newline="")):
        a, b = r["a.variant"], r["b.variant"]
        if a and b:
            pairs.append((a, b, float(r["a.throughput"]), float(r["b.throughput"])))
        elif a:
            solo[a] = float(r["a.throughput"])
        elif b:
            solo[b] = float(r["b.throughput"])
    return solo, pairs


def load_predictions(path):
    """(seed, method, field) -> row -> {model: predicted}, rows from 1."""
    out = defaultdict(lambda: defaultdict(dict))
    for r in csv.DictReader(open(path, newline="")):
        key = (r["seed"], r["method"], r["field"])
        out[key][int(r["row"])][r["model"]] = float(r["predicted"])
    return out


def choose(solo, pairs, predicted):
    """Per job A: (regret, hit, random regret) of the partner ranked first."""
    by_job = defaultdict(list)
    for row, (a, b, ta, tb) in enumerate(pairs, start=1):
        p = predicted.get(row)
        if p is None or a not in solo or b not in solo:
            continue
        measured = ta / solo[a] + tb / solo[b]
        guess = p["a"] / solo[a] + p["b"] / solo[b]
        by_job[a].append((guess, measured))
    out = []
    for rows in by_job.values():
        if len(rows) < 2:
            continue
        best = max(m for _, m in rows)
        chosen = max(rows, key=lambda r: r[0])[1]
        out.append((best - chosen, chosen == best, best - statistics.mean(m for _, m in rows)))
    return out


def pair_values(solo, pairs, predicted):
    """{frozenset(A, B): (predicted, measured)} of s_A + s_B, both orders of a
    pair averaged; pairs of a job with itself left out."""
    sums = defaultdict(lambda: [0.0, 0.0, 0])
    for row, (a, b, ta, tb) in enumerate(pairs, start=1):
        p = predicted.get(row)
        if a == b or p is None or a not in solo or b not in solo:
            continue
        v = sums[frozenset((a, b))]
        v[0] += p["a"] / solo[a] + p["b"] / solo[b]
        v[1] += ta / solo[a] + tb / solo[b]
        v[2] += 1
    return {k: (v[0] / v[2], v[1] / v[2]) for k, v in sums.items()}


def matchings(jobs):
    if not jobs:
        yield []
        return
    first, rest = jobs[0], jobs[1:]
    for i, other in enumerate(rest):
        for m in matchings(rest[:i] + rest[i + 1:]):
            yield [frozenset((first, other))] + m


def match(values, subsets):
    """Per subset of jobs: (regret, hit, random regret) of the perfect
    matching with the largest predicted total."""
    out = []
    for jobs in subsets:
        options = list(matchings(jobs))
        if any(p not in values for m in options for p in m):
            continue
        scored = [(sum(values[p][0] for p in m), sum(values[p][1] for p in m)) for m in options]
        best = max(m for _, m in scored)
        chosen = max(scored, key=lambda r: r[0])[1]
        out.append((best - chosen, chosen == best, best - statistics.mean(m for _, m in scored)))
    return out


def main(profile, export, subsets, size):
    solo, pairs = load_profile(profile)
    predictions = load_predictions(f"{export}/predictions.csv")
    table = defaultdict(list)
    for (seed, method, field), predicted in sorted(predictions.items()):
        results = choose(solo, pairs, predicted)
        table[(method, field)].append(
            (
                statistics.mean(r[0] for r in results),
                statistics.mean(1.0 if r[1] else 0.0 for r in results),
                statistics.mean(r[2] for r in results),
                len(results),
            )
        )
    jobs = sorted(solo)
    rng = random.Random(1)
    drawn = [rng.sample(jobs, size) for _ in range(subsets)]
    matched = defaultdict(list)
    for (seed, method, field), predicted in sorted(predictions.items()):
        results = match(pair_values(solo, pairs, predicted), drawn)
        matched[(method, field)].append(
            (
                statistics.mean(r[0] for r in results),
                statistics.mean(1.0 if r[1] else 0.0 for r in results),
                statistics.mean(r[2] for r in results),
                len(results),
            )
        )
    print(f"{profile}: {len(pairs)} pair rows, out-of-fold predictions of {export}")
    report("best partner of each job", "jobs", table)
    report(f"pairing {size} jobs drawn at random ({subsets} draws, seed 1; the draws with every pair measured)",
           "sets", matched)


def report(title, unit, table):
    print(f"\n{title}: regret of s_A + s_B summed, mean ± std over the cv seeds")
    print(f"{'method':<16} {'field':<18} {unit:>4} {'regret':>16} {'hits':>14} {'random regret':>14}")
    for (method, field), per_seed in sorted(table.items()):
        regret = [s[0] for s in per_seed]
        hits = [s[1] for s in per_seed]
        rand = statistics.mean(s[2] for s in per_seed)
        sd = lambda v: statistics.pstdev(v) if len(v) > 1 else 0.0
        print(
            f"{method:<16} {field:<18} {per_seed[0][3]:>4} "
            f"{statistics.mean(regret):>8.4f} ± {sd(regret):.4f} "
            f"{statistics.mean(hits):>6.3f} ± {sd(hits):.3f} {rand:>14.4f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a profile CSV from scripts/gavel-to-mfsched.py")
    parser.add_argument("export", help="the --export directory of `mfsched surrogate cv`")
    parser.add_argument("--subsets", type=int, default=300, help="random job sets to pair up")
    parser.add_argument("--size", type=int, default=6, help="jobs per set (even)")
    args = parser.parse_args()
    main(args.profile, args.export, args.subsets, args.size)
