#!/usr/bin/env bash
# GPU proxy workloads, live-profiled: two `mfsched gpu-proxy` processes (a
# memory-bound and a compute-bound wgpu kernel; rig/scenarios/gpu-proxy-n2.toml)
# co-located on the card, started and restarted by the daemon's process actuator
# for every point of a small plan, their counters scraped from their own
# /metrics, the field from NVML; at two load regimes their rate files hold
# (low: 0.40 of the reference rate; burst: as fast as each can). Then
# `data check` and `train` on the profile. scripts/gpu-check.sh runs it as its
# `proxies` step; alone, with SAMPLER=host, it runs on lavapipe (the CPU's
# software Vulkan, where the proxies' CPU time and memory are the field), so it
# is tested before a GPU appears. Needs nothing from the network.
#
# Usage: scripts/gpu-proxies.sh
# Environment:
#   MFSCHED         the binary (default target/release/mfsched; must exist)
#   OUT             where the outputs go (default target/gpu-proxies)
#   SAMPLER         nvml (default: NVML, no fallback) or host (no NVML: lavapipe)
#   ITERATIONS      the compute proxy's steps of 16 FMAs per lane and dispatch
#                   (default 16384 on nvml, 32 on host)
#   REFERENCE_RATE  dispatches/s of each proxy at load ratio 1 (default 400 on
#                   nvml, 8 on host); `low` offers 0.40 of it
#   SAMPLES         plan rows over the 4 regimes (default 24: 6 per regime, 2 measured)
#   SETTLE_MS WINDOW_MS   per point (default 1000 and 2000)
#   PROFILE_LIMIT   seconds each regime's profile may take (default 60 on nvml,
#                   300 on host: lavapipe restarts a proxy in seconds, a GPU in less)
#   PORT_BASE       the proxies listen on 127.0.0.1:PORT_BASE and PORT_BASE+1 (default 18710)
# Its last line is the key figure ("rows …; mem …; fma …; downtime …"), also
# written to $OUT/key.txt. Exit status: 0 profiled, checked and trained; 1 not.
set -euo pipefail

