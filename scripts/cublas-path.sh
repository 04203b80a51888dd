# Sourced (bench/gpu.sh, scripts/unpack-gpu.sh): puts cuBLASLt's folder on LD_LIBRARY_PATH for the
# CUDA build's binaries. It comes from the CUDA toolkit or, failing that, from torch's wheels
# (nvidia/cu13/lib).
cublas=$(ls /usr/local/cuda/lib64/libcublasLt.so.13 \
  /usr/local/cuda/targets/x86_64-linux/lib/libcublasLt.so.13 2>/dev/null | head -1 || true)
if [ -z "$cublas" ]; then
  site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
  cublas=$(find $site -path '*nvidia*' -name libcublasLt.so.13 2>/dev/null | head -1 || true)
fi
if [ -n "$cublas" ]; then export LD_LIBRARY_PATH="$(dirname "$cublas"):${LD_LIBRARY_PATH:-}"; fi
