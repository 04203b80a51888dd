#include "models/whisper/cuda/forward.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "base/error.h"
#include "compute/cuda/frame_attention_sm90.h"

namespace hark::whisper::cuda {

namespace {

// Element offset helper for untyped device pointers.
const void* offset(const void* base, int64_t elements, gpu::Element e) {
  return static_cast<const uint8_t*>(base) + elements * static_cast<int64_t>(gpu::element_size(e));
}
void* offset(void* base, int64_t elements, gpu::Element e) {
  return static_cast<uint8_t*>(base) + elements * static_cast<int64_t>(gpu::element_size(e));
}

// Windows up to which encode() replays its layers as a graph: the batches whose scratch stays
// from one call to the next (large-v3's, under EncoderBuffers::kKeptBytes), so that the addresses
// the graph holds stay too.
constexpr int kReplayedEncoderWindows = 3;

// HARK_CUDA_ENCODER_GRAPH=0 runs them eagerly (to compare; read at each call, so that a test can
// run both ways in one process).
bool encoder_graph_enabled() {
  const char* value = std::getenv("HARK_CUDA_ENCODER_GRAPH");
  return value == nullptr || value[0] != '0';
}

// Prompt tokens per window up to which a prompt's cross-attention runs like a step's, each token
// a query row of the step's kernel (over the frames, or over the INT8 K/V as stored), a pass over
// its window's K/V per token (the tokens of a window run side by side, so that their reads may
// share L2); a longer prompt has each layer's K and V of its windows in the element type first
// (from the frames, or dequantised) and runs the flash attention over them. Not tuned: the
// prompts of a batched decode have 3-4 tokens, those that carry a previous window's text up to
// 224.
constexpr int64_t kStepLikePromptRows = 16;

// Decoder layer l's INT8 cross-attention K and V in the windows `cross` names: each window holds
// its frames' K/V product [frames, layers · 2d] quantised group-major (kernels.h:
// group_major_strides), groups of a head's values, so layer l's K heads are groups
// [2l · heads, 2l · heads + heads) and its V heads the next `heads`.
struct Int8Layer {
  gpu::Int8Kv kv;
  int head_dim = 0;
};

Int8Layer int8_layer(const Config& config, const CrossKv& cross, int l) {
  const int64_t frames = config.max_source_positions, d = config.d_model;
  const int heads = config.decoder_heads;
  Int8Layer layer;
  layer.head_dim = static_cast<int>(d / heads);
  gpu::Int8Kv& kv = layer.kv;
  kv.strides = gpu::group_major_strides(2 * d * config.decoder_layers, layer.head_dim, frames);
  kv.strides.batch = cross.sequence_stride;
  kv.strides.scale_batch = cross.scale_sequence_stride;
  const int64_t first_group = int64_t{2} * heads * l;
  kv.k = static_cast<const int8_t*>(cross.kv) + first_group * kv.strides.group_stride;
  kv.v = kv.k + heads * kv.strides.group_stride;
  kv.k_scales = cross.scales + first_group * kv.strides.scale_group_stride;
  kv.v_scales = kv.k_scales + heads * kv.strides.scale_group_stride;
  return layer;
}

bool frames_run(const Config& config, const Weights& w) {
  return !w.cross_kv.weight.q8_0 &&
         gpu::frame_attention_runs(w.element, config.decoder_heads, config.d_model);
}

bool int8_frames_run(const Config& config, const Weights& w) {
  return frames_run(config, w) &&
         gpu::frame_attention_int8_runs(w.element, config.decoder_heads, config.d_model);
}

}  // namespace

// HARK_CUDA_CROSS_KV is read at each model load, so that a test can compare the storages in one
// process.
CrossKvPolicy cross_kv_policy(const Config& config, const Weights& w,
                              std::optional<CrossKvMode> requested) {
  if (!requested.has_value()) {
    const char* text = std::getenv("HARK_CUDA_CROSS_KV");
    if (text == nullptr || *text == '\0') return {};
    requested = cross_kv_mode_from_name(text);
    if (!requested.has_value()) {
      fail("HARK_CUDA_CROSS_KV is '", text, "': expected ", cross_kv_mode_names());
    }
  }
  CrossKvPolicy policy;
  switch (*requested) {
    case CrossKvMode::native:
      return policy;
    case CrossKvMode::int8_auto:
      if (int8_frames_run(config, w)) {
        policy.larger = CrossKvStorage::int8_frames;
        policy.larger_from = kInt8AutoFramesFromWindows;
      }
      [[fallthrough]];  // INT8 K/V for the smaller batches
    case CrossKvMode::int8:
      policy.storage = CrossKvStorage::int8;
      return policy;
    case CrossKvMode::frames:
    case CrossKvMode::int8_frames:
      break;
  }
  // The frames' storages, where this model (and GPU) can attend over them.
  const bool int8 = *requested == CrossKvMode::int8_frames;
  if (!(int8 ? int8_frames_run(config, w) : frames_run(config, w))) {
    fail("cross-attention storage ", cross_kv_mode_name(*requested),
         ": this model or GPU cannot run it (it needs ",
         int8 ? "an H100/H200, F16 weights, at most 24 heads and a width that is a multiple of "
                "128 up to 1280"
              : "16-bit weights that are not Q8_0, at most 24 heads of a multiple of 16 values "
                "up to 128, and a width that is a multiple of 16 up to 1280",
         ")");
  }
  policy.storage = int8 ? CrossKvStorage::int8_frames : CrossKvStorage::frames;
  return policy;
}

void encode(gpu::Pass& pass, const Config& config, const Weights& w, const EncoderInput& input,
            int count, CrossKvStorage storage, EncoderBuffers& s, EncodedBuffers& out) {
  const gpu::Element e = pass.element();
  const int64_t n_mels = config.n_mels, in_frames = config.window_frames();
  const int64_t frames = config.max_source_positions, d = config.d_model;
  const int64_t rows = count * frames;
  const int layers = config.decoder_layers;

  s.time_major.reserve(pass.bytes(count * in_frames * n_mels));
  if (input.host_mel != nullptr) {
    pass.mark("encoder: the mel to the GPU");
    // From page-locked memory, in pieces copied in on parallel threads: from the caller's
    // pageable memory the driver copies through a staging area of its own, several times slower.
    const size_t mel_bytes = sizeof(float) * count * n_mels * in_frames;
    s.mel.reserve(mel_bytes);
    s.staging.upload_from(input.host_mel, mel_bytes, s.mel.data(), pass.stream());
    pass.mark("encoder conv1");
    gpu::mel_to_time_major(s.mel.as<float>(), count, n_mels, in_frames, e, s.time_major.data(),
                           pass.stream());
  } else {
    pass.mark("encoder: the mel's windows");
    const size_t cut_bytes = sizeof(gpu::MelWindowCut) * count;
    s.cuts.reserve(cut_bytes);
    gpu::upload(input.cuts, cut_bytes, s.cuts.data(), pass.stream());
    gpu::mel_windows_to_time_major(s.cuts.as<const gpu::MelWindowCut>(), count, in_frames, n_mels,
                                   e, s.time_major.data(), pass.stream());
    pass.mark("encoder conv1");
  }

  // conv1 (stride 1) and conv2 (stride 2), each as an unfold and one product, then GELU.
  s.unfolded.reserve(pass.bytes(count * in_frames * std::max(n_mels, d) * 3));
  gpu::im2col_1d(e, s.time_major.data(), count, in_frames, n_mels, 3, 1, 1, s.unfolded.data(),
                 pass.stream());
  s.conv1.reserve(pass.bytes(count * in_frames * d));
  pass.linear(s.unfolded.data(), count * in_frames, w.conv1, s.conv1.data());
  pass.gelu(s.conv1.data(), count * in_frames, d);
  pass.mark("encoder conv2");
  gpu::im2col_1d(e, s.conv1.data(), count, in_frames, d, 3, 2, 1, s.unfolded.data(), pass.stream());
  s.x.reserve(pass.bytes(rows * d));
  pass.linear(s.unfolded.data(), rows, w.conv2, s.x.data());
  pass.gelu(s.x.data(), rows, d);
  gpu::add_rows(e, s.x.data(), w.encoder_positions.data(), count, frames, d, pass.stream());

  pass.mark("encoder: scratch for the layers");
  s.h.reserve(pass.bytes(rows * d));
  s.qkv.reserve(pass.bytes(rows * 3 * d));
  s.context.reserve(pass.bytes(rows * d));
  s.hidden.reserve(pass.bytes(rows * config.encoder_ffn));
  const int heads = config.encoder_heads;
  auto encoder_layers = [&] {
    for (const EncoderLayer& layer : w.encoder_layers) {
      pass.mark("encoder attention projections");
      pass.layer_norm(s.x.data(), rows, layer.attention_norm, d, s.h.data());
      pass.linear(s.h.data(), rows, layer.qkv, s.qkv.data());
      const void* q = s.qkv.data();
      pass.mark("encoder attention");
      gpu::attention(e, q, 3 * d, frames * 3 * d, offset(q, d, e), offset(q, 2 * d, e), 3 * d,
                     frames * 3 * d, s.context.data(), d, frames * d, count, heads, d / heads,
                     frames, frames, w.encoder_scale, /*causal=*/false, pass.stream());
      pass.mark("encoder attention projections");
      pass.linear(s.context.data(), rows, layer.out, s.x.data(), s.x.data());
      pass.mark("encoder feed-forward");
      pass.layer_norm(s.x.data(), rows, layer.ffn_norm, d, s.h.data());
      pass.activation_linear(s.h.data(), rows, layer.fc1, gpu::Activation::gelu, s.hidden.data());
      pass.linear(s.hidden.data(), rows, layer.fc2, s.x.data(), s.x.data());
    }
  };
  // A small batch replays its layers as a graph: ~7 launches a layer, each at most a few dozen
  // microseconds of work, whose gaps add up. The key names the shapes and every buffer the layers
  // read or write (the weights are the model's, at fixed addresses).
  if (count <= kReplayedEncoderWindows && encoder_graph_enabled()) {
    std::vector<int64_t> key = pass.scratch_key();
    for (const gpu::Buffer* buffer : {&s.x, &s.h, &s.qkv, &s.context, &s.hidden}) {
      key.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(buffer->data())));
    }
    key.push_back(count);
    pass.mark("encoder layers (replayed graph)");
    s.layers.run(std::move(key), pass.stream(), encoder_layers);
  } else {
    encoder_layers();
  }
  // Decoding the batch needs the memory more than a later encode needs these allocations, and the
  // peak comes with the outputs: unless the scratch is small enough to keep, it goes first.
  size_t scratch_bytes = 0;
  for (const gpu::Buffer* buffer : s.buffers()) scratch_bytes += buffer->bytes();
  s.kept = scratch_bytes <= EncoderBuffers::kKeptBytes;
  if (!s.kept) {
    s.mel = {};
    s.cuts = {};
    s.time_major = {};
    s.unfolded = {};
    s.conv1 = {};
    s.h = {};
    s.qkv = {};
    s.context = {};
    s.hidden = {};
  }

  pass.mark(over_frames(storage) ? "encoder final norm" : "cross-attention K/V");
  out.count = count;
  out.storage = storage;
  out.frames = gpu::Buffer(pass.bytes(rows * d));
  pass.layer_norm(s.x.data(), rows, w.encoder_norm, d, out.frames.data());
  if (storage == CrossKvStorage::int8_frames) {
    out.frame_codes = gpu::Buffer(rows * d);
    out.frame_scales = gpu::Buffer(sizeof(float) * rows);
    out.channel_scales = gpu::Buffer(sizeof(float) * count * d);
    gpu::quantize_frames(e, out.frames.data(), count, static_cast<int>(frames), d,
                         out.frame_codes.as<uint8_t>(), out.frame_scales.as<float>(),
                         out.channel_scales.as<float>(), pass.stream());
  }
  if (over_frames(storage)) {
    pass.finish_stages();
    return;
  }
  const int64_t kv_width = layers * 2 * d;
  if (storage == CrossKvStorage::native) {
    out.cross_kv = gpu::Buffer(pass.bytes(rows * kv_width));
    pass.linear(out.frames.data(), rows, w.cross_kv, out.cross_kv.data());
    pass.finish_stages();
    return;
  }
  // INT8: quantised as the product computes it (through s.hidden where the GPU cannot), each
  // window group-major.
  const int head_dim = static_cast<int>(d / config.decoder_heads);
  out.cross_kv = gpu::Buffer(rows * kv_width);
  out.cross_kv_scales = gpu::Buffer(sizeof(float) * rows * (kv_width / head_dim));
  pass.quantized_linear(out.frames.data(), rows, w.cross_kv, head_dim, frames,
                        out.cross_kv.as<int8_t>(), out.cross_kv_scales.as<float>(), s.hidden);
  pass.finish_stages();
}

