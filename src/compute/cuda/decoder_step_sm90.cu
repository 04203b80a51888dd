// decoder_step (decoder_step_sm90.h): a single sequence's decode step in one persistent launch.
// Opt-in and slower than the launch-per-op step so far (bench/RESULTS.md, thirty-ninth session).
//
// One CTA an SM, kThreads threads. A layer is eight phases, each ending at a grid-wide barrier:
//   0  h = norm(x); q, k, v = h · W_qkvᵀ + b (k and v into the caches at the step's position)
//   1  self-attention: a CTA per (head, 64 positions), a partial softmax each
//   2  x += context · W_oᵀ + b
//   3  q = norm(x) · W_qᵀ + b
//   4  cross-attention: a CTA per (head, chunk of frames), a partial softmax each
//   5  x += context · W_oᵀ + b
//   6  hidden = GELU(norm(x) · W_1ᵀ + b)
//   7  x += hidden · W_2ᵀ + b
// A product splits its output rows evenly among the CTAs: each CTA's rows of W are one
// contiguous range of memory. Every CTA computes the input vector itself (the norm of x, or
// loads the context or the hidden vector), since each output row needs all of it. The last CTA
// of a head to write its partial softmax (a count of arrivals per head) merges the head's
// partials into the context.
//
// What a phase reads that no phase writes (the weights, biases, γ and β; the cross-attention's
// keys and values) is copied into one of two buffers of shared memory, phase p's into buffer
// p % 2, as soon as phase p − 2 has finished with that buffer: the copies run on through the
// next phase and its barrier, so that the HBM streams while the CTAs wait for each other. A
// product's share then comes from shared memory.
//
// What the CTAs hand each other (x, q, the hidden vector, the context, the caches' new row, the
// partial softmaxes) goes through L2: written by plain stores, read by ld.global.cg after the
// barrier, so that no stale line of an SM's L1 is read. Each CTA keeps its own rows of x (the
// residual) in shared memory.
//
// Rounding follows the launch-per-op step: the normalised vector, q, the attention's output,
// each product's output (after bias, GELU and residual) are rounded to the element type, and
// everything else is F32.
#include "compute/cuda/decoder_step_sm90.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <vector>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/hopper.cuh"
#include "compute/cuda/tensor_core.cuh"

