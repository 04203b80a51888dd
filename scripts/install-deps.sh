#!/usr/bin/env bash
# Installs the Debian 12 packages hark builds and tests with. Needs root (or sudo).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-dev                                     # CPU matrix products
  libavformat-dev libavcodec-dev libavutil-dev libswresample-dev  # mp3/flac/ogg/opus/m4a + resampling
  zlib1g-dev                                          # compression ratio of decoded text
  nlohmann-json3-dev libcpp-httplib-dev libcurl4-openssl-dev
  libgtest-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
