#!/usr/bin/env bash
# profile --live against sim serve beside the offline profile of the same plan,
# both trained alike: the held-out R² of each (issue 15's acceptance check).
# Usage: scripts/live-vs-offline-r2.sh [OUT_DIR]   (MFSCHED=path/to/mfsched, SAMPLES=160)
# Uses loopback ports 18100 and 18101. Everything it measures is simulated.
set -euo pipefail
MFSCHED=${MFSCHED:-target/release/mfsched}
MFSCHED=$(realpath "$MFSCHED")
OUT=${1:-live-vs-offline}
SAMPLES=${SAMPLES:-160}
SEED=1
mkdir -p "$OUT"
cd "$OUT"
rm -f offline.csv live.csv
cat > live.toml <<'TOML'
scenario = "paper-n2"
[policy]
active = "hold"
[sampler]
kind = "footprint"
[log]
path = "decisions.log"
[workload]
source = "prometheus"
[workload.prometheus]
timeout_ms = 400
[workload.prometheus.models.llama3b]
preset = "vllm"
scrape = "http://127.0.0.1:18100/metrics"
reference_rate = 10.0
[workload.prometheus.models.yolo-a]
preset = "triton"
scrape = "http://127.0.0.1:18101/metrics"
reference_rate = 10.0
[actuator.webhook]
timeout_ms = 300
[actuator.webhook.urls]
llama3b = "http://127.0.0.1:18100/config"
yolo-a = "http://127.0.0.1:18101/config"
TOML
# Offline: 20 simulator draws per row; live: 1 s windows of 50 ms ticks (20 draws).
"$MFSCHED" profile --scenario paper-n2 --samples "$SAMPLES" --seed $SEED --repeats 20 --out offline.csv
for level in low medium high burst; do
  "$MFSCHED" sim serve --scenario paper-n2 --level $level --tick-ms 50 --seed 7 --port-base 18100 > "sim-$level.log" 2>&1 &
  sim=$!
  sleep 1
  "$MFSCHED" profile --live --config live.toml --workload $level --samples "$SAMPLES" --seed $SEED \
    --settle-ms 300 --window-ms 1000 --gpu-metrics http://127.0.0.1:18100/metrics --out live.csv
  kill $sim
  wait $sim 2>/dev/null || true
done
for p in offline live; do
  echo "== trained on the $p profile"
  "$MFSCHED" train --data $p.csv --scenario paper-n2 --holdout 0.2 --seed 3 --out bundle-$p | tail -3
done