namespace hark::compute::cuda {

namespace {

namespace cg = cooperative_groups;
using namespace hopper;
using bf16 = __nv_bfloat16;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kHeadDim = 64;
constexpr int kPack = 8;                // 16-bit values in a 16-byte load
constexpr int kPartial = 2 + kHeadDim;  // a partial softmax: max, sum, then Σ p · v
constexpr int kSelfChunk = 64;          // positions a self-attention item takes
constexpr int kPhases = 8;              // a layer's
constexpr int kMaxNormPacks = 2;        // the norm's values a thread: d up to 4096
constexpr int64_t kMaxNormWidth = kThreads * kMaxNormPacks * kPack;

struct Params {
  const StepLayer* layers;
  int n_layers, heads;
  int64_t d, ffn;
  float scale;
  void* x;
  void* q;
  void* hidden;
  void* context;          // [d]: the attention's output, merged
  float* self_partials;   // [heads, self_chunks, kPartial]
  float* cross_partials;  // [heads, cross_chunks, kPartial]
  int* arrivals;          // [2 · heads]: the chunks of each head done (self, then cross)
  void* keys;
  void* values;
  int64_t cache_layer_stride;
  const int32_t* positions;
  const int32_t* lengths;
  const void* cross_keys;
  const void* cross_values;
  int64_t cross_layer_stride, cross_row_stride;
  int cross_values_column;  // bytes from a key's column of the cross map to its value's
  const int32_t* cross_lengths;
  int frames, cross_chunks, cross_chunk_frames, self_chunks;
  int64_t buffer_bytes;  // each of the two buffers, at the start of shared memory
  // Where the rest of shared memory lies: the layers' pointers, the input vector of a product,
  // the CTA's rows of x (F32), a chunk's scores, the value sums of its warps, a reduction's
  // scratch.
  int64_t layers_offset, vector_offset, own_offset, scores_offset, reduce_offset, scratch_offset,
      barriers_offset, sums_offset;
  // With HARK_CUDA_STEP_TIMING: CTA 0's clock (globaltimer, ns) at four points of each phase
  // [phases, 4] (its copies landed, its input vector ready, its work done, the grid's barrier
  // passed); null otherwise.
  unsigned long long* timings;
};

// How a launch divides the work, from the shape and the number of CTAs (one an SM).
struct Layout {
  int ctas = 0, cross_chunks = 0, cross_chunk_frames = 0, self_chunks = 0;
  int64_t buffer_bytes = 0, shared_bytes = 0, scratch_bytes = 0;
  int64_t layers_offset = 0, vector_offset = 0, own_offset = 0, scores_offset = 0;
  int64_t reduce_offset = 0, scratch_offset = 0, barriers_offset = 0, sums_offset = 0;
  int64_t hidden_offset = 0, context_offset = 0, self_offset = 0, cross_offset = 0;  // q first
  int64_t arrivals_offset = 0;
};

__host__ __device__ constexpr int64_t round_up(int64_t value, int64_t multiple) {
  return ceil_div(value, multiple) * multiple;
}

// Where a product's share lies in its buffer: at most ceil(rows / ctas) rows of W of `depth`
// 16-bit values, then their bias (from the row before the first that is a multiple of 8: the
// copies move 16-byte pieces), then with a norm its γ and β [d] each.
struct Share {
  int64_t bias, norm, end;
};
__host__ __device__ inline Share share_of(int64_t rows, int64_t depth, int64_t ctas, int64_t d,
                                          bool normed) {
  const int64_t most =
      (static_cast<uint32_t>(rows) + static_cast<uint32_t>(ctas) - 1) / static_cast<uint32_t>(ctas);
  Share share;
  share.bias = round_up(most * depth * 2, 16);
  share.norm = share.bias + round_up((most + 16) * 2, 16);
  share.end = share.norm + (normed ? 2 * round_up(d * 2, 16) : 0);
  return share;
}

Layout layout_of(const StepShape& s, int ctas) {
  Layout l;
  l.ctas = ctas;
  l.cross_chunks = std::max(1, ctas / std::max(1, s.heads));
  l.cross_chunk_frames = static_cast<int>(ceil_div(s.frames, l.cross_chunks));
  l.self_chunks = static_cast<int>(ceil_div(s.capacity, kSelfChunk));
  l.buffer_bytes = std::max(
      {share_of(3 * s.d, s.d, ctas, s.d, true).end, share_of(s.d, s.d, ctas, s.d, true).end,
       share_of(s.ffn, s.d, ctas, s.d, true).end, share_of(s.d, s.ffn, ctas, s.d, false).end,
       int64_t{2} * l.cross_chunk_frames * kHeadDim * 2});
  l.buffer_bytes = round_up(l.buffer_bytes, 16);
  const int64_t scores = std::max(l.cross_chunk_frames, kSelfChunk);
  l.layers_offset = 2 * l.buffer_bytes;
  l.vector_offset =
      l.layers_offset + round_up(int64_t{s.layers} * static_cast<int64_t>(sizeof(StepLayer)), 16);
  l.own_offset = l.vector_offset + round_up(std::max(s.d, s.ffn) * 2, 16);
  l.scores_offset = l.own_offset + round_up(ceil_div(s.d, ctas) * 4, 16);
  l.reduce_offset = l.scores_offset + round_up(scores * 4, 16);
  l.scratch_offset = l.reduce_offset + kWarps * kHeadDim * 4;
  l.barriers_offset = l.scratch_offset + 64 * 4;
  l.sums_offset = l.barriers_offset + 16;
  l.shared_bytes = l.sums_offset + round_up(ceil_div(std::max(3 * s.d, s.ffn), ctas) * 4, 16);
  l.hidden_offset = round_up(s.d * 2, 16);
  l.context_offset = l.hidden_offset + round_up(s.ffn * 2, 16);
  l.self_offset = l.context_offset + round_up(s.d * 2, 16);
  l.cross_offset = l.self_offset + round_up(int64_t{s.heads} * l.self_chunks * kPartial * 4, 16);
  l.arrivals_offset =
      l.cross_offset + round_up(int64_t{s.heads} * l.cross_chunks * kPartial * 4, 16);
  l.scratch_bytes = l.arrivals_offset + round_up(int64_t{2} * s.heads * 4, 16);
  return l;
}

// ---- Device helpers ---------------------------------------------------------------------------

template <class T>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[kPack]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = unpack_pair<T>(words[i]);
    out[2 * i] = pair.x;
    out[2 * i + 1] = pair.y;
  }
}

template <class T>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b, float sum) {
  const uint32_t as[4] = {a.x, a.y, a.z, a.w}, bs[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = unpack_pair<T>(as[i]), y = unpack_pair<T>(bs[i]);
    sum = fmaf(x.x, y.x, sum);
    sum = fmaf(x.y, y.y, sum);
  }
  return sum;
}

// This CTA's output rows of a product of `rows` rows: [first, end).
struct Rows {
  int64_t first, end;
};
// (In 32 bits: a 64-bit division is a long sequence of instructions, inlined at each use.)
__device__ __forceinline__ Rows rows_of(int64_t rows) {
  const auto n = static_cast<uint32_t>(rows);
  return {n * blockIdx.x / gridDim.x, n * (blockIdx.x + 1) / gridDim.x};
}

// The bias of output row `row` of a product whose rows the buffer holds (0 without a bias).
template <class T>
__device__ __forceinline__ float bias_of(const unsigned char* buffer, const Share& share,
                                         const void* bias, Rows r, int64_t row) {
  if (bias == nullptr) return 0.0f;
  const T* values = reinterpret_cast<const T*>(buffer + share.bias);
  return to_float(values[row - (r.first & ~int64_t{7})]);
}

