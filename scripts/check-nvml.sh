#!/usr/bin/env bash
# Checks the NVML sampler on a machine with an NVIDIA GPU: builds mfsched, prints
# what NVML reports, then runs the daemon for a few ticks on the NVML sampler
# (no fallback) and prints the recorded samples.
# Usage: scripts/check-nvml.sh [extra cargo build args]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p mfsched "$@"
bin=target/debug/mfsched
[[ " $* " == *" --release "* ]] && bin=target/release/mfsched

echo "== mfsched nvml probe"
"$bin" nvml probe

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/mfsched.toml" <<'TOML'
scenario = "paper-n2"
[loop]
period_ms = 200
deadline_ms = 50
[policy]
active = "hold"
[sampler]
kind = "nvml"
allow_fallback = false
[log]
path = "decisions.log"
[api]
listen = "127.0.0.1:0"
TOML
echo "== mfsched run --sampler nvml (5 ticks)"
"$bin" run --config "$work/mfsched.toml" --max-ticks 5
echo "== recorded samples"
"$bin" replay "$work/decisions.log"
