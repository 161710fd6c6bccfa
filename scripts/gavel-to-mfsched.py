#!/usr/bin/env python3
"""Convert Gavel's published throughput measurements into an mfsched scenario and profile.

Usage:
    python3 scripts/gavel-to-mfsched.py [--data PATH] --gpu {k80,p100,v100} --out DIR

Writes DIR/gavel-<gpu>.toml (a scenario) and DIR/gavel-<gpu>.csv (a profile CSV,
format version 2), each atomically (a temporary file beside it, then a rename), and
prints one summary line. Bad input (a missing or unreadable file, an unknown GPU) is
one line on stderr and exit status 1. The same input gives the same bytes.
See docs/gavel.md for the full account and the commands that use the output.

The data
--------
`simulation_throughputs.json` from the public repository stanford-futuredata/gavel
(scheduler/simulation_throughputs.json, MIT licence, Copyright (c) 2020 Stanford
Future Data Systems). The project keeps it outside the repository, in
../shared/data/gavel/ beside the checkout; the default --data is that file, found from
this script's own location (<script dir>/../../shared/data/gavel/...). Nothing from
it, and nothing derived from it, belongs in the repository: run this script instead.

Shape: GPU type -> job key "('ResNet-18 (batch size 64)', 1)" (job type, scale
factor) -> "null": the job's solo throughput in steps/s, and for each co-located job
key, [own, other]: both jobs' throughputs, steps/s, while the two share the GPU.
0.0 marks a pair that was not run. The file has no utilisation and no memory.

What is used:
- the consolidated GPU types k80, p100 and v100; the *_unconsolidated entries are
  multi-server placements of distributed jobs and are skipped;
- scale factor 1 only (26 jobs). A scale factor s > 1 is one job spread over s GPUs,
  a different placement with its own throughput, not a co-location on one GPU.

The scenario (DIR/gavel-<gpu>.toml)
-----------------------------------
- name `gavel-<gpu>`; the card is the GPU with its memory as nvidia-smi reports it:
  K80 11441 MiB (one of the board's two 12 GB dies; Gavel schedules per die),
  P100 16280 MiB (16 GB), V100 16160 MiB (16 GB).
- one family `gavel-job` (kind "training", unit "steps/s") with one variant per job,
  named by a lowercase slug of the job type and its batch size: `resnet18-bs16`,
  `resnet50-bs128`, `transformer-bs64`, `lm-bs20`, `recommendation-bs4096`, and
  `a3c`, `cyclegan` (no batch size in their keys). Variants are ordered by slug of
  the job type, then by batch size.
- no knobs (`knobs = []`): the data measures whole jobs, nothing tunable inside one.
- quality 1.0 for every variant: the data has no notion of quality.
- runtime_overhead_mib = RUNTIME_OVERHEAD_MIB (300): the CUDA context and the
  framework's allocator and library workspaces of one training process, rounded.
- two models, `a` and `b`, both of family `gavel-job`: the two slots of one GPU.

Each variant's weights_mib is an a-priori estimate of the job's device memory
(the data has none), from the constants in JOB_TYPES:

    weights_mib = ceil(scale * (params_m * 1e6 * 4 B * 4 / 2**20
                                + act_mib_per_sample * batch
                                + fixed_act_mib))

params_m: rough public parameter counts, in millions, of the models Gavel trains
(ResNet-18 on CIFAR-10 11.2, ResNet-50 on ImageNet 25.6, the Transformer of
attention-is-all-you-need-pytorch on Multi30k 52, the 2-layer 200-unit LSTM on
Wikitext-2 with its 33k-word embedding and decoder 14, the recoder autoencoder on
MovieLens-20M 20, the A3C Pong network 1.0, CycleGAN's two generators and two
discriminators 28.3). Four bytes per parameter, times four for weights, gradients
and two optimiser moments. act_mib_per_sample: the activations kept for the
backward pass per sample of the batch (32x32 images 6, 224x224 images 100, a
Multi30k sentence pair 16, a 35-token Wikitext-2 window with its 33k-way softmax 14,
a MovieLens item vector 0.25). A3C and CycleGAN have no batch size in the data
(batch = 0 here) and a fixed activation term instead (A3C's four workers 200 MiB,
CycleGAN at 256x256 with batch 1 2500 MiB).

The scale. Every measured pair did run, so both jobs fit on the card together:
2 * RUNTIME_OVERHEAD_MIB + weights_mib(A) + weights_mib(B) <= card. Where the raw
estimates break that for a measured pair (or a single job does not fit alone), all
of the GPU's estimates are multiplied by one factor, scale = the largest that makes
every measured pair and every single job fit (rounded down to three decimals);
otherwise scale = 1. The factor is in the scenario file's comment and in the summary
line. With the constants below it is 0.844 on K80 (the raw ResNet-50 batch 128
estimate, 13191 MiB, ran alone on an 11441 MiB die), 0.934 on P100 (ResNet-50
batch 32 beside batch 128 ran) and 1.000 on V100. So a job's declared memory
differs between the three scenarios; within one scenario it is one consistent
estimate.

The profile (DIR/gavel-<gpu>.csv)
---------------------------------
Columns: format_version (2), scenario, vram_used_mib, utilization, a.variant,
a.throughput, b.variant, b.throughput, x-pair, x-source. No `workload` column: the
data has one load regime, and the column is optional in the profile reader.

- scenario: the scenario file's name as it sits beside the CSV (`gavel-v100.toml`).
  mfsched reads a path in that column relative to the working directory, so the
  column loads on its own when a command runs in DIR; anywhere else pass
  `--scenario DIR/gavel-<gpu>.toml`, which takes precedence over the column.
- co-location rows: for each unordered pair {A, B} measured in both directions
  (A's entry for B and B's entry for A both have both throughputs > 0), two rows,
  (a=A, b=B) with A's entry for B ([A's, B's]) and (a=B, b=A) with B's entry for A.
  A job paired with itself gives one row. The summary counts entries where the two
  directions disagree (asymmetric), pairs measured in one direction only (left out),
  and the co-located throughputs (two per measured pair) that are exactly the job's
  solo throughput (on V100 some are: they look capped at the solo value; they are
  kept as published).
- solo rows: for each job J, (a=J, b empty) and (a empty, b=J), with J's solo
  throughput. A model that does not run has its variant and throughput cells empty
  (and would have its knob cells empty; there are none here).
- x-pair: the unordered pair id, the two variant names sorted and joined by "|"
  (`lm-bs20|resnet18-bs16`), the same on both orders of a pair, so that grouped
  cross-validation keeps both orders in one fold; a solo row's x-pair is J alone.
- x-source: "gavel <gpu>".

The state columns are derived a priori, because the data has neither:
- vram_used_mib = sum over the running jobs of (runtime_overhead_mib + weights_mib),
  exactly the memory the scenario declares for that configuration, so the same
  number mfsched itself computes for it.
- utilization = (sum over the running jobs of u_j) / 2, the mean demand of the
  GPU's two slots (an idle slot demands 0), where
  u_j = solo steps/s * batch size / the best such solo samples/s over the batch
  sizes of the same job type (the type's fastest batch size has u = 1.0; A3C and
  CycleGAN, with one batch size each, have u = 1.0). It uses solo measurements only,
  which exist before any pair is run. Rounded to 4 decimals. (The union
  1 - prod_j (1 - u_j) was tried first: it is 1.0 for every pair holding a job at
  its type's fastest batch size, about half of the rows, so the state could not
  tell those pairs apart; the mean keeps them apart.)

Rows are sorted: co-location rows by (a, b) in variant order, then the solo rows of
`a`, then those of `b`. Throughputs are written as Python's shortest round-trip repr
of the JSON numbers.
"""

