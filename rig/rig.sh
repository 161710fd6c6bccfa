#!/usr/bin/env bash
# The real-workload rig (docs/real-servers.md, "The rig"). Run rig/setup.sh first.
#
#   rig/rig.sh config             write $RIG_DIR/run: the daemon configs, MLServer's
#                                 repository and settings, request bodies
#   rig/rig.sh mlserver start|stop  MLServer (pinned to $RIG_CPUS with taskset)
#   rig/rig.sh drive TRACE        drive every model's server through a trace of regimes (hey)
#   rig/rig.sh hold REGIME SECS   hold one regime on every server for SECS
#   rig/rig.sh gateway start|stop HAProxy in front of the servers (RIG_GATEWAY=1)
#
# llama-server is not started here: the daemon's process actuator starts it
# (and `profile --live`, which applies configurations through the same actuators).
# Environment: RIG_DIR (default target/rig), RIG_MODELS (the models served:
# "mlp gemma", the default, is rig-n2; "mlp gemma conv" is rig-n3), RIG_CPUS
# (default 0-1: every server on the same cores, so that they contend),
# RIG_LOAD_CPUS (where the load generator runs; default RIG_CPUS),
# RIG_PORT_BASE (default 27100), MLP_RATE / GEMMA_RATE / CONV_RATE (full-load
# request and token rates, the reference rates), MLP_FLOOR / GEMMA_FLOOR /
# CONV_FLOOR (SLA floors), RIG_ONLY (one model: load it alone, for its solo rows),
# RIG_GATEWAY (1: the load goes through HAProxy, which counts what arrives
# and admits at most 8 requests at a time per model, shedding what waits past
# its queue timeout, and the generator is npm's open-loop loadtest, not hey;
# the daemon reads the offered load off HAProxy's page), RIG_OVERLAP (1, with
# RIG_GATEWAY: llama-server alternates between two ports, the process
# actuator's slots, a new configuration starting beside the one serving; the
# gateway sends Gemma's requests and the daemon's reads of its /metrics to the
# first of the two that answers its health check).
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
LLAMA_PORT=$((BASE + 10)) LLAMA_PORT_B=$((BASE + 11)) API_PORT=$((BASE + 20))
# The gateway: its Prometheus page, then one frontend per model, and
# llama-server's /metrics with RIG_OVERLAP.
GW_METRICS=$((BASE + 30)) GW_MLP=$((BASE + 31)) GW_GEMMA=$((BASE + 32)) GW_CONV=$((BASE + 33))
GW_GEMMA_METRICS=$((BASE + 34))
GATEWAY=${RIG_GATEWAY:-}
OVERLAP=${RIG_OVERLAP:-}
if [ -n "$OVERLAP" ] && [ -z "$GATEWAY" ]; then
  echo "rig.sh: RIG_OVERLAP needs RIG_GATEWAY (the gateway finds the slot that serves)" >&2; exit 2
fi
MLP_RATE=${MLP_RATE:-400}
GEMMA_RATE=${GEMMA_RATE:-40}
CONV_RATE=${CONV_RATE:-300}
# SLA floors, in each model's unit (rig/scenarios/rig.toml).
MLP_FLOOR=${MLP_FLOOR:-150.0} GEMMA_FLOOR=${GEMMA_FLOOR:-5.0} CONV_FLOOR=${CONV_FLOOR:-50.0}
# Requests the load generator sends: one 512-wide row for the MLP and one
# 64x64 RGB image for the convnet (MLServer batches them), a short completion
# for Gemma (GEMMA_TOKENS tokens each).
GEMMA_TOKENS=${GEMMA_TOKENS:-16}
ALL="mlp gemma conv"
MODELS=${RIG_MODELS:-mlp gemma}
for m in $MODELS ${RIG_ONLY:-}; do
  case " $ALL " in
    *" $m "*) ;;
    *) echo "rig.sh: unknown model '$m' (RIG_MODELS, RIG_ONLY: of $ALL)" >&2; exit 2 ;;
  esac
done
N=$(echo "$MODELS" | wc -w)
# What `config` writes for this set (rig-n2 keeps its first names; the
# gateway's configs are named apart, so that neither overwrites the other).
GW_SUFFIX=${GATEWAY:+-gateway}
if [ "$N" = 2 ]; then CONFIG="$RUN/mfsched-rig$GW_SUFFIX.toml"; else CONFIG="$RUN/mfsched-rig-n$N$GW_SUFFIX.toml"; fi
SCENARIO="$RUN/rig-n$N.toml"

