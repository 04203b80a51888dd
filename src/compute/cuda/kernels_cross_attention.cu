// Cross-attention with its key and value projections folded into the query and the output, so
// that a decoder step reads the encoder's frames themselves instead of a K/V cache per layer.
//
// For head h of a query q (already projected), keys k_t = W_k,h x_t and values v_t = W_v,h x_t +
// b_v,h over the frames x_t:
//
//   score_t = scale · q_h · (W_k,h x_t) = q̃_h · x_t          with q̃_h = scale · W_k,hᵀ q_h
//   out_h   = Σ_t p_t v_t = W_v,h (Σ_t p_t x_t) + b_v,h       (the p_t sum to 1)
//
// Three kernels: absorb_query (q → q̃, every head a vector of the model's width), frame_attention
// (softmax(q̃_h · Xᵀ) X for every head at once: one pass over X serves all heads, since they
// share it as their keys and values), absorb_values (o_h → W_v,h o_h + b_v,h). A step then reads
// the frames once per layer (d values a frame) where the K/V cache took 2d, and nothing
// per layer is stored: a large-v3 window keeps 3.8 MB of frames instead of 246 MB of K/V.
//
// frame_attention is meant to be bound by reading the frames. A CTA of 8 warps takes one query
// row and a range of frames (a split); the splits of a row form a thread-block cluster and merge
// their softmax states through distributed shared memory. Frames come in tiles of 32 rows
// through a 2-stage cp.async ring. Per tile, on the tensor cores (mma m16n8k16, F32
// accumulators):
//   S [32 frames × heads] = X_tile · Q̃ᵀ, each warp 1/8 of the width (the query's fragments of
//     its columns stay in registers), the warps' parts summed in shared memory;
//   the online softmax of each head (a warp per head, a frame per lane);
//   Oᵀ [width × heads] += X_tileᵀ · Pᵀ, each warp its 1/8 of the width in registers.
// Heads are the products' narrow side (n = 8 per tile, up to 3 tiles: 24 heads), the width the
// wide one; every X value read from memory feeds every head. A tile's three phases depend on each
// other, and their fixed costs (the score sum, the rescale of the accumulators, three barriers)
// limited a form with 16-frame tiles and 16 warps, which issued about 530 instructions per warp
// and tile for 30 products. With this one, large-v3's batch-16 step is still 1.6× slower than
// over the K/V cache (bench/RESULTS.md).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/kernels.h"
#include "compute/cuda/tensor_core.cuh"