import argparse
import ast
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

SCRIPT_DIR = Path(__file__).resolve().parent
DEFAULT_DATA = SCRIPT_DIR / ".." / ".." / "shared" / "data" / "gavel" / "simulation_throughputs.json"

# GPU type -> (card name, memory in MiB as nvidia-smi reports it).
CARDS = {
    "k80": ("NVIDIA Tesla K80 (one 12 GB die)", 11441),
    "p100": ("NVIDIA Tesla P100 (16 GB)", 16280),
    "v100": ("NVIDIA Tesla V100 (16 GB)", 16160),
}

RUNTIME_OVERHEAD_MIB = 300
PARAM_BYTES = 4  # fp32
STATE_COPIES = 4  # weights, gradients, two optimiser moments
MIB = 2**20

# Job type (as Gavel names it) -> (slug, params in millions, activation MiB per
# sample, fixed activation MiB).
JOB_TYPES = {
    "ResNet-18": ("resnet18", 11.2, 6.0, 0.0),
    "ResNet-50": ("resnet50", 25.6, 100.0, 0.0),
    "Transformer": ("transformer", 52.0, 16.0, 0.0),
    "LM": ("lm", 14.0, 14.0, 0.0),
    "Recommendation": ("recommendation", 20.0, 0.25, 0.0),
    "A3C": ("a3c", 1.0, 0.0, 200.0),
    "CycleGAN": ("cyclegan", 28.3, 0.0, 2500.0),
}

