#!/usr/bin/env bash
# On the GPU machine: puts back the binaries that scripts/pack-gpu.sh packed into
# build-gpu-carry (with python's lzma: that machine may lack xz), puts cuBLASLt's folder on
# LD_LIBRARY_PATH (scripts/cublas-path.sh), then runs the command given, e.g.
#   scripts/unpack-gpu.sh bench/gpu.sh "$OUT" build-gpu tests
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import glob, lzma, os, shutil
for packed in sorted(glob.glob('build-gpu-carry/*.xz')):
    target = os.path.basename(packed)[:-len('.xz')].replace('__', '/')
    os.makedirs(os.path.dirname(target) or '.', exist_ok=True)
    with lzma.open(packed) as source, open(target, 'wb') as sink:
        shutil.copyfileobj(source, sink)
    os.chmod(target, 0o755)
    print('unpack-gpu:', target)
PY
source scripts/cublas-path.sh
if [ $# -gt 0 ]; then exec "$@"; fi