// The item (head, chunk of frames) of this CTA's cross-attention; false: none.
struct CrossItem {
  int head, chunk, first, count;
};
__device__ __forceinline__ bool cross_item(const Params& p, CrossItem& item) {
  if (static_cast<int>(blockIdx.x) >= p.heads * p.cross_chunks) return false;
  item.head = blockIdx.x / p.cross_chunks;
  item.chunk = blockIdx.x % p.cross_chunks;
  item.first = item.chunk * p.cross_chunk_frames;
  item.count = max(0, min(p.cross_chunk_frames, p.frames - item.first));
  return true;
}

// The copies of a phase into its buffer are bulk copies by the tensor memory accelerator, issued
// by the last warp and counted by the buffer's mbarrier. Not cp.async: a CTA's ~100 KB of those
// in flight held up every later load of its SM and every memory fence (the grid's barrier's
// among them) until they had landed, which put the stream of weights back on the critical path.
constexpr int kCopyWarp = kWarps - 1;
constexpr uint32_t kMaxCopy = 32 * 1024;  // bytes a bulk copy of contiguous memory takes at most

// A phase's product: W [rows, depth], its bias (null: none), and the norm before it (null γ:
// none).
struct Product {
  const void* w = nullptr;
  const void* bias = nullptr;
  int64_t rows = 0, depth = 0;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  float eps = 0.0f;
};

// Phase `phase`'s product; false for the attention phases, which have none.
__device__ __forceinline__ bool product_of(const Params& p, const StepLayer& w, int phase,
                                           Product& out) {
  switch (phase % kPhases) {
    case 0:
      out = {w.qkv, w.qkv_bias, 3 * p.d, p.d, w.self_gamma, w.self_beta, w.self_eps};
      return true;
    case 2:
      out = {w.self_out, w.self_out_bias, p.d, p.d, nullptr, nullptr, 0.0f};
      return true;
    case 3:
      out = {w.cross_q, w.cross_q_bias, p.d, p.d, w.cross_gamma, w.cross_beta, w.cross_eps};
      return true;
    case 5:
      out = {w.cross_out, w.cross_out_bias, p.d, p.d, nullptr, nullptr, 0.0f};
      return true;
    case 6:
      out = {w.fc1, w.fc1_bias, p.ffn, p.d, w.ffn_gamma, w.ffn_beta, w.ffn_eps};
      return true;
    case 7:
      out = {w.fc2, w.fc2_bias, p.d, p.ffn, nullptr, nullptr, 0.0f};
      return true;
    default:
      return false;
  }
}

// Whether phase `phase` has copies to wait for: every phase but the self-attention's (the copy
// warp arms the buffer's mbarrier for each, with the bytes it copies, which may be none).
__device__ __forceinline__ bool copies(const Params& p, int phase) {
  return phase / kPhases < p.n_layers && phase % kPhases != 1;
}

// Issues phase `phase`'s copies into its buffer (the copy warp only): the mbarrier expects their
// bytes, then the lanes share the copies. The cross-attention's keys and values of the CTA's
// item are two boxes of the window's tensor map (rows of 64 values a frame apart).
template <class T>
__device__ void prefetch(const Params& p, const CUtensorMap* cross_map, const StepLayer* layers,
                         int phase, unsigned char* shared, uint64_t* full) {
  if (threadIdx.x / 32 != kCopyWarp || !copies(p, phase)) return;
  const int lane = threadIdx.x % 32;
  const int layer = phase / kPhases;
  unsigned char* buffer = shared + (phase % 2) * p.buffer_bytes;
  uint64_t* barrier = full + phase % 2;
  const StepLayer& w = layers[layer];
  if (phase % kPhases == 4) {
    CrossItem item;
    if (!cross_item(p, item)) {
      if (lane == 0) barrier_expect_bytes(barrier, 0);
      return;
    }
    // A box is copied whole (zeros past the frames), so the barrier expects all its bytes.
    const uint32_t box = p.cross_chunk_frames * kHeadDim * sizeof(T);
    if (lane == 0) {
      barrier_expect_bytes(barrier, 2 * box);
      const int column =
          static_cast<int>((layer * p.cross_layer_stride + item.head * kHeadDim) * sizeof(T));
      tma_load(buffer, cross_map, barrier, column, item.first);
      tma_load(buffer + box, cross_map, barrier, column + p.cross_values_column, item.first);
    }
    return;
  }
  // A product's runs of memory: this CTA's rows of W, their bias from the row at or before the
  // first that is a multiple of 8 (the copies move 16-byte pieces), and with a norm its γ and β.
  // (Fixed-size arrays indexed by constants after unrolling: registers, not local memory, and one
  // loop of copies for every product, so that the kernel's code stays small.)
  Product product;
  product_of(p, w, phase, product);
  const Rows r = rows_of(product.rows);
  const Share share =
      share_of(product.rows, product.depth, gridDim.x, p.d, product.gamma != nullptr);
  const int64_t bias_first = r.first & ~int64_t{7};
  const int64_t norm_bytes = p.d * sizeof(T);
  const unsigned char* from[4] = {
      static_cast<const unsigned char*>(product.w) + r.first * product.depth * sizeof(T),
      product.bias != nullptr
          ? static_cast<const unsigned char*>(product.bias) + bias_first * sizeof(T)
          : nullptr,
      static_cast<const unsigned char*>(product.gamma),
      static_cast<const unsigned char*>(product.beta)};
  const int64_t to[4] = {0, share.bias, share.norm, share.norm + round_up(norm_bytes, 16)};
  const int64_t bytes[4] = {
      (r.end - r.first) * product.depth * static_cast<int64_t>(sizeof(T)),
      product.bias != nullptr ? (round_up(r.end, 8) - bias_first) * int64_t{sizeof(T)} : 0,
      product.gamma != nullptr ? norm_bytes : 0, product.gamma != nullptr ? norm_bytes : 0};
  if (lane == 0) {
    barrier_expect_bytes(barrier, static_cast<uint32_t>(bytes[0] + bytes[1] + bytes[2] + bytes[3]));
  }
  __syncwarp();
  // Each run in pieces of at most kMaxCopy bytes, piece i to lane i % 32.
#pragma unroll
  for (int run = 0; run < 4; ++run) {
    for (int64_t at = lane * int64_t{kMaxCopy}; at < bytes[run]; at += 32 * int64_t{kMaxCopy}) {
      const auto size = static_cast<uint32_t>(min(int64_t{kMaxCopy}, bytes[run] - at));
      bulk_load(buffer + to[run] + at, from[run] + at, size, barrier);
    }
  }
}