CrossKv cross_kv_of(const Config& config, gpu::Element e, const EncodedBuffers& encoded, int first,
                    bool per_sequence) {
  if (first < 0 || first >= encoded.count) {
    fail("whisper: window ", first, " of a batch of ", encoded.count, " encoded windows");
  }
  const int64_t frames = config.max_source_positions;
  const int64_t window = frames * 2 * config.d_model * config.decoder_layers;
  const int64_t window_scales = frames * 2 * config.decoder_heads * config.decoder_layers;
  CrossKv cross;
  cross.storage = encoded.storage;
  if (over_frames(encoded.storage)) {
    const int64_t window_frames = frames * config.d_model;
    cross.kv = offset(encoded.frames.data(), first * window_frames, e);
    cross.sequence_stride = per_sequence ? window_frames : 0;
    if (encoded.storage == CrossKvStorage::int8_frames) {
      cross.int8_frames.codes = encoded.frame_codes.as<uint8_t>() + first * window_frames;
      cross.int8_frames.frame_scales = encoded.frame_scales.as<float>() + first * frames;
      cross.int8_frames.channel_scales =
          encoded.channel_scales.as<float>() + first * config.d_model;
      cross.int8_frames.windowed = per_sequence;
    }
    return cross;
  }
  cross.sequence_stride = per_sequence ? window : 0;
  if (encoded.storage == CrossKvStorage::native) {
    cross.kv = offset(encoded.cross_kv.data(), first * window, e);
    return cross;
  }
  cross.kv = encoded.cross_kv.as<int8_t>() + first * window;
  cross.scales = encoded.cross_kv_scales.as<float>() + first * window_scales;
  cross.scale_sequence_stride = per_sequence ? window_scales : 0;
  return cross;
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

// frame_rows: the rows that attend over the frames (frames storage), 0 if none.
void reserve_decoder(gpu::Pass& pass, const Config& config, int64_t rows, int64_t frame_rows,
                     DecoderBuffers& s) {
  const int64_t d = config.d_model;
  s.x.reserve(pass.bytes(rows * d));
  s.h.reserve(pass.bytes(rows * d));
  s.qkv.reserve(pass.bytes(rows * 3 * d));
  s.context.reserve(pass.bytes(rows * d));
  s.q.reserve(pass.bytes(rows * d));
  s.hidden.reserve(pass.bytes(rows * config.decoder_ffn));
  s.absorbed.reserve(pass.bytes(frame_rows * config.decoder_heads * d));
  s.attended.reserve(pass.bytes(frame_rows * config.decoder_heads * d));
}

// Decoder layer l's rows of the stacked cross-attention K/V matrix (K rows, then V rows d · d
// values on) and of its bias (null: none; V's d values on).
struct CrossLayer {
  const void* weights;
  const void* bias;
};
CrossLayer cross_layer(const Config& config, const Weights& w, int l, gpu::Element e) {
  const int64_t first_row = 2 * config.d_model * l;
  return {offset(w.cross_kv.weight.data.data(), first_row * config.d_model, e),
          w.cross_kv.bias.bytes() > 0 ? offset(w.cross_kv.bias.data(), first_row, e) : nullptr};
}

// Cross-attention of decoder layer l over the frames (frames or, in INT8, int8_frames storage):
// q [rows, d] to s.context; row r reads window r / rows_per_window of those `cross` names.
void attend_frames(gpu::Pass& pass, const Config& config, const Weights& w, int l, const void* q,
                   int64_t rows, int64_t rows_per_window, const CrossKv& cross, DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const int64_t d = config.d_model;
  const int heads = config.decoder_heads;
  const int head_dim = static_cast<int>(d / heads);
  const CrossLayer layer = cross_layer(config, w, l, e);
  const void* w_k = layer.weights;
  const void* w_v = offset(w_k, d * d, e);
  const void* b_v = layer.bias != nullptr ? offset(layer.bias, d, e) : nullptr;
  gpu::absorb_query(e, q, d, rows, heads, head_dim, w_k, d, d, w.decoder_scale, s.absorbed.data(),
                    pass.stream());
  const int frames = static_cast<int>(config.max_source_positions);
  if (cross.storage == CrossKvStorage::int8_frames) {
    gpu::frame_attention_int8(e, s.absorbed.data(), rows, heads, d, cross.int8_frames, frames,
                              rows_per_window, s.attended.data(), pass.stream());
  } else {
    gpu::frame_attention(e, s.absorbed.data(), rows, heads, d, cross.kv, frames,
                         cross.sequence_stride, rows_per_window, s.attended.data(), pass.stream());
  }
  gpu::absorb_values(e, s.attended.data(), rows, heads, head_dim, w_v, d, b_v, d, s.context.data(),
                     d, pass.stream());
}

}  // namespace

