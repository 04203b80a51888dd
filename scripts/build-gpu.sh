#!/usr/bin/env bash
# Builds hark for the GPU machine (CUDA only: no OpenBLAS, no FFmpeg, which that machine lacks)
# into build-gpu, with the tests' data and CLI paths relative to the repository root, where
# bench/gpu.sh runs them. Works on any machine with the CUDA toolkit, CMake, Ninja and the
# header-only and test dependencies (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHARK_CUDA=ON -DHARK_BLAS=OFF \
  -DHARK_FFMPEG=OFF -DHARK_TEST_DATA_DIR=tests/data -DHARK_TEST_CLI=build-gpu/hark >/dev/null
cmake --build build-gpu -j"$(nproc)"