namespace hark::compute::cuda {

namespace {

// ---- absorb_query: q̃[r, h, :] = scale · Σ_j q[r, h·head_dim + j] · W_k[h·head_dim + j, :] -----
//
// A thread per 8 output columns of a (head, kRows rows) block: the query values sit in shared
// memory and are broadcast; each 16-byte weight load feeds 8 columns of kRows rows. A thread
// issues 16 loads before their products (few warps run, and their loads must overlap; whether
// the compiler keeps all 16 in flight was not checked in the machine code).

constexpr int kAbsorbThreads = 64;
constexpr int kMaxAbsorbHeadDim = 128;
constexpr int kQueryChunk = 16;

template <class T, int kRows>
__global__ void __launch_bounds__(kAbsorbThreads)
    absorb_query_kernel(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ w_k,
                        int64_t w_row_stride, int rows, int heads, int head_dim, int64_t width,
                        float scale, T* __restrict__ out) {
  __shared__ float query[kRows][kMaxAbsorbHeadDim];
  allow_dependent_kernels();
  const int head = blockIdx.y, first_row = blockIdx.z * kRows;
  const int block_rows = min(kRows, rows - first_row);
  for (int i = threadIdx.x; i < kRows * head_dim; i += kAbsorbThreads) {
    const int r = i / head_dim, j = i % head_dim;
    query[r][j] =
        r < block_rows ? scale * to_float(q[(first_row + r) * q_stride + head * head_dim + j]) : 0;
  }
  __syncthreads();
  const int64_t column = (int64_t{blockIdx.x} * kAbsorbThreads + threadIdx.x) * 8;
  if (column >= width) return;
  const T* weights = w_k + int64_t{head} * head_dim * w_row_stride + column;
  float sums[kRows][8] = {};
  for (int first = 0; first < head_dim; first += kQueryChunk) {
    uint4 raw[kQueryChunk];
#pragma unroll
    for (int j = 0; j < kQueryChunk; ++j) {
      const int at = min(first + j, head_dim - 1);  // past head_dim: a weight times a zero query
      raw[j] = *reinterpret_cast<const uint4*>(weights + at * w_row_stride);
    }
#pragma unroll
    for (int j = 0; j < kQueryChunk; ++j) {
      T values[8];
      memcpy(values, &raw[j], sizeof raw[j]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float value = first + j < head_dim ? query[r][first + j] : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) sums[r][i] += value * to_float(values[i]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r < block_rows) {
      store_pack<8>(sums[r], out + ((first_row + r) * int64_t{heads} + head) * width + column);
    }
  }
}

// ---- absorb_values: context[r, h·head_dim + j] = W_v[h·head_dim + j, :] · o[r, h, :] + b_v -----
//
// On the tensor cores: C [16 rows × 16 outputs] = O_h [16 × width] · W_v,hᵀ per CTA, the width
// split among its 8 warps, whose partial products are summed in shared memory. The fragments
// come straight from global memory (o and the weights are read once a CTA), so a warp has its
// loads in flight together.

constexpr int kValueWarps = 8;
constexpr int kValueRows = 16;
constexpr int kValueOutputs = 16;   // two n-tiles
constexpr int kMaxValueSteps = 10;  // 16-wide steps of the width a warp: width ≤ 1280

template <class T>
__global__ void __launch_bounds__(kValueWarps * 32)
    absorb_values_kernel(const T* __restrict__ o, const T* __restrict__ w_v, int64_t w_row_stride,
                         const T* __restrict__ bias, int rows, int heads, int head_dim,
                         int64_t width, T* __restrict__ context, int64_t context_stride) {
  __shared__ float partial[kValueWarps][kValueRows][kValueOutputs + 1];
  allow_dependent_kernels();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int head = blockIdx.y, first_row = blockIdx.z * kValueRows;
  const int first_output = blockIdx.x * kValueOutputs;
  const int block_rows = min(kValueRows, rows - first_row);
  // Rows past the block read row 0, outputs past head_dim output 0: their results are dropped.
  const T* const o_low = o + (int64_t{first_row + (g < block_rows ? g : 0)} * heads + head) * width;
  const T* const o_high =
      o + (int64_t{first_row + (g + 8 < block_rows ? g + 8 : 0)} * heads + head) * width;
  const T* w_rows[2];
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    const int output = first_output + n * 8 + g;
    w_rows[n] = w_v + (int64_t{head} * head_dim + (output < head_dim ? output : 0)) * w_row_stride;
  }
  const int steps = static_cast<int>(width / 16);
  const int steps_per_warp = (steps + kValueWarps - 1) / kValueWarps;
  const int first_step = warp * steps_per_warp;
  const int last_step = min(steps, first_step + steps_per_warp);
  const auto pair = [](const T* p) { return *reinterpret_cast<const uint32_t*>(p); };
  float acc[2][4] = {};
#pragma unroll
  for (int i = 0; i < kMaxValueSteps; ++i) {  // all of a warp's loads issued together
    // Steps past the warp's read step 0 and multiply zeros: no branch keeps a load waiting.
    const int step = first_step + i;
    const bool real = step < last_step;
    const int k = (real ? step : 0) * 16 + 2 * c;
    const uint32_t a[4] = {real ? pair(o_low + k) : 0u, real ? pair(o_high + k) : 0u,
                           real ? pair(o_low + k + 8) : 0u, real ? pair(o_high + k + 8) : 0u};
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      mma_16816<T>(acc[n], a, pair(w_rows[n] + k), pair(w_rows[n] + k + 8));
    }
  }
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    partial[warp][g][n * 8 + 2 * c] = acc[n][0];
    partial[warp][g][n * 8 + 2 * c + 1] = acc[n][1];
    partial[warp][g + 8][n * 8 + 2 * c] = acc[n][2];
    partial[warp][g + 8][n * 8 + 2 * c + 1] = acc[n][3];
  }
  __syncthreads();
  const int r = threadIdx.x / kValueOutputs, j = threadIdx.x % kValueOutputs;
  const int output = first_output + j;
  if (r >= block_rows || output >= head_dim) return;
  float sum = bias != nullptr ? to_float(bias[head * head_dim + output]) : 0.0f;
#pragma unroll
  for (int w = 0; w < kValueWarps; ++w) sum += partial[w][r][j];
  context[(first_row + r) * context_stride + head * head_dim + output] = from_float<T>(sum);
}