namespace {

// The decoder's blocks over `rows` token rows (embedded into s.x): the two attentions are given
// by the caller, since the prompt attends over whole sequences and the step over one query per
// sequence. self_attend(l) reads s.x, writes s.context (its Q/K/V product included: a step's may
// put K and V straight into the caches); cross_attend(l, q) writes s.context.
template <class SelfAttend, class CrossAttend>
void decoder_blocks(gpu::Pass& pass, const Config& config, const Weights& w, int64_t rows,
                    DecoderBuffers& s, SelfAttend self_attend, CrossAttend cross_attend) {
  for (int l = 0; l < config.decoder_layers; ++l) {
    const DecoderLayer& layer = w.decoder_layers[l];
    pass.mark("decoder self-attention");
    self_attend(l);
    pass.linear(s.context.data(), rows, layer.self_out, s.x.data(), s.x.data());

    pass.mark("decoder cross-attention");
    pass.norm_linear(s.x.data(), rows, layer.cross_norm, layer.cross_q, gpu::Activation::none,
                     s.h.data(), s.q.data());
    cross_attend(l, s.q.data());
    pass.linear(s.context.data(), rows, layer.cross_out, s.x.data(), s.x.data());

    pass.mark("decoder feed-forward");
    pass.norm_linear(s.x.data(), rows, layer.ffn_norm, layer.fc1, gpu::Activation::gelu, s.h.data(),
                     s.hidden.data());
    pass.linear(s.hidden.data(), rows, layer.fc2, s.x.data(), s.x.data());
  }
}

// Q, K and V of layer l for `rows` rows of s.x into s.qkv [rows, 3d]; with `scatter` (a step),
// K and V may go straight into the caches instead, Q then to s.qkv [rows, d]: returns whether
// they did.
bool self_qkv(gpu::Pass& pass, const Weights& w, int l, int64_t rows, DecoderBuffers& s,
              const gpu::KvScatter* scatter = nullptr) {
  const DecoderLayer& layer = w.decoder_layers[l];
  return pass.norm_linear(s.x.data(), rows, layer.self_norm, layer.qkv, gpu::Activation::none,
                          s.h.data(), s.qkv.data(), scatter);
}

}  // namespace

