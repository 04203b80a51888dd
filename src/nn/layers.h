// Layers shared by model families: linear, layer norm, feed-forward, multi-head attention with a
// K/V cache. They hold weight views only (no activations), so one model instance serves any
// number of concurrent sessions; every call takes the buffers it writes to.
#pragma once

#include <optional>
#include <span>

#include "compute/ops.h"

namespace hark::nn {

using compute::Activation;
using compute::Shape;
using compute::Tensor;
using compute::Weight;

struct Linear {
  Weight weight;               // [out, in]
  std::optional<Weight> bias;  // [out]

  int64_t in_features() const { return weight.cols(); }
  int64_t out_features() const { return weight.rows(); }
  // y = activation(x Wᵀ + b) + residual; residual may be y itself.
  void forward(const Tensor& x, Tensor& y, Activation activation = Activation::none,
               const Tensor* residual = nullptr) const;
};

struct LayerNorm {
  Weight weight, bias;  // [d]
  float eps = 1e-5f;

  void forward(const Tensor& x, Tensor& y) const;  // y may be x
};

// fc2(activation(fc1(x))), added to a residual.
struct FeedForward {
  Linear fc1, fc2;
  Activation activation = Activation::gelu;

  // out = residual + fc2(act(fc1(x))); `hidden` is scratch; residual may be out.
  void forward(const Tensor& x, Tensor& hidden, Tensor& out,
               const Tensor* residual = nullptr) const;
};

// Keys and values of past positions for n parallel sequences of one attention layer:
// [n_sequences, capacity, width] each, of which the first length() positions are valid.
class KvCache {
 public:
  KvCache() = default;
  KvCache(int64_t n_sequences, int64_t capacity, int64_t width);

  int64_t n_sequences() const { return keys_.dim(0); }
  int64_t capacity() const { return keys_.dim(1); }
  int64_t width() const { return keys_.dim(2); }
  int64_t length() const { return length_; }
  const Tensor& keys() const { return keys_; }
  const Tensor& values() const { return values_; }

  // Appends k, v [n_sequences, steps, width] after the current length; throws hark::Error when
  // the cache would overflow its capacity.
  void append(const Tensor& k, const Tensor& v);
  // Afterwards sequence i holds what sequence source[i] held (beam search).
  void reorder(std::span<const int> source);
  void clear() { length_ = 0; }

 private:
  Tensor keys_, values_;
  Tensor spare_;  // the previous keys/values buffer, reused by reorder()
  int64_t length_ = 0;
};

// Buffers one attention call writes to; kept by the caller and reused across calls.
struct AttentionScratch {
  Tensor q, k, v, context;
};

// Multi-head attention with separate q/k/v/out projections (any may lack a bias, like Whisper's
// k_proj). Scores are scaled by `scale` (usually head_dim^-1/2).
struct MultiHeadAttention {
  Linear q_proj, k_proj, v_proj, out_proj;
  int heads = 1;
  float scale = 1.0f;

  int64_t width() const { return q_proj.out_features(); }

  // Bidirectional self-attention over x [batch, steps, d] (an encoder layer):
  // out = residual + attention(x).
  void self_attention(const Tensor& x, AttentionScratch& scratch, Tensor& out,
                      const Tensor* residual = nullptr) const;
  // Self-attention of new positions x [n_sequences, steps, d] that are appended to `cache`
  // first; causal: each position sees the cache and the new positions up to itself.
  void cached_self_attention(const Tensor& x, KvCache& cache, bool causal,
                             AttentionScratch& scratch, Tensor& out,
                             const Tensor* residual = nullptr) const;
  // Cross-attention: the keys and values of `memory` [1, steps, d], computed and packed once.
  void project_memory(const Tensor& memory, compute::PackedKv& memory_kv) const;
  // Queries from x [n_sequences, steps, d] over the projected memory, shared by all sequences.
  void cross_attention(const Tensor& x, const compute::PackedKv& memory_kv,
                       AttentionScratch& scratch, Tensor& out,
                       const Tensor* residual = nullptr) const;
};

}  // namespace hark::nn