// ---- frame_attention ---------------------------------------------------------------------------

constexpr int kFrameWarps = 8;
constexpr int kFrameThreads = kFrameWarps * 32;
constexpr int kFrameTile = 32;  // frames a tile: two mma row blocks, a frame per lane in softmax
constexpr int kFrameBlocks = kFrameTile / 16;
constexpr int kFrameStages = 2;
constexpr int kMaxHeadTiles = 3;
constexpr int kMaxFrameHeads = 8 * kMaxHeadTiles;
constexpr int kMaxWidthTiles = 10;  // 16-wide column tiles a warp: width ≤ 8 · 16 · 10 = 1280
constexpr int kMaxFrameSplits = 8;  // the portable cluster size
constexpr int kPartialPitch = kFrameTile + 1;
constexpr int kProbabilityPitch = kFrameTile + 8;

// Shared memory, in this order: the frame tiles [stages][32][pitch] of T (pitch = width + 8: rows
// 16 bytes apart in bank terms, so ldmatrix's 8 rows hit 8 different bank quads), each warp's
// partial scores F32 [8][24][33], the probabilities T [24][40], and per head the rescale factor,
// the final max and sum, and the cluster's merge coefficients F32 [8][24]. After the last tile,
// the tiles' space holds the CTA's unnormalised output F32 [24][width + 4]. The query's heads
// stay in registers, as the B fragments of the score products.
struct FrameLayout {
  int64_t pitch, tiles, partials, probabilities, rescale, final_max, final_sum, coefficients, bytes;
  template <class T>
  __host__ __device__ static FrameLayout of(int64_t width) {
    FrameLayout l;
    l.pitch = width + 8;
    l.tiles = 0;
    l.partials = l.tiles + sizeof(T) * kFrameStages * kFrameTile * l.pitch;
    l.probabilities = l.partials + sizeof(float) * kFrameWarps * kMaxFrameHeads * kPartialPitch;
    l.rescale = l.probabilities + sizeof(T) * kMaxFrameHeads * kProbabilityPitch;
    l.final_max = l.rescale + sizeof(float) * kMaxFrameHeads;
    l.final_sum = l.final_max + sizeof(float) * kMaxFrameHeads;
    l.coefficients = l.final_sum + sizeof(float) * kMaxFrameHeads;
    l.bytes = l.coefficients + sizeof(float) * kMaxFrameSplits * kMaxFrameHeads;
    return l;
  }
};

