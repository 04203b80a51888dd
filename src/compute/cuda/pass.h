// The ops a model's forward pass runs on the GPU, over one stream and one activation element type
// (F32, F16 or BF16). Models call these; they never touch cuBLASLt or launch kernels themselves.
// Every op is asynchronous and capturable into a CUDA Graph.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "compute/cuda/device.h"
#include "compute/cuda/gemm.h"
#include "compute/cuda/gemm_sm90.h"
#include "compute/cuda/kernels.h"
#include "compute/cuda/profile.h"
#include "compute/tensor.h"

namespace hark::compute::cuda {

// A weight matrix [rows, cols] on the device: in the pass's element type, or Q8_0 in the device
// layout of kernels.h (decode steps read that directly; larger products expand it into a scratch
// buffer first).
struct Matrix {
  Buffer data;
  int64_t rows = 0, cols = 0;
  bool q8_0 = false;
};

// A Q8_0 matrix's scales (the device layout, kernels.h); null for a matrix of the element type.
inline const void* q8_0_scales(const Matrix& m) {
  return m.q8_0 ? static_cast<const uint8_t*>(m.data.data()) + q8_0_scales_offset(m.rows, m.cols)
                : nullptr;
}

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

// GGUF's Q8_0 blocks of `rows` rows of `cols` values (a multiple of 32) in the device layout
// (kernels.h): their quants to quants [rows · cols], their scales' F16 bits to
// scales [rows · cols / 32].
void q8_0_to_device_layout(const uint8_t* blocks, int64_t rows, int64_t cols, int8_t* quants,
                           uint16_t* scales);

// Copies host weights to the device in the pass's element type (Q8_0 matrices stay Q8_0, in the
// device layout, when the element type is 16-bit). Several parts are stacked by rows, so that one
// product computes what several layers read from the same input (Q, K and V; the cross-attention
// K/V of all layers). A null part of a vector is zeros of the given length (a projection without
// bias).
//
// The copies go up asynchronously, through a ring of page-locked buffers that all cores fill:
// the reads from the (mapped) model file, the conversions and the transfers of successive
// weights overlap. finish() waits for them all; the weights are usable on any stream after it.
// (Should an upload stop early, the staging buffers' destructors wait for their copies.)
class Uploader {
 public:
  explicit Uploader(Element element);

  Matrix matrix(std::span<const Weight* const> parts);
  Matrix matrix(const Weight& w);
  Buffer vector(std::span<const std::pair<const Weight*, int64_t>> parts);
  Buffer vector(const Weight& w);
  // Rows of a table (F32 values) with `padding_rows` rows of zeros after them.
  Buffer table(const Weight& w, int64_t padding_rows);
  Linear linear(const Weight& weight, const Weight* bias);
  LayerNorm layer_norm(const Weight& gamma, const Weight& beta, float eps);
  // Waits for every copy queued so far, and logs (info) the bytes and the time since the
  // Uploader was made; throws hark::Error when a copy failed.
  void finish();

 private:
  // Queues `bytes` of host memory for `device`; returns once `host` has been read.
  void put(const void* host, size_t bytes, void* device);
  Buffer to_device(const std::vector<uint8_t>& bytes);

  Element element_;
  Stream stream_;
  // Three, so that one is filled while the two before it are on their way up.
  StagingBuffer staging_[3];
  size_t next_staging_ = 0;
  size_t bytes_put_ = 0;
  std::chrono::steady_clock::time_point started_;
};

class Pass {
 public:
  Pass(Element element, cudaStream_t stream) : element_(element), stream_(stream), clock_(stream) {}

  Element element() const { return element_; }
  cudaStream_t stream() const { return stream_; }
  size_t bytes(int64_t values) const {
    return static_cast<size_t>(values) * element_size(element_);
  }

