#!/usr/bin/env bash
# The real-workload rig (docs/real-servers.md, "The rig"). Run rig/setup.sh first.
#
#   rig/rig.sh config             write $RIG_DIR/run: the daemon config, MLServer's
#                                 repository and settings, request bodies
#   rig/rig.sh mlserver start|stop  MLServer (pinned to $RIG_CPUS with taskset)
#   rig/rig.sh drive TRACE        drive both servers through a trace of regimes (hey)
#   rig/rig.sh hold REGIME SECS   hold one regime on both servers for SECS
#
# llama-server is not started here: the daemon's process actuator starts it
# (and `profile --live`, which applies configurations through the same actuators).
# Environment: RIG_DIR (default target/rig), RIG_CPUS (default 0-1: both servers
# on the same cores, so that they contend), RIG_LOAD_CPUS (where the load
# generator runs; default RIG_CPUS), RIG_PORT_BASE (default 27100),
# MLP_RATE / GEMMA_RATE (full-load request and token rates, the reference rates),
# RIG_ONLY (mlp or gemma: load that model alone, for its solo rows).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
RIG_DIR=${RIG_DIR:-target/rig}
mkdir -p "$RIG_DIR"
RIG_DIR=$(cd "$RIG_DIR" && pwd)
RUN="$RIG_DIR/run"
CPUS=${RIG_CPUS:-0-1}
LOAD_CPUS=${RIG_LOAD_CPUS:-$CPUS}
BASE=${RIG_PORT_BASE:-27100}
ML_HTTP=$BASE ML_GRPC=$((BASE + 1)) ML_METRICS=$((BASE + 2))
LLAMA_PORT=$((BASE + 10)) API_PORT=$((BASE + 20))
MLP_RATE=${MLP_RATE:-400}
GEMMA_RATE=${GEMMA_RATE:-40}
# Requests the load generator sends: one 512-wide row for the MLP (MLServer
# batches them), a short completion for Gemma (GEMMA_TOKENS tokens each).
GEMMA_TOKENS=${GEMMA_TOKENS:-16}

config() {
  mkdir -p "$RUN/mlserver/mlp"
  cp "$RIG_DIR"/models/onnx/mlp-m-fp32.onnx "$RIG_DIR"/models/onnx/mlp-m-int8.onnx "$RUN/mlserver/mlp/"
  cat > "$RUN/mlserver/settings.json" <<JSON
{"host": "127.0.0.1", "http_port": $ML_HTTP, "grpc_port": $ML_GRPC, "metrics_port": $ML_METRICS,
 "parallel_workers": 0, "load_models_at_startup": true, "debug": false}
JSON
  # The least configuration, as the scenario starts; the actuator rewrites it.
  cat > "$RUN/mlserver/mlp/model-settings.json" <<JSON
{"name": "mlp", "implementation": "onnx_runtime.OnnxModel", "max_batch_size": 1, "max_batch_time": 0.004,
 "parameters": {"uri": "./mlp-m-int8.onnx", "version": "int8", "extra": {"threads": 1}}}
JSON
  "$RIG_DIR/venv/bin/python" - "$RUN" "$GEMMA_TOKENS" <<'PY'
import json, sys
run, tokens = sys.argv[1], int(sys.argv[2])
json.dump({"inputs": [{"name": "input", "shape": [1, 512], "datatype": "FP32", "data": [0.5] * 512}]},
          open(f"{run}/mlp-body.json", "w"))
json.dump({"prompt": "Write one sentence about the sea.", "n_predict": tokens, "cache_prompt": True},
          open(f"{run}/gemma-body.json", "w"))
PY
  # The pair, and each model alone (its solo rows): the other model's marked
  # blocks dropped from the scenario and the config.
  cp rig/scenarios/rig-n2.toml "$RUN/rig-n2.toml"
  render "$RUN/rig-n2.toml" none > "$RUN/mfsched-rig.toml"
  for m in mlp gemma; do
    other=$([ $m = mlp ] && echo gemma || echo mlp)
    sed -e "/# @$other-begin/,/# @$other-end/d" -e "s|^name = \"rig-n2\"|name = \"rig-$m-solo\"|" \
      rig/scenarios/rig-n2.toml > "$RUN/solo-$m.toml"
    render "$RUN/solo-$m.toml" "$other" > "$RUN/mfsched-solo-$m.toml"
  done
  echo "$RUN/mfsched-rig.toml"
}