# The models of the list $1 that MLServer serves (in its one process).
on_mlserver() { local m; for m in $1; do [ "$m" = gemma ] || echo "$m"; done; }

config() {
  # MLServer's repository holds this set's models only: it loads all of them
  # at start-up, and a model served idle still holds memory.
  rm -rf "$RUN/mlserver"
  mkdir -p "$RUN/mlserver"
  cat > "$RUN/mlserver/settings.json" <<JSON
{"host": "127.0.0.1", "http_port": $ML_HTTP, "grpc_port": $ML_GRPC, "metrics_port": $ML_METRICS,
 "parallel_workers": 0, "load_models_at_startup": true, "debug": false}
JSON
  # Each model's least configuration, as the scenario starts; the actuator rewrites it.
  local m uri version
  for m in $(on_mlserver "$MODELS"); do
    mkdir -p "$RUN/mlserver/$m"
    case $m in
      mlp) cp "$RIG_DIR"/models/onnx/mlp-m-{fp32,int8}.onnx "$RUN/mlserver/mlp/"
           uri=./mlp-m-int8.onnx version=int8 ;;
      conv) cp "$RIG_DIR"/models/onnx/conv-{s,m}-fp32.onnx "$RUN/mlserver/conv/"
            uri=./conv-s-fp32.onnx version=s ;;
    esac
    cat > "$RUN/mlserver/$m/model-settings.json" <<JSON
{"name": "$m", "implementation": "onnx_runtime.OnnxModel", "max_batch_size": 1, "max_batch_time": 0.004,
 "parameters": {"uri": "$uri", "version": "$version", "extra": {"threads": 1}}}
JSON
  done
  "$RIG_DIR/venv/bin/python" - "$RUN" "$GEMMA_TOKENS" <<'PY'
import json, sys
run, tokens = sys.argv[1], int(sys.argv[2])
def image(shape):
    n = 1
    for d in shape:
        n *= d
    return {"inputs": [{"name": "input", "shape": shape, "datatype": "FP32", "data": [0.5] * n}]}
json.dump(image([1, 512]), open(f"{run}/mlp-body.json", "w"))
json.dump(image([1, 3, 64, 64]), open(f"{run}/conv-body.json", "w"))
json.dump({"prompt": "Write one sentence about the sea.", "n_predict": tokens, "cache_prompt": True},
          open(f"{run}/gemma-body.json", "w"))
PY
  gateway_config > "$RUN/haproxy.cfg"
  # The set's scenario and config, and each model alone (its solo rows): the
  # other models' marked blocks dropped from both.
  scenario "$MODELS" "rig-n$N" > "$SCENARIO"
  render "$SCENARIO" "$MODELS" > "$CONFIG"
  for m in $MODELS; do
    scenario "$m" "rig-$m-solo" > "$RUN/solo-$m.toml"
    render "$RUN/solo-$m.toml" "$m" > "$RUN/mfsched-solo-$m$GW_SUFFIX.toml"
  done
  echo "$CONFIG"
}

# sed arguments, one a line, dropping the marked blocks of every model not in
# the list $1, MLServer's shared blocks where the list has none of its models,
# and the gateway's without RIG_GATEWAY.
drop_others() {
  local m
  for m in $ALL; do
    case " $1 " in *" $m "*) ;; *) printf -- '-e\n/# @%s-begin/,/# @%s-end/d\n' "$m" "$m" ;; esac
  done
  [ -n "$(on_mlserver "$1")" ] || printf -- '-e\n/# @mlserver-begin/,/# @mlserver-end/d\n'
  [ -n "$GATEWAY" ] || printf -- '-e\n/# @gateway-begin/,/# @gateway-end/d\n'
  if [ -n "$OVERLAP" ]; then
    printf -- '-e\n/# @one-port-begin/,/# @one-port-end/d\n'
  else
    printf -- '-e\n/# @overlap-begin/,/# @overlap-end/d\n'
  fi
}