template <class T>
__global__ void __launch_bounds__(kFrameThreads, 1)
    frame_attention_kernel(const T* __restrict__ queries, const T* __restrict__ frames,
                           int64_t window_stride, int rows_per_window, int frame_count, int heads,
                           int group_heads, int width, T* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char frame_shared[];
  const FrameLayout layout = FrameLayout::of<T>(width);
  const int64_t pitch = layout.pitch;
  T* const tiles = reinterpret_cast<T*>(frame_shared + layout.tiles);
  float* const partials = reinterpret_cast<float*>(frame_shared + layout.partials);
  T* const probabilities = reinterpret_cast<T*>(frame_shared + layout.probabilities);
  float* const rescale = reinterpret_cast<float*>(frame_shared + layout.rescale);
  float* const final_max = reinterpret_cast<float*>(frame_shared + layout.final_max);
  float* const final_sum = reinterpret_cast<float*>(frame_shared + layout.final_sum);
  float* const coefficients = reinterpret_cast<float*>(frame_shared + layout.coefficients);
  float* const output = reinterpret_cast<float*>(frame_shared + layout.tiles);

  allow_dependent_kernels();
  const int splits = gridDim.x, split = blockIdx.x;
  const int first_head = blockIdx.y * group_heads;
  const int cta_heads = min(group_heads, heads - first_head);
  const int head_tiles = (cta_heads + 7) / 8;
  const int64_t row = blockIdx.z;
  const T* const x = frames + (row / rows_per_window) * window_stride;

  const int tile_count = (frame_count + kFrameTile - 1) / kFrameTile;
  const int tiles_per_split = (tile_count + splits - 1) / splits;
  const int tile_begin = min(tile_count, split * tiles_per_split);
  const int tile_end = min(tile_count, tile_begin + tiles_per_split);

  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  const int vectors = width / 8;  // 16-byte pieces a row

  // Tiles: thread i copies row i / 8 of the tile, its 16-byte pieces i % 8, + 8, + 16, ...
  constexpr int kLoadersPerRow = kFrameThreads / kFrameTile;
  const int load_row = thread / kLoadersPerRow, load_piece = thread % kLoadersPerRow;
  const uint32_t stage_bytes = sizeof(T) * kFrameTile * pitch;
  const uint32_t tiles_address = shared_address(tiles);
  const uint32_t load_target = tiles_address + sizeof(T) * (load_row * pitch + load_piece * 8);
  const auto load_tile = [&](int tile, int stage) {
    const int frame = tile * kFrameTile + load_row;
    const bool real = frame < frame_count;
    const T* source = x + int64_t{real ? frame : 0} * width + load_piece * 8;
    const uint32_t target = load_target + stage * stage_bytes;
    for (int v = load_piece, k = 0; v < vectors; v += kLoadersPerRow, ++k) {
      copy_async_16(target + k * kLoadersPerRow * 16, source + k * kLoadersPerRow * 8, real);
    }
  };
  if (tile_begin < tile_end) load_tile(tile_begin, 0);
  copy_async_commit();

  // Warp w's columns of the width: width_tiles tiles of 16 from warp_column (none for some warps
  // of a narrow model).
  const int all_tiles = width / 16, tiles_per_warp = (all_tiles + kFrameWarps - 1) / kFrameWarps;
  const int width_tiles = max(0, min(tiles_per_warp, all_tiles - warp * tiles_per_warp));
  const int warp_column = warp * tiles_per_warp * 16;
  const int g = lane / 4, c = lane % 4;

  // The query's heads as B fragments of S = X · Q̃ᵀ (k = columns, n = heads): lane (g, c) holds
  // head n·8 + g, columns 2c, 2c + 1 and 2c + 8, 2c + 9 of each 16-column tile; zeros past
  // cta_heads.
  uint32_t query_fragments[kMaxWidthTiles][kMaxHeadTiles][2];
#pragma unroll
  for (int t = 0; t < kMaxWidthTiles; ++t) {
#pragma unroll
    for (int n = 0; n < kMaxHeadTiles; ++n) {
      const int h = n * 8 + g;
      const bool real = t < width_tiles && h < cta_heads;
      const T* q = queries + ((row * heads) + first_head + (real ? h : 0)) * width +
                   (real ? warp_column + t * 16 : 0) + 2 * c;
      query_fragments[t][n][0] = real ? *reinterpret_cast<const uint32_t*>(q) : 0u;
      query_fragments[t][n][1] = real ? *reinterpret_cast<const uint32_t*>(q + 8) : 0u;
    }
  }

  // ldmatrix row addresses of this lane at the warp's first column tile (the next tile 32 bytes
  // on): X as the A operand of S (rows = frames), X transposed as the A operand of Oᵀ, and the
  // probabilities as the B operand of Oᵀ (k = frames, n = heads).
  const int m = lane / 8;
  const uint32_t scores_a =
      tiles_address + sizeof(T) * (((m & 1) * 8 + lane % 8) * pitch + warp_column + (m >> 1) * 8);
  const uint32_t output_a =
      tiles_address + sizeof(T) * (((m >> 1) * 8 + lane % 8) * pitch + warp_column + (m & 1) * 8);
  const uint32_t block_bytes = sizeof(T) * 16 * pitch;  // one 16-frame row block
  const uint32_t probability_b =
      shared_address(probabilities) + sizeof(T) * ((lane % 8) * kProbabilityPitch + m * 8);
  const uint32_t head_tile_probabilities = sizeof(T) * 8 * kProbabilityPitch;

  // Softmax owners: warp w holds heads w, w + 8 and w + 16, a frame per lane; their running max
  // and sum.
  float running_max[kMaxHeadTiles], running_sum[kMaxHeadTiles];
#pragma unroll
  for (int k = 0; k < kMaxHeadTiles; ++k) running_max[k] = -INFINITY, running_sum[k] = 0.0f;

  float acc[kMaxWidthTiles][kMaxHeadTiles][4] = {};
  for (int tile = tile_begin, step = 0; tile < tile_end; ++tile, ++step) {
    copy_async_wait<0>();
    __syncthreads();  // this tile is in, and every warp is done with the other stage
    if (tile + 1 < tile_end) load_tile(tile + 1, (step + 1) % kFrameStages);
    copy_async_commit();
    const uint32_t stage_offset = (step % kFrameStages) * stage_bytes;

    // Both products take X's fragments of the warp's column tiles t and row blocks b (at the
    // lane's address `first`), each with the B fragments of every head tile n.
    const auto over_x_fragments = [&](uint32_t first, auto load, auto multiply) {
#pragma unroll
      for (int t = 0; t < kMaxWidthTiles; ++t) {
        if (t >= width_tiles) break;
#pragma unroll
        for (int b = 0; b < kFrameBlocks; ++b) {
          uint32_t a[4];
          load(a, first + stage_offset + b * block_bytes + t * 32);
#pragma unroll
          for (int n = 0; n < kMaxHeadTiles; ++n) {
            if (n >= head_tiles) break;
            multiply(t, b, n, a);
          }
        }
      }
    };

    // S partial over this warp's columns, both row blocks.
    float scores[kFrameBlocks][kMaxHeadTiles][4] = {};
    over_x_fragments(
        scores_a, [](uint32_t(&a)[4], uint32_t at) { load_matrix_x4(a, at); },
        [&](int t, int b, int n, const uint32_t(&a)[4]) {
          mma_16816<T>(scores[b][n], a, query_fragments[t][n][0], query_fragments[t][n][1]);
        });
#pragma unroll
    for (int b = 0; b < kFrameBlocks; ++b) {
#pragma unroll
      for (int n = 0; n < kMaxHeadTiles; ++n) {
        if (n >= head_tiles) break;
        float* const p =
            partials + (warp * kMaxFrameHeads + n * 8 + 2 * c) * kPartialPitch + b * 16;
        p[g] = scores[b][n][0];
        p[kPartialPitch + g] = scores[b][n][1];
        p[g + 8] = scores[b][n][2];
        p[kPartialPitch + g + 8] = scores[b][n][3];
      }
    }
    __syncthreads();

    // Online softmax, a head per warp and pass, a frame per lane: heads past cta_heads get
    // probability 0 and rescale 0.
#pragma unroll
    for (int k = 0; k < kMaxHeadTiles; ++k) {
      const int h = warp + 8 * k;
      float score = -INFINITY;
      if (h < cta_heads && tile * kFrameTile + lane < frame_count) {
        score = 0.0f;
#pragma unroll
        for (int w = 0; w < kFrameWarps; ++w) {
          score += partials[(w * kMaxFrameHeads + h) * kPartialPitch + lane];
        }
      }
      const float new_max = fmaxf(running_max[k], warp_max(score));
      const float reference = exp_reference(new_max);
      const float probability = expf(score - reference);
      const float factor = expf(running_max[k] - reference);
      running_sum[k] = running_sum[k] * factor + warp_sum(probability);
      running_max[k] = new_max;
      probabilities[h * kProbabilityPitch + lane] = from_float<T>(probability);
      if (lane == 0) rescale[h] = factor;
    }
    __syncthreads();

    // Oᵀ += X_tileᵀ · Pᵀ over this warp's columns, after rescaling each head's column.
    uint32_t p_fragments[kMaxHeadTiles][4];  // k-step 0: [0], [1]; k-step 1: [2], [3]
#pragma unroll
    for (int n = 0; n < kMaxHeadTiles; ++n) {
      if (n >= head_tiles) break;
      load_matrix_x4(p_fragments[n], probability_b + n * head_tile_probabilities);
      const float even = rescale[n * 8 + 2 * c], odd = rescale[n * 8 + 2 * c + 1];
#pragma unroll
      for (int t = 0; t < kMaxWidthTiles; ++t) {
        acc[t][n][0] *= even;
        acc[t][n][1] *= odd;
        acc[t][n][2] *= even;
        acc[t][n][3] *= odd;
      }
    }
    over_x_fragments(
        output_a, [](uint32_t(&a)[4], uint32_t at) { load_matrix_x4_transposed(a, at); },
        [&](int t, int b, int n, const uint32_t(&a)[4]) {
          mma_16816<T>(acc[t][n], a, p_fragments[n][2 * b], p_fragments[n][2 * b + 1]);
        });
  }
  copy_async_wait<0>();

  // Each head's final max and sum; the unnormalised output into shared memory.
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < kMaxHeadTiles; ++k) {
      final_max[warp + 8 * k] = running_max[k];
      final_sum[warp + 8 * k] = running_sum[k];
    }
  }
  __syncthreads();  // every warp is done with the tiles
  const int64_t output_pitch = width + 4;
