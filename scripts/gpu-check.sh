#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU, in about eight minutes at most:
#   nvidia-smi                 the driver's view of the card
#   check-backends             CPU reference vs wgpu on every paper-n5 row (1e-5 gate)
#   bench surrogate            rows/s on the CPU and on wgpu, side by side
#   nvml probe                 what the NVML sampler reads
#   daemon                     a few daemon ticks on the NVML sampler (no fallback),
#                              GA active with exact and exhaustive shadows on paper-n5
#   proxies                    two GPU proxy workloads (memory- and compute-bound wgpu
#                              kernels) co-located on the card through the process
#                              actuator, live-profiled on NVML, checked and trained
#                              (scripts/gpu-proxies.sh; alone it runs on lavapipe too)
# then one summary table (step, status, seconds, key figure). Every step has its own
# timeout; its output is kept under $OUT.
#
# Usage: scripts/gpu-check.sh
# Environment:
#   MFSCHED    the binary (default target/release/mfsched, built with
#              `cargo build --release -p mfsched` only when missing)
#   OUT        where the outputs go (default target/gpu-check)
#   TICKS      daemon ticks (default 10, one per 500 ms)
#   FIELD      the daemon's policy.field: observed (default) or candidate-aware
#   BENCH_REPEATS              timed runs per backend in bench surrogate (default 7)
#   ALLOW_SOFTWARE_ADAPTER=1   do not fail when wgpu finds only a software adapter
#   the proxies step's own knobs (ITERATIONS, REFERENCE_RATE, SAMPLES, …): scripts/gpu-proxies.sh
# Exit status: 0 every step passed, 1 a step failed, 2 no nvidia-smi (no NVIDIA GPU).
set -euo pipefail

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: nvidia-smi not found: no NVIDIA GPU (or no NVIDIA driver) on this machine; nothing checked" >&2
  exit 2
fi