# HAProxy's config: a frontend per model (named as the model: its request
# counter is haproxy_frontend_http_requests_total{proxy="MODEL"}, counted as
# requests arrive), each admitting 8 requests at a time to its server (as the
# profile's 8 hey workers did) and shedding with a 503 what waits in its queue
# longer than the timeout (a Gemma completion takes seconds, an MLServer
# inference milliseconds), so that an overloaded server neither hides the
# offered load nor builds a backlog that outlives the load step. Each
# frontend takes at most 256 connections (64 for Gemma's, whose requests stay
# seconds), the rest waiting in the kernel's backlog: an open-loop generator
# opens another connection whenever every one it has waits, so a gateway short
# of CPU would otherwise accept ever more of them and fall further behind,
# its own /metrics page unanswered (session 21's DOWNTIME_AS_COST run).
# An idle keep-alive connection is closed after 1 s: at a step down, the
# previous segment's generator has stopped sending but lives on (up to 15 s,
# waiting on its requests still in the backlog) with its idle connections
# holding every slot of the frontend, so the next segment's generator got
# none and the model served nothing until the old one was killed (the 2-14 s
# of zero requests/s after each step down in sessions 21-22; reproduced with
# a frontend of 100 slots: 13 s of zero, and 1 s with this timeout).
gateway_config() {
  cat <<CFG
global
    maxconn 8192
    nbthread 1
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout http-keep-alive 1s
    timeout server 60s
frontend metrics
    bind 127.0.0.1:$GW_METRICS
    maxconn 16
    http-request use-service prometheus-exporter if { path /metrics }
CFG
  local m port server timeout conns
  for m in $ALL; do
    case $m in
      mlp) port=$GW_MLP server=$ML_HTTP timeout=100ms conns=256 ;;
      conv) port=$GW_CONV server=$ML_HTTP timeout=100ms conns=256 ;;
      gemma) port=$GW_GEMMA server=$LLAMA_PORT timeout=2s conns=64 ;;
    esac
    printf 'frontend %s\n    bind 127.0.0.1:%s\n    maxconn %s\n    default_backend %s-server\n' \
      "$m" "$port" "$conns" "$m"
    if [ "$m" = gemma ] && [ -n "$OVERLAP" ]; then
      printf 'backend %s-server\n    timeout queue %s\n' "$m" "$timeout"
      llama_slots 8
    else
      printf 'backend %s-server\n    timeout queue %s\n    server %s 127.0.0.1:%s maxconn 8\n' \
        "$m" "$timeout" "$m" "$server"
    fi
  done
  if [ -n "$OVERLAP" ]; then
    printf 'frontend gemma-metrics\n    bind 127.0.0.1:%s\n    maxconn 16\n    default_backend gemma-metrics\n' \
      "$GW_GEMMA_METRICS"
    printf 'backend gemma-metrics\n'
    llama_slots 4
  fi
}

# RIG_OVERLAP: llama-server's two ports as one backend's servers, each taking
# at most $1 requests at a time. Requests go to the first that answers
# /health (checked every 250 ms: the one serving, or during a change the
# first slot once its new server is ready); one refused (the old server
# stopping) is tried on the other. The same for the daemon's reads of
# /metrics, so that they follow the server that serves.
llama_slots() {
  printf '    balance first\n    option httpchk GET /health\n    option redispatch\n    retries 3\n'
  printf '    default-server inter 250ms fall 1 rise 1 maxconn %s\n' "$1"
  printf '    server gemma-a 127.0.0.1:%s check\n    server gemma-b 127.0.0.1:%s check\n' \
    "$LLAMA_PORT" "$LLAMA_PORT_B"
}

# Stops the process whose PID the file $1 holds, if any, and forgets it.
stop_pid() {
  if [ -s "$1" ]; then
    kill "$(cat "$1")" 2>/dev/null || true
    rm -f "$1"
  fi
}

gateway() {
  case "$1" in
    start)
      if [ -s "$RUN/haproxy.pid" ] && kill -0 "$(cat "$RUN/haproxy.pid")" 2>/dev/null; then
        echo "gateway already runs (pid $(cat "$RUN/haproxy.pid"))"; return
      fi
      command -v haproxy >/dev/null || { echo "haproxy is not on PATH (apt-get install haproxy)" >&2; exit 1; }
      taskset -c "$LOAD_CPUS" haproxy -D -p "$RUN/haproxy.pid" -f "$RUN/haproxy.cfg"
      for _ in $(seq 1 40); do
        curl -sf "http://127.0.0.1:$GW_METRICS/metrics" >/dev/null && { echo "gateway ready"; return; }
        sleep 0.25
      done
      echo "the gateway's page did not answer in 10 s" >&2; exit 1 ;;
    stop) stop_pid "$RUN/haproxy.pid" ;;
    *) echo "rig.sh gateway start|stop" >&2; exit 2 ;;
  esac
}

