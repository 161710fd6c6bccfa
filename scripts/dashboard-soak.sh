#!/usr/bin/env bash
# The dashboard's memory over a long run: `mfsched run` on the simulated card
# at 10 Hz ticks, the dashboard open in headless Chromium, the daemon killed
# and restarted half way (the page must reconnect). Every 10 s it prints the
# daemon's RSS and the page's JS heap after a garbage collection, then a
# summary. Needs Debian's `chromium`.
#
# Usage: scripts/dashboard-soak.sh [SECONDS]    (default 600)
set -euo pipefail
cd "$(dirname "$0")/.."
export MFSCHED_SOAK_SECS="${1:-600}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
exec cargo test --locked --test all dashboard_soak -- --ignored --nocapture
