#!/usr/bin/env bash
# The whole loop on the rig (docs/real-servers.md, "The loop on the rig"), one
# step at a time; every step writes under $RIG_DIR/run/loop and says what it ran.
#
#   rig/loop.sh profile   live profile of the models together and of each alone,
#                         at every regime, each under `rig.sh hold REGIME`
#                         (resumable: rows already measured are skipped)
#   rig/loop.sh fit       solo rows merged, data check, train, surrogate cv
#   rig/loop.sh run NAME POLICY [SHADOWS] [PERIOD_MS]
#                         the daemon under the trace (rig/traces/steps.txt), POLICY
#                         active; its log and /v1/history kept as NAME
#   rig/loop.sh first [POLICY]
#                         what POLICY (exact) decides for the trace's first regime,
#                         as a policy.start line (START="$(cat …/first-start.txt)")
#   rig/loop.sh repeats [REGIME] [PASSES]
#                         the measurement noise: one plan's points (REPEAT_SAMPLES/4,
#                         default 8, at REGIME, default medium) measured PASSES times (3),
#                         each pass applying them again; rig/noise.py reports it
#   rig/loop.sh overhead [SECS]
#                         the daemon's CPU and RSS at 10 Hz with three shadows
#
# Environment: as rig/rig.sh (RIG_DIR, RIG_MODELS, RIG_CPUS, RIG_LOAD_CPUS,
# MLP_RATE, GEMMA_RATE, CONV_RATE, GEMMA_TOKENS, RIG_GATEWAY; run `rig/rig.sh
# config` with the same RIG_MODELS and RIG_GATEWAY first), MFSCHED (the binary; default
# target/release/mfsched), SAMPLES (plan rows of the models together over the 4
# regimes, default 128), SETTLE_MS, WINDOW_MS, TRACE (default
# rig/traces/steps.txt), REPEAT_SAMPLES (default 32). rig-n2 writes under $RIG_DIR/run/loop, rig-n3 under
# $RIG_DIR/run/loop-n3.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
RIG_DIR=$(cd "${RIG_DIR:-target/rig}" && pwd)
RUN="$RIG_DIR/run"
MODELS=${RIG_MODELS:-mlp gemma}
N=$(echo "$MODELS" | wc -w)
# As rig/rig.sh config names them.
GW_SUFFIX=${RIG_GATEWAY:+-gateway}
if [ "$N" = 2 ]; then CONFIG="$RUN/mfsched-rig$GW_SUFFIX.toml" OUT="$RUN/loop"
else CONFIG="$RUN/mfsched-rig-n$N$GW_SUFFIX.toml" OUT="$RUN/loop-n$N"; fi
# The load through HAProxy (RIG_GATEWAY=1, rig/rig.sh): it runs beside the servers.
start_gateway() { [ -z "${RIG_GATEWAY:-}" ] || rig/rig.sh gateway start; }
SCEN="$RUN/rig-n$N.toml"
[ -s "$CONFIG" ] || { echo "loop: no $CONFIG: run RIG_MODELS=\"$MODELS\" rig/rig.sh config" >&2; exit 2; }
mkdir -p "$OUT"
MFSCHED=${MFSCHED:-$REPO/target/release/mfsched}
SAMPLES=${SAMPLES:-128}
SETTLE_MS=${SETTLE_MS:-2500}
WINDOW_MS=${WINDOW_MS:-5000}
TRACE=${TRACE:-$REPO/rig/traces/steps.txt}
REGIMES="low medium high burst"
say() { echo "loop: $*" >&2; }