  // y[m, out] = x[m, in] · Wᵀ + bias (+ residual, which may be y), in the pass's element type.
  // Up to 32 rows take skinny_linear on Hopper (bias and residual in its epilogue). Q8_0 weights:
  // up to 16 rows of a 16-byte-aligned x read the quants (decode_linear), up to 32 skinny_linear
  // reads them, more rows expand the matrix for cuBLASLt.
  void linear(const void* x, int64_t m, const Linear& layer, void* y,
              const void* residual = nullptr);
  // y[m, n] = x[m, k] · w[n, k]ᵀ + bias[n] (bias may be null) from raw 16-bit or F32 weight rows
  // (not Q8_0): a part of a stacked matrix, such as one layer's rows of it.
  void product(const void* x, int64_t m, int64_t k, const void* w, int64_t n, const void* bias,
               void* y) {
    gemm_.linear(element_, x, m, k, w, n, bias, nullptr, element_, y, stream_);
  }
  // y = act(x · Wᵀ + bias): on Hopper one product with the activation in its epilogue
  // (gemm_sm90.h) for products of many rows, otherwise the product, then the activation in
  // place. HARK_CUDA_SM90_GEMM=0 keeps the second way everywhere.
  void activation_linear(const void* x, int64_t m, const Linear& layer, Activation act, void* y);
  // y = act(norm(x) · Wᵀ + bias), x [m, in_features]: one skinny_linear launch with the norm in
  // it where that kernel takes the product (up to 32 rows on Hopper; HARK_CUDA_SKINNY_NORM=0
  // turns the norm in it off, to compare); otherwise layer_norm into `normed` [m, in_features],
  // then linear (act none) or activation_linear. With `scatter` (a step's Q/K/V product, one row
  // a sequence), where skinny_linear runs the product, it writes Q to y [m, width] and K and V
  // into the caches (HARK_CUDA_SKINNY_SCATTER=0: not); returns whether it did (otherwise y holds
  // the whole product, as without a scatter).
  bool norm_linear(const void* x, int64_t m, const LayerNorm& norm, const Linear& layer,
                   Activation act, void* normed, void* y, const KvScatter* scatter = nullptr);
  // q and scales = quantize_int8 (kernels.h) of x · Wᵀ + bias in groups of `group` columns, in
  // group_major_strides(out_features, group, block_rows). On Hopper, groups of 64 take one
  // product that quantises in its epilogue (gemm_sm90.h: quantized_linear; off with
  // HARK_CUDA_SM90_GEMM=0); otherwise the product runs a chunk of rows at a time into `scratch`
  // (its size, at least 256 rows), each chunk quantised from there, so that no full copy in the
  // element type is ever held.
  void quantized_linear(const void* x, int64_t m, const Linear& layer, int group,
                        int64_t block_rows, int8_t* q, float* scales, Buffer& scratch);
  // One linear layer of a decode step (m ≤ 16 rows) in one launch (decode_linear): y =
  // [gelu](norm(x) · Wᵀ + bias) (+ residual, which may be y), or with `scatter` the layer's output
  // split into y and the K/V caches. Null norm, residual, scatter: absent. From 8 rows (10 with
  // Q8_0 weights) skinny_linear takes the layer where it runs instead, the faster one there (its
  // GELU the fitted form of the products' epilogues); HARK_CUDA_SKINNY_STEP=0 or 1 forces one
  // kernel for every row count, to compare.
  void step_linear(const void* x, int64_t m, const Linear& layer, void* y,
                   const LayerNorm* norm = nullptr, bool gelu = false,
                   const void* residual = nullptr, const KvScatter* scatter = nullptr);
  // y[m, rows of w] = x · Wᵀ in F32 (logits).
  void linear_f32_out(const void* x, int64_t m, const Matrix& w, float* y);
  // y[m, rows of w] = norm(x) · Wᵀ in F32 (logits); x may be overwritten. Up to 16 rows take one
  // decode_linear launch with the norm fused (one launch instead of two, W read once); otherwise
  // x is normalised in place, then multiplied.
  void norm_linear_f32_out(void* x, int64_t m, const LayerNorm& norm, int64_t cols, const Matrix& w,
                           float* y);
  void layer_norm(const void* x, int64_t rows, const LayerNorm& norm, int64_t cols, void* y);
  void gelu(void* x, int64_t rows, int64_t cols) {
    bias_gelu(element_, x, nullptr, rows, cols, stream_);
  }

  // Multi-head self-attention with Transformer-XL relative positions over a padded or packed
  // batch, as rel_pos_attention (kernels_conformer.h) defines it, on queries that hold the
  // position bias already: q here is q + v' (a model folds v' into its query projection's bias,
  // so that no pass over the queries adds it), and content_bias [heads, head_dim] is u − v', so
  // that the content scores take q + u = (q + v') + (u − v'). F16/BF16 with head_dim 64 or 128
  // runs on the tensor cores as one flash kernel (padded_attention with RelativePositions): the
  // position scores from q and the table as it goes, the content bias added to the queries as
  // they are loaded. Anything else runs rel_pos_attention's kernel (bias_u = content_bias, no
  // bias_v), F32 throughout.
  void rel_pos_attention(const void* q, const void* k, const void* v, int64_t row_stride,
                         const void* p, int64_t p_row_stride, const void* content_bias,
                         const int32_t* lengths, const int32_t* starts, int batch, int64_t steps,
                         int heads, int head_dim, float scale, void* out, int64_t out_row_stride);
  // HARK_CUDA_PROFILE's stages (profile.h): `stage` begins here on the pass's stream, ending
  // the one before; finish_stages() ends the last and books their times. No-ops when not
  // profiling, and while the stream is being captured into a graph.
  void mark(const char* stage) { clock_.mark(stage); }
  void finish_stages() { clock_.finish(); }
  bool profiling() const { return clock_.enabled(); }
  StageClock& clock() { return clock_; }

  // Where the pass's own scratch (its ops' workspaces) lies now, as numbers for the key of a
  // ReplayedGraph (graph.h) of its ops: a graph captured before one of them moved is stale.
  std::vector<int64_t> scratch_key() const {
    std::vector<int64_t> key;
    key.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(expanded_.data())));
    return key;
  }

 private:
  // Runs y = act(norm(x) · Wᵀ + bias) + residual as skinny_linear (skinny_linear_sm90.h) where it
  // takes the product (null norm, residual: none); false where it does not, having done nothing.
  // Which rows should take it is the caller's rule (pass_cuda.cpp: takes_skinny_linear for the
  // products, step_takes_skinny_linear for the fused step's layers).
  bool skinny(const void* x, int64_t m, const Linear& layer, Activation act, const void* residual,
              void* y, const DecodeNorm* norm = nullptr, const KvScatter* scatter = nullptr);
  const void* expanded(const Matrix& w);

  Element element_;
  cudaStream_t stream_;
  Gemm gemm_;
  Buffer expanded_;  // Q8_0 weights expanded for a product with many rows
  StageClock clock_;
};

}  // namespace hark::compute::cuda
