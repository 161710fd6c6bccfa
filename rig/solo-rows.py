#!/usr/bin/env python3
"""Adds a model's solo rows to a co-location profile (docs/profile-format.md).

A solo row is the model measured alone: its cells filled, every other model's
empty. `profile --live` on the model's solo scenario (rig/rig.sh config writes
it: the pair's scenario without the other model) measures them as a one-model
profile; this copies those rows into the pair's profile, under the pair's
scenario, keeping the pair's header. The output is written atomically.

Usage: solo-rows.py --pair PAIR.csv --solo SOLO.csv [--solo ...] --out OUT.csv
"""

import argparse
import csv
import os
import sys
import tempfile

SHARED = ["format_version", "scenario", "workload", "vram_used_mib", "utilization", "contention"]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", required=True)
    p.add_argument("--solo", action="append", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    with open(args.pair, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        rows = list(reader)
    if not rows:
        sys.exit(f"{args.pair}: no rows")
    scenario = rows[0]["scenario"]
    for path in args.solo:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            cols = reader.fieldnames or []
            own = [c for c in cols if c not in SHARED and not c.startswith("x-")]
            unknown = [c for c in own if c not in header]
            if unknown:
                sys.exit(f"{path}: columns {unknown} are not in {args.pair}")
            for r in reader:
                row = {c: "" for c in header}
                for c in SHARED + own:
                    if c in r:
                        row[c] = r[c]
                row["scenario"] = scenario
                rows.append(row)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".csv.tmp")
    with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, args.out)
    print(f"{args.out}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
