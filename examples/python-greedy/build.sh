#!/usr/bin/env bash
# Builds the Python greedy policy into a WebAssembly component with
# componentize-py (from PyPI) against the repository's WIT, world `policy`.
# Usage: examples/python-greedy/build.sh [OUT.wasm]   (default: python-greedy.wasm here)
# Needs `componentize-py` on PATH: pip install componentize-py==0.25.1
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/python-greedy.wasm}"
cd "$here"
componentize-py --wit-path ../../wit --world policy componentize app --output "$out"
