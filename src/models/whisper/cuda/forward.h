// Whisper's forward pass on the GPU, written against compute/cuda's Pass: the encoder over a
// batch of windows, the decoder over a prompt (any number of tokens per sequence) and the
// decoder's single-token step that the batched greedy search captures into a CUDA Graph.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "compute/cuda/decoder_step_sm90.h"
#include "compute/cuda/graph.h"
#include "compute/cuda/kernels.h"
#include "models/whisper/cuda/weights.h"
#include "models/whisper/model.h"

namespace hark::whisper::cuda {

// Scratch of the encoder. A batch whose scratch is small (at most kKeptBytes: a few large-v3
// windows, about 70 MB each) leaves it for the next call (`kept`); a larger one has encode() free
// all but `x` and `hidden` past the layers, before it allocates the outputs, and the caller the
// rest after it: decoding the batch needs the memory more than the next encode needs the
// allocations saved. `staging` carries a mel from the host up; `cuts` holds the windows of a
// mel already on the device.
struct EncoderBuffers {
  gpu::Buffer mel, cuts, time_major, unfolded, conv1, x, h, qkv, context, hidden;
  gpu::StagingBuffer staging;
  gpu::ReplayedGraph layers;  // the layers of a small batch (forward_cuda.cpp)
  bool kept = false;          // set by encode()

  static constexpr size_t kKeptBytes = size_t{256} << 20;
  std::array<gpu::Buffer*, 10> buffers() {
    return {&mel, &cuts, &time_major, &unfolded, &conv1, &x, &h, &qkv, &context, &hidden};
  }
};

// What the decoder's cross-attention reads of an encoded window:
//   native (the default): every decoder layer's K and V, computed once per window, in the pass's
//     element type.
//   int8: the same, as INT8 with one F32 scale per (frame, layer, K or V, head)
//     (compute/cuda/kernels.h: quantize_int8). Half the memory; it moves the logits of the
//     chaotic tiny test models by up to 1.9e-2 and changes some of their greedy tokens
//     (bench/RESULTS.md), though on the large-v3 random model it stays within 2.7e-3 of
//     transformers with the same tokens.
//   frames: the encoder's output itself, with the key and value projections folded into the
//     query and the output (compute/cuda/kernels.h: absorb_query, frame_attention,
//     absorb_values). Nothing per decoder layer is stored (large-v3: 3.8 MB a window where its
//     K/V take 246 MB in F16), no K/V product runs after the encoder, and a step reads d values a
//     frame and layer instead of 2d. Runs for 16-bit weights that are not Q8_0, at most 24
//     heads of a multiple of 16 values up to 128, and d a multiple of 16 up to 1280 (every Whisper
//     size). Not the default: its kernels do not yet read the frames fast enough, and the steps are
//     slower than native ones (bench/RESULTS.md).
//   int8_frames: the frames as with `frames`, and a copy in INT8, scaled per channel and frame
//     (kernels.h: Int8Frames), that the decoder's steps and short prompts attend over on the
//     tensor cores (frame_attention_sm90.h): a step reads d bytes a frame and layer, a quarter
//     of the INT8 K/V's bytes. Long prompts attend over the 16-bit frames, as with `frames`. Runs
//     where `frames` does, for F16 weights, d a multiple of 128, on an H100/H200.
enum class CrossKvStorage : uint8_t { native, int8, frames, int8_frames };

// Whether the storage keeps the frames rather than per-layer K/V (frames, int8_frames).
inline bool over_frames(CrossKvStorage storage) {
  return storage == CrossKvStorage::frames || storage == CrossKvStorage::int8_frames;
}

// The storage of a model's encoded batches: `storage`, or from `larger_from` windows on (0:
// never) `larger`.
struct CrossKvPolicy {
  CrossKvStorage storage = CrossKvStorage::native;
  CrossKvStorage larger = CrossKvStorage::native;
  int larger_from = 0;