#pragma unroll
  for (int t = 0; t < kMaxWidthTiles; ++t) {
    if (t >= width_tiles) break;
    const int column = warp_column + t * 16 + g;
#pragma unroll
    for (int n = 0; n < kMaxHeadTiles; ++n) {
      if (n >= head_tiles) break;
      float* const o = output + (n * 8 + 2 * c) * output_pitch + column;
      o[0] = acc[t][n][0];
      o[output_pitch] = acc[t][n][1];
      o[8] = acc[t][n][2];
      o[output_pitch + 8] = acc[t][n][3];
    }
  }
  __syncthreads();

  T* const target = out + (row * heads + first_head) * width;
  if (splits == 1) {
    for (int h = 0; h < cta_heads; ++h) {
      const float sum = final_sum[h];
      const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
      for (int column = thread; column < width; column += kFrameThreads) {
        target[h * width + column] = from_float<T>(output[h * output_pitch + column] * inverse);
      }
    }
    return;
  }

  // The cluster's CTAs: CTA `split` merges columns [split · share, (split + 1) · share) of every
  // head from all of them.
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (thread < cta_heads) {
    const int h = thread;
    float merged_max = -INFINITY;
    for (int rank = 0; rank < splits; ++rank) {
      merged_max = fmaxf(merged_max, *cluster.map_shared_rank(&final_max[h], rank));
    }
    const float reference = exp_reference(merged_max);
    float merged_sum = 0.0f;
    for (int rank = 0; rank < splits; ++rank) {
      const float weight = expf(*cluster.map_shared_rank(&final_max[h], rank) - reference);
      coefficients[rank * kMaxFrameHeads + h] = weight;
      merged_sum += *cluster.map_shared_rank(&final_sum[h], rank) * weight;
    }
    const float inverse = merged_sum > 0.0f ? 1.0f / merged_sum : 0.0f;
    for (int rank = 0; rank < splits; ++rank) coefficients[rank * kMaxFrameHeads + h] *= inverse;
  }
  __syncthreads();
  const int share = (width + splits - 1) / splits;
  const int first_column = split * share, end_column = min(width, first_column + share);
  const float* remote[kMaxFrameSplits];
