#!/usr/bin/env bash
# The hostile inputs of docs/limits.md against a build of mfsched: each one's
# exit code, wall time, peak RSS and the line it printed (its first error or
# warning), as a markdown table.
# Every input must be refused (or read bounded) well under 512 MiB and 10 s.
#
#   scripts/limits-sweep.sh [path/to/mfsched]     (default: target/release/mfsched)
#
# Needs python3 and GNU time (/usr/bin/time). Inputs are written to a
# temporary directory, removed at the end.
set -euo pipefail
bin=$(realpath "${1:-target/release/mfsched}")
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export XDG_RUNTIME_DIR="$work"

python3 - "$root" <<'PY'
import sys
root = sys.argv[1]
def scenario(name, body, card=24576):
    open(f"{name}.toml", "w").write(
        f'name = "{name}"\ndescription = "hostile"\n[card]\nname = "c"\nvram_mib = {card}\n' + body)
def family(quality="1.0", more="", overhead=1):
    return (f'[families.f]\nkind = "llm"\nunit = "t/s"\nruntime_overhead_mib = {overhead}\n'
            f'variants = [{{ name = "a", weights_mib = 10, quality = {quality} }}{more}]\nknobs = []\n'
            '[[models]]\nname = "m"\nfamily = "f"\n')
knob = lambda i: f'{{ name = "k{i}", values = [{",".join(map(str, range(1, 11)))}] }}'
scenario("knobs12", family().replace("knobs = []", "knobs = [" + ", ".join(knob(i) for i in range(12)) + "]"))
scenario("vram-max", '[[models]]\nname = "y"\nfamily = "yolo11"\n', card=4294967295)
scenario("models10k", "".join(f'[[models]]\nname = "y{i}"\nfamily = "yolo11"\n' for i in range(10000)), card=4194304)
scenario("quality-nan", family("nan"))
scenario("quality-neg", family("-5.0"))
scenario("variant-twice", family(more=', { name = "a", weights_mib = 1, quality = 1.0 }'))
scenario("reconfig-neg", "[reconfig]\nvariant_switch = -1000.0\nknob_change = 0.01\n" + family())
scenario("memory-overflow", family(overhead=4294967295))
scenario("name-1mib", f'[[models]]\nname = "{"x" * (1 << 20)}"\nfamily = "yolo11"\n')
open("deep.toml", "w").write('name = "n"\nx = ' + "[" * 200000 + "]" * 200000 + "\n")
profile = open(f"{root}/models/paper-n2/profile.csv").read().splitlines()
header, row = profile[0], profile[1]
open("dev-zero-cell.csv", "w").write(header + "\n" + row.replace(",paper-n2,", ",/dev/zero,", 1) + "\n")
open("newline-cell.csv", "w").write(header + "\n" + row.replace(",low,", ',"lo\nerror: forged",', 1) + "\n")
open("columns-1m.csv", "w").write(header + "," + ",".join(f"x-{i}" for i in range(1000000)) + "\n")
daemon = ('scenario = "{s}"\nseed = 1\n[loop]\nperiod_ms = 200\ndeadline_ms = 150\n'
          '[policy]\nactive = "hold"\n[log]\npath = "{log}"\n[api]\nlisten = "{listen}"\n{extra}')
for name, s, log, listen, extra in [
    ("same-log", "paper-n2", "same.log", "127.0.0.1:0", ""),
    ("scenario-dev-zero", "/dev/zero", "a.log", "127.0.0.1:0", ""),
    ("log-dev-zero", "paper-n2", "/dev/zero", "127.0.0.1:0", ""),
    ("open-listen", "paper-n2", "refused.log", "0.0.0.0:0", ""),
    ("long-trace", "paper-n2", "b.log", "127.0.0.1:0", '[workload]\ntrace = "steady"\ntrace_ticks = 1000000000000\n'),
]:
    open(f"{name}.toml", "w").write(daemon.format(s=s, log=log, listen=listen, extra=extra))
