#!/usr/bin/env bash
# Builds the JavaScript greedy policy into a WebAssembly component with
# componentize-js (pinned in package.json / package-lock.json) against the
# repository's WIT, world `policy`.
# Usage: examples/js-greedy/build.sh [OUT.wasm]   (default: js-greedy.wasm here)
# Needs Node.js 20+ and `npm ci` run here once.
#
# The componentize-js CLI is called directly: `jco componentize` fails on
# Node 20 (its WASI shim has no preopened directory). `-d http fetch-event`
# leaves out the engine's outbound and incoming HTTP support, which would
# import wasi:http, an interface the mfsched host does not link.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(realpath -m "${1:-$here/js-greedy.wasm}")"
cd "$here"
if [ ! -f node_modules/@bytecodealliance/componentize-js/src/cli.js ]; then
  echo "error: componentize-js is not installed: run 'npm ci' in $here" >&2
  exit 1
fi
node node_modules/@bytecodealliance/componentize-js/src/cli.js policy.js \
  --wit ../../wit --world-name policy -d http fetch-event -o "$out"
