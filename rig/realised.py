#!/usr/bin/env python3
"""Realised utility of a rig run, from the servers' measured throughputs.

The daemon's `/v1/history` (dumped by rig/loop.sh every few minutes: it keeps
the newest 600 ticks) has, per tick, the configuration running after it and
each model's throughput as its own server reported it over the period before
it. So tick t's measurement belongs to the configuration tick t-1 left
running. This scores those pairs with the published utility
(rig/utility.py: plugins/utility/src/lib.rs's formula, with the bundle's
per-variant throughput ranges and the scenario's quality and reconfiguration costs):

    J = sum_i q_i(v)/q_i,max * clamp((T_i - min_i,v)/(max_i,v - min_i,v), 0, 1) - sum_i r_i

and counts floor violations (a measured T_i under the model's sla_floor). A
model whose throughput the daemon could not read at a tick (its server down
while it restarts, its counter reset, its page too slow) is scored as serving
0 there (--missing zero, the default since 2026-12-06; --missing skip leaves
such ticks out, as the figures before then did, which scores a run that
restarts a server often on its good ticks only). The
reward (the sum) and the reconfiguration penalty are reported apart: a
restart's real cost is already in the measured throughput of its period.
The ticks of the first SKIP seconds of the drive are left out (each
server's rate window still holds the idle time before the load: `gemma`'s is
10 s; the drive's start is the first tick whose first model measures a
throughput above 1; before 2026-12-07, session 24, they were counted from the
daemon's first tick, which the drive followed within a second until
rig/loop.sh waited for the servers to come up), and with --trace those after
the trace ended (nothing offered while the drive waits for its generators;
before 2026-12-06, session 23, they were scored). A
server's counter moves in steps (llama-server counts a completion's tokens
when it finishes): over one short poll a model that keeps its floor on average
can read zero, so violations are also counted over windows of WINDOW ticks
(the mean measured throughput of the window against the floor).

The reaction time to a load step of the trace (--trace; the drive starts at
the first tick whose first model measures a throughput above 1, the servers
idle before it): the time from the step to the first tick that changed a
configuration, plus that model's mean measured downtime (from the run's
/metrics page, --metrics). A step no change followed within 30 s is counted
as not reacted to (the configuration running was still the best predicted).

Usage: realised.py --history H.json [--history ...] --bundle DIR --scenario S.toml
                   [--metrics METRICS.txt] [--trace TRACE] [--missing zero|skip]
                   [--skip 10] [--window 10] [--json OUT.json]
"""

import argparse
import json
import sys

from drive import parse_trace
from utility import Utility


