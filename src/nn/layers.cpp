#include "nn/layers.h"

#include <utility>

#include "base/error.h"

namespace hark::nn {

void Linear::forward(const Tensor& x, Tensor& y, Activation activation,
                     const Tensor* residual) const {
  compute::linear(
      x, weight, y,
      {.bias = bias ? &*bias : nullptr, .activation = activation, .residual = residual});
}

void LayerNorm::forward(const Tensor& x, Tensor& y) const {
  compute::layer_norm(x, weight, bias, eps, y);
}

void FeedForward::forward(const Tensor& x, Tensor& hidden, Tensor& out,
                          const Tensor* residual) const {
  fc1.forward(x, hidden, activation);
  fc2.forward(hidden, out, Activation::none, residual);
}

KvCache::KvCache(int64_t n_sequences, int64_t capacity, int64_t width)
    : keys_(Shape{n_sequences, capacity, width}), values_(Shape{n_sequences, capacity, width}) {}

void KvCache::append(const Tensor& k, const Tensor& v) {
  if (k.shape() != v.shape() || k.shape().rank() != 3 || k.dim(0) != n_sequences() ||
      k.dim(2) != width()) {
    fail("K/V cache of ", n_sequences(), " sequences x ", width(), " values: cannot append keys ",
         k.shape().str(), " and values ", v.shape().str());
  }
  if (length_ + k.dim(1) > capacity()) {
    fail("K/V cache overflow: ", length_, " + ", k.dim(1), " positions, room for ", capacity());
  }
  compute::write_rows(k, length_, keys_);
  compute::write_rows(v, length_, values_);
  length_ += k.dim(1);
}

void KvCache::reorder(std::span<const int> source) {
  if (static_cast<int64_t>(source.size()) != n_sequences()) {
    fail("K/V cache reorder: ", source.size(), " sources for ", n_sequences(), " sequences");
  }
  bool identity = true;
  for (size_t i = 0; i < source.size(); ++i) identity = identity && source[i] == int(i);
  if (identity || length_ == 0) {
    for (int s : source) {  // still reject bad indices
      if (s < 0 || s >= n_sequences()) fail("K/V cache reorder: source ", s);
    }
    return;
  }
  // Gather into the spare buffer and swap: two copies of the valid prefix, no allocation after
  // the first reorder.
  spare_.resize(keys_.shape());
  compute::gather_sequences(keys_, source, length_, spare_);
  std::swap(keys_, spare_);
  compute::gather_sequences(values_, source, length_, spare_);
  std::swap(values_, spare_);
}

void MultiHeadAttention::self_attention(const Tensor& x, AttentionScratch& scratch, Tensor& out,
                                        const Tensor* residual) const {
  q_proj.forward(x, scratch.q);
  k_proj.forward(x, scratch.k);
  v_proj.forward(x, scratch.v);
  compute::attention(scratch.q, scratch.k, scratch.v, scratch.k.dim(1), heads, scale, false,
                     scratch.context);
  out_proj.forward(scratch.context, out, Activation::none, residual);
}

void MultiHeadAttention::cached_self_attention(const Tensor& x, KvCache& cache, bool causal,
                                               AttentionScratch& scratch, Tensor& out,
                                               const Tensor* residual) const {
  q_proj.forward(x, scratch.q);
  k_proj.forward(x, scratch.k);
  v_proj.forward(x, scratch.v);
  cache.append(scratch.k, scratch.v);
  compute::attention(scratch.q, cache.keys(), cache.values(), cache.length(), heads, scale, causal,
                     scratch.context);
  out_proj.forward(scratch.context, out, Activation::none, residual);
}

void MultiHeadAttention::project_memory(const Tensor& memory, compute::PackedKv& memory_kv) const {
  Tensor keys, values;
  k_proj.forward(memory, keys);
  v_proj.forward(memory, values);
  compute::pack_kv(std::move(keys), std::move(values), heads, memory_kv);
}

void MultiHeadAttention::cross_attention(const Tensor& x, const compute::PackedKv& memory_kv,
                                         AttentionScratch& scratch, Tensor& out,
                                         const Tensor* residual) const {
  q_proj.forward(x, scratch.q);
  compute::attention(scratch.q, memory_kv, scale, scratch.context);
  out_proj.forward(scratch.context, out, Activation::none, residual);
}

}  // namespace hark::nn