JOB_NAME = re.compile(r"^(?P<type>.+?)(?: \(batch size (?P<batch>\d+)\))?$")


class InputError(Exception):
    """A problem with the input, reported as one line."""


class Job:
    def __init__(self, key, job_type, batch, solo):
        self.key = key
        self.type = job_type
        self.batch = batch  # 0 where the data gives none
        slug = JOB_TYPES[job_type][0]
        self.variant = f"{slug}-bs{batch}" if batch else slug
        self.sort_key = (slug, batch)
        self.solo = solo
        self.weights_mib = 0
        self.util = 0.0


def raw_memory_mib(job):
    _, params_m, act_per_sample, fixed = JOB_TYPES[job.type]
    return params_m * 1e6 * PARAM_BYTES * STATE_COPIES / MIB + act_per_sample * job.batch + fixed


def load(path, gpu):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (pass --data PATH to simulation_throughputs.json)")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read it: {e}")
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON: {e}")
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object of GPU types")
    known = sorted(g for g in data if g in CARDS)
    if gpu not in known:
        raise InputError(f"unknown gpu '{gpu}' (known: {', '.join(known) or 'none'})")
    if not isinstance(data[gpu], dict):
        raise InputError(f"{path}: '{gpu}' is not a JSON object of jobs")
    return data[gpu]


def parse_key(key):
    try:
        name, scale = ast.literal_eval(key)
    except (ValueError, SyntaxError, TypeError):
        raise InputError(f"unexpected job key {key!r}")
    m = JOB_NAME.match(name)
    if not m or m.group("type") not in JOB_TYPES:
        raise InputError(f"unknown job type in key {key!r} (known: {', '.join(JOB_TYPES)})")
    return m.group("type"), int(m.group("batch") or 0), scale


def build(table, gpu):
    jobs = []
    for key, entry in table.items():
        job_type, batch, scale = parse_key(key)
        if scale != 1:
            continue
        solo = entry.get("null") if isinstance(entry, dict) else None
        if not isinstance(solo, (int, float)) or not solo > 0:
            raise InputError(f"{gpu}: job {key!r} has no positive solo throughput")
        jobs.append(Job(key, job_type, batch, float(solo)))
    if not jobs:
        raise InputError(f"{gpu}: no jobs at scale factor 1")
    jobs.sort(key=lambda j: j.sort_key)
    by_key = {j.key: j for j in jobs}

    def entry(a, b):
        v = table[a.key].get(b.key)
        if isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
            return float(v[0]), float(v[1])
        return None

    def measured(v):
        return v is not None and v[0] > 0 and v[1] > 0

    pairs = []  # (A, B, A's entry for B, B's entry for A), A <= B in variant order
    asymmetric = one_sided = 0
    for i, a in enumerate(jobs):
        for b in jobs[i:]:
            ab, ba = entry(a, b), entry(b, a)
            if measured(ab) and measured(ba):
                if a is not b and (ab[0] != ba[1] or ab[1] != ba[0]):
                    asymmetric += 1
                pairs.append((a, b, ab, ba))
            elif measured(ab) or measured(ba):
                one_sided += 1
    unmeasured = len(jobs) * (len(jobs) + 1) // 2 - len(pairs) - one_sided
    return jobs, pairs, asymmetric, one_sided, unmeasured