// vector [d] := layer_norm(x) with γ, β (the phase's buffer holds them; F32 statistics, two
// passes over registers), rounded to T, as layer_norm and decode_linear's staging compute it.
template <class T>
__device__ __noinline__ void norm_into(const Params& p, const unsigned char* buffer,
                                       const Share& share, float eps, T* vector, float* scratch) {
  const auto* gamma = reinterpret_cast<const uint4*>(buffer + share.norm);
  const auto* beta =
      reinterpret_cast<const uint4*>(buffer + share.norm + round_up(p.d * sizeof(T), 16));
  const int64_t packs = p.d / kPack;
  const auto* x = static_cast<const uint4*>(p.x);
  float values[kMaxNormPacks][kPack];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxNormPacks; ++i) {
    const int64_t pack = threadIdx.x + i * kThreads;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (pack < packs) raw = __ldcg(x + pack);
    unpack8<T>(raw, values[i]);
#pragma unroll
    for (int j = 0; j < kPack; ++j) sum += values[i][j];
  }
  const float mean = block_sum(sum, scratch) / static_cast<float>(p.d);
  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxNormPacks; ++i) {
    if (threadIdx.x + i * kThreads < packs) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        const float centred = values[i][j] - mean;
        squares = fmaf(centred, centred, squares);
      }
    }
  }
  const float scale = 1.0f / sqrtf(block_sum(squares, scratch) / static_cast<float>(p.d) + eps);
#pragma unroll
  for (int i = 0; i < kMaxNormPacks; ++i) {
    const int64_t pack = threadIdx.x + i * kThreads;
    if (pack >= packs) continue;
    float g[kPack], b[kPack], out[kPack];
    unpack8<T>(gamma[pack], g);
    unpack8<T>(beta[pack], b);
#pragma unroll
    for (int j = 0; j < kPack; ++j) out[j] = (values[i][j] - mean) * scale * g[j] + b[j];
    uint32_t words[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) words[j] = pack_pair<T>(out[2 * j], out[2 * j + 1]);
    *reinterpret_cast<uint4*>(vector + pack * kPack) =
        make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// vector [width] := a vector another phase wrote to global memory.
template <class T>
__device__ void load_into(const void* from, int64_t width, T* vector) {
  const auto* source = static_cast<const uint4*>(from);
  for (int64_t pack = threadIdx.x; pack < width / kPack; pack += kThreads) {
    *reinterpret_cast<uint4*>(vector + pack * kPack) = __ldcg(source + pack);
  }
}

// One chunk of a head's attention: `count` keys and values (rows `stride` apart, in shared or
// global memory), the query q [64] from global memory; writes the partial softmax (the chunk's
// maximum score, Σ e^(s − max), Σ e^(s − max) · v) to out. Ends with the block synchronised and
// the partial visible to the other CTAs.
template <class T, bool kGlobal>
__device__ __noinline__ void attend(const T* keys, const T* values, int64_t stride, int count,
                                    const void* q, float scale, float* scores, float* reduce,
                                    float* scratch, float* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 8, part = lane % 8;  // 4 keys a warp at once, 8 lanes a key
  float query[kPack];
  unpack8<T>(__ldcg(static_cast<const uint4*>(q) + part), query);
  for (int first = warp * 4; first < count; first += kWarps * 4) {
    const int key = first + group;
    const bool real = key < count;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (real) {
      const auto* at = reinterpret_cast<const uint4*>(keys + key * stride) + part;
      raw = kGlobal ? __ldcg(at) : *at;
    }
    float k[kPack];
    unpack8<T>(raw, k);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kPack; ++j) s = fmaf(query[j], k[j], s);
    s += __shfl_xor_sync(kFullWarp, s, 1);
    s += __shfl_xor_sync(kFullWarp, s, 2);
    s += __shfl_xor_sync(kFullWarp, s, 4);
    if (real && part == 0) scores[key] = s * scale;
  }
  __syncthreads();
  float maximum = -INFINITY;
  for (int i = threadIdx.x; i < count; i += kThreads) maximum = fmaxf(maximum, scores[i]);
  maximum = block_max(maximum, scratch);
  float total = 0.0f;
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const float weight = __expf(scores[i] - maximum);
    scores[i] = weight;
    total += weight;
  }
  total = block_sum(total, scratch);  // its barriers publish the weights too
  // Values: each warp every 8th key, each lane two of the 64 values.
  float low = 0.0f, high = 0.0f;
  for (int key = warp; key < count; key += kWarps) {
    const auto* at = reinterpret_cast<const uint32_t*>(values + key * stride) + lane;
    const float2 v = unpack_pair<T>(kGlobal ? __ldcg(at) : *at);
    const float weight = scores[key];
    low = fmaf(weight, v.x, low);
    high = fmaf(weight, v.y, high);
  }
  *reinterpret_cast<float2*>(reduce + warp * kHeadDim + 2 * lane) = make_float2(low, high);
  __syncthreads();
  // Warp 0 writes the partial and fences it (the copy warp never fences: see kCopyWarp).
  if (warp == 0) {
    float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float2 part = *reinterpret_cast<const float2*>(reduce + w * kHeadDim + 2 * lane);
      sum.x += part.x;
      sum.y += part.y;
    }
    out[2 + 2 * lane] = sum.x;
    out[3 + 2 * lane] = sum.y;
    if (lane == 0) {
      out[0] = maximum;
      out[1] = total;
    }
    __threadfence();
  }
  __syncthreads();
}