# The config template for SCENARIO without the blocks of model DROP.
render() {
  sed -e "/# @$2-begin/,/# @$2-end/d" -e "s|@SCENARIO@|$1|g" \
      -e "s|@RIG_DIR@|$RIG_DIR|g" -e "s|@CPUS@|$CPUS|g" \
      -e "s|@ML_HTTP@|$ML_HTTP|g" -e "s|@ML_METRICS@|$ML_METRICS|g" \
      -e "s|@LLAMA_PORT@|$LLAMA_PORT|g" -e "s|@API_PORT@|$API_PORT|g" \
      -e "s|@MLP_RATE@|$MLP_RATE|g" -e "s|@GEMMA_RATE@|$GEMMA_RATE|g" \
      rig/mfsched-rig.toml.in
}

mlserver() {
  case "$1" in
    start)
      if [ -s "$RUN/mlserver.pid" ] && kill -0 "$(cat "$RUN/mlserver.pid")" 2>/dev/null; then
        echo "mlserver already runs (pid $(cat "$RUN/mlserver.pid"))"; return
      fi
      # nohup and taskset exec: the PID recorded is MLServer's own.
      (cd "$RUN/mlserver" || exit 1
       PYTHONPATH="$REPO/rig/mlserver" nohup taskset -c "$CPUS" \
        "$RIG_DIR/venv/bin/mlserver" start . > "$RUN/mlserver.log" 2>&1 &
       echo $! > "$RUN/mlserver.pid")
      for _ in $(seq 1 120); do
        if curl -sf "http://127.0.0.1:$ML_HTTP/v2/models/mlp/ready" >/dev/null; then
          echo "mlserver ready (pid $(cat "$RUN/mlserver.pid"))"; return
        fi
        sleep 0.5
      done
      echo "mlserver did not become ready in 60 s: $RUN/mlserver.log" >&2; exit 1 ;;
    stop)
      if [ -s "$RUN/mlserver.pid" ]; then
        kill "$(cat "$RUN/mlserver.pid")" 2>/dev/null || true
        rm -f "$RUN/mlserver.pid"
      fi ;;
    *) echo "rig.sh mlserver start|stop" >&2; exit 2 ;;
  esac
}

# The load generator's targets: both models, or RIG_ONLY's alone (solo rows).
targets() {
  if [ "${RIG_ONLY:-mlp}" = mlp ]; then
    echo --target "mlp=http://127.0.0.1:$ML_HTTP/v2/models/mlp/infer,$RUN/mlp-body.json,$MLP_RATE"
  fi
  if [ "${RIG_ONLY:-gemma}" = gemma ]; then
    # hey's rate is in requests: a Gemma request is GEMMA_TOKENS tokens.
    local req_rate
    req_rate=$(python3 -c "print($GEMMA_RATE / $GEMMA_TOKENS)")
    echo --target "gemma=http://127.0.0.1:$LLAMA_PORT/completion,$RUN/gemma-body.json,$req_rate"
  fi
}

case "${1:-}" in
  config) config ;;
  mlserver) mlserver "${2:-}" ;;
  drive) # shellcheck disable=SC2046
    python3 rig/drive.py --trace "$2" $(targets) --cpus "$LOAD_CPUS" ;;
  hold)
    t=$(mktemp); echo "$3 $2" > "$t"
    # shellcheck disable=SC2046
    python3 rig/drive.py --trace "$t" $(targets) --cpus "$LOAD_CPUS"; rm -f "$t" ;;
  *) sed -n 2,16p "$0" >&2; exit 2 ;;
esac
