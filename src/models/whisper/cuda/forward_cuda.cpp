#include "models/whisper/cuda/forward.h"

#include <algorithm>
#include <utility>

#include "base/error.h"

namespace hark::whisper::cuda {

namespace {

// Element offset helper for untyped device pointers.
const void* offset(const void* base, int64_t elements, gpu::Element e) {
  return static_cast<const uint8_t*>(base) + elements * static_cast<int64_t>(gpu::element_size(e));
}
void* offset(void* base, int64_t elements, gpu::Element e) {
  return static_cast<uint8_t*>(base) + elements * static_cast<int64_t>(gpu::element_size(e));
}

}  // namespace

void encode(gpu::Pass& pass, const Config& config, const Weights& w, const float* mel, int count,
            EncoderBuffers& s, EncodedBuffers& out) {
  const gpu::Element e = pass.element();
  const int64_t n_mels = config.n_mels, in_frames = config.window_frames();
  const int64_t frames = config.max_source_positions, d = config.d_model;
  const int64_t rows = count * frames;
  const int layers = config.decoder_layers;

  const size_t mel_bytes = sizeof(float) * count * n_mels * in_frames;
  s.mel.reserve(mel_bytes);
  gpu::upload(mel, mel_bytes, s.mel.data(), pass.stream());
  s.time_major.reserve(pass.bytes(count * in_frames * n_mels));
  gpu::mel_to_time_major(s.mel.as<float>(), count, n_mels, in_frames, e, s.time_major.data(),
                         pass.stream());

  // conv1 (stride 1) and conv2 (stride 2), each as an unfold and one product, then GELU.
  s.unfolded.reserve(pass.bytes(count * in_frames * std::max(n_mels, d) * 3));
  gpu::im2col_1d(e, s.time_major.data(), count, in_frames, n_mels, 3, 1, 1, s.unfolded.data(),
                 pass.stream());
  s.conv1.reserve(pass.bytes(count * in_frames * d));
  pass.linear(s.unfolded.data(), count * in_frames, w.conv1, s.conv1.data());
  pass.gelu(s.conv1.data(), count * in_frames, d);
  gpu::im2col_1d(e, s.conv1.data(), count, in_frames, d, 3, 2, 1, s.unfolded.data(), pass.stream());
  s.x.reserve(pass.bytes(rows * d));
  pass.linear(s.unfolded.data(), rows, w.conv2, s.x.data());
  pass.gelu(s.x.data(), rows, d);
  gpu::add_rows(e, s.x.data(), w.encoder_positions.data(), count, frames, d, pass.stream());

  s.h.reserve(pass.bytes(rows * d));
  s.qkv.reserve(pass.bytes(rows * 3 * d));
  s.context.reserve(pass.bytes(rows * d));
  s.hidden.reserve(pass.bytes(rows * config.encoder_ffn));
  const int heads = config.encoder_heads;
  for (const EncoderLayer& layer : w.encoder_layers) {
    pass.layer_norm(s.x.data(), rows, layer.attention_norm, d, s.h.data());
    pass.linear(s.h.data(), rows, layer.qkv, s.qkv.data());
    const void* q = s.qkv.data();
    gpu::attention(e, q, 3 * d, frames * 3 * d, offset(q, d, e), offset(q, 2 * d, e), 3 * d,
                   frames * 3 * d, s.context.data(), d, frames * d, count, heads, d / heads, frames,
                   frames, w.encoder_scale, /*causal=*/false, pass.stream());
    pass.linear(s.context.data(), rows, layer.out, s.x.data(), s.x.data());
    pass.layer_norm(s.x.data(), rows, layer.ffn_norm, d, s.h.data());
    pass.linear(s.h.data(), rows, layer.fc1, s.hidden.data());
    pass.gelu(s.hidden.data(), rows, config.encoder_ffn);
    pass.linear(s.hidden.data(), rows, layer.fc2, s.x.data(), s.x.data());
  }
  out.frames = gpu::Buffer(pass.bytes(rows * d));
  pass.layer_norm(s.x.data(), rows, w.encoder_norm, d, out.frames.data());
  out.cross_kv = gpu::Buffer(pass.bytes(rows * layers * 2 * d));
  pass.linear(out.frames.data(), rows, w.cross_kv, out.cross_kv.data());
  out.count = count;
}

KvCaches::KvCaches(const Config& config, gpu::Element element, int sequences, int capacity)
    : element_(element),
      layers_(config.decoder_layers),
      sequences_(sequences),
      capacity_(capacity),
      d_(config.d_model) {
  data_ = gpu::Buffer(gpu::element_size(element) * 2 * layers_ * sequence_stride() * sequences);
}

void* KvCaches::at(int layer, int which, int sequence) const {
  const int64_t block = sequence_stride() * sequences_;
  return offset(data_.data(), (2 * layer + which) * block + sequence * sequence_stride(), element_);
}

void KvCaches::reorder(const int* source, int length, cudaStream_t stream) {
  if (spare_.bytes() < data_.bytes()) spare_ = gpu::Buffer(data_.bytes());
  const size_t row_bytes = gpu::element_size(element_) * d_ * length;
  const int64_t block = sequence_stride() * sequences_;
  for (int part = 0; part < 2 * layers_; ++part) {
    for (int i = 0; i < sequences_; ++i) {
      const void* from =
          offset(data_.data(), part * block + source[i] * sequence_stride(), element_);
      void* to = offset(spare_.data(), part * block + i * sequence_stride(), element_);
      gpu::check(cudaMemcpyAsync(to, from, row_bytes, cudaMemcpyDeviceToDevice, stream),
                 "K/V cache reorder");
    }
  }
  std::swap(data_, spare_);
}

namespace {

void reserve_decoder(gpu::Pass& pass, const Config& config, int64_t rows, DecoderBuffers& s) {
  const int64_t d = config.d_model;
  s.x.reserve(pass.bytes(rows * d));
  s.h.reserve(pass.bytes(rows * d));
  s.qkv.reserve(pass.bytes(rows * 3 * d));
  s.context.reserve(pass.bytes(rows * d));
  s.q.reserve(pass.bytes(rows * d));
  s.hidden.reserve(pass.bytes(rows * config.decoder_ffn));
}

}  // namespace

namespace {

// The decoder's blocks over `rows` token rows (embedded into s.x): the two attentions are given
// by the caller, since the prompt attends over whole sequences and the step over one query per
// sequence. self_attend(layer, qkv) and cross_attend(layer, q) write s.context.
template <class SelfAttend, class CrossAttend>
void decoder_blocks(gpu::Pass& pass, const Config& config, const Weights& w, int64_t rows,
                    DecoderBuffers& s, SelfAttend self_attend, CrossAttend cross_attend) {
  const int64_t d = config.d_model;
  for (int l = 0; l < config.decoder_layers; ++l) {
    const DecoderLayer& layer = w.decoder_layers[l];
    pass.layer_norm(s.x.data(), rows, layer.self_norm, d, s.h.data());
    pass.linear(s.h.data(), rows, layer.qkv, s.qkv.data());
    self_attend(l, s.qkv.data());
    pass.linear(s.context.data(), rows, layer.self_out, s.x.data(), s.x.data());

    pass.layer_norm(s.x.data(), rows, layer.cross_norm, d, s.h.data());
    pass.linear(s.h.data(), rows, layer.cross_q, s.q.data());
    cross_attend(l, s.q.data());
    pass.linear(s.context.data(), rows, layer.cross_out, s.x.data(), s.x.data());

    pass.layer_norm(s.x.data(), rows, layer.ffn_norm, d, s.h.data());
    pass.linear(s.h.data(), rows, layer.fc1, s.hidden.data());
    pass.gelu(s.hidden.data(), rows, config.decoder_ffn);
    pass.linear(s.hidden.data(), rows, layer.fc2, s.x.data(), s.x.data());
  }
}

}  // namespace

void decode_tokens(gpu::Pass& pass, const Config& config, const Weights& w, KvCaches& caches,
                   int first, int batch, int steps, int past, const int32_t* ids,
                   const int32_t* position_ids, const int32_t* positions, CrossKv cross,
                   DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const int64_t d = config.d_model, rows = int64_t{batch} * steps;
  const int64_t frames = config.max_source_positions, kv_row = 2 * d * config.decoder_layers;
  const int heads = config.decoder_heads;
  reserve_decoder(pass, config, rows, s);
  gpu::embed(e, w.tokens.data.data(), w.tokens.q8_0, w.decoder_positions.data(), ids, position_ids,
             rows, d, s.x.data(), pass.stream());
  auto self_attend = [&](int l, const void* qkv) {
    gpu::append_kv(e, offset(qkv, d, e), offset(qkv, 2 * d, e), 3 * d, steps * 3 * d, batch, steps,
                   d, caches.keys(l, first), caches.values(l, first), caches.sequence_stride(),
                   positions, pass.stream());
    gpu::attention(e, qkv, 3 * d, steps * 3 * d, caches.keys(l, first), caches.values(l, first), d,
                   caches.sequence_stride(), s.context.data(), d, steps * d, batch, heads,
                   d / heads, steps, past + steps, w.decoder_scale, /*causal=*/true, pass.stream());
  };
  auto cross_attend = [&](int l, const void* q) {
    const void* keys = offset(cross.kv, 2 * d * l, e);
    gpu::attention(e, q, d, steps * d, keys, offset(keys, d, e), kv_row, cross.sequence_stride,
                   s.context.data(), d, steps * d, batch, heads, d / heads, steps, frames,
                   w.decoder_scale, /*causal=*/false, pass.stream());
  };
  decoder_blocks(pass, config, w, rows, s, self_attend, cross_attend);
}

void decode_step(gpu::Pass& pass, const Config& config, const Weights& w, KvCaches& caches,
                 int batch, const int32_t* ids, const int32_t* positions, const int32_t* lengths,
                 const int32_t* cross_lengths, CrossKv cross, DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const int64_t d = config.d_model, kv_row = 2 * d * config.decoder_layers;
  const int heads = config.decoder_heads;
  reserve_decoder(pass, config, batch, s);
  gpu::embed(e, w.tokens.data.data(), w.tokens.q8_0, w.decoder_positions.data(), ids, positions,
             batch, d, s.x.data(), pass.stream());
  auto self_attend = [&](int l, const void* qkv) {
    gpu::append_kv(e, offset(qkv, d, e), offset(qkv, 2 * d, e), 3 * d, 3 * d, batch, 1, d,
                   caches.keys(l), caches.values(l), caches.sequence_stride(), positions,
                   pass.stream());
    gpu::decode_attention(e, qkv, 3 * d, caches.keys(l), caches.values(l), d,
                          caches.sequence_stride(), lengths, s.context.data(), d, batch, heads,
                          d / heads, w.decoder_scale, pass.stream());
  };
  auto cross_attend = [&](int l, const void* q) {
    const void* keys = offset(cross.kv, 2 * d * l, e);
    gpu::decode_attention(e, q, d, keys, offset(keys, d, e), kv_row, cross.sequence_stride,
                          cross_lengths, s.context.data(), d, batch, heads, d / heads,
                          w.decoder_scale, pass.stream());
  };
  decoder_blocks(pass, config, w, batch, s, self_attend, cross_attend);
}

void gather_rows(const void* from, std::span<const int64_t> rows, size_t row_bytes, void* to,
                 cudaStream_t stream) {
  for (size_t i = 0; i < rows.size(); ++i) {
    gpu::check(cudaMemcpyAsync(static_cast<uint8_t*>(to) + i * row_bytes,
                               static_cast<const uint8_t*>(from) + rows[i] * row_bytes, row_bytes,
                               cudaMemcpyDeviceToDevice, stream),
               "gather rows");
  }
}

void logits(gpu::Pass& pass, const Config& config, const Weights& w, void* hidden, int64_t rows,
            float* out) {
  pass.layer_norm(hidden, rows, w.decoder_norm, config.d_model, hidden);
  pass.linear_f32_out(hidden, rows, w.tokens, out);
}

}  // namespace hark::whisper::cuda