# The scenario of the models $1, named $2.
scenario() {
  local args
  mapfile -t args < <(drop_others "$1")
  sed "${args[@]}" -e "s|^name = \"rig\"|name = \"$2\"|" -e "s|@MLP_FLOOR@|$MLP_FLOOR|" \
      -e "s|@GEMMA_FLOOR@|$GEMMA_FLOOR|" -e "s|@CONV_FLOOR@|$CONV_FLOOR|" rig/scenarios/rig.toml
}

# Gemma's reference rate in the unit of its load counter: tokens/s on
# llama-server's page, requests/s (GEMMA_TOKENS tokens each) at the gateway.
gemma_reference() {
  if [ -n "$GATEWAY" ]; then python3 -c "print($GEMMA_RATE / $GEMMA_TOKENS)"; else echo "$GEMMA_RATE"; fi
}

# The config template for the scenario $1 with the blocks of the models $2.
render() {
  local args
  mapfile -t args < <(drop_others "$2")
  sed "${args[@]}" -e "s|@SCENARIO@|$1|g" \
      -e "s|@RIG_DIR@|$RIG_DIR|g" -e "s|@CPUS@|$CPUS|g" \
      -e "s|@ML_HTTP@|$ML_HTTP|g" -e "s|@ML_METRICS@|$ML_METRICS|g" \
      -e "s|@LLAMA_PORT@|$LLAMA_PORT|g" -e "s|@LLAMA_PORT_B@|$LLAMA_PORT_B|g" \
      -e "s|@GW_GEMMA_METRICS@|$GW_GEMMA_METRICS|g" -e "s|@API_PORT@|$API_PORT|g" \
      -e "s|@MLP_RATE@|$MLP_RATE|g" -e "s|@GEMMA_REFERENCE@|$(gemma_reference)|g" \
      -e "s|@CONV_RATE@|$CONV_RATE|g" -e "s|@GW_METRICS@|$GW_METRICS|g" \
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
      local m ready
      for _ in $(seq 1 120); do
        ready=yes
        for m in $(on_mlserver "$MODELS"); do
          curl -sf "http://127.0.0.1:$ML_HTTP/v2/models/$m/ready" >/dev/null || ready=
        done
        if [ -n "$ready" ]; then
          echo "mlserver ready (pid $(cat "$RUN/mlserver.pid"))"; return
        fi
        sleep 0.5
      done
      echo "mlserver did not become ready in 60 s: $RUN/mlserver.log" >&2; exit 1 ;;
    stop) stop_pid "$RUN/mlserver.pid" ;;
    unload) # MODEL: unloaded through the repository API (its solo rows are another's)
      curl -sf -X POST "http://127.0.0.1:$ML_HTTP/v2/repository/models/$2/unload" >/dev/null ;;
    *) echo "rig.sh mlserver start|stop|unload MODEL" >&2; exit 2 ;;
  esac
}

# The load generator's targets: every model of the set, or RIG_ONLY alone
# (solo rows); through the gateway with RIG_GATEWAY, then its open-loop generator.
targets() {
  local m req_rate ml=$ML_HTTP conv=$ML_HTTP llama=$LLAMA_PORT
  [ -z "$GATEWAY" ] || { ml=$GW_MLP conv=$GW_CONV llama=$GW_GEMMA; echo --generator loadtest; }
  for m in ${RIG_ONLY:-$MODELS}; do
    case $m in
      mlp) echo --target "mlp=http://127.0.0.1:$ml/v2/models/mlp/infer,$RUN/mlp-body.json,$MLP_RATE" ;;
      conv) echo --target "conv=http://127.0.0.1:$conv/v2/models/conv/infer,$RUN/conv-body.json,$CONV_RATE" ;;
      gemma)
        # The generator's rate is in requests: a Gemma request is GEMMA_TOKENS tokens.
        req_rate=$(python3 -c "print($GEMMA_RATE / $GEMMA_TOKENS)")
        echo --target "gemma=http://127.0.0.1:$llama/completion,$RUN/gemma-body.json,$req_rate" ;;
    esac
  done
}

case "${1:-}" in
  config) config ;;
  mlserver) mlserver "${2:-}" "${3:-}" ;;
  gateway) gateway "${2:-}" ;;
  drive) # shellcheck disable=SC2046
    python3 rig/drive.py --trace "$2" $(targets) --cpus "$LOAD_CPUS" ;;
  hold)
    t=$(mktemp); echo "$3 $2" > "$t"
    # shellcheck disable=SC2046
    python3 rig/drive.py --trace "$t" $(targets) --cpus "$LOAD_CPUS"; rm -f "$t" ;;
  *) sed -n 2,23p "$0" >&2; exit 2 ;;
esac