// After a CTA wrote one of a head's `chunks` partial softmaxes (partials: the head's first):
// the last CTA to do so merges them into the head's 64 values of the context, rounded to T, and
// resets the head's count of arrivals for the next use.
template <class T>
__device__ __noinline__ void arrive(const float* partials, int chunks, int* arrivals, T* context,
                                    float* scratch) {
  int* last = reinterpret_cast<int*>(scratch + 32);
  if (threadIdx.x == 0) {
    const bool is_last = atomicAdd(arrivals, 1) == chunks - 1;
    if (is_last) *arrivals = 0;
    *last = is_last;
  }
  __syncthreads();
  const bool merge = *last != 0;
  __syncthreads();  // `last` may be written again by the next arrival
  if (!merge) return;
  __threadfence();
  if (threadIdx.x < kHeadDim) {
    float maximum = -INFINITY;
    for (int c = 0; c < chunks; ++c) maximum = fmaxf(maximum, __ldcg(partials + c * kPartial));
    const float reference = exp_reference(maximum);
    float sum = 0.0f, weights = 0.0f;
    constexpr int kUnroll = 8;  // loads in flight together
    for (int first = 0; first < chunks; first += kUnroll) {
      float m[kUnroll], l[kUnroll], a[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float* part = partials + (first + u) * kPartial;
        const bool real = first + u < chunks;
        m[u] = real ? __ldcg(part) : -INFINITY;
        l[u] = real ? __ldcg(part + 1) : 0.0f;
        a[u] = real ? __ldcg(part + 2 + threadIdx.x) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float weight = __expf(m[u] - reference);
        weights = fmaf(weight, l[u], weights);
        sum = fmaf(weight, a[u], sum);
      }
    }
    // A sequence that is done attends to nothing (its lengths are 0): zeros, as decode_attention
    // gives it.
    context[threadIdx.x] = from_float<T>(weights > 0.0f ? sum / weights : 0.0f);
  }
}

// The sums of a product's rows [first, end) from shared memory (`w`, rows of `depth`) times the
// vector (shared memory) into sums[row − first], a warp a row. Not inlined, nor unrolled past a
// few packs: one copy of this code serves every product. The whole step is one kernel, and with
// each product's code inlined and unrolled its ~200 KB of instructions missed the instruction
// cache in every phase (a third of the warps' samples, in Nsight Compute).
template <class T>
__device__ __noinline__ void product_sums(const unsigned char* w, Rows r, int64_t depth,
                                          const T* vector, float* sums) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int packs = static_cast<int>(depth / kPack);
  const auto* x = reinterpret_cast<const uint4*>(vector);
  for (int64_t row = r.first + warp; row < r.end; row += kWarps) {
    const auto* w_row = reinterpret_cast<const uint4*>(w + (row - r.first) * depth * sizeof(T));
    float sum = 0.0f;
#pragma unroll 4
    for (int pack = lane; pack < packs; pack += 32) sum = dot8<T>(w_row[pack], x[pack], sum);
    sum = warp_sum(sum);
    if (lane == 0) sums[row - r.first] = sum;
  }
}

// What a launch reads once: the step's position and lengths.
struct Step {
  int64_t position;
  int length, cross_length;
};