const int32_t* frame_lengths(const Config& config, int64_t windows, DecoderBuffers& s,
                             cudaStream_t stream) {
  const size_t bytes = sizeof(int32_t) * windows;
  if (s.cross_lengths.bytes() < bytes) {
    s.cross_lengths.reserve(bytes);
    const std::vector<int32_t> lengths(s.cross_lengths.bytes() / sizeof(int32_t),
                                       static_cast<int32_t>(config.max_source_positions));
    gpu::upload(lengths.data(), s.cross_lengths.bytes(), s.cross_lengths.data(), stream);
  }
  return s.cross_lengths.as<int32_t>();
}

void decode_tokens(gpu::Pass& pass, const Config& config, const Weights& w, KvCaches& caches,
                   int first, int batch, int steps, int past, const int32_t* ids,
                   const int32_t* position_ids, const int32_t* positions, CrossKv cross,
                   DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const int64_t d = config.d_model, rows = int64_t{batch} * steps;
  const int64_t frames = config.max_source_positions, kv_row = 2 * d * config.decoder_layers;
  const int heads = config.decoder_heads;
  const bool frames_storage = over_frames(cross.storage);
  const bool prompt_over_frames = frames_storage && steps <= kStepLikePromptRows;
  const bool prompt_over_int8 =
      cross.storage == CrossKvStorage::int8 && steps <= kStepLikePromptRows;
  reserve_decoder(pass, config, rows, prompt_over_frames ? rows : 0, s);
  gpu::embed(e, w.tokens.data.data(), gpu::q8_0_scales(w.tokens), w.decoder_positions.data(), ids,
             position_ids, rows, d, s.x.data(), pass.stream());
  auto self_attend = [&](int l) {
    self_qkv(pass, w, l, rows, s);
    const void* qkv = s.qkv.data();
    gpu::append_kv(e, offset(qkv, d, e), offset(qkv, 2 * d, e), 3 * d, steps * 3 * d, batch, steps,
                   d, caches.keys(l, first), caches.values(l, first), caches.sequence_stride(),
                   positions, pass.stream());
    gpu::attention(e, qkv, 3 * d, steps * 3 * d, caches.keys(l, first), caches.values(l, first), d,
                   caches.sequence_stride(), s.context.data(), d, steps * d, batch, heads,
                   d / heads, steps, past + steps, w.decoder_scale, /*causal=*/true, pass.stream());
  };
  // A long prompt over INT8 K/V has each layer's K and V of the windows read dequantised into
  // s.cross [windows, frames, 2d] for the flash attention; over frames, computed there from them.
  const int64_t cross_windows = cross.sequence_stride == 0 ? 1 : batch;
  if ((cross.storage == CrossKvStorage::int8 && !prompt_over_int8) ||
      (frames_storage && !prompt_over_frames)) {
    s.cross.reserve(pass.bytes(cross_windows * frames * 2 * d));
  }
  // A short one over INT8 K/V reads them as stored, as a step does.
  const int32_t* cross_lengths =
      prompt_over_int8 ? frame_lengths(config, batch, s, pass.stream()) : nullptr;
  auto cross_attend = [&](int l, const void* q) {
    if (prompt_over_frames) return attend_frames(pass, config, w, l, q, rows, steps, cross, s);
    if (prompt_over_int8) {
      return gpu::decode_attention_int8(e, q, d, int8_layer(config, cross, l).kv, cross_lengths,
                                        s.context.data(), d, static_cast<int>(rows), heads,
                                        d / heads, w.decoder_scale, pass.stream(), steps);
    }
    const void* keys = nullptr;
    int64_t row_stride = kv_row, sequence_stride = cross.sequence_stride;
    if (cross.storage == CrossKvStorage::native) {
      keys = offset(cross.kv, 2 * d * l, e);
    } else if (frames_storage) {
      const CrossLayer layer = cross_layer(config, w, l, e);
      pass.product(cross.kv, cross_windows * frames, d, layer.weights, 2 * d, layer.bias,
                   s.cross.data());
      keys = s.cross.data();
      row_stride = 2 * d;
      sequence_stride = cross.sequence_stride == 0 ? 0 : frames * 2 * d;
    } else {
      const Int8Layer layer = int8_layer(config, cross, l);
      gpu::dequantize_int8(layer.kv.k, layer.kv.k_scales, layer.kv.strides,
                           static_cast<int>(cross_windows), frames, 2 * d, layer.head_dim, e,
                           s.cross.data(), pass.stream());
      keys = s.cross.data();
      row_stride = 2 * d;
      sequence_stride = cross.sequence_stride == 0 ? 0 : frames * 2 * d;
    }
    gpu::attention(e, q, d, steps * d, keys, offset(keys, d, e), row_stride, sequence_stride,
                   s.context.data(), d, steps * d, batch, heads, d / heads, steps, frames,
                   w.decoder_scale, /*causal=*/false, pass.stream());
  };
  decoder_blocks(pass, config, w, rows, s, self_attend, cross_attend);
}