#pragma unroll
  for (int rank = 0; rank < kMaxFrameSplits; ++rank) {
    remote[rank] = cluster.map_shared_rank(output, rank < splits ? rank : 0);
  }
  // Every thread on (head, column) pairs, all ranks' values of a pair in flight together.
  const int columns = max(0, end_column - first_column);
  for (int i = thread; i < cta_heads * columns; i += kFrameThreads) {
    const int h = i / columns, column = first_column + i % columns;
    const int64_t at = h * output_pitch + column;
    float parts[kMaxFrameSplits];
#pragma unroll
    for (int rank = 0; rank < kMaxFrameSplits; ++rank) {
      parts[rank] = rank < splits ? remote[rank][at] : 0.0f;
    }
    float value = 0.0f;
#pragma unroll
    for (int rank = 0; rank < kMaxFrameSplits; ++rank) {
      if (rank < splits) value += coefficients[rank * kMaxFrameHeads + h] * parts[rank];
    }
    target[h * width + column] = from_float<T>(value);
  }
  cluster.sync();  // the other CTAs' shared memory must outlive these reads
}

template <class F>
void with_half_type(Element e, const char* what, F&& f) {
  if (e == Element::f16) return f(__half{});
  if (e == Element::bf16) return f(__nv_bfloat16{});
  fail(what, ": F16 or BF16 elements only");
}

}  // namespace