__device__ __forceinline__ unsigned long long global_time() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Phase `phase` (its layer's phase phase % kPhases; the layout at the top of the file). Every
// product takes one path (its input vector, its sums, then its epilogue by the phase), so that
// the kernel's code stays small.
template <class T>
__device__ void run_phase(const Params& p, const Step& step, const StepLayer& w, int phase,
                          const unsigned char* buffer, T* vector, float* own, float* scores,
                          float* reduce, float* scratch, float* sums, unsigned long long* mark) {
  const int layer = phase / kPhases, kind = phase % kPhases;
  T* x = static_cast<T*>(p.x);
  T* q = static_cast<T*>(p.q);
  T* hidden = static_cast<T*>(p.hidden);
  T* context = static_cast<T*>(p.context);
  T* keys = static_cast<T*>(p.keys) + layer * p.cache_layer_stride;
  T* values = static_cast<T*>(p.values) + layer * p.cache_layer_stride;
  const int64_t d = p.d;
  Product product;
  if (product_of(p, w, phase, product)) {
    const Share share =
        share_of(product.rows, product.depth, gridDim.x, d, product.gamma != nullptr);
    if (product.gamma != nullptr) {
      norm_into<T>(p, buffer, share, product.eps, vector, scratch);
    } else {
      load_into<T>(kind == 7 ? hidden : context, product.depth, vector);
    }
    __syncthreads();
    if (mark) *mark = global_time();
    const Rows r = rows_of(product.rows);
    product_sums<T>(buffer, r, product.depth, vector, sums);
    __syncthreads();
    for (int64_t row = r.first + threadIdx.x; row < r.end; row += kThreads) {
      const float value = sums[row - r.first] + bias_of<T>(buffer, share, product.bias, r, row);
      if (kind == 0) {  // q, and this token's k and v into the caches
        T* target = row < d       ? q + row
                    : row < 2 * d ? keys + step.position * d + row - d
                                  : values + step.position * d + row - 2 * d;
        *target = from_float<T>(value);
      } else if (kind == 3) {
        q[row] = from_float<T>(value);
      } else if (kind == 6) {
        hidden[row] = from_float<T>(gelu_value(value));
      } else {  // the residual: the CTA's rows of x stay in `own`
        const T sum = from_float<T>(value + own[row - r.first]);
        own[row - r.first] = to_float(sum);
        x[row] = sum;
      }
    }
    return;
  }
  if (kind == 1) {
    const int chunks = static_cast<int>(ceil_div(step.length, kSelfChunk));
    if (chunks == 0) {  // a sequence that is done: its context is zeros
      for (int i = blockIdx.x * kThreads + threadIdx.x; i < d; i += gridDim.x * kThreads) {
        context[i] = from_float<T>(0.0f);
      }
      return;
    }
    for (int item = blockIdx.x; item < p.heads * p.self_chunks; item += gridDim.x) {
      const int head = item / p.self_chunks, chunk = item - head * p.self_chunks;
      if (chunk >= chunks) continue;
      const int first = chunk * kSelfChunk;
      const int64_t at = int64_t{first} * d + head * kHeadDim;
      float* head_partials = p.self_partials + int64_t{head} * p.self_chunks * kPartial;
      attend<T, true>(keys + at, values + at, d, min(kSelfChunk, step.length - first),
                      q + head * kHeadDim, p.scale, scores, reduce, scratch,
                      head_partials + chunk * kPartial);
      if (mark) *mark = global_time();
      arrive<T>(head_partials, chunks, p.arrivals + head, context + head * kHeadDim, scratch);
    }
    return;
  }
  CrossItem item;  // kind 4
  if (!cross_item(p, item)) return;
  const int count = max(0, min(item.count, step.cross_length - item.first));
  const T* keys_here = reinterpret_cast<const T*>(buffer);
  float* head_partials = p.cross_partials + int64_t{item.head} * p.cross_chunks * kPartial;
  attend<T, false>(keys_here, keys_here + int64_t{p.cross_chunk_frames} * kHeadDim, kHeadDim, count,
                   q + item.head * kHeadDim, p.scale, scores, reduce, scratch,
                   head_partials + item.chunk * kPartial);
  if (mark) *mark = global_time();
  arrive<T>(head_partials, p.cross_chunks, p.arrivals + p.heads + item.head,
            context + item.head * kHeadDim, scratch);
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    decoder_step_kernel(const __grid_constant__ Params p,
                        const __grid_constant__ CUtensorMap cross_map) {
  extern __shared__ __align__(128) unsigned char shared[];
  // A buffer's copies have landed (an mbarrier each).
  auto* full = reinterpret_cast<uint64_t*>(shared + p.barriers_offset);
  auto* layers = reinterpret_cast<StepLayer*>(shared + p.layers_offset);
  T* vector = reinterpret_cast<T*>(shared + p.vector_offset);
  float* own = reinterpret_cast<float*>(shared + p.own_offset);
  float* scores = reinterpret_cast<float*>(shared + p.scores_offset);
  float* reduce = reinterpret_cast<float*>(shared + p.reduce_offset);
  float* scratch = reinterpret_cast<float*>(shared + p.scratch_offset);
  float* sums = reinterpret_cast<float*>(shared + p.sums_offset);
  cg::grid_group grid = cg::this_grid();
  // The layers' pointers, the CTA's rows of x and the step's position and lengths, once.
  const int layer_words = p.n_layers * static_cast<int>(sizeof(StepLayer) / 4);
  for (int i = threadIdx.x; i < layer_words; i += kThreads) {
    reinterpret_cast<uint32_t*>(layers)[i] = reinterpret_cast<const uint32_t*>(p.layers)[i];
  }
  const Rows own_rows = rows_of(p.d);
  for (int64_t row = own_rows.first + threadIdx.x; row < own_rows.end; row += kThreads) {
    own[row - own_rows.first] = to_float(static_cast<const T*>(p.x)[row]);
  }
  const Step step = {p.positions[0], p.lengths[0], p.cross_lengths[0]};
  if (threadIdx.x == 0) {
    barrier_init(&full[0], 1);
    barrier_init(&full[1], 1);
    barrier_init_fence();
  }
  __syncthreads();
  const int phases = p.n_layers * kPhases;
  prefetch<T>(p, &cross_map, layers, 0, shared, full);
  prefetch<T>(p, &cross_map, layers, 1, shared, full);
  uint32_t parity[2] = {0, 0};
  const bool timed = p.timings != nullptr && blockIdx.x == 0 && threadIdx.x == 0;
  for (int phase = 0; phase < phases; ++phase) {
    const int b = phase % 2;
    if (copies(p, phase)) {
      barrier_wait(&full[b], parity[b]);
      parity[b] ^= 1;
    }
    if (timed) p.timings[4 * phase] = global_time();
    run_phase<T>(p, step, layers[phase / kPhases], phase, shared + b * p.buffer_bytes, vector, own,
                 scores, reduce, scratch, sums, timed ? p.timings + 4 * phase + 1 : nullptr);
    __syncthreads();  // the buffer is free
    if (timed) p.timings[4 * phase + 2] = global_time();
    prefetch<T>(p, &cross_map, layers, phase + 2, shared, full);
    if (phase + 1 < phases) grid.sync();
    if (timed) p.timings[4 * phase + 3] = global_time();
  }
}

// The kernel's attributes, once per instantiation: its shared memory limit raised to the most a
// block may take, and whether one block fits an SM with `shared_bytes`.
int64_t shared_per_block() {
  static const int64_t bytes =
      device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "shared memory per block");
  return bytes;
}

template <class T>
bool fits(int64_t shared_bytes) {
  static const bool raised = [] {
    allow_shared_memory(decoder_step_kernel<T>, static_cast<size_t>(shared_per_block()),
                        "decoder_step shared memory limit");
    return true;
  }();
  (void)raised;
  if (shared_bytes > shared_per_block()) return false;
  int blocks = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, decoder_step_kernel<T>, kThreads,
                                                      static_cast<size_t>(shared_bytes)),
        "decoder_step occupancy");
  return blocks >= 1;
}

