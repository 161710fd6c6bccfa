#!/usr/bin/env python3
"""The numpy peer of `mfsched bench surrogate`: the same work in plain numpy/OpenBLAS.

A reference point for the host's inference speed, not part of mfsched: it needs
numpy (`pip install numpy`) and nothing else, and no test depends on it.

It builds a scenario's shape (default paper-n5) from the scenario TOML and the zoo
(scenarios/*.toml, the grid rule of docs/scenarios.md), gives every model a random
float32 MLP input->64->32->1 (ReLU, sigmoid head; input = the model's local features
+ 6 state features, docs/model-bundle.md), and times:

  A  candidates  every VRAM-feasible joint candidate, each model's row through its
                 MLP (N x feasible rows; 393,660 on paper-n5), then an additive
                 utility (sum of quality * throughput / scale, a candidate with any
                 model under its floor is out) and the argmax;
  B  table       each model's grid through its MLP once (sum k rows; 63 on paper-n5),
                 per-model term tables, then exhaustive search over the feasible
                 candidates by summing the term tables (vectorised gather), argmax;
  MLP            rows/s of one MLP on one big batch.

The feasible candidates' per-model indices are computed once, outside the timing,
as the host computes the feasible set once per problem. The MLP weights, scales and
floors are random (seeded), so the figures are about speed, not about answers; A
and B are checked to agree with each other under the observed field.

    python3 bench/numpy_peer.py                      # paper-n5, 7 repeats
    python3 bench/numpy_peer.py --repeats 3 --json peer.json
    python3 bench/numpy_peer.py --mfsched target/release/mfsched   # cross-check the counts
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    sys.exit("numpy_peer.py needs Python 3.11 or newer (tomllib)")

try:
    import numpy as np
except ModuleNotFoundError:
    sys.exit("numpy_peer.py needs numpy: pip install numpy")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIDDEN = (64, 32)
STATE_FEATURES = 6  # workload one-hot (4), vram_used/card_vram, utilization
WORKLOADS = ("low", "medium", "high", "burst")
EXPECTED_FEASIBLE = {"paper-n5": 78732}


# --------------------------------------------------------------------------- scenario


def _knob(k: dict) -> dict:
    values = list(k["values"])
    n = len(values)
    is_cat = any(isinstance(v, str) for v in values)
    enc = k.get("encoding", "one-hot" if is_cat else "linear")
    if enc == "linear":
        default_scale = max((abs(float(v)) for v in values), default=0.0) or 1.0
    else:
        default_scale = 1.0
    return {
        "name": k["name"],
        "values": values,
        "vram": [int(x) for x in k.get("vram_mib", [0] * n)],
        "quality": [float(x) for x in k.get("quality_factors", [1.0] * n)],
        "encoding": enc,
        "scale": float(k.get("scale", default_scale)),
    }


def _encode(knob: dict, j: int) -> list[float]:
    v = knob["values"][j]
    if knob["encoding"] == "one-hot":
        return [1.0 if i == j else 0.0 for i in range(len(knob["values"]))]
    if knob["encoding"] == "log2":
        return [math.log2(float(v)) / knob["scale"]]
    return [float(v) / knob["scale"]]


def load_scenario(path: str, zoo_path: str) -> dict:
    """The scenario's models with their grids (variant slowest, last knob fastest)."""
    with open(zoo_path, "rb") as f:
        families = dict(tomllib.load(f).get("families", {}))
    with open(path, "rb") as f:
        sc = tomllib.load(f)
    families.update(sc.get("families", {}))  # the scenario's own are found first
    models = []
    for m in sc["models"]:
        fam = families[m["family"]]
        variants = fam["variants"]
        keep = m.get("variants")
        knobs = [_knob(k) for k in fam.get("knobs", [])]
        kept = [v for v in variants if keep is None or v["name"] in keep]
        table = fam.get("vram_table_mib")
        overhead = int(fam.get("runtime_overhead_mib", 0))
        rows_vram, rows_quality, rows_local = [], [], []
        full_grid = itertools.product(
            range(len(variants)), *[range(len(k["values"])) for k in knobs]
        )
        for gi, (vi, *kj) in enumerate(full_grid):
            var = variants[vi]
            if keep is not None and var["name"] not in keep:
                continue
            if table is not None:
                vram = int(table[gi])
            else:
                vram = overhead + int(var["weights_mib"])
                vram += sum(k["vram"][j] for k, j in zip(knobs, kj))
            q = float(var["quality"])
            for k, j in zip(knobs, kj):
                q *= k["quality"][j]
            local = [1.0 if v is var else 0.0 for v in kept]
            for k, j in zip(knobs, kj):
                local += _encode(k, j)
            rows_vram.append(vram)
            rows_quality.append(q)
            rows_local.append(local)
        models.append(
            {
                "name": m["name"],
                "family": m["family"],
                "vram": np.array(rows_vram, dtype=np.int64),
                "quality": np.array(rows_quality, dtype=np.float32),
                "local": np.array(rows_local, dtype=np.float32),
            }
        )
    return {
        "name": sc["name"],
        "card_vram_mib": int(sc["card"]["vram_mib"]),
        "models": models,
    }