namespace {

// The step with each linear layer in one launch together with the norm before it and the bias,
// GELU, residual and K/V cache writes after it (Pass::step_linear): 8 launches a layer instead
// of 13. A step of a few sequences is bound by each launch's chain of dependent loads (x, the
// norm, the bias and residual), not by arithmetic or the weights' bytes. The kernel reads
// W once per 16 rows, and up to 8 sequences (its 8-row form) it is the faster one on the H200;
// from 9 on it multiplies 16 rows and cuBLASLt's products win (large-v3 step, fused vs products:
// 2.48 vs 2.66 ms at batch 8, 3.73 vs 3.24 at 16; bench/RESULTS.md, tenth session), so larger
// batches take decoder_blocks' products. Q8_0 weights take the kernel up to 16 rows either way
// (Pass::linear), so for them the fused step runs up to 16 sequences. For a few sequences (1, 2
// and 4 of large-v3's 20 heads, native K/V), the cross-attention computes its own query
// (cross_query_fused): 7 launches a layer.
//
// The batch up to which the fused step runs: the environment's HARK_CUDA_FUSED_STEP_MAX_BATCH
// (0: never) lets a benchmark compare the two forms, else kFusedStepMaxBatch(Q8).
constexpr int kFusedStepMaxBatch = 8, kFusedStepMaxBatchQ8 = 16;

int fused_step_max_batch(bool q8_0) {
  static const int value = [] {
    const char* text = std::getenv("HARK_CUDA_FUSED_STEP_MAX_BATCH");
    if (text == nullptr || *text == '\0') return -1;
    char* end = nullptr;
    const long parsed = std::strtol(text, &end, 10);
    if (*end != '\0' || parsed < 0 || parsed > 16) {
      fail("HARK_CUDA_FUSED_STEP_MAX_BATCH is '", text, "': expected a number from 0 to 16");
    }
    return static_cast<int>(parsed);
  }();
  if (value >= 0) return value;
  return q8_0 ? kFusedStepMaxBatchQ8 : kFusedStepMaxBatch;
}

// A step's cross-attention of decoder layer l: q [batch, d] to s.context, over the K/V of the
// windows `cross` names, cross_lengths[b] (= frames) keys each. With `query` (native or INT8
// storage only), the attention computes q itself (gpu::AttentionQuery) and q is not read.
void cross_attend_step(gpu::Pass& pass, const Config& config, const Weights& w, CrossKv cross,
                       int l, const void* q, int batch, const int32_t* cross_lengths,
                       DecoderBuffers& s, const gpu::AttentionQuery* query = nullptr) {
  const gpu::Element e = pass.element();
  const int64_t d = config.d_model, kv_row = 2 * d * config.decoder_layers;
  const int heads = config.decoder_heads;
  const int head_dim = static_cast<int>(d / heads);
  if (over_frames(cross.storage)) {
    attend_frames(pass, config, w, l, q, batch, 1, cross, s);
    return;
  }
  if (cross.storage == CrossKvStorage::native) {
    const void* keys = offset(cross.kv, 2 * d * l, e);
    gpu::decode_attention(e, q, d, keys, offset(keys, d, e), kv_row, cross.sequence_stride,
                          cross_lengths, s.context.data(), d, batch, heads, head_dim,
                          w.decoder_scale, pass.stream(), query);
    return;
  }
  gpu::decode_attention_int8(e, q, d, int8_layer(config, cross, l).kv, cross_lengths,
                             s.context.data(), d, batch, heads, head_dim, w.decoder_scale,
                             pass.stream(), 1, query);
}

// Whether the fused step's cross-attention computes its own query (gpu::AttentionQuery): for
// K/V stored natively, the batches the kernel takes it for, and only while its CTAs fit the GPU
// at once. On an H100 (large-v3, step ms, own query against its own launch; bench/RESULTS.md,
// thirty-second session), native K/V: 1.59 / 1.60 at 1 sequence, 1.73 / 1.80 at 2, 2.04 / 2.13
// at 4, but 2.12 / 1.93 at 3 and 2.50 / 2.25 at 5, whose CTAs take two waves; INT8 K/V, whose
// integer kernel then holds 3 CTAs an SM instead of 4, lost at every batch (1.58 / 1.52 at 1).
// HARK_CUDA_FUSED_QUERY=0 keeps the query's own launch (to compare; read once).
bool cross_query_fused(const Config& config, const Weights& w, CrossKv cross, gpu::Element e,
                       int batch) {
  static const bool enabled = [] {
    const char* value = std::getenv("HARK_CUDA_FUSED_QUERY");
    return value == nullptr || value[0] != '0';
  }();
  const int heads = config.decoder_heads;
  const int head_dim = static_cast<int>(config.d_model / heads);
  return enabled && cross.storage == CrossKvStorage::native &&
         gpu::attention_query_fuses(e, batch, heads, head_dim, config.d_model,
                                    w.decoder_layers[0].cross_q.weight.q8_0) &&
         gpu::attention_query_in_one_wave(e, batch, heads, head_dim);
}

bool fused_step_fits(const Config& config, const Weights& w, int batch) {
  // The kernel moves rows in 16-byte loads: widths must be multiples of 8 values (Q8_0 rows are
  // whole blocks of 32 already).
  return !w.decoder_layers.empty() &&
         batch <= fused_step_max_batch(w.decoder_layers[0].fc1.weight.q8_0) &&
         config.d_model % 8 == 0 && config.decoder_ffn % 8 == 0;
}

void fused_step_blocks(gpu::Pass& pass, const Config& config, const Weights& w, KvCaches& caches,
                       int batch, const int32_t* positions, const int32_t* lengths,
                       const int32_t* cross_lengths, CrossKv cross, DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const int64_t d = config.d_model;
  const int heads = config.decoder_heads;
  const bool query_fused = cross_query_fused(config, w, cross, e, batch);
  for (int l = 0; l < config.decoder_layers; ++l) {
    const DecoderLayer& layer = w.decoder_layers[l];
    // Self-attention: Q to s.q, this token's K and V straight into the caches.
    pass.mark("decoder self-attention");
    const gpu::KvScatter scatter = caches.step_scatter(l, positions);
    pass.step_linear(s.x.data(), batch, layer.qkv, s.q.data(), &layer.self_norm, false, nullptr,
                     &scatter);
    gpu::decode_attention(e, s.q.data(), d, caches.keys(l), caches.values(l), d,
                          caches.sequence_stride(), lengths, s.context.data(), d, batch, heads,
                          d / heads, w.decoder_scale, pass.stream());
    pass.step_linear(s.context.data(), batch, layer.self_out, s.x.data(), nullptr, false,
                     s.x.data());

    pass.mark("decoder cross-attention");
    if (query_fused) {
      gpu::AttentionQuery query;
      query.x = s.x.data();
      query.d = d;
      query.gamma = layer.cross_norm.gamma.data();
      query.beta = layer.cross_norm.beta.data();
      query.eps = layer.cross_norm.eps;
      query.w = layer.cross_q.weight.data.data();
      query.bias = layer.cross_q.bias.bytes() > 0 ? layer.cross_q.bias.data() : nullptr;
      query.q8_0 = layer.cross_q.weight.q8_0;
      cross_attend_step(pass, config, w, cross, l, nullptr, batch, cross_lengths, s, &query);
    } else {
      pass.step_linear(s.x.data(), batch, layer.cross_q, s.q.data(), &layer.cross_norm);
      cross_attend_step(pass, config, w, cross, l, s.q.data(), batch, cross_lengths, s);
    }
    pass.step_linear(s.context.data(), batch, layer.cross_out, s.x.data(), nullptr, false,
                     s.x.data());

    pass.mark("decoder feed-forward");
    pass.step_linear(s.x.data(), batch, layer.fc1, s.hidden.data(), &layer.ffn_norm, true);
    pass.step_linear(s.hidden.data(), batch, layer.fc2, s.x.data(), nullptr, false, s.x.data());
  }
}

// Whether a step runs as one persistent launch (gpu::decoder_step): for one sequence over K/V
// stored natively, 16-bit or Q8_0 weights, and a shape the kernel takes on this GPU (an H100 or
// H200), unless HARK_CUDA_STEP_KERNEL=0 (read at each call). It gives the launches' tokens, and on
// an H100 large-v3 steps in 1.28-1.33 ms with it against 1.58-1.59 without, turbo in 0.234-0.236
// against 0.261-0.265 (bench/RESULTS.md, forty-eighth session); over Q8_0 weights in 1.274
// against 1.423 (forty-ninth session).
bool step_kernel_runs(const Config& config, const Weights& w, const KvCaches& caches,
                      const CrossKv& cross, gpu::Element e, int batch) {
  if (batch != 1 || cross.storage != CrossKvStorage::native || w.step_layers.bytes() == 0 ||
      gpu::environment_is("HARK_CUDA_STEP_KERNEL", "0")) {
    return false;
  }
  if (gpu::decoder_step_runs(e, step_shape(config, caches.capacity(), w.step_q8_0))) return true;
  // Asked for by name, and refused for the shape: said once, since the timings then are the
  // other step's. (By default a step the kernel does not take runs launch per op silently.)
  if (gpu::environment_is("HARK_CUDA_STEP_KERNEL", "1")) {
    static std::once_flag said;
    std::call_once(said, [] {
      std::fprintf(stderr,
                   "hark: HARK_CUDA_STEP_KERNEL=1, but the one-launch step does not take this "
                   "model's step on this GPU (gpu::decoder_step_runs); it runs launch per op\n");
    });
  }
  return false;
}

void step_kernel(gpu::Pass& pass, const Config& config, const Weights& w, KvCaches& caches,
                 const int32_t* positions, const int32_t* lengths, const int32_t* cross_lengths,
                 const CrossKv& cross, DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const int64_t d = config.d_model;
  pass.mark("decoder layers");
  gpu::DecoderStep step;
  step.e = e;
  step.shape = step_shape(config, caches.capacity(), w.step_q8_0);
  // The kernel's count of launches starts at zero, and its tagged vectors and partials with tags
  // of 0, which no launch writes.
  const size_t scratch_bytes = gpu::decoder_step_scratch_bytes(step.shape);
  if (s.step.bytes() < scratch_bytes) {
    s.step.reserve(scratch_bytes);
    gpu::check(cudaMemsetAsync(s.step.data(), 0, s.step.bytes(), pass.stream()), "step scratch");
  }
  step.layers = w.step_layers.as<gpu::StepLayer>();
  step.scale = w.decoder_scale;
  step.x = s.x.data();
  step.keys = caches.keys(0);
  step.values = caches.values(0);
  step.cache_layer_stride = caches.layer_stride();
  step.positions = positions;
  step.lengths = lengths;
  step.cross_keys = cross.kv;
  step.cross_values = offset(cross.kv, d, e);
  step.cross_layer_stride = 2 * d;
  step.cross_row_stride = 2 * d * config.decoder_layers;
  step.cross_lengths = cross_lengths;
  step.scratch = s.step.data();
  gpu::decoder_step(step, pass.stream());
}

}  // namespace