import json, os, shutil, struct, zlib
def frame(payload):
    head = b"\xF5MFR" + struct.pack("<II", len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload
# A run record whose scenario string claims 2^40 bytes; then 2,000,000
# headers whose checksums hold, each claiming 1 MiB (32 MB of them).
open("forged-length.log", "wb").write(
    b"MFSDLOG3" + frame(bytes([0, 1, 0xfd]) + struct.pack("<Q", 1 << 40) + b"x" * 16))
head = b"\xF5MFR" + struct.pack("<II", 1 << 20, 0)
head += struct.pack("<I", zlib.crc32(head))
with open("forged-headers.log", "wb") as f:
    f.write(b"MFSDLOG3" + head * 2000000 + bytes(2 << 20))
def bundle(name, edit=None):
    os.makedirs(name)
    meta = json.load(open(f"{root}/models/paper-n2/bundle.json"))
    if edit:
        edit(meta)
    json.dump(meta, open(f"{name}/bundle.json", "w"))
    shutil.copy(f"{root}/models/paper-n2/weights.safetensors", f"{name}/weights.safetensors")
bundle("bundle-dev-zero", lambda m: m.update(scenario="/dev/zero"))
bundle("bundle-other-models", lambda m: m.update(scenario_toml=open(f"{root}/scenarios/paper-n3.toml").read()))
bundle("bundle-sparse-weights")
bundle("bundle-huge-meta", lambda m: m.update(padding="x" * (100 << 20)))
PY
truncate -s 8G bundle-sparse-weights/weights.safetensors
truncate -s 8G sparse-8g.wasm
{ printf '\0asm\r\0\1\0'; head -c $((200 << 20)) /dev/zero; } > padded-200m.wasm

run() {
  local label=$1; shift
  /usr/bin/time -o time.out -f '%x %e %M' timeout 30 "$@" > out.txt 2> err.txt || true
  read -r rc secs kib < <(tail -1 time.out)
  local line
  line=$( (grep -h -E '^(error|ERROR|warning)' out.txt err.txt | grep -v XDG_RUNTIME || true) | head -1 | cut -c1-140)
  [ -n "$line" ] || line="(stdout) $(head -1 out.txt | cut -c1-120)"
  printf '| %s | %s | %s s | %s MB | %s |\n' "$label" "$rc" "$secs" "$((kib / 1024))" "${line//|//}"
}
echo "| input | exit | wall | peak RSS | the line printed |"
echo "|---|---|---|---|---|"
for s in knobs12 vram-max models10k quality-nan quality-neg variant-twice reconfig-neg memory-overflow name-1mib deep; do
  run "scenario show $s.toml" "$bin" scenario show "$s.toml"
done
run "decide --scenario knobs12.toml" "$bin" decide --scenario knobs12.toml --policy ga
run "run --config deep.toml" "$bin" run --sampler sim --config deep.toml --max-ticks 1
for c in dev-zero-cell newline-cell columns-1m; do run "data check $c.csv" "$bin" data check "$c.csv"; done
for c in scenario-dev-zero log-dev-zero long-trace open-listen; do
  run "run --config $c.toml" "$bin" run --sampler sim --config "$c.toml" --max-ticks 1
done
echo "| (the refused start wrote a log: $([ -e refused.log ] && echo yes || echo no)) | | | | |"
run "replay /dev/zero" "$bin" replay /dev/zero
run "replay forged-length.log" "$bin" replay forged-length.log
run "replay forged-headers.log" "$bin" replay forged-headers.log
profile="$root/models/paper-n2/profile.csv"
run "surrogate eval --model bundle-dev-zero" "$bin" surrogate eval --model bundle-dev-zero --data "$profile"
for b in bundle-sparse-weights bundle-huge-meta; do
  run "surrogate eval --model $b" "$bin" surrogate eval --model "$b" --scenario paper-n2 --data "$profile"
done
run "decide --models bundle-other-models" "$bin" decide --scenario paper-n2 --policy exhaustive --models bundle-other-models
run "plugins check sparse-8g.wasm" "$bin" plugins check sparse-8g.wasm
run "plugins check padded-200m.wasm" "$bin" plugins check padded-200m.wasm
"$bin" run --sampler sim --config same-log.toml --max-ticks 30 > /dev/null 2>&1 &
first=$!
sleep 3
run "a second run on the same log" "$bin" run --sampler sim --config same-log.toml --max-ticks 1
wait "$first"
