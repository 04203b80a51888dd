#!/usr/bin/env bash
# Packs the GPU build for a call on the GPU machine, which carries at most 64 MiB with the
# working tree: build-gpu's hark and tests/hark_tests (37 and 44 MB) go xz-compressed (about
# 4.7 and 6.2 MB) into build-gpu-carry, with any other binaries named, e.g. a baseline's hark:
#   scripts/pack-gpu.sh [build-gpu/hark-base=OTHER_TREE/build-gpu/hark ...]
# There, scripts/unpack-gpu.sh puts them back in place before it runs a command.
set -euo pipefail
cd "$(dirname "$0")/.."
for pair in "$@"; do
  [[ "$pair" == *=* ]] || { echo "pack-gpu: expected TARGET=SOURCE, got $pair" >&2; exit 2; }
  # A packed name stands for its target with each / as __.
  [[ "${pair%%=*}" != *__* ]] || { echo "pack-gpu: a target may not hold __: $pair" >&2; exit 2; }
done
out=build-gpu-carry
rm -rf "$out"
mkdir -p "$out"
pack() {  # TARGET SOURCE: TARGET is the path the binary takes back, from the repository root
  [ -f "$2" ] || { echo "pack-gpu: no such file: $2" >&2; exit 1; }
  local packed="$out/${1//\//__}.xz"
  xz -T0 -9 -c "$2" > "$packed"
  echo "$1 <- $2 ($(du -h "$packed" | cut -f1))"
}
pack build-gpu/hark build-gpu/hark
pack build-gpu/tests/hark_tests build-gpu/tests/hark_tests
for pair in "$@"; do
  pack "${pair%%=*}" "${pair#*=}"
done
echo "carry: $out ($(du -sh "$out" | cut -f1))"
