#!/usr/bin/env bash
# From a fresh Debian 12 checkout to a transcript: installs dependencies, builds hark, converts the
# bundled model and transcribes the bundled sample.
#
# The bundled model is a RANDOM-WEIGHT Whisper (tiny.en architecture, shrunk) used by the test
# suite: the pipeline runs end to end, but its text is meaningless until a trained model ships.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
build/hark convert tests/data/whisper/tiny-random-tiny.en -o build/tiny-random-tiny.en.gguf
build/hark run build/tiny-random-tiny.en.gguf tests/data/audio/jfk.wav --no-fallback -o json