bool cooperative_launches() {
  static const bool supported =
      device_attribute(cudaDevAttrCooperativeLaunch, "cooperative launch attribute") != 0;
  return supported;
}

bool shape_runs(Element e, const StepShape& s) {
  return (e == Element::f16 || e == Element::bf16) && s.heads > 0 && s.layers > 0 && s.frames > 0 &&
         s.capacity > 0 && s.d == int64_t{s.heads} * kHeadDim && s.d <= kMaxNormWidth &&
         s.ffn > 0 && s.ffn % kPack == 0;
}

// HARK_CUDA_STEP_TIMING's table: for each of a layer's phases, CTA 0's time (µs, summed over
// the layers) waiting for its copies, making its input vector, doing the rest of its work, and
// at the grid's barrier (waiting for the slowest CTA).
void print_timings(const unsigned long long* timings, int phases, cudaStream_t stream) {
  std::vector<unsigned long long> t(4 * static_cast<size_t>(phases));
  download(timings, sizeof(unsigned long long) * t.size(), t.data(), stream);
  check(cudaStreamSynchronize(stream), "decoder_step timings");
  double copies[kPhases] = {}, vector[kPhases] = {}, rest[kPhases] = {}, barrier[kPhases] = {};
  for (int phase = 0; phase < phases; ++phase) {
    const unsigned long long* at = t.data() + 4 * phase;
    const unsigned long long ready = at[1] > at[0] ? at[1] : at[0];  // no vector: no mark
    const int k = phase % kPhases;
    if (phase > 0) copies[k] += (at[0] - at[-1]) * 1e-3;
    vector[k] += (ready - at[0]) * 1e-3;
    rest[k] += (at[2] - ready) * 1e-3;
    barrier[k] += (at[3] - at[2]) * 1e-3;
  }
  std::fprintf(stderr, "decoder_step, CTA 0, us over %d layers: %.1f in all\n", phases / kPhases,
               (t[4 * static_cast<size_t>(phases) - 2] - t[0]) * 1e-3);
  for (int k = 0; k < kPhases; ++k) {
    std::fprintf(stderr, "  phase %d: copies %.1f, vector %.1f, rest %.1f, barrier %.1f\n", k,
                 copies[k], vector[k], rest[k], barrier[k]);
  }
}

}  // namespace

