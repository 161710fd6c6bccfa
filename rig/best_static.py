#!/usr/bin/env python3
"""The best static configuration from a rig profile, as a one-configuration scenario.

A static deployment picks one joint configuration and keeps it whatever the
load. This picks it from the same live profile the surrogate was trained on:
every pair row is scored with the published utility (rig/utility.py, the bundle's throughput ranges, no reconfiguration cost: a static
configuration never changes), a row under a model's SLA floor scores as a
violation, and each joint configuration measured at two regimes or more gets
the trace-weighted mean of its rows' scores (the weights: each regime's share
of the trace's seconds, renormalised over the regimes it was measured at),
its violations counted. The best is the configuration with the fewest
violations, then the highest mean. It is written as a scenario whose models
each have that one configuration, so any policy keeps it.

Usage: best_static.py --profile PROFILE.csv --bundle DIR --scenario S.toml
                      --trace TRACE --out STATIC.toml
"""

import argparse
import csv
import os
import re
import sys
import tempfile
import tomllib
from collections import defaultdict

from drive import parse_trace
from utility import Utility


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for a in ("--profile", "--bundle", "--scenario", "--trace", "--out"):
        p.add_argument(a, required=True)
    args = p.parse_args(argv)
    with open(args.scenario, "rb") as f:
        scen = tomllib.load(f)
    u = Utility(args.scenario, args.bundle)
    models, fam = u.models, u.family
    share = defaultdict(float)
    for secs, regime in parse_trace(args.trace):
        share[regime] += secs

    cells = defaultdict(list)  # joint -> [(regime, score, violated)]
    with open(args.profile, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if any(row.get(f"{m}.throughput", "") == "" for m in models):
                continue  # a solo row
            joint, score, violated = [], 0.0, False
            for m in models:
                knobs = [k["name"] for k in fam[m]["knobs"]]
                variant = row[f"{m}.variant"]
                joint.append((m, variant, tuple((k, row[f"{m}.{k}"]) for k in knobs)))
                t = float(row[f"{m}.throughput"])
                score += u.term(m, variant, t)
                violated |= t < u.floors[m]
            cells[tuple(joint)].append((row["workload"], score, violated))

    best = None
    for joint, rows in cells.items():
        regimes = {r for r, _, _ in rows}
        if len(regimes) < 2:
            continue
        weight = sum(share[r] for r in regimes) or 1.0
        by_regime = defaultdict(list)
        for r, s, _ in rows:
            by_regime[r].append(s)
        mean = sum(share[r] / weight * sum(v) / len(v) for r, v in by_regime.items())
        violations = sum(v for _, _, v in rows)
        key = (-violations, mean)
        if best is None or key > best[0]:
            best = (key, joint, sorted(regimes))
    if best is None:
        sys.exit(f"{args.profile}: no joint configuration measured at two regimes or more")
    (neg_violations, mean), joint, regimes = best
    print(f"best static: {' | '.join(f'{m}: {v} ' + ' '.join(f'{k}={x}' for k, x in ks) for m, v, ks in joint)}"
          f"; trace-weighted measured utility {mean:.3f} over {', '.join(regimes)}; {-neg_violations} row(s) under a floor")

    # The scenario with each model's family cut to the one configuration.
    with open(args.scenario, encoding="utf-8") as f:
        text = f.read()
    for m, variant, knobs in joint:
        family = next(x["family"] for x in scen["models"] if x["name"] == m)
        section = re.search(rf"(?ms)^\[families\.{re.escape(family)}\]\n.*?(?=^\[|\Z)", text)
        body = section.group(0)
        body = re.sub(r'(?ms)^variants = \[.*?^\]\n',
                      lambda _: "variants = [\n" + "".join(
                          f"  {{ name = \"{v['name']}\", weights_mib = {v['weights_mib']}, quality = {v['quality']} }},\n"
                          for v in fam[m]["variants"] if v["name"] == variant) + "]\n", body)
        for k, value in knobs:
            body = re.sub(rf'(?m)^(  {{ name = "{re.escape(k)}", values = )\[[^\]]*\]', rf"\g<1>[{value}]", body)
        text = text.replace(section.group(0), body)
    text = re.sub(r'(?m)^name = "([^"]+)"', r'name = "\1-static"', text, count=1)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.out)), suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
