// Matrix products through cuBLASLt: y = x · Wᵀ (+ bias) (+ residual), row-major, the layout of
// every linear layer. Descriptors and the chosen algorithm are cached per shape, so repeated calls
// (every layer of every step) cost one cublasLtMatmul each, and calls can be captured into a
// CUDA Graph. Products of many rows time cuBLASLt's candidates on first use and keep the fastest;
// a later shape with about as many rows (batches of files of other lengths) starts from that
// choice instead of timing again, and so does the next process: choices are kept in a tuning
// cache file (compute/tuning_cache.h) per GPU and cuBLASLt version, by default in ~/.cache/hark
// (HARK_CUDA_TUNING_CACHE: another file, or "off").
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "compute/cuda/device.h"
#include "compute/tuning_cache.h"

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

  // Shapes whose candidates this object has timed (for tests: a choice found in the tuning cache
  // is not timed).
  int timed_shapes() const { return timed_shapes_; }

 private:
  struct Plan;
  // Everything a plan depends on: element types, sizes, epilogue.
  struct Shape {
    int in = 0, out = 0;
    int64_t m = 0, n = 0, k = 0;
    bool bias = false, residual = false;
    auto key() const { return std::tuple(in, out, m, n, k, bias, residual); }
    bool operator<(const Shape& other) const { return key() < other.key(); }
    // The shapes that share a tuned algorithm: rows rounded up to a quarter octave.
    Shape tuning_class() const;
    // The tuning cache's key of a tuning class.
    std::string cache_key() const;
  };
  Plan& plan(const Shape& shape);
  // Times the plan's candidates on these inputs (a large product on its first rows), once, and
  // keeps the fastest (gemm_cuda.cpp). residual (null: none) may be y, which the candidates must
  // then not overwrite.
  void tune(Plan& p, const Shape& shape, const void* x, const void* w, const void* residual,
            void* y, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  Buffer workspace_;
  std::map<Shape, Plan*> plans_;
  // Per tuning class, the plan whose tuned algorithm later shapes of the class start from: an
  // encoder's batches of new lengths (every batch of a folder of files) then tune nothing.
  std::map<Shape, const Plan*> tuned_;
  // The file tuned choices are kept in across processes (null: none).
  std::shared_ptr<TuningCache> cache_;
  int timed_shapes_ = 0;
};

}  // namespace hark::compute::cuda
