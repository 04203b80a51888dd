// The ops a model's forward pass runs on the GPU, over one stream and one activation element type
// (F32, F16 or BF16). Models call these; they never touch cuBLASLt or launch kernels themselves.
// Every op is asynchronous and capturable into a CUDA Graph.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "compute/cuda/device.h"
#include "compute/cuda/gemm.h"
#include "compute/cuda/kernels.h"
#include "compute/tensor.h"

namespace hark::compute::cuda {

// A weight matrix [rows, cols] on the device: in the pass's element type, or as GGUF Q8_0 blocks
// (decode steps read those directly; larger products expand them into a scratch buffer first).
struct Matrix {
  Buffer data;
  int64_t rows = 0, cols = 0;
  bool q8_0 = false;
};

// The activation element type for a model whose weights are stored as `type`: F32 and BF16
// stay, F16 and Q8_0 (and any other type) run in F16.
Element activation_element(DType type);

// `count` device values of element type e, copied to the host as F32 (synchronously).
std::vector<float> download_f32(const void* device, int64_t count, Element e);

// y = x · Wᵀ + bias: a linear layer's weight and optional bias [rows].
struct Linear {
  Matrix weight;
  Buffer bias;  // empty: no bias
  int64_t out_features() const { return weight.rows; }
  int64_t in_features() const { return weight.cols; }
};

struct LayerNorm {
  Buffer gamma, beta;
  float eps = 1e-5f;
};

// Copies host weights to the device in the pass's element type (Q8_0 matrices stay Q8_0 when the
// element type is 16-bit). Several parts are stacked by rows, so that one product computes what
// several layers read from the same input (Q, K and V; the cross-attention K/V of all layers).
// A null part of a vector is zeros of the given length (a projection without bias).
class Uploader {
 public:
  explicit Uploader(Element element) : element_(element) {}
  Matrix matrix(std::span<const Weight* const> parts) const;
  Matrix matrix(const Weight& w) const;
  Buffer vector(std::span<const std::pair<const Weight*, int64_t>> parts) const;
  Buffer vector(const Weight& w) const;
  // Rows of a table (F32 values) with `padding_rows` rows of zeros after them.
  Buffer table(const Weight& w, int64_t padding_rows) const;
  Linear linear(const Weight& weight, const Weight* bias) const;
  LayerNorm layer_norm(const Weight& gamma, const Weight& beta, float eps) const;

 private:
  Element element_;
};

class Pass {
 public:
  Pass(Element element, cudaStream_t stream) : element_(element), stream_(stream) {}

  Element element() const { return element_; }
  cudaStream_t stream() const { return stream_; }
  size_t bytes(int64_t values) const {
    return static_cast<size_t>(values) * element_size(element_);
  }

  // y[m, out] = x[m, in] · Wᵀ + bias (+ residual, which may be y), in the pass's element type.
  void linear(const void* x, int64_t m, const Linear& layer, void* y,
              const void* residual = nullptr);
  // One linear layer of a decode step (m ≤ 16 rows; 16-bit or F32 weights, not Q8_0) in one
  // launch (decode_linear): y = [gelu](norm(x) · Wᵀ + bias) (+ residual, which may be y), or with
  // `scatter` the layer's output split into y and the K/V caches. Null norm, residual, scatter:
  // absent.
  void step_linear(const void* x, int64_t m, const Linear& layer, void* y,
                   const LayerNorm* norm = nullptr, bool gelu = false,
                   const void* residual = nullptr, const KvScatter* scatter = nullptr);
  // y[m, rows of w] = x · Wᵀ in F32 (logits).
  void linear_f32_out(const void* x, int64_t m, const Matrix& w, float* y);
  void layer_norm(const void* x, int64_t rows, const LayerNorm& norm, int64_t cols, void* y);
  void gelu(void* x, int64_t rows, int64_t cols) {
    bias_gelu(element_, x, nullptr, rows, cols, stream_);
  }

 private:
  const void* expanded(const Matrix& w);

  Element element_;
  cudaStream_t stream_;
  Gemm gemm_;
  Buffer expanded_;  // Q8_0 weights expanded for a product with many rows
  Buffer f16_logits_;
};

}  // namespace hark::compute::cuda