def feasible_digits(sc: dict) -> tuple[list[np.ndarray], int]:
    """Per model, its local index in every VRAM-feasible joint candidate (C order)."""
    total = np.zeros((), dtype=np.int64)
    for m in sc["models"]:
        total = np.add.outer(total, m["vram"])
    joint = int(total.size)
    digits = np.nonzero(total <= sc["card_vram_mib"])
    return [d.astype(np.intp) for d in digits], joint


def mfsched_counts(binary: str, scenario: str) -> tuple[int, int]:
    out = subprocess.run(
        [binary, "scenario", "show", scenario],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    joint = re.search(r"^joint configurations\s+(\d+)", out, re.M)
    feas = re.search(r"^VRAM-feasible\s+(\d+)", out, re.M)
    if not joint or not feas:
        raise RuntimeError(f"`{binary} scenario show {scenario}` printed no counts")
    return int(joint.group(1)), int(feas.group(1))


# --------------------------------------------------------------------------- MLPs


def random_mlp(rng: np.random.Generator, n_in: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """He-initialised layers, each (W^T contiguous [in, out], b [out]), float32."""
    layers, width = [], n_in
    for out in (*HIDDEN, 1):
        w = rng.normal(0.0, math.sqrt(2.0 / width), size=(width, out)).astype(np.float32)
        b = rng.normal(0.0, 0.1, size=out).astype(np.float32)
        layers.append((np.ascontiguousarray(w), b))
        width = out
    return layers


def mlp_forward(layers, x: np.ndarray) -> np.ndarray:
    """sigmoid(W3 relu(W2 relu(W1 x + b1) + b2) + b3), one value per row."""
    h = x
    for w, b in layers[:-1]:
        h = h @ w
        h += b
        np.maximum(h, 0.0, out=h)
    w, b = layers[-1]
    z = h @ w
    z += b
    z = z[:, 0]
    np.negative(z, out=z)
    np.exp(z, out=z)
    z += 1.0
    np.reciprocal(z, out=z)
    return z


# --------------------------------------------------------------------------- the two paths


def path_candidates(sc, nets, digits, state, cand_vram_frac=None):
    """A: every feasible candidate's N rows through the MLPs, additive utility, argmax."""
    n = digits[0].shape[0]
    util = np.zeros(n, dtype=np.float32)
    ok = np.ones(n, dtype=bool)
    for m, net, d in zip(sc["models"], nets, digits):
        loc = m["local"].shape[1]
        x = np.empty((n, loc + STATE_FEATURES), dtype=np.float32)
        np.take(m["local"], d, axis=0, out=x[:, :loc])
        x[:, loc:] = state
        if cand_vram_frac is not None:
            x[:, loc + 4] = cand_vram_frac
        t = mlp_forward(net["layers"], x) * net["scale"]
        ok &= t >= net["floor"]
        util += m["quality"][d] * (t / net["scale"])
    util[~ok] = -np.inf
    best = int(np.argmax(util))
    return best, float(util[best])


def path_table(sc, nets, digits, state):
    """B: each grid through its MLP once, term tables, exhaustive sum over candidates."""
    terms = []
    for m, net in zip(sc["models"], nets):
        k, loc = m["local"].shape
        x = np.empty((k, loc + STATE_FEATURES), dtype=np.float32)
        x[:, :loc] = m["local"]
        x[:, loc:] = state
        t = mlp_forward(net["layers"], x) * net["scale"]
        term = m["quality"] * (t / net["scale"])
        term[t < net["floor"]] = -np.inf
        terms.append(term)
    util = terms[0][digits[0]]
    for term, d in zip(terms[1:], digits[1:]):
        util += term[d]
    best = int(np.argmax(util))
    return best, float(util[best])


# --------------------------------------------------------------------------- machine


def blas_info() -> dict:
    info = {"numpy": np.__version__}
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["blas"] = f'{deps.get("name", "?")} {deps.get("version", "?")}'
    except Exception:  # older numpy: no dict mode
        info["blas"] = "unknown"
    np.ones((64, 64), dtype=np.float32) @ np.ones((64, 64), dtype=np.float32)  # load it
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if "blas" in os.path.basename(p).lower() and p.startswith("/"):
                    libs.add(p)
    except OSError:
        pass
    threads = None
    for lib in sorted(libs):
        try:
            h = ctypes.CDLL(lib)
        except OSError:
            continue
        for sym in (
            "openblas_get_num_threads",
            "scipy_openblas_get_num_threads64_",
            "scipy_openblas_get_num_threads",
            "openblas_get_num_threads64_",
        ):
            fn = getattr(h, sym, None)
            if fn is not None:
                fn.restype = ctypes.c_int
                threads = int(fn())
                break
        if threads is not None:
            break
    info["blas_threads"] = threads
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if var in os.environ:
            info[var] = os.environ[var]
    return info


def timed(fn, repeats: int) -> tuple[list[float], object]:
    result = fn()  # warm-up, not counted
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, result


def summary(times: list[float]) -> dict:
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "runs_ms": times,
    }


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default=os.path.join(REPO, "scenarios", "paper-n5.toml"),
                    help="scenario TOML (default: scenarios/paper-n5.toml)")
    ap.add_argument("--zoo", default=os.path.join(REPO, "scenarios", "zoo.toml"),
                    help="the zoo TOML (default: scenarios/zoo.toml)")
    ap.add_argument("--mfsched", metavar="PATH",
                    help="an mfsched binary: check the joint and feasible counts against "
                         "`PATH scenario show`")
    ap.add_argument("--repeats", type=int, default=7, help="timed runs per path (median)")
    ap.add_argument("--rows", type=int, default=0,
                    help="rows of the one-batch MLP measurement (default: N x feasible)")
    ap.add_argument("--field", choices=("observed", "candidate"), default="observed",
                    help="path A's state: the observed one for every candidate (A and B "
                         "must agree) or each candidate's own VRAM fraction")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="OUT", help="also write the numbers as JSON")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")

    load_before = os.getloadavg()
    sc = load_scenario(args.scenario, args.zoo)
    card = sc["card_vram_mib"]
    digits, joint = feasible_digits(sc)
    n_feasible = int(digits[0].shape[0])
    n_models = len(sc["models"])
    rows_a = n_models * n_feasible
    grid = [int(m["vram"].shape[0]) for m in sc["models"]]

    expected = EXPECTED_FEASIBLE.get(sc["name"])
    if expected is not None and n_feasible != expected:
        print(f"error: {sc['name']}: {n_feasible} feasible candidates, expected {expected}",
              file=sys.stderr)
        return 1
    checked = "no (--mfsched not given)"
    if args.mfsched:
        mj, mf = mfsched_counts(args.mfsched, args.scenario)
        if (mj, mf) != (joint, n_feasible):
            print(f"error: mfsched says joint {mj}, feasible {mf}; "
                  f"this script built joint {joint}, feasible {n_feasible}", file=sys.stderr)
            return 1
        checked = "yes, same joint and feasible counts"

    rng = np.random.default_rng(args.seed)
    current = [int(np.argmin(m["vram"])) for m in sc["models"]]  # least-memory start
    used = sum(int(m["vram"][c]) for m, c in zip(sc["models"], current))
    state = np.array([0.0, 1.0, 0.0, 0.0, used / card, 0.5], dtype=np.float32)  # medium
    nets = []
    for m in sc["models"]:
        n_in = m["local"].shape[1] + STATE_FEATURES
        layers = random_mlp(rng, n_in)
        scale = np.float32(rng.uniform(50.0, 2000.0))
        x = np.empty((m["local"].shape[0], n_in), dtype=np.float32)
        x[:, : m["local"].shape[1]] = m["local"]
        x[:, m["local"].shape[1]:] = state
        t = mlp_forward(layers, x) * scale
        floor = np.float32(np.percentile(t, 25))  # like the host's default P25 floor
        nets.append({"layers": layers, "scale": scale, "floor": floor, "n_in": n_in})

    cand_frac = None
    if args.field == "candidate":
        fp = np.zeros(n_feasible, dtype=np.int64)
        for m, d in zip(sc["models"], digits):
            fp += m["vram"][d]
        cand_frac = (fp / card).astype(np.float32)

    blas = blas_info()
    times_a, (best_a, u_a) = timed(
        lambda: path_candidates(sc, nets, digits, state, cand_frac), args.repeats)
    times_b, (best_b, u_b) = timed(lambda: path_table(sc, nets, digits, state), args.repeats)

    big_rows = args.rows or rows_a
    net0 = nets[0]
    xb = rng.random((big_rows, net0["n_in"]), dtype=np.float32)
    times_m, _ = timed(lambda: mlp_forward(net0["layers"], xb), args.repeats)
    load_after = os.getloadavg()

    a, b, mm = summary(times_a), summary(times_b), summary(times_m)
    a["rows"], a["rows_per_s"] = rows_a, rows_a / (a["median_ms"] / 1e3)
    b["rows"], b["candidates"] = sum(grid), n_feasible
    mm["rows"], mm["rows_per_s"] = big_rows, big_rows / (mm["median_ms"] / 1e3)
    agree = None
    if args.field == "observed":
        agree = best_a == best_b or math.isclose(u_a, u_b, rel_tol=1e-5)
    best_cfg = [int(d[best_b]) for d in digits]

    print(f"numpy peer   {sc['name']}: {n_models} models, grid "
          f"{'/'.join(map(str, grid))}, joint {joint}, VRAM-feasible {n_feasible} "
          f"(card {card} MiB); checked against mfsched: {checked}")
    print(f"numpy        {blas['numpy']}, BLAS {blas['blas']}, "
          f"BLAS threads {blas['blas_threads']}"
          + "".join(f", {k}={blas[k]}" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
                    if k in blas))
    print(f"machine      {platform.machine()}, {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}; load average {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f} before, {load_after[0]:.2f} "
          f"{load_after[1]:.2f} {load_after[2]:.2f} after")
    print(f"MLPs         random float32 in->{'->'.join(map(str, HIDDEN))}->1, ReLU, sigmoid; "
          f"inputs {'/'.join(str(n['n_in']) for n in nets)}; seed {args.seed}; "
          f"{args.repeats} repeats, medians; field for A: {args.field}")
    print()
    print(f"{'path':<34}{'rows':>9}{'median ms':>12}{'min ms':>10}{'max ms':>10}{'rows/s':>12}")
    print(f"{'A every candidate + utility':<34}{rows_a:>9}{a['median_ms']:>12.2f}"
          f"{a['min_ms']:>10.2f}{a['max_ms']:>10.2f}{a['rows_per_s']:>12.3e}")
    print(f"{'B table + exhaustive':<34}{sum(grid):>9}{b['median_ms']:>12.2f}"
          f"{b['min_ms']:>10.2f}{b['max_ms']:>10.2f}{'':>12}")
    print(f"{'MLP one batch (' + sc['models'][0]['name'] + ')':<34}{big_rows:>9}"
          f"{mm['median_ms']:>12.2f}{mm['min_ms']:>10.2f}{mm['max_ms']:>10.2f}"
          f"{mm['rows_per_s']:>12.3e}")
    print()
    print(f"A / B time   {a['median_ms'] / b['median_ms']:.1f}x")
    if agree is not None:
        print(f"A and B      {'agree' if agree else 'DISAGREE'}: best candidate {best_cfg}, "
              f"utility {u_b:.6f} (A {u_a:.6f})")
    else:
        print(f"A and B      not compared (field candidate): A utility {u_a:.6f}, "
              f"B {u_b:.6f}")

    if args.json:
        doc = {
            "scenario": sc["name"],
            "models": n_models,
            "grid": grid,
            "joint": joint,
            "feasible": n_feasible,
            "card_vram_mib": card,
            "checked_against_mfsched": bool(args.mfsched),
            "seed": args.seed,
            "repeats": args.repeats,
            "field": args.field,
            "hidden": list(HIDDEN),
            "inputs": [n["n_in"] for n in nets],
            "candidates": a,
            "table": b,
            "mlp_batch": mm,
            "agree": agree,
            "best": best_cfg,
            "utility": u_b,
            "machine": {
                "cpus": os.cpu_count(),
                "arch": platform.machine(),
                "python": platform.python_version(),
                "loadavg_before": list(load_before),
                "loadavg_after": list(load_after),
                **blas,
            },
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    return 0 if agree in (None, True) else 1


if __name__ == "__main__":
    sys.exit(main())