# Holds REGIME on the servers of RIG_ONLY (or every model's) until the returned group is killed.
hold() {
  setsid rig/rig.sh hold "$1" 14000 > "$OUT/hold-$1.log" 2>&1 &
  echo $!
}
stop_hold() { kill -- "-$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

profile_one() { # CONFIG SAMPLES CSV [RIG_ONLY] (at each of PROFILE_REGIMES, default every regime)
  local config=$1 samples=$2 csv=$3
  for regime in ${PROFILE_REGIMES:-$REGIMES}; do
    say "profile $(basename "$config") at $regime"
    local h
    h=$(RIG_ONLY=${4:-} hold "$regime")
    sleep 3
    (cd "$RUN" && "$MFSCHED" profile --live --config "$config" --workload "$regime" \
      --samples "$samples" --seed 1 --settle-ms "$SETTLE_MS" --window-ms "$WINDOW_MS" \
      --repeats 1 --out "$csv") || { stop_hold "$h"; return 1; }
    stop_hold "$h"
  done
}

case "${1:-}" in
  profile)
    start_gateway
    # Gemma alone with MLServer stopped (its memory and its idle CPU are not
    # Gemma's co-runner), then each MLServer model alone (the others unloaded
    # from it), then the models together (MLServer restarted: every model loaded).
    rig/rig.sh mlserver stop
    case " $MODELS " in *" gemma "*)
      profile_one "$RUN/mfsched-solo-gemma$GW_SUFFIX.toml" 48 "$OUT/solo-gemma.csv" gemma ;; esac
    for m in $MODELS; do
      [ "$m" != gemma ] || continue
      rig/rig.sh mlserver start
      for other in $MODELS; do
        [ "$other" = gemma ] || [ "$other" = "$m" ] || rig/rig.sh mlserver unload "$other"
      done
      profile_one "$RUN/mfsched-solo-$m$GW_SUFFIX.toml" 32 "$OUT/solo-$m.csv" "$m"
      rig/rig.sh mlserver stop
    done
    rig/rig.sh mlserver start
    # (pair.csv: the name the N = 2 runs gave the models-together profile.)
    profile_one "$CONFIG" "$SAMPLES" "$OUT/pair.csv" ;;
  fit)
    solos=()
    for m in $MODELS; do solos+=(--solo "$OUT/solo-$m.csv"); done
    "$RIG_DIR/venv/bin/python" rig/solo-rows.py --pair "$OUT/pair.csv" "${solos[@]}" \
      --out "$OUT/profile.csv"
    "$MFSCHED" data check "$OUT/profile.csv" --scenario "$SCEN" | tee "$OUT/data-check.txt"
    "$MFSCHED" train --data "$OUT/profile.csv" --scenario "$SCEN" --seed 1 \
      --field "${FIELD:-co-runner-factors}" --out "$OUT/bundle" | tee "$OUT/train.txt"
    "$MFSCHED" surrogate cv --data "$OUT/profile.csv" --scenario "$SCEN" \
      --targets absolute,relative --fields observed,contention,co-runner-solo,co-runner-factors \
      --jobs 1 --out "$OUT/cv" | tee "$OUT/cv.txt" ;;
  run)
    # A daemon run under the trace: NAME, the active POLICY, SHADOWS (a TOML
    # list, default the config's), PERIOD_MS (default 1000), SCENARIO and
    # BUNDLE (default the pair's and the trained bundle; a static run passes a
    # one-configuration scenario and its bundle, or START, a policy.start line
    # that hold keeps: rig/best_static.py --start); DOWNTIME_AS_COST=1 makes the
    # measured downtime the utility's reconfiguration cost (DOWNTIME_HORIZON_MS:
    # paid off over that horizon, `actuator.downtime_horizon_ms`); NO_CORRECTION=1 turns
    # the online correction off (`[correction] enabled = false`), FORCED_OUT_TICKS
    # sets its floor's memory (`[correction] forced_out_ticks`, 0: off); FIELD=candidate-aware
    # decides under the candidate-aware field (`policy.field`).
    name=$2 policy=$3 shadows=${4:-} period=${5:-1000}
    dir="$OUT/$name"
    rm -rf "$dir"; mkdir -p "$dir"
    # Absolute: the daemon resolves a relative path against its config's
    # directory ($dir), not the caller's.
    scenario=$(realpath "${SCENARIO:-$SCEN}")
    bundle=${BUNDLE-$OUT/bundle}
    [ -z "$bundle" ] || bundle=$(realpath "$bundle")
    # The config: the rig's, with this run's policy, period, scenario and bundle.
    sed -e "s|^scenario = .*|scenario = \"$scenario\"|" \
        -e "s|^active = .*|active = \"$policy\"${bundle:+\\nbundle_dir = \"$bundle\"}|" \
        -e "s|^period_ms = .*|period_ms = $period|" \
        ${shadows:+-e "s|^shadows = .*|shadows = $shadows|"} \
        ${DOWNTIME_AS_COST:+-e 's|^file = "applied.json"|file = "applied.json"\ndowntime_as_cost = true|'} \
        "$CONFIG" > "$dir/mfsched.toml"
    [ -z "${DOWNTIME_HORIZON_MS:-}" ] ||
      sed -i "s|^downtime_as_cost = true|&\ndowntime_horizon_ms = $DOWNTIME_HORIZON_MS|" "$dir/mfsched.toml"
    # One [correction] table for both keys (TOML refuses a table defined twice).
    if [ -n "${NO_CORRECTION:-}${FORCED_OUT_TICKS:-}" ]; then
      printf '\n[correction]\n' >> "$dir/mfsched.toml"
      [ -z "${NO_CORRECTION:-}" ] || printf 'enabled = false\n' >> "$dir/mfsched.toml"
      [ -z "${FORCED_OUT_TICKS:-}" ] ||
        printf 'forced_out_ticks = %s\n' "$FORCED_OUT_TICKS" >> "$dir/mfsched.toml"
    fi
    [ -z "${START:-}" ] || sed -i "s|^active = .*|&\n$START|" "$dir/mfsched.toml"
    [ -z "${FIELD:-}" ] || sed -i "s|^active = .*|&\nfield = \"$FIELD\"|" "$dir/mfsched.toml"
    rig/rig.sh mlserver start
    start_gateway
    MFSCHED_API_TOKEN=rig RUST_LOG=info "$MFSCHED" run --config "$dir/mfsched.toml" \
      > "$dir/daemon.log" 2>&1 &
    daemon=$!
    api=$(grep -oE '^listen = "[^"]+"' "$dir/mfsched.toml" | cut -d'"' -f2)
    for _ in $(seq 1 240); do
      curl -sf "http://$api/healthz" >/dev/null && break; sleep 0.5
    done
    # A daemon that did not start leaves the servers undriven by it: stop here.
    curl -sf "http://$api/healthz" >/dev/null || {
      say "run $name: the daemon does not answer: $(tail -n 1 "$dir/daemon.log")"; exit 1; }
    # The trace starts once every server serves what the daemon brought up
    # (each model's first reconfiguration finished, or failed): a load on a
    # server still starting is its start-up, not the policy's doing.
    for _ in $(seq 1 120); do
      page=$(curl -sf "http://$api/metrics" || true)
      up=1
      for m in $MODELS; do
        grep -qE "^mfsched_reconfiguration_(downtime_seconds_count|failures_total)\{model=\"$m\"" <<< "$page" || up=
      done
      [ -z "$up" ] || break
      sleep 0.5
    done
    [ -n "$up" ] || say "run $name: a server is not up after 60 s; driving anyway"
    say "run $name: $policy active, under $(basename "$TRACE")"
    rig/rig.sh drive "$TRACE" | tee "$dir/drive.txt"
    curl -sf "http://$api/v1/history" > "$dir/history.json"
    curl -sf "http://$api/metrics" > "$dir/metrics.txt"
    kill -TERM "$daemon"; wait "$daemon" || true
    "$RIG_DIR/venv/bin/python" rig/realised.py --history "$dir/history.json" \
      --bundle "$OUT/bundle" --scenario "$SCEN" --metrics "$dir/metrics.txt" \
      --trace "$TRACE" --json "$dir/realised.json" ;;
  first)
    # The configuration POLICY (default exact) decides for the trace's first
    # regime at the profile's mean state there, as a policy.start line in
    # $OUT/first-start.txt: START="$(cat …/first-start.txt)" rig/loop.sh run …
    # brings the servers up in it (no restart at the trace's start).
    "$RIG_DIR/venv/bin/python" rig/first_decision.py --mfsched "$MFSCHED" \
      --profile "$OUT/profile.csv" --bundle "$OUT/bundle" --scenario "$SCEN" \
      --trace "$TRACE" --policy "${2:-exact}" --out "$OUT/first-start.txt" ;;
  repeats)
    regime=${2:-medium} passes=${3:-3}
    dir="$OUT/repeats"
    mkdir -p "$dir"
    rig/rig.sh mlserver start
    start_gateway
    args=()
    for k in $(seq 1 "$passes"); do
      PROFILE_REGIMES=$regime profile_one "$CONFIG" "${REPEAT_SAMPLES:-32}" "$dir/pass-$k.csv"
      args+=(--pass "$dir/pass-$k.csv")
    done
    "$RIG_DIR/venv/bin/python" rig/noise.py "${args[@]}" --profile "$OUT/pair.csv" | tee "$dir/noise.txt" ;;
  overhead)
    # The daemon's own CPU and memory at a 100 ms tick (10 Hz) with three
    # shadows, both servers under medium load for SECS (default 60) seconds:
    # utime + stime from /proc/PID/stat over the run, VmRSS and VmHWM at its end.
    secs=${2:-60}
    dir="$OUT/overhead"
    rm -rf "$dir"; mkdir -p "$dir"
    sed -e "s|^scenario = .*|scenario = \"$SCEN\"|" \
        -e "s|^active = .*|active = \"exact\"\\nbundle_dir = \"$OUT/bundle\"|" \
        -e "s|^period_ms = .*|period_ms = 100|" -e "s|^deadline_ms = .*|deadline_ms = 75|" \
        -e 's|^shadows = .*|shadows = ["ga", "static-budget", "hold"]|' \
        "$CONFIG" > "$dir/mfsched.toml"
    rig/rig.sh mlserver start
    start_gateway
    h=$(hold medium)
    MFSCHED_API_TOKEN=rig "$MFSCHED" run --config "$dir/mfsched.toml" > "$dir/daemon.log" 2>&1 &
    daemon=$!
    sleep 10 # start-up (component compiles, the servers' first configuration)
    ticks() { curl -sf "http://$(grep -oE '^listen = "[^"]+"' "$dir/mfsched.toml" | cut -d'"' -f2)/metrics" | awk '/^mfsched_ticks_total /{print $2}'; }
    cpu0=$(awk '{print $14 + $15}' "/proc/$daemon/stat"); t0=$(ticks)
    sleep "$secs"
    cpu1=$(awk '{print $14 + $15}' "/proc/$daemon/stat"); t1=$(ticks)
    hz=$(getconf CLK_TCK)
    { echo "ticks: $((t1 - t0)) in ${secs} s"
      echo "cpu: $(python3 -c "print(f'{($cpu1 - $cpu0) / $hz / $secs * 100:.1f} % of one core')")"
      grep -E 'VmRSS|VmHWM' "/proc/$daemon/status"
      uptime; } | tee "$dir/overhead.txt"
    kill -TERM "$daemon"; wait "$daemon" || true
    stop_hold "$h" ;;
  *) sed -n 2,25p "$0" >&2; exit 2 ;;
esac