# Relative MFSCHED / OUT are the caller's; the steps run from the repository root.
MFSCHED=${MFSCHED:-}
OUT=${OUT:-}
[[ -n $MFSCHED && $MFSCHED != /* ]] && MFSCHED="$PWD/$MFSCHED"
[[ -n $OUT && $OUT != /* ]] && OUT="$PWD/$OUT"
cd "$(dirname "$0")/.."
MFSCHED=${MFSCHED:-$PWD/target/release/mfsched}
OUT=${OUT:-$PWD/target/gpu-check}
TICKS=${TICKS:-10}
FIELD=${FIELD:-observed}
BENCH_REPEATS=${BENCH_REPEATS:-7}
ALLOW_SOFTWARE_ADAPTER=${ALLOW_SOFTWARE_ADAPTER:-0}
mkdir -p "$OUT"
# wgpu (Vulkan) complains on every start without one.
if [[ -z ${XDG_RUNTIME_DIR:-} ]]; then
  export XDG_RUNTIME_DIR="$OUT/xdg-runtime"
  mkdir -p "$XDG_RUNTIME_DIR"
  chmod 700 "$XDG_RUNTIME_DIR"
fi

names=() statuses=() seconds=() keys=()
record() { # name status seconds key
  names+=("$1") statuses+=("$2") seconds+=("$3") keys+=("$4")
  printf '   %-7s %6s s  %s\n' "$2" "$3" "$4"
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs_since() { # start_ms -> "12.3"
  local ms=$(($(now_ms) - $1))
  printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

# run_step NAME LIMIT_S CMD...: runs CMD under timeout with stdout+stderr in
# $OUT/NAME.log; sets step_rc, step_secs and step_log.
run_step() {
  local name=$1 limit=$2 t0
  shift 2
  step_log="$OUT/$name.log"
  echo "== $name (timeout ${limit}s): $*"
  t0=$(now_ms)
  if timeout --kill-after=10 "$limit" "$@" >"$step_log" 2>&1; then
    step_rc=0
  else
    step_rc=$?
  fi
  step_secs=$(secs_since "$t0")
}

# A finished step's status from its exit code, and the reason it failed.
rc_status() { if [[ $step_rc -eq 0 ]]; then echo pass; else echo fail; fi; }
rc_note() {
  case $step_rc in
    0) ;;
    124 | 137) echo "timed out; " ;;
    *) echo "exit $step_rc; " ;;
  esac
}
last_error() { grep -m1 -iE '^(error|Error)' "$1" | cut -c1-140 || true; }

software_adapter() { grep -q '(Cpu, ' <<<"$1"; }

t_all=$(now_ms)

# -- build (only when the binary is missing) ----------------------------------
if [[ -x $MFSCHED ]]; then
  record build skipped 0.0 "$MFSCHED"
elif [[ $MFSCHED == "$PWD/target/release/mfsched" ]]; then
  echo "== build: cargo build --release -p mfsched (not part of the eight minutes)"
  t0=$(now_ms)
  if cargo build --release -p mfsched >"$OUT/build.log" 2>&1; then
    record build pass "$(secs_since "$t0")" "$MFSCHED"
  else
    record build fail "$(secs_since "$t0")" "cargo build failed, see $OUT/build.log"
    exit 1
  fi
  t_all=$(now_ms)
else
  echo "gpu-check: MFSCHED=$MFSCHED is not an executable" >&2
  exit 1
fi

# -- nvidia-smi ----------------------------------------------------------------
run_step nvidia-smi 20 nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
key="$(rc_note)$(head -n1 "$step_log" | cut -c1-100)"
timeout 20 nvidia-smi >>"$step_log" 2>&1 || true
record nvidia-smi "$(rc_status)" "$step_secs" "$key"

# -- surrogate check-backends -----------------------------------------------------
run_step check-backends 90 "$MFSCHED" surrogate check-backends
status=$(rc_status)
adapter=$(sed -n 's/^adapter  *//p' "$step_log" | head -n1)
adapter_name=${adapter%% (DiscreteGpu,*}
adapter_name=${adapter_name%% (IntegratedGpu,*}
adapter_name=${adapter_name%% (VirtualGpu,*}
adapter_name=${adapter_name%% (Cpu,*}
adapter_name=${adapter_name%% (Other,*}
delta=$(grep -o 'max |Δσ| = [0-9.eE+-]*' "$step_log" | head -n1 | sed 's/.*= //' || true)
key="$(rc_note)adapter ${adapter_name:-none}; max |Δσ| ${delta:-?} (gate 1e-5)"
if [[ $step_rc -ne 0 ]]; then
  err=$(last_error "$step_log")
  [[ -n $err ]] && key="$key; $err"
elif software_adapter "$adapter" && [[ $ALLOW_SOFTWARE_ADAPTER != 1 ]]; then
  status=fail
  key="$key; software adapter: wgpu found no Vulkan driver for the GPU"
fi
record check-backends "$status" "$step_secs" "$key"

# -- bench surrogate -----------------------------------------------------------------
run_step bench-surrogate 110 "$MFSCHED" bench surrogate --repeats "$BENCH_REPEATS" --svg "$OUT/bench-surrogate.svg"
status=$(rc_status)
# "every feasible cand.  ROWS  CPU_THREADS  CPU_ROWS/S  WGPU_ROWS/S  RATIO  CPU_MS  WGPU_MS"
read -r rows cpu_threads cpu_rps wgpu_rps ratio cpu_ms wgpu_ms < <(awk '/^every feasible cand\./ {print $4, $5, $6, $7, $8, $9, $10; exit}' "$step_log") || true
if [[ -n ${rows:-} ]]; then
  key="$(rc_note)all $rows rows: wgpu ${wgpu_rps} rows/s (${wgpu_ms} ms), CPU ${cpu_rps} rows/s (${cpu_ms} ms, ${cpu_threads} threads), wgpu/CPU ${ratio}"
else
  key="$(rc_note)no 'every feasible cand.' line; $(last_error "$step_log")"
  status=fail
fi
if grep -q '^adapter  *none' "$step_log"; then
  status=fail
  key="$key; no wgpu adapter"
elif software_adapter "$(grep -m1 '^adapter' "$step_log" || true)" && [[ $ALLOW_SOFTWARE_ADAPTER != 1 ]]; then
  status=fail
  key="$key; software adapter"
fi
record bench-surrogate "$status" "$step_secs" "$key"

# -- nvml probe ----------------------------------------------------------------------
run_step nvml-probe 20 "$MFSCHED" nvml probe
status=$(rc_status)
if [[ $step_rc -eq 0 ]]; then
  dev=$(sed -n 's/^device 0  *//p' "$step_log" | head -n1)
  total=$(sed -n 's/^  memory total  *//p' "$step_log" | head -n1)
  used=$(sed -n 's/^  memory used  *//p' "$step_log" | head -n1)
  util=$(sed -n 's/^  utilisation  *//p' "$step_log" | head -n1)
  driver=$(sed -n 's/^driver  *//p' "$step_log" | head -n1)
  key="${dev:-no device 0}, ${total:-?} total, ${used:-?} used, util ${util:-?}, driver ${driver:-?}"
  [[ -z $dev ]] && status=fail
else
  key="$(rc_note)$(last_error "$step_log")"
fi
record nvml-probe "$status" "$step_secs" "$key"

# -- daemon ticks on NVML ------------------------------------------------------------
work="$OUT/daemon"
rm -rf "$work"
mkdir -p "$work"
cat >"$work/mfsched.toml" <<TOML
# Written by scripts/gpu-check.sh: a few ticks on the NVML sampler, no fallback.
scenario = "paper-n5"
seed = 1

[loop]
period_ms = 500
deadline_ms = 300

[policy]
active = "ga"
shadows = ["exact", "exhaustive"]
field = "$FIELD"

[sampler]
kind = "nvml"
device = 0
allow_fallback = false

[workload]
trace = "periodic"
trace_ticks = $TICKS

[actuator]
file = "applied.json"

[log]
path = "decisions.log"

[api]
listen = "127.0.0.1:0"
TOML
run_step daemon 45 "$MFSCHED" run --config "$work/mfsched.toml" --max-ticks "$TICKS"
status=$(rc_status)
done_ticks=$(sed -n 's/^stopped after \([0-9]*\) tick(s), \([0-9]*\) missed.*/\1/p' "$step_log" | tail -n1)
missed=$(sed -n 's/^stopped after \([0-9]*\) tick(s), \([0-9]*\) missed.*/\2/p' "$step_log" | tail -n1)
backend=$(grep -o 'predictor=MeanField surrogate, \(GPU on [^(]*\|CPU\)' "$step_log" | head -n1 | sed 's/^predictor=MeanField surrogate, //; s/ *$//' || true)
if [[ -f $work/decisions.log ]]; then
  timeout 20 "$MFSCHED" replay --summary "$work/decisions.log" >"$OUT/daemon-replay.txt" 2>&1 || true
fi
ga_p50=$(awk '$1 == "ga" && $2 == "active" {print $5; exit}' "$OUT/daemon-replay.txt" 2>/dev/null || true)
key="$(rc_note)${done_ticks:-0}/$TICKS ticks, ${missed:-?} missed; inference ${backend:-?}; ga p50 ${ga_p50:-?} us; field $FIELD"
if [[ $step_rc -ne 0 ]]; then
  err=$(last_error "$step_log")
  [[ -n $err ]] && key="$key; $err"
elif [[ ${done_ticks:-0} -lt $TICKS ]]; then
  status=fail
fi
record daemon "$status" "$step_secs" "$key"

# -- GPU proxy workloads on NVML -------------------------------------------------------
run_step proxies 170 env MFSCHED="$MFSCHED" OUT="$OUT/proxies" SAMPLER=nvml scripts/gpu-proxies.sh
status=$(rc_status)
key="$(rc_note)$(sed 's/^proxies: //' "$OUT/proxies/key.txt" 2>/dev/null || echo "no key figure; see $step_log")"
if [[ $step_rc -eq 0 && $key == *"(software: the CPU)"* && $ALLOW_SOFTWARE_ADAPTER != 1 ]]; then
  status=fail
  key="$key; software adapter"
fi
record proxies "$status" "$step_secs" "$key"

# -- summary -------------------------------------------------------------------------
failed=0
for st in "${statuses[@]}"; do
  [[ $st == fail ]] && failed=1
done
{
  echo
  echo "gpu-check summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(secs_since "$t_all") s in the steps; outputs in $OUT)"
  printf '%-16s %-8s %8s  %s\n' step status seconds "key figure"
  for i in "${!names[@]}"; do
    printf '%-16s %-8s %8s  %s\n' "${names[$i]}" "${statuses[$i]}" "${seconds[$i]}" "${keys[$i]}"
  done
  if [[ $failed -eq 0 ]]; then echo "PASS"; else echo "FAIL (see the step logs in $OUT)"; fi
} | tee "$OUT/summary.txt"
exit "$failed"