bool frame_attention_runs(Element e, int heads, int64_t width) {
  return (e == Element::f16 || e == Element::bf16) && heads > 0 && heads <= kMaxFrameHeads &&
         width > 0 && width % 16 == 0 && width <= kFrameWarps * 16 * kMaxWidthTiles &&
         width % heads == 0 && width / heads <= kMaxAbsorbHeadDim;
}

void absorb_query(Element e, const void* q, int64_t q_stride, int64_t rows, int heads, int head_dim,
                  const void* w_k, int64_t w_row_stride, int64_t width, float scale, void* out,
                  cudaStream_t stream) {
  if (rows <= 0) return;
  if (head_dim > kMaxAbsorbHeadDim) fail("absorb_query: head_dim ", head_dim, " > 128");
  if (width % 8 != 0 || w_row_stride % 8 != 0 || !aligned(w_k, 16) || !aligned(out, 16)) {
    fail("absorb_query: weight and output rows must be 16-byte aligned");
  }
  // One row (a batch-1 step) in its own form, so that it computes no rows it does not have.
  const int block_rows = rows == 1 ? 1 : 8;
  const dim3 grid(static_cast<unsigned>(ceil_div(width / 8, kAbsorbThreads)), heads,
                  static_cast<unsigned>(ceil_div(rows, block_rows)));
  with_half_type(e, "absorb_query", [&](auto zero) {
    using T = decltype(zero);
    const auto kernel = block_rows == 1 ? absorb_query_kernel<T, 1> : absorb_query_kernel<T, 8>;
    kernel<<<grid, kAbsorbThreads, 0, stream>>>(
        static_cast<const T*>(q), q_stride, static_cast<const T*>(w_k), w_row_stride,
        static_cast<int>(rows), heads, head_dim, width, scale, static_cast<T*>(out));
  });
  check_launch("absorb_query");
}

