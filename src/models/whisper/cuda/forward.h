// Whisper's forward pass on the GPU, written against compute/cuda's Pass: the encoder over a
// batch of windows, the decoder over a prompt (any number of tokens per sequence) and the
// decoder's single-token step that the batched greedy search captures into a CUDA Graph.
#pragma once

#include <cstdint>
#include <span>

#include "models/whisper/cuda/weights.h"

namespace hark::whisper::cuda {

// Scratch of the encoder, grown to the largest batch seen.
struct EncoderBuffers {
  gpu::Buffer mel, time_major, unfolded, conv1, x, h, qkv, context, hidden;
};

// What the decoder reads of a batch of encoded windows: frames [count, frames, d] after the
// final norm, and cross_kv [count, frames, layers · 2d] (every decoder layer's K and V).
struct EncodedBuffers {
  gpu::Buffer frames, cross_kv;
  int count = 0;
};

// mel: `count` windows on the host, F32 [count, n_mels, window_frames()].
void encode(gpu::Pass& pass, const Config& config, const Weights& w, const float* mel, int count,
            EncoderBuffers& scratch, EncodedBuffers& out);

// Self-attention K/V caches of every decoder layer for `sequences` slots of `capacity`
// positions: keys(l) and values(l) are [sequences, capacity, d].
class KvCaches {
 public:
  KvCaches(const Config& config, gpu::Element element, int sequences, int capacity);
  void* keys(int layer, int sequence = 0) const { return at(layer, 0, sequence); }
  void* values(int layer, int sequence = 0) const { return at(layer, 1, sequence); }
  int64_t sequence_stride() const { return static_cast<int64_t>(capacity_) * d_; }
  int sequences() const { return sequences_; }
  int capacity() const { return capacity_; }
  // Afterwards slot i holds what slot source[i] held, in its first `length` positions.
  void reorder(const int* source, int length, cudaStream_t stream);

 private:
  void* at(int layer, int which, int sequence) const;
  gpu::Buffer data_, spare_;
  gpu::Element element_;
  int layers_, sequences_, capacity_;
  int64_t d_;
};

// The cross-attention K/V that a decoder batch reads: sequence b reads window kv +
// b · sequence_stride (0: all sequences read one window).
struct CrossKv {
  const void* kv = nullptr;
  int64_t sequence_stride = 0;
};

// Scratch of the decoder, grown as needed.
struct DecoderBuffers {
  gpu::Buffer x, h, qkv, context, q, hidden;
};

// Appends `steps` tokens to sequences [first, first + batch) of `caches`, each of which holds
// `past` positions: ids and position_ids [batch · steps] and positions [batch] (= past each) on
// the device. Leaves the last layer's output [batch · steps, d] in scratch.x.
void decode_tokens(gpu::Pass& pass, const Config& config, const Weights& w, KvCaches& caches,
                   int first, int batch, int steps, int past, const int32_t* ids,
                   const int32_t* position_ids, const int32_t* positions, CrossKv cross,
                   DecoderBuffers& scratch);

// One token for each of `batch` sequences (slots 0..batch-1): ids[b] at position positions[b];
// lengths[b] = positions[b] + 1 and cross_lengths[b] = frames, all on the device, so that the
// same launches serve every step. Leaves the last layer's output [batch, d] in scratch.x.
void decode_step(gpu::Pass& pass, const Config& config, const Weights& w, KvCaches& caches,
                 int batch, const int32_t* ids, const int32_t* positions, const int32_t* lengths,
                 const int32_t* cross_lengths, CrossKv cross, DecoderBuffers& scratch);

// to[i] = from[rows[i]], rows of `row_bytes`, on the device.
void gather_rows(const void* from, std::span<const int64_t> rows, size_t row_bytes, void* to,
                 cudaStream_t stream);

// logits [rows, vocab] F32 = final_norm(hidden rows) · tokensᵀ; hidden is overwritten.
void logits(gpu::Pass& pass, const Config& config, const Weights& w, void* hidden, int64_t rows,
            float* out);

}  // namespace hark::whisper::cuda