gpu::StepShape step_shape(const Config& config, int capacity, bool q8_0) {
  gpu::StepShape shape;
  shape.d = config.d_model;
  shape.ffn = config.decoder_ffn;
  shape.heads = config.decoder_heads;
  shape.layers = config.decoder_layers;
  shape.frames = config.max_source_positions;
  shape.capacity = capacity;
  shape.q8_0 = q8_0;
  return shape;
}

void decode_step(gpu::Pass& pass, const Config& config, const Weights& w, KvCaches& caches,
                 int batch, const int32_t* ids, const int32_t* positions, const int32_t* lengths,
                 const int32_t* cross_lengths, CrossKv cross, DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const int64_t d = config.d_model;
  const int heads = config.decoder_heads;
  reserve_decoder(pass, config, batch, over_frames(cross.storage) ? batch : 0, s);
  gpu::embed(e, w.tokens.data.data(), gpu::q8_0_scales(w.tokens), w.decoder_positions.data(), ids,
             positions, batch, d, s.x.data(), pass.stream());
  if (step_kernel_runs(config, w, caches, cross, e, batch)) {
    step_kernel(pass, config, w, caches, positions, lengths, cross_lengths, cross, s);
    return;
  }
  if (fused_step_fits(config, w, batch)) {
    fused_step_blocks(pass, config, w, caches, batch, positions, lengths, cross_lengths, cross, s);
    return;
  }
  auto self_attend = [&](int l) {
    const gpu::KvScatter scatter = caches.step_scatter(l, positions);
    const void* qkv = s.qkv.data();
    const bool scattered = self_qkv(pass, w, l, batch, s, &scatter);
    if (!scattered) {
      gpu::append_kv(e, offset(qkv, d, e), offset(qkv, 2 * d, e), 3 * d, 3 * d, batch, 1, d,
                     caches.keys(l), caches.values(l), caches.sequence_stride(), positions,
                     pass.stream());
    }
    gpu::decode_attention(e, qkv, scattered ? d : 3 * d, caches.keys(l), caches.values(l), d,
                          caches.sequence_stride(), lengths, s.context.data(), d, batch, heads,
                          d / heads, w.decoder_scale, pass.stream());
  };
  auto cross_attend = [&](int l, const void* q) {
    cross_attend_step(pass, config, w, cross, l, q, batch, cross_lengths, s);
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
  pass.mark("logits");
  pass.norm_linear_f32_out(hidden, rows, w.decoder_norm, config.d_model, w.tokens, out);
}

}  // namespace hark::whisper::cuda
