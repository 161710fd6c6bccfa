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

With --per-model each model's configuration is chosen on its own, the same
way, from the rows where the models run together and it runs that
configuration (whatever its co-runners run there), by its own utility term and
its own share of rows under its floor. A plan of R rows over the regimes
rarely measures one joint configuration of three models twice (rig-n3 has
768), while each model's 8 to 12 configurations recur in every regime.

With --start FILE it also writes the choice as the daemon's `policy.start`
line (each model's configuration label): `hold` on the full scenario and its
bundle then keeps it, and the run's predictions come from the same bundle as
the policies' runs (rig/loop.sh run: START="$(cat FILE)").

Usage: best_static.py --profile PROFILE.csv --bundle DIR --scenario S.toml
                      --trace TRACE --out STATIC.toml [--per-model] [--start FILE]
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
    p.add_argument("--per-model", action="store_true")
    p.add_argument("--start")
    args = p.parse_args(argv)
    with open(args.scenario, "rb") as f:
        scen = tomllib.load(f)
    u = Utility(args.scenario, args.bundle)
    models, fam = u.models, u.family
    share = defaultdict(float)
    for secs, regime in parse_trace(args.trace):
        share[regime] += secs

    # unit -> [(regime, score, violated)]: a unit is a joint configuration, or
    # with --per-model one model's configuration.
    cells = defaultdict(list)
    with open(args.profile, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if any(row.get(f"{m}.throughput", "") == "" for m in models):
                continue  # a solo row
            joint, score, violated = [], 0.0, False
            for m in models:
                knobs = [k["name"] for k in fam[m]["knobs"]]
                variant = row[f"{m}.variant"]
                config = (m, variant, tuple((k, row[f"{m}.{k}"]) for k in knobs))
                joint.append(config)
                t = float(row[f"{m}.throughput"])
                term, under = u.term(m, variant, t), t < u.floors[m]
                if args.per_model:
                    cells[config].append((row["workload"], term, under))
                score += term
                violated |= under
            if not args.per_model:
                cells[tuple(joint)].append((row["workload"], score, violated))

    def ranked(rows, per_row):
        """(key, mean, regimes) of a unit's rows, or None below two regimes:
        fewer violations (a count, or with per_row a share of the rows) first,
        then the trace-weighted mean score."""
        regimes = {r for r, _, _ in rows}
        if len(regimes) < 2:
            return None
        weight = sum(share[r] for r in regimes) or 1.0
        by_regime = defaultdict(list)
        for r, s, _ in rows:
            by_regime[r].append(s)
        mean = sum(share[r] / weight * sum(v) / len(v) for r, v in by_regime.items())
        violations = sum(v for _, _, v in rows)
        return (-(violations / len(rows) if per_row else violations), mean), mean, sorted(regimes)

    def best_of(units):
        best = None
        for unit in units:
            r = ranked(cells[unit], args.per_model)
            if r is not None and (best is None or r[0] > best[0][0]):
                best = (r, unit)
        return best

    def shown(config):
        m, v, ks = config
        return f"{m}: {v} " + " ".join(f"{k}={x}" for k, x in ks)

    if args.per_model:
        joint = []
        for m in models:
            best = best_of([c for c in cells if c[0] == m])
            if best is None:
                sys.exit(f"{args.profile}: no configuration of {m} measured at two regimes or more")
            (key, mean, regimes), config = best
            joint.append(config)
            print(f"best static {shown(config)}: trace-weighted measured term {mean:.3f} over "
                  f"{', '.join(regimes)}; {-key[0]:.0%} of its {len(cells[config])} rows under its floor")
    else:
        best = best_of(list(cells))
        if best is None:
            sys.exit(f"{args.profile}: no joint configuration measured at two regimes or more")
        ((neg_violations, _), mean, regimes), joint = best
        print(f"best static: {' | '.join(shown(c) for c in joint)}"
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
    write_atomically(args.out, text)
    if args.start:
        # The label the daemon shows: the variant, then the knobs by name.
        labels = [f'{m} = "{" ".join([v] + [f"{k}={x}" for k, x in sorted(ks)])}"' for m, v, ks in joint]
        write_atomically(args.start, f"start = {{ {', '.join(labels)} }}\n")
    return 0


def write_atomically(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