void frame_attention(Element e, const void* queries, int64_t rows, int heads, int64_t width,
                     const void* frames, int frame_count, int64_t window_stride,
                     int64_t rows_per_window, void* out, cudaStream_t stream) {
  if (rows <= 0) return;
  if (!frame_attention_runs(e, heads, width)) {
    fail("frame_attention: ", heads, " heads of width ", width,
         " (wants F16/BF16, at most 24 heads, a width that is a multiple of 16 up to 1280)");
  }
  if (!aligned(queries, 16) || !aligned(frames, 16) || !aligned(out, 16) ||
      window_stride % 8 != 0) {
    fail("frame_attention: queries, frames and output must be 16-byte aligned");
  }
  if (rows > 65535) fail("frame_attention: ", rows, " rows (at most 65535 a launch)");
  const int sms = multiprocessor_count();
  const int head_tiles = (heads + 7) / 8;
  // Fill the GPU: a CTA per row first, then splits of the frames (a cluster each), then, for a
  // few rows, a CTA per 8 heads.
  int groups = 1;
  if (rows * kMaxFrameSplits * 2 < sms) groups = head_tiles;
  const int tiles = (frame_count + kFrameTile - 1) / kFrameTile;
  int splits = 1;
  while (splits < kMaxFrameSplits && splits * 2 <= std::max(tiles, 1) &&
         rows * groups * splits < sms * 9 / 10) {
    splits *= 2;
  }
  const int group_heads = groups == 1 ? heads : 8;

  with_half_type(e, "frame_attention", [&](auto zero) {
    using T = decltype(zero);
    const FrameLayout layout = FrameLayout::of<T>(width);
    static const bool configured =
        (allow_shared_memory(frame_attention_kernel<T>,
                             FrameLayout::of<T>(kFrameWarps * 16 * kMaxWidthTiles).bytes,
                             "frame_attention shared memory"),
         true);
    (void)configured;
    launch_kernel(frame_attention_kernel<T>, dim3(splits, groups, static_cast<unsigned>(rows)),
                  dim3(kFrameThreads), static_cast<size_t>(layout.bytes), splits,
                  /*early_start=*/false, stream, "frame_attention", static_cast<const T*>(queries),
                  static_cast<const T*>(frames), window_stride, static_cast<int>(rows_per_window),
                  frame_count, heads, group_heads, static_cast<int>(width), static_cast<T*>(out));
  });
}

void absorb_values(Element e, const void* o, int64_t rows, int heads, int head_dim, const void* w_v,
                   int64_t w_row_stride, const void* bias, int64_t width, void* context,
                   int64_t context_stride, cudaStream_t stream) {
  if (rows <= 0) return;
  if (width % 16 != 0 || width > 16 * kValueWarps * kMaxValueSteps || w_row_stride % 8 != 0 ||
      !aligned(o, 16) || !aligned(w_v, 16)) {
    fail("absorb_values: rows must be 16-byte aligned, a multiple of 16 values wide, at most 1280");
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(head_dim, kValueOutputs)), heads,
                  static_cast<unsigned>(ceil_div(rows, kValueRows)));
  with_half_type(e, "absorb_values", [&](auto zero) {
    using T = decltype(zero);
    absorb_values_kernel<T><<<grid, kValueWarps * 32, 0, stream>>>(
        static_cast<const T*>(o), static_cast<const T*>(w_v), w_row_stride,
        static_cast<const T*>(bias), static_cast<int>(rows), heads, head_dim, width,
        static_cast<T*>(context), context_stride);
  });
  check_launch("absorb_values");
}

}  // namespace hark::compute::cuda