bool decoder_step_runs(Element e, const StepShape& shape) {
  if (!shape_runs(e, shape) || !present() || !cooperative_launches()) return false;
  const Layout l = layout_of(shape, multiprocessor_count());
  // A chunk of frames is one box of a tensor map: at most 256 rows.
  if (shape.heads > l.ctas || l.cross_chunk_frames > 256) return false;
  return e == Element::f16 ? fits<__half>(l.shared_bytes) : fits<bf16>(l.shared_bytes);
}

size_t decoder_step_scratch_bytes(const StepShape& shape) {
  return static_cast<size_t>(layout_of(shape, multiprocessor_count()).scratch_bytes);
}

void decoder_step(const DecoderStep& step, cudaStream_t stream) {
  const StepShape& s = step.shape;
  if (!decoder_step_runs(step.e, s)) {
    fail("decoder_step: the step of d ", s.d, ", ffn ", s.ffn, ", ", s.heads, " heads, ", s.frames,
         " frames does not run on this GPU");
  }
  for (const void* pointer : std::initializer_list<const void*>{
           step.x, step.keys, step.values, step.cross_keys, step.cross_values, step.scratch}) {
    if (!aligned(pointer, 16)) fail("decoder_step: pointers must be 16-byte aligned");
  }
  const Layout l = layout_of(s, multiprocessor_count());
  auto* scratch = static_cast<unsigned char*>(step.scratch);
  Params p = {};
  p.layers = step.layers;
  p.n_layers = s.layers;
  p.heads = s.heads;
  p.d = s.d;
  p.ffn = s.ffn;
  p.scale = step.scale;
  p.x = step.x;
  p.q = scratch;
  p.hidden = scratch + l.hidden_offset;
  p.context = scratch + l.context_offset;
  p.self_partials = reinterpret_cast<float*>(scratch + l.self_offset);
  p.cross_partials = reinterpret_cast<float*>(scratch + l.cross_offset);
  p.arrivals = reinterpret_cast<int*>(scratch + l.arrivals_offset);
  p.keys = step.keys;
  p.values = step.values;
  p.cache_layer_stride = step.cache_layer_stride;
  p.positions = step.positions;
  p.lengths = step.lengths;
  p.cross_keys = step.cross_keys;
  p.cross_values = step.cross_values;
  p.cross_layer_stride = step.cross_layer_stride;
  p.cross_row_stride = step.cross_row_stride;
  p.cross_lengths = step.cross_lengths;
  p.frames = s.frames;
  p.cross_chunks = l.cross_chunks;
  p.cross_chunk_frames = l.cross_chunk_frames;
  p.self_chunks = l.self_chunks;
  p.buffer_bytes = l.buffer_bytes;
  p.layers_offset = l.layers_offset;
  p.vector_offset = l.vector_offset;
  p.own_offset = l.own_offset;
  p.scores_offset = l.scores_offset;
  p.reduce_offset = l.reduce_offset;
  p.scratch_offset = l.scratch_offset;
  p.barriers_offset = l.barriers_offset;
  p.sums_offset = l.sums_offset;

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(l.ctas));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(l.shared_bytes);
  config.stream = stream;
  cudaLaunchAttribute cooperative = {};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  const auto kernel =
      step.e == Element::f16 ? decoder_step_kernel<__half> : decoder_step_kernel<bf16>;
  // HARK_CUDA_STEP_TIMING: the launches outside a capture (a decode's first step) time CTA 0's
  // phases and print them, summed over the layers, to stderr (a diagnostic: it waits for the GPU).
  static unsigned long long* timings = nullptr;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capturing), "decoder_step capture status");
  const bool timed =
      std::getenv("HARK_CUDA_STEP_TIMING") != nullptr && capturing == cudaStreamCaptureStatusNone;
  const int phases = s.layers * kPhases;
  const size_t timing_bytes = sizeof(unsigned long long) * 4 * phases;
  if (timed) {
    static size_t allocated = 0;
    if (allocated < timing_bytes) {
      if (timings != nullptr) check(cudaFree(timings), "decoder_step timings");
      check(cudaMalloc(&timings, timing_bytes), "decoder_step timings");
      allocated = timing_bytes;
    }
    check(cudaMemsetAsync(timings, 0, timing_bytes, stream), "decoder_step timings");
    p.timings = timings;
  }
  // The window's keys and values as a byte matrix [frames, a row of every layer's K and V], in
  // boxes of a chunk's frames × one head's 64 values.
  const int64_t element = 2;
  p.cross_values_column = static_cast<int>((static_cast<const unsigned char*>(step.cross_values) -
                                            static_cast<const unsigned char*>(step.cross_keys)));
  const CUtensorMap cross_map =
      byte_matrix_map(step.cross_keys, s.frames, step.cross_row_stride * element,
                      l.cross_chunk_frames, static_cast<int>(kHeadDim * element));
  check(cudaLaunchKernelEx(&config, kernel, p, cross_map), "decoder_step launch");
  check_launch("decoder_step");
  if (timed) print_timings(timings, phases, stream);
}

}  // namespace hark::compute::cuda
