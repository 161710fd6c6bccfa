#!/usr/bin/env python3
"""The configuration a policy decides for a trace's first regime, as a `policy.start` line.

A daemon started in its scenario's least-memory configuration (or in the best
static one) reconfigures at its first ticks, and a `llama-server` restart
then costs seconds of service while the load is already on. This brings the
servers up in what the policy itself would decide for the trace's first
regime: `mfsched decide` on the bundle, at the profile's mean state over its
co-location rows of that regime (the state such a configuration meets there,
as far as the profile knows it), and writes each model's choice as the
daemon's `policy.start` line (rig/loop.sh run: START="$(cat FILE)").

Usage: first_decision.py --mfsched BIN --profile PROFILE.csv --bundle DIR
                         --scenario S.toml --trace TRACE --policy POLICY --out FILE
"""

import argparse
import csv
import json
import subprocess
import sys
import tomllib

from best_static import write_atomically
from drive import parse_trace


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for a in ("--mfsched", "--profile", "--bundle", "--scenario", "--trace", "--policy", "--out"):
        p.add_argument(a, required=True)
    args = p.parse_args(argv)
    with open(args.scenario, "rb") as f:
        models = [m["name"] for m in tomllib.load(f)["models"]]
    regime = parse_trace(args.trace)[0][1]

    # Co-location rows (every model measured) of the first regime.
    rows = []
    with open(args.profile, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("workload", "medium") != regime:
                continue
            if all(row.get(f"{m}.throughput", "") not in ("", None) for m in models):
                rows.append(row)
    if not rows:
        sys.exit(f"{args.profile}: no co-location row at the trace's first regime, {regime}")
    state = {"workload": regime}
    for key in ("vram_used_mib", "utilization", "contention"):
        values = [float(r[key]) for r in rows if r.get(key, "") not in ("", None)]
        if values:
            state[key] = sum(values) / len(values)

    out = subprocess.run(
        [args.mfsched, "decide", "--scenario", args.scenario, "--models", args.bundle,
         "--policy", args.policy, "--state", json.dumps(state), "--json"],
        check=True, capture_output=True, text=True).stdout
    decided = json.loads(out)
    labels = []
    for m in decided["models"]:
        knobs = m["knobs"]
        label = " ".join([knobs["variant"]] + [f"{k}={value(v)}" for k, v in sorted(knobs["knobs"].items())])
        labels.append(f'{m["model"]} = "{label}"')
    print(f"first decision ({args.policy}) at {regime}, the profile's mean state over "
          f"{len(rows)} rows {json.dumps(state)}: {'; '.join(labels)}"
          f"{'' if decided.get('floors_met') else ' (a floor predicted unmet)'}")
    write_atomically(args.out, f"start = {{ {', '.join(labels)} }}\n")
    return 0


def value(v):
    """A knob's value as the daemon's label prints it."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