def load_history(paths):
    ticks = {}
    for p in paths:
        with open(p, encoding="utf-8") as f:
            doc = json.load(f)
        for t in doc.get("ticks", []):
            ticks[t["tick"]] = t
    return [ticks[k] for k in sorted(ticks)]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--history", action="append", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--scenario", required=True)
    p.add_argument("--skip", type=float, default=10.0)
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--metrics")
    p.add_argument("--trace")
    p.add_argument("--missing", choices=["zero", "skip"], default="zero",
                   help="a tick where a model's throughput could not be read: scored as 0 "
                        "(its server restarting serves nothing, and a run that restarts it "
                        "often is not scored on its good ticks only), or left out")
    p.add_argument("--json")
    args = p.parse_args(argv)
    u = Utility(args.scenario, args.bundle)
    models = u.models

    ticks = load_history(args.history)
    if len(ticks) < 2:
        sys.exit("fewer than two ticks in the history")
    # The skip runs from the drive's start (from the daemon's first tick
    # where no reading shows the drive).
    t0 = drive_start(ticks) or ticks[0]["unix_ms"]
    # With the trace, the ticks after it ended are not scored: nothing is
    # offered then (the drive waits up to 15 s for its generators), and every
    # model would count a floor miss at each of them, as many as the drive
    # happened to outlast the trace.
    end_ms = None
    if args.trace:
        start = drive_start(ticks)
        if start is not None:
            end_ms = start + sum(secs for secs, _ in parse_trace(args.trace)) * 1e3
    # (the tick before, the tick) pairs scored: consecutive, past the skip,
    # within the trace; with --missing skip, every model measured.
    pairs = [(prev, cur) for prev, cur in zip(ticks, ticks[1:])
             if cur["tick"] == prev["tick"] + 1 and (cur["unix_ms"] - t0) / 1e3 >= args.skip
             and (end_ms is None or cur["unix_ms"] <= end_ms)
             and (args.missing == "zero" or all(v is not None for v in cur["measured_throughput"]))]
    after_trace = 0 if end_ms is None else sum(1 for t in ticks if t["unix_ms"] > end_ms)
    unmeasured = sum(1 for _, cur in pairs for v in cur["measured_throughput"] if v is None)
    scored, penalties, violations, reconfigs, predicted = [], [], {m: 0 for m in models}, 0, []
    for prev, cur in pairs:
        measured = [0.0 if v is None else v for v in cur["measured_throughput"]]
        j, penalty = 0.0, 0.0
        for i, m in enumerate(models):
            variant = prev["running"][i].split()[0]
            j += u.term(m, variant, measured[i])
            if measured[i] < u.floors[m]:
                violations[m] += 1
            if cur["running"][i] != prev["running"][i]:
                reconfigs += 1
                penalty += u.cost(m, cur["running"][i].split()[0] != variant)
        scored.append(j)
        penalties.append(penalty)
        active = prev["policies"][0] if prev["policies"] else {}
        if active.get("utility") is not None:
            predicted.append(active["utility"])
    n = len(scored)
    # Floors over windows of consecutive scored ticks.
    measured_rows = [[0.0 if v is None else v for v in cur["measured_throughput"]] for _, cur in pairs]
    windows = [measured_rows[k:k + args.window] for k in range(0, len(measured_rows) - args.window + 1, args.window)]
    window_violations = {m: sum(1 for w in windows if sum(r[i] for r in w) / len(w) < u.floors[m])
                         for i, m in enumerate(models)}
    out = {
        "ticks_scored": n,
        "ticks_after_trace": after_trace,
        "missing": args.missing,
        "unmeasured_readings_scored_as_zero": unmeasured,
        "realised_reward_mean": sum(scored) / n if n else None,
        "reconfiguration_penalty_mean": sum(penalties) / n if n else None,
        "realised_utility_mean": (sum(scored) - sum(penalties)) / n if n else None,
        "predicted_utility_mean": sum(predicted) / len(predicted) if predicted else None,
        "floor_violation_ticks": violations,
        "floor_violation_share": {m: v / n for m, v in violations.items()} if n else None,
        "windows": len(windows),
        "window_ticks": args.window,
        "floor_violation_windows": window_violations,
        "changes": reconfigs,
        # Ticks whose active policy's decision failed (refused, late), so the
        # last valid configuration was kept.
        "kept_last_valid_ticks": sum(1 for _, cur in pairs if cur.get("kept_last_valid")),
    }
    if args.trace:
        out.update(reaction(ticks, models, args.metrics, args.trace))
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


def drive_start(ticks):
    """When the drive started: the first tick whose first model measures a
    throughput above 1 (the servers idle before it), ms since the epoch."""
    return next((t["unix_ms"] for t in ticks if (t["measured_throughput"][0] or 0.0) > 1.0), None)


def reaction(ticks, models, metrics_path, trace_path):
    """Reaction times to the regime steps the daemon saw, in ms."""
    downtime = {}
    if metrics_path:
        sums, counts = {}, {}
        with open(metrics_path, encoding="utf-8") as f:
            for line in f:
                for kind, store in (("_sum", sums), ("_count", counts)):
                    prefix = "mfsched_reconfiguration_downtime_seconds" + kind + '{model="'
                    if line.startswith(prefix):
                        model = line[len(prefix):].split('"', 1)[0]
                        store[model] = store.get(model, 0.0) + float(line.rsplit(" ", 1)[1])
        downtime = {m: sums[m] / counts[m] * 1e3 for m in sums if counts.get(m)}
    steps, at = [], 0.0
    for secs, _ in parse_trace(trace_path):
        if at > 0:
            steps.append(at)
        at += secs
    start = drive_start(ticks)
    times, unanswered = [], 0
    for step in steps:
        if start is None:
            break
        step_ms = start + step * 1e3
        for j in range(1, len(ticks)):
            t = ticks[j]
            if t["unix_ms"] < step_ms:
                continue
            if t["unix_ms"] > step_ms + 30e3:
                unanswered += 1
                break
            changed = [i for i in range(len(models)) if t["running"][i] != ticks[j - 1]["running"][i]]
            if changed:
                times.append(t["unix_ms"] - step_ms + max(downtime.get(models[i], 0.0) for i in changed))
                break
        else:
            unanswered += 1
    times.sort()
    return {
        "trace_steps": len(times) + unanswered,
        "steps_without_change": unanswered,
        "reaction_ms_median": times[len(times) // 2] if times else None,
        "reaction_ms_max": times[-1] if times else None,
        "reaction_ms": times,
        "mean_downtime_ms": downtime,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