def assign_memory(jobs, pairs, vram):
    raw = {j.key: raw_memory_mib(j) for j in jobs}
    budget_pair = vram - 2 * RUNTIME_OVERHEAD_MIB
    budget_solo = vram - RUNTIME_OVERHEAD_MIB
    scale = 1.0
    need = max((raw[a.key] + raw[b.key] for a, b, _, _ in pairs), default=0.0)
    if need > budget_pair:
        scale = min(scale, budget_pair / need)
    biggest = max(raw.values())
    if biggest > budget_solo:
        scale = min(scale, budget_solo / biggest)
    scale = math.floor(scale * 1000) / 1000  # three decimals, rounded down
    for j in jobs:
        j.weights_mib = max(1, math.ceil(scale * raw[j.key]))
    # ceil may add a MiB per job: shave the factor until every constraint holds.
    while not fits(jobs, pairs, vram):
        scale = round(scale - 0.001, 3)
        if scale <= 0:
            raise InputError("cannot fit the memory estimates on the card")
        for j in jobs:
            j.weights_mib = max(1, math.ceil(scale * raw[j.key]))
    return scale


def fits(jobs, pairs, vram):
    if any(RUNTIME_OVERHEAD_MIB + j.weights_mib > vram for j in jobs):
        return False
    return all(2 * RUNTIME_OVERHEAD_MIB + a.weights_mib + b.weights_mib <= vram for a, b, _, _ in pairs)


def assign_utilisation(jobs):
    best = {}
    for j in jobs:
        samples = j.solo * (j.batch or 1)
        best[j.type] = max(best.get(j.type, 0.0), samples)
    for j in jobs:
        j.util = j.solo * (j.batch or 1) / best[j.type]


def state(running):
    vram = sum(RUNTIME_OVERHEAD_MIB + j.weights_mib for j in running)
    # The mean over the two slots: a union of independent claims saturates at 1.0
    # for every pair with a job at its type's fastest batch size (docstring).
    return str(vram), repr(round(sum(j.util for j in running) / 2.0, 4))


def num(x):
    return repr(float(x))


def rows(jobs, pairs, scenario_file, source):
    """The profile rows (without the workload column), in output order."""
    colocated, solo_a, solo_b = [], [], []
    for a, b, ab, ba in pairs:
        pair_id = "|".join(sorted([a.variant, b.variant]))
        orders = [(a, b, ab)] if a is b else [(a, b, ab), (b, a, ba)]
        for x, y, v in orders:
            vram, util = state([x, y])
            colocated.append(((x.sort_key, y.sort_key), [
                "2", scenario_file, vram, util, x.variant, num(v[0]), y.variant, num(v[1]), pair_id, source,
            ]))
    colocated.sort(key=lambda r: r[0])
    for j in jobs:
        vram, util = state([j])
        solo_a.append(["2", scenario_file, vram, util, j.variant, num(j.solo), "", "", j.variant, source])
        solo_b.append(["2", scenario_file, vram, util, "", "", j.variant, num(j.solo), j.variant, source])
    return [r for _, r in colocated], solo_a + solo_b


HEADER = ["format_version", "scenario", "vram_used_mib", "utilization", "a.variant", "a.throughput",
          "b.variant", "b.throughput", "x-pair", "x-source"]


