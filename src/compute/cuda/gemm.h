// Matrix products through cuBLASLt: y = x · Wᵀ (+ bias) (+ residual), row-major, the layout of
// every linear layer. Descriptors and the chosen algorithm are cached per shape, so repeated calls
// (every layer of every step) cost one cublasLtMatmul each, and calls can be captured into a
// CUDA Graph.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "compute/cuda/device.h"

namespace hark::compute::cuda {

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]) (+ residual[m, n]); x, w and bias of element type
  // `in`, residual and y of type `out` (out may be F32 with 16-bit inputs: logits). Row strides
  // are the widths (k for x, n for y). residual may alias y. F32 runs in full F32 (no TF32).
  void linear(Element in, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
              const void* bias, const void* residual, Element out, void* y, cudaStream_t stream);

 private:
  struct Plan;
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool>;
  Plan& plan(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  Buffer workspace_;
  std::map<Key, Plan*> plans_;
};

}  // namespace hark::compute::cuda
