#!/usr/bin/env python3
"""Drives the rig's servers through a trace of load regimes (Debian's `hey`, or npm's `loadtest`).

A trace is a text file, one segment a line: ``SECONDS REGIME`` (``low``,
``medium``, ``high``, ``burst``; ``#`` starts a comment). For each segment every
target gets ``hey -z SECONDS`` at the regime's share of its full rate, all
targets at once, so the servers see their loads together and contend.

A target is ``NAME=URL,BODY_FILE,FULL_RATE``: requests POSTed as JSON to URL,
FULL_RATE requests/s at load ratio 1. The regime's ratios (below) sit inside
the daemon's default regime thresholds (0.55, 0.75, 1.0 of the reference rate),
so a daemon whose ``reference_rate`` is FULL_RATE reads the intended regime
from the served counters while the server keeps up. ``hey`` runs WORKERS
closed-loop workers per target, each limited to rate / WORKERS; a server that
cannot keep up gets less than offered (then its counters show it).

With ``--generator loadtest`` (the gateway runs) the generator is open-loop
instead: npm's ``loadtest --rps`` sends each request on a timer at the
offered rate whatever the server answers (a new client where every one waits),
so the requests that arrive are the offered load even where a server keeps up
with none of it; the gateway in front sheds what it cannot admit.

Prints one line per segment and target: ``segment regime target offered
served errors``, from the generator's own summary. Bounded: every generator is
killed 15 s past its segment; a trace is at most 4 hours.

Usage: drive.py --trace FILE --target NAME=URL,BODY,RATE [--target ...]
                [--generator hey|loadtest] [--workers 8] [--cpus 0-1]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

RATIOS = {"low": 0.40, "medium": 0.65, "high": 0.88, "burst": 1.30}
MAX_TRACE_S = 4 * 3600


def parse_trace(path):
    segments = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or parts[1] not in RATIOS:
                sys.exit(f"{path}:{n}: expected 'SECONDS REGIME' with REGIME one of {', '.join(RATIOS)}")
            try:
                secs = int(parts[0])
            except ValueError:
                sys.exit(f"{path}:{n}: '{parts[0]}' is not a whole number of seconds")
            if secs < 1:
                sys.exit(f"{path}:{n}: a segment lasts at least 1 s")
            segments.append((secs, parts[1]))
    if not segments:
        sys.exit(f"{path}: no segment")
    if sum(s for s, _ in segments) > MAX_TRACE_S:
        sys.exit(f"{path}: longer than {MAX_TRACE_S} s")
    return segments


def parse_target(text):
    try:
        name, rest = text.split("=", 1)
        url, body, rate = rest.split(",")
        rate = float(rate)
    except ValueError:
        sys.exit(f"--target '{text}': expected NAME=URL,BODY_FILE,FULL_RATE")
    if not url.startswith(("http://127.", "http://localhost")):
        sys.exit(f"--target {name}: only loopback URLs")
    if not rate > 0:
        sys.exit(f"--target {name}: FULL_RATE must be positive")
    return name, url, body, rate


def loadtest_binary():
    """npm's loadtest as rig/setup.sh installs it (LOADTEST overrides)."""
    rig = os.environ.get("RIG_DIR", "target/rig")
    path = os.environ.get("LOADTEST", os.path.join(rig, "loadgen/node_modules/.bin/loadtest"))
    return path if os.access(path, os.X_OK) else None


def command(generator, url, body, offered, secs, workers):
    """The generator's argv for one target over one segment."""
    if generator == "loadtest":
        # -k: keep-alive; -d: a request's own timeout (a shed one answers at once).
        return [loadtest_binary(), "-t", str(secs), "--rps", f"{offered:.3f}", "-k", "-d", "30000",
                "-m", "POST", "-T", "application/json", "-p", body, "--quiet", url]
    return ["hey", "-z", f"{secs}s", "-c", str(workers), "-q", f"{offered / workers:.3f}",
            "-m", "POST", "-T", "application/json", "-D", body, url]


def summary(generator, out):
    """(served requests/s, errors) from the generator's summary."""
    if generator == "loadtest":
        completed = re.search(r"Completed requests:\s+(\d+)", out)
        errors = re.search(r"Total errors:\s+(\d+)", out)
        elapsed = re.search(r"Total time:\s+([0-9.]+) s", out)
        if not (completed and errors and elapsed) or float(elapsed.group(1)) <= 0:
            return 0.0, 0
        ok = int(completed.group(1)) - int(errors.group(1))
        return ok / float(elapsed.group(1)), int(errors.group(1))
    served = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    ok = sum(int(n) for n in re.findall(r"\[200\]\s+(\d+) responses", out))
    total = sum(int(n) for n in re.findall(r"\[\d+\]\s+(\d+) responses", out))
    # Non-200 answers, and hey's "Error distribution" (connection errors).
    failed = sum(int(n) for n in re.findall(r"^\s+\[(\d+)\]\s+(?:Get|Post) ", out, re.M))
    return (float(served.group(1)) if served else 0.0), total - ok + failed


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--target", action="append", required=True)
    p.add_argument("--generator", choices=["hey", "loadtest"], default="hey")
    p.add_argument("--workers", type=int, default=8, help="hey's closed-loop workers per target")
    p.add_argument("--cpus", help="taskset cpu list for hey (the servers' cores: it contends too)")
    args = p.parse_args(argv)
    segments = parse_trace(args.trace)
    targets = [parse_target(t) for t in args.target]
    pin = ["taskset", "-c", args.cpus] if args.cpus else []
    # Without the generator every regime would "serve" nothing and a profile
    # would record idle servers as loaded ones: refuse to start.
    if args.generator == "hey" and shutil.which("hey") is None:
        print("drive.py: `hey` is not on PATH (Debian: apt-get install hey)", file=sys.stderr)
        return 2
    if args.generator == "loadtest" and loadtest_binary() is None:
        print("drive.py: no loadtest (rig/setup.sh installs it under $RIG_DIR/loadgen)", file=sys.stderr)
        return 2
    print("segment regime target offered_rps served_rps errors", flush=True)
    # Each segment's generators start on the trace's clock, not when the
    # previous ones have exited: a generator that starts (node takes most of
    # a second) only after the last one ended leaves a gap without requests
    # at every step, which a daemon reading the arrivals sees as a dip to low.
    boundary = time.monotonic()
    previous = None
    for k, (secs, regime) in enumerate(segments):
        procs = []
        for name, url, body, rate in targets:
            offered = rate * RATIOS[regime]
            cmd = pin + command(args.generator, url, body, offered, secs, args.workers)
            procs.append((name, offered, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        if previous is not None and not report(args.generator, *previous):
            return 1
        previous = (k, regime, secs, procs)
        boundary += secs
        time.sleep(max(0.0, boundary - time.monotonic()))
    return 0 if report(args.generator, *previous) else 1


def report(generator, k, regime, secs, procs):
    """Waits for one segment's generators and prints their lines; False if one failed."""
    for name, offered, proc in procs:
        try:
            out, _ = proc.communicate(timeout=secs + 15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc.returncode not in (0, -9):
            print(f"drive.py: {generator} for {name} exited with {proc.returncode}: {out.strip()[:300]}",
                  file=sys.stderr)
            return False
        served, errors = summary(generator, out)
        print(f"{k} {regime} {name} {offered:.1f} {served:.1f} {errors}", flush=True)
    return True

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