MFSCHED=${MFSCHED:-}
OUT=${OUT:-}
[[ -n $MFSCHED && $MFSCHED != /* ]] && MFSCHED="$PWD/$MFSCHED"
[[ -n $OUT && $OUT != /* ]] && OUT="$PWD/$OUT"
cd "$(dirname "$0")/.."
MFSCHED=${MFSCHED:-$PWD/target/release/mfsched}
OUT=${OUT:-$PWD/target/gpu-proxies}
SAMPLER=${SAMPLER:-nvml}
case $SAMPLER in
  nvml) default_iterations=16384 default_rate=400 default_limit=60 ;;
  host) default_iterations=32 default_rate=8 default_limit=300 ;;
  *)
    echo "gpu-proxies: SAMPLER=$SAMPLER: use nvml or host" >&2
    exit 1
    ;;
esac
ITERATIONS=${ITERATIONS:-$default_iterations}
REFERENCE_RATE=${REFERENCE_RATE:-$default_rate}
SAMPLES=${SAMPLES:-24}
SETTLE_MS=${SETTLE_MS:-1000}
WINDOW_MS=${WINDOW_MS:-2000}
PROFILE_LIMIT=${PROFILE_LIMIT:-$default_limit}
PORT_BASE=${PORT_BASE:-18710}
if [[ ! -x $MFSCHED ]]; then
  echo "gpu-proxies: MFSCHED=$MFSCHED is not an executable (cargo build --release -p mfsched)" >&2
  exit 1
fi

work="$OUT/work"
rm -rf "$work"
mkdir -p "$work"
rm -f "$OUT/key.txt"
if [[ -z ${XDG_RUNTIME_DIR:-} ]]; then
  export XDG_RUNTIME_DIR="$OUT/xdg-runtime"
  mkdir -p "$XDG_RUNTIME_DIR"
  chmod 700 "$XDG_RUNTIME_DIR"
fi

fail() {
  echo "proxies: $*" | tee "$OUT/key.txt"
  exit 1
}

# The proxies run under a name of their own, so the host sampler counts them
# and not the profiler (also mfsched).
proxy="$work/mfsched-gpu-proxy"
ln -s "$MFSCHED" "$proxy"

# The scenario, with the card's own memory under NVML.
scenario="$work/gpu-proxy-n2.toml"
cp rig/scenarios/gpu-proxy-n2.toml "$scenario"
if [[ $SAMPLER == nvml ]]; then
  total=$(timeout 20 "$MFSCHED" nvml probe 2>/dev/null | sed -n 's/^  memory total  *\([0-9]*\).*/\1/p' | head -n1 || true)
  [[ -n $total ]] || fail "nvml probe gave no memory total (no NVML?)"
  sed -i "s/^vram_mib = .*/vram_mib = $total/" "$scenario"
fi

port_mem=$PORT_BASE
port_fma=$((PORT_BASE + 1))

if [[ $SAMPLER == nvml ]]; then
  sampler='[sampler]
kind = "nvml"
device = 0
allow_fallback = false'
else
  sampler='[sampler]
kind = "host"

[sampler.host]
cpu = "processes"
memory = "processes"
commands = ["mfsched-gpu-proxy"]
include_children = true
memory_total_mib = 81920'
fi

# One proxy's process-actuator entry: MODEL FAMILY PORT.
proxy_entry() {
  cat <<TOML
[actuator.process.models.$1]
argv = ["{proxy}", "gpu-proxy", "--model", "{model}", "--family", "$2", "--precision", "{variant}", "--batch", "{batch}", "--workgroups", "{workgroups}", "--iterations", "$ITERATIONS", "--listen", "127.0.0.1:{port}", "--rate-file", "{rate_file}"]
env_allow = ["PATH", "HOME", "LD_LIBRARY_PATH", "XDG_RUNTIME_DIR", "WGPU_BACKEND", "VK_ICD_FILENAMES"]
ready_url = "http://127.0.0.1:{port}/v2/models/{model}/ready"
vars = { proxy = "$proxy", port = "$3", rate_file = "$work/$1.rate" }

[workload.prometheus.models.$1]
metric = "mfsched_proxy_requests_total"
label = "model"
throughput_metric = "mfsched_proxy_items_total"
scrape = "http://127.0.0.1:$3/metrics"
reference_rate = $REFERENCE_RATE
TOML
}

cat >"$work/mfsched.toml" <<TOML
# Written by scripts/gpu-proxies.sh: two GPU proxies through the process actuator.
scenario = "$scenario"
seed = 1

[loop]
period_ms = 1000
deadline_ms = 750

[policy]
active = "hold"

$sampler

[workload]
source = "prometheus"

[workload.prometheus]
poll_ms = 4000
timeout_ms = 3000

[actuator.process]
grace_ms = 3000
ready_timeout_ms = 60000
backoff_ms = 200

$(proxy_entry mem memory "$port_mem")

$(proxy_entry fma compute "$port_fma")

[log]
path = "decisions.log"

[api]
listen = "127.0.0.1:0"
TOML

csv="$OUT/proxies.csv"
rm -f "$csv"
# Each regime: its rate files (absent: closed loop), then the plan's points of it.
for regime in low burst; do
  for model in mem fma; do
    if [[ $regime == low ]]; then
      awk -v r="$REFERENCE_RATE" 'BEGIN { print 0.40 * r }' >"$work/$model.rate"
    else
      rm -f "$work/$model.rate"
    fi
  done
  echo "== profile --live at $regime load"
  if ! timeout --kill-after=10 "$PROFILE_LIMIT" "$MFSCHED" profile --live --config "$work/mfsched.toml" \
    --workload "$regime" --samples "$SAMPLES" --seed 1 \
    --settle-ms "$SETTLE_MS" --window-ms "$WINDOW_MS" --out "$csv" \
    >"$OUT/profile-$regime.txt" 2>"$OUT/profile-$regime.log"; then
    tail -n 5 "$OUT/profile-$regime.log" >&2
    fail "profile --live at $regime failed: $(grep -m1 '^error' "$OUT/profile-$regime.log" | cut -c1-160 || true)"
  fi
  cat "$OUT/profile-$regime.txt"
done

echo "== data check"
timeout 30 "$MFSCHED" data check "$csv" --scenario "$scenario" >"$OUT/data-check.txt" 2>&1 ||
  fail "data check refused the profile: $(grep -m1 '^error' "$OUT/data-check.txt" | cut -c1-160 || true)"
cat "$OUT/data-check.txt"

echo "== train"
timeout 60 "$MFSCHED" train --data "$csv" --scenario "$scenario" --out "$OUT/bundle" \
  --seed 1 --holdout 0 >"$OUT/train.txt" 2>&1 ||
  fail "train failed: $(grep -m1 '^error' "$OUT/train.txt" | cut -c1-160 || true)"
cat "$OUT/train.txt"

# The key figure: rows, each model's throughput range, the field's range, the
# downtime per restart (the medians of the two regimes), and what ran where.
rows=$(sed -n 's/^rows  *\([0-9]*\) co-location.*/\1/p' "$OUT/data-check.txt")
range() { awk -v c="$1" -v f="${2:-%.1f}" '$1 == c { printf f ".." f, $2, $3 }' "$OUT/data-check.txt"; }
off=$(cat "$OUT"/profile-*.txt | sed -n 's/.*; \([0-9]*\) row(s) saw a load outside.*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
downtime=$(cat "$OUT"/profile-*.txt | sed -n 's/^process: \([0-9]*\) reconfigurations, downtime (request to ready) median \([0-9]*\) ms, p90 [0-9]* ms, max \([0-9]*\) ms/\1 \2 \3/p' |
  awk 'NR == 1 { lo = $2 } { n += $1; if ($2 < lo) lo = $2; if ($2 > hi) hi = $2; if ($3 > max) max = $3 }
       END { printf "%d restarts, median %d-%d ms, max %d ms", n, lo, hi, max }')
adapter=$(grep -o -m1 'on adapter .*' "$OUT/profile-low.log" | sed 's/^on adapter //; s/ (.*//' || true)
software=""
grep -q 'the kernels run on the CPU' "$OUT/profile-low.log" && software=" (software: the CPU)"
key="rows ${rows:-?} ($off off-regime); mem $(range mem.throughput) chunks/s; fma $(range fma.throughput) groups/s; VRAM $(range vram_used_mib) MiB; util $(range utilization %.2f); $downtime; ${adapter:-adapter ?}$software, $SAMPLER"
echo "proxies: $key" | tee "$OUT/key.txt"
