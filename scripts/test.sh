#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds (Release), runs every test, then builds again
# with AddressSanitizer + UndefinedBehaviorSanitizer and runs every test once more.
# Needs no GPU, no network beyond Debian's packages, nothing outside this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# ctest runs tests side by side: idle OpenMP threads must sleep, not spin, or they starve each other.
export OMP_WAIT_POLICY=passive

scripts/install-deps.sh

echo "== Release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHARK_TESTS=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

# The sanitizers check the CPU path; the CUDA backend (compiled by the Release build when nvcc is
# there) runs its tests on the GPU machine (bench/gpu.sh).
echo "== AddressSanitizer + UBSan build"
# Line tables only (-g1): the sanitizers' reports keep files and lines, and the template-heavy
# test files build about a third faster than with full debug information.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DHARK_TESTS=ON -DHARK_SANITIZE=ON \
  -DHARK_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"
