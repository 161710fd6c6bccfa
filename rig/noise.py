#!/usr/bin/env python3
"""The measurement noise of a rig profile, from repeated passes of one plan.

`rig/loop.sh repeats` measures the same joint configurations in several passes
(each pass applies every point again through the actuators). Per model this
reports how much two windows of one configuration differ (the coefficient of
variation over the passes: median and max) and the within-configuration variance
as a share of the profile's throughput variance: 1 minus that share is about the
highest throughput R² any predictor can reach on rows measured this way.

Usage: noise.py --pass P1.csv --pass P2.csv [...] --profile PROFILE.csv
"""

import argparse
import csv
import statistics as st
import sys
from collections import defaultdict

SHARED = {"format_version", "scenario", "workload", "vram_used_mib", "utilization", "contention"}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pass", dest="passes", action="append", required=True)
    p.add_argument("--profile", required=True)
    args = p.parse_args(argv)
    rows = []
    for path in args.passes:
        with open(path, newline="", encoding="utf-8") as f:
            rows += list(csv.DictReader(f))
    if not rows:
        sys.exit("no rows in the passes")
    cols = [c for c in rows[0] if c not in SHARED and not c.startswith("x-")]
    models = sorted({c.split(".", 1)[0] for c in cols if c.endswith(".throughput")})
    config_cols = ["workload"] + [c for c in cols if not c.endswith(".throughput")]
    points = defaultdict(list)
    for r in rows:
        points[tuple(r[c] for c in config_cols)].append(r)
    repeated = [v for v in points.values() if len(v) > 1]
    with open(args.profile, newline="", encoding="utf-8") as f:
        profile = [r for r in csv.DictReader(f) if all(r.get(f"{m}.throughput") for m in models)]
    print(f"{len(repeated)} configurations measured {min(len(v) for v in repeated)}-"
          f"{max(len(v) for v in repeated)} times; the profile's {len(profile)} co-location rows")
    print("model  median CV  max CV  noise share of the profile's variance  R² ceiling")
    for m in models:
        values = [[float(r[f"{m}.throughput"]) for r in v] for v in repeated]
        cvs = [st.stdev(t) / st.mean(t) for t in values if st.mean(t) > 0]
        noise = st.mean(st.variance(t) for t in values)
        total = st.variance(float(r[f"{m}.throughput"]) for r in profile)
        print(f"{m:<6} {st.median(cvs):9.3f} {max(cvs):7.3f} {noise / total:38.3f} {1 - noise / total:11.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