def csv_cell(text):
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_text(header, records):
    return "".join(",".join(csv_cell(c) for c in r) + "\n" for r in [header] + records)


def toml_str(text):
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def scenario_text(gpu, jobs, scale):
    card_name, vram = CARDS[gpu]
    lines = [
        f"# Generated by scripts/gavel-to-mfsched.py from Gavel's simulation_throughputs.json ({gpu}).",
        "# weights_mib: a-priori memory estimates (see the script's docstring and docs/gavel.md),",
        f"# multiplied by {scale:.3f} so that every measured pair fits on the card.",
        f"name = {toml_str('gavel-' + gpu)}",
        "description = " + toml_str(
            f"Gavel's published {gpu} training throughputs (MIT, stanford-futuredata/gavel), "
            "two jobs per GPU, converted by scripts/gavel-to-mfsched.py."),
        "",
        "[card]",
        f"name = {toml_str(card_name)}",
        f"vram_mib = {vram}",
        "",
        "[families.gavel-job]",
        'kind = "training"',
        'unit = "steps/s"',
        f"runtime_overhead_mib = {RUNTIME_OVERHEAD_MIB}",
        "variants = [",
    ]
    for j in jobs:
        lines.append(f"  {{ name = {toml_str(j.variant)}, weights_mib = {j.weights_mib}, quality = 1.0 }},")
    lines += [
        "]",
        "knobs = []",
        "",
        "[[models]]",
        'name = "a"',
        'family = "gavel-job"',
        "",
        "[[models]]",
        'name = "b"',
        'family = "gavel-job"',
    ]
    return "\n".join(lines) + "\n"


def write_atomic(path, text):
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Convert Gavel's simulation_throughputs.json into an mfsched scenario "
                    "(gavel-GPU.toml) and profile CSV v2 (gavel-GPU.csv). See docs/gavel.md.")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="Gavel's simulation_throughputs.json (default: ../shared/data/gavel/ "
                             "beside the repository, found from this script's location)")
    parser.add_argument("--gpu", required=True, help="the GPU type: k80, p100 or v100")
    parser.add_argument("--out", required=True, type=Path, help="the output directory (created if missing)")
    args = parser.parse_args(argv)

    try:
        gpu = args.gpu
        if gpu not in CARDS:
            raise InputError(f"unknown gpu '{gpu}' (known: {', '.join(sorted(CARDS))})")
        data_path = Path(os.path.normpath(args.data))
        table = load(data_path, gpu)
        jobs, pairs, asymmetric, one_sided, unmeasured = build(table, gpu)
        vram = CARDS[gpu][1]
        scale = assign_memory(jobs, pairs, vram)
        assign_utilisation(jobs)

        scenario_file = f"gavel-{gpu}.toml"
        colocated, solo = rows(jobs, pairs, scenario_file, f"gavel {gpu}")
        at_solo = sum(1 for a, b, ab, ba in pairs for x, v in ((a, ab[0]), (b, ab[1])) if v == x.solo)

        try:
            args.out.mkdir(parents=True, exist_ok=True)
            write_atomic(args.out / scenario_file, scenario_text(gpu, jobs, scale))
            write_atomic(args.out / f"gavel-{gpu}.csv", csv_text(HEADER, colocated + solo))
        except OSError as e:
            raise InputError(f"{args.out}: cannot write: {e}")
    except InputError as e:
        print(f"gavel-to-mfsched: {e}", file=sys.stderr)
        return 1

    print(f"gavel-{gpu}: {len(jobs)} jobs, {len(colocated)} pair rows "
          f"({len(pairs)} measured pairs, {unmeasured} not run), {len(solo)} solo rows; "
          f"memory scale {scale:.3f}; {asymmetric} asymmetric, {one_sided} one-sided pairs; "
          f"{at_solo} of {2 * len(pairs)} co-located throughputs equal the solo value -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