  CrossKvStorage for_batch(int windows) const {
    return larger_from > 0 && windows >= larger_from ? larger : storage;
  }
};

// The policy of `requested` (model.h: CrossKvMode) or, unset, of the environment's
// HARK_CUDA_CROSS_KV (read at each call, and a model calls this once, when it loads), else
// native: one storage for every batch, or for int8_auto INT8 K/V for batches of fewer than
// kInt8AutoFramesFromWindows (model.h) windows and INT8 frames from there, where they run
// (otherwise INT8 K/V for every batch). A storage this model or GPU cannot run is a hark::Error.
CrossKvPolicy cross_kv_policy(const Config& config, const Weights& w,
                              std::optional<CrossKvMode> requested);

// What the decoder reads of a batch of encoded windows: frames [count, frames, d] after the
// final norm (with int8_frames, also quantised: frame_codes, frame_scales, channel_scales as
// kernels.h's Int8Frames describes), and, unless the storage is over the frames, cross_kv [count,
// frames, layers · 2d] (every decoder layer's K and V, layer l's K at 2d·l and its V d after), in
// the pass's element type or, for INT8 storage, as int8 values with cross_kv_scales F32, each
// window group-major (compute/cuda/kernels.h: group_major_strides): the head_dim values of a head
// for all frames of a window in one run, [count, layers · 2 · heads, frames, head_dim] and scales
// [count, layers · 2 · heads, frames] (layer l's K heads at 2·heads·l, its V heads after).
struct EncodedBuffers {
  gpu::Buffer frames, cross_kv, cross_kv_scales;
  gpu::Buffer frame_codes, frame_scales, channel_scales;
  CrossKvStorage storage = CrossKvStorage::native;
  int count = 0;
};

// Where encode() takes its `count` windows' log-mel from, one of:
//   host_mel: F32 [count, n_mels, window_frames()] on the host, uploaded through the scratch's
//     staging memory;
//   cuts: `count` windows (host memory) of time-major log-mels on the device
//     (features/mel_cuda.h), copied into the encoder's input there.
struct EncoderInput {
  const float* host_mel = nullptr;
  const gpu::MelWindowCut* cuts = nullptr;
};

// Unless the scratch is kept (EncoderBuffers), what the end of the pass no longer needs is
// released before the outputs are allocated.
void encode(gpu::Pass& pass, const Config& config, const Weights& w, const EncoderInput& input,
            int count, CrossKvStorage storage, EncoderBuffers& scratch, EncodedBuffers& out);

// Self-attention K/V caches of every decoder layer for `sequences` slots of `capacity`
// positions: keys(l) and values(l) are [sequences, capacity, d].
class KvCaches {
 public:
  KvCaches(const Config& config, gpu::Element element, int sequences, int capacity);
  void* keys(int layer, int sequence = 0) const { return at(layer, 0, sequence); }
  void* values(int layer, int sequence = 0) const { return at(layer, 1, sequence); }
  int64_t sequence_stride() const { return static_cast<int64_t>(capacity_) * d_; }
  // Elements from one layer's keys (or values) to the next one's.
  int64_t layer_stride() const { return 2 * sequence_stride() * sequences_; }
  // Where a step's K and V of `layer` go: sequence b's at row positions[b] (device, [batch]).
  gpu::KvScatter step_scatter(int layer, const int32_t* positions) const {
    gpu::KvScatter scatter;
    scatter.k_cache = keys(layer);
    scatter.v_cache = values(layer);
    scatter.cache_batch_stride = sequence_stride();
    scatter.positions = positions;
    scatter.width = d_;
    return scatter;
  }
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
// b · sequence_stride values (0: all sequences read one window), and for INT8 storage its scales
// at scales + b · scale_sequence_stride. Over the frames, kv is the window's frames; with
// int8_frames storage, int8_frames names their INT8 copy too.
struct CrossKv {
  CrossKvStorage storage = CrossKvStorage::native;
  const void* kv = nullptr;
  int64_t sequence_stride = 0;
  const float* scales = nullptr;
  int64_t scale_sequence_stride = 0;
  gpu::Int8Frames int8_frames;
};

// The windows of `encoded` that a decoder batch reads: window `first` for every sequence, or with
// per_sequence window first + b for sequence b.
CrossKv cross_kv_of(const Config& config, gpu::Element e, const EncodedBuffers& encoded, int first,
                    bool per_sequence);

// Scratch of the decoder, grown as needed.
struct DecoderBuffers {
  gpu::Buffer x, h, qkv, context, q, hidden;
  gpu::Buffer cross;  // one layer's cross K/V for a prompt: INT8 dequantised, or from the frames
  gpu::Buffer cross_lengths;       // every window's cross-attention length: frame_lengths
  gpu::Buffer absorbed, attended;  // over the frames: [rows, heads, d] before and after attending
  gpu::Buffer step;                // the one-launch step's (gpu::decoder_step_scratch_bytes)
};

// `windows` cross-attention lengths on the device, each the model's frames (what a step's and a
// short prompt's cross-attention read): scratch.cross_lengths, filled only when it grows, as the
// values are the same for every call (a host-driven session decodes once a token).
const int32_t* frame_lengths(const Config& config, int64_t windows, DecoderBuffers& scratch,
                             cudaStream_t stream);

// Appends `steps` tokens to sequences [first, first + batch) of `caches`, each of which holds
// `past` positions: ids and position_ids [batch · steps] and positions [batch] (= past each) on
// the device. Leaves the last layer's output [batch · steps, d] in scratch.x.
void decode_tokens(gpu::Pass& pass, const Config& config, const Weights& w, KvCaches& caches,
                   int first, int batch, int steps, int past, const int32_t* ids,
                   const int32_t* position_ids, const int32_t* positions, CrossKv cross,
                   DecoderBuffers& scratch);

// One token for each of `batch` sequences (slots 0..batch-1): ids[b] at position positions[b];
// lengths[b] = positions[b] + 1 and cross_lengths[b] = frames (frame_lengths), all on the device,
// so that the same launches serve every step. Leaves the last layer's output [batch, d] in
// scratch.x.
void decode_step(gpu::Pass& pass, const Config& config, const Weights& w, KvCaches& caches,
                 int batch, const int32_t* ids, const int32_t* positions, const int32_t* lengths,
                 const int32_t* cross_lengths, CrossKv cross, DecoderBuffers& scratch);

// The shape of the one-launch step (gpu::decoder_step, which a step of one sequence over native
// K/V takes unless HARK_CUDA_STEP_KERNEL=0) for caches of `capacity` positions, over 16-bit or
// Q8_0 matrices.
gpu::StepShape step_shape(const Config& config, int capacity, bool q8_0);

// to[i] = from[rows[i]], rows of `row_bytes`, on the device.
void gather_rows(const void* from, std::span<const int64_t> rows, size_t row_bytes, void* to,
                 cudaStream_t stream);

// logits [rows, vocab] F32 = final_norm(hidden rows) · tokensᵀ; hidden is overwritten.
void logits(gpu::Pass& pass, const Config& config, const Weights& w, void* hidden, int64_t rows,
            float* out);

}  // namespace hark::whisper::cuda
