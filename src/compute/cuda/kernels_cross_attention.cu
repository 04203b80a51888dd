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
// frame_attention is the memory-bound one. A CTA of 16 warps takes one query row and a range of
// frames (a split); the splits of a row form a thread-block cluster and merge their softmax
// states through distributed shared memory. Frames come in tiles of 16 rows through a 3-stage
// cp.async ring. Per tile, on the tensor cores (mma m16n8k16, F32 accumulators):
//   S [16 frames × heads] = X_tile · Q̃ᵀ, each warp a 1/16 of the width, summed in shared memory;
//   the online softmax of each head (one half-warp per head, a frame per lane);
//   Oᵀ [width × heads] += X_tileᵀ · Pᵀ, each warp its 1/16 of the width in registers.
// Heads are the products' narrow side (n = 8 per tile, up to 3 tiles: 24 heads), the width the
// wide one; every X value read from memory feeds every head. A tile's three phases depend on each
// other, so an SM needs many warps to keep its loads going: 16 warps of 80 columns each (8 warps
// of 160 ran large-v3's batch-16 step at 0.5 TB/s).
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

// ---- absorb_query: q̃[r, h, :] = scale · Σ_j q[r, h·head_dim + j] · W_k[h·head_dim + j, :]
// --------
//
// One thread per output column i of a (head, 8 rows) block: the query values sit in shared
// memory and are broadcast; each weight value loaded feeds 8 rows. (16 rows a block left a
// batch of 16 with 6 warps an SM, too few to hide the loads: 13 µs for large-v3.)

constexpr int kQueryRows = 8;
constexpr int kAbsorbThreads = 128;
constexpr int kMaxAbsorbHeadDim = 128;
constexpr int kValueRows = 16;  // absorb_values' rows a block

template <class T>
__global__ void __launch_bounds__(kAbsorbThreads)
    absorb_query_kernel(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ w_k,
                        int64_t w_row_stride, int rows, int heads, int head_dim, int64_t width,
                        float scale, T* __restrict__ out) {
  __shared__ float query[kQueryRows][kMaxAbsorbHeadDim];
  allow_dependent_kernels();
  const int head = blockIdx.y, first_row = blockIdx.z * kQueryRows;
  const int block_rows = min(kQueryRows, rows - first_row);
  for (int i = threadIdx.x; i < block_rows * head_dim; i += kAbsorbThreads) {
    const int r = i / head_dim, j = i % head_dim;
    query[r][j] = scale * to_float(q[(first_row + r) * q_stride + head * head_dim + j]);
  }
  __syncthreads();
  const int64_t column = int64_t{blockIdx.x} * kAbsorbThreads + threadIdx.x;
  if (column >= width) return;
  const T* weights = w_k + int64_t{head} * head_dim * w_row_stride + column;
  // 32 weights in flight at a time, then their products: few SM warps, so each thread's loads
  // must overlap rather than follow each other.
  constexpr int kChunk = 32;
  float sums[kQueryRows] = {};
  for (int first = 0; first < head_dim; first += kChunk) {
    float weight[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      weight[j] = first + j < head_dim ? to_float(weights[(first + j) * w_row_stride]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
#pragma unroll
      for (int r = 0; r < kQueryRows; ++r) {
        sums[r] += query[r][min(first + j, kMaxAbsorbHeadDim - 1)] * weight[j];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kQueryRows; ++r) {
    if (r < block_rows) {
      out[((first_row + r) * int64_t{heads} + head) * width + column] = from_float<T>(sums[r]);
    }
  }
}

// ---- absorb_values: context[r, h·head_dim + j] = W_v[h·head_dim + j, :] · o[r, h, :] + b_v
// --------
//
// A warp per output (h, j) and up to 16 rows, its lanes along the width in 16-byte vectors, then a
// sum across the warp; a CTA's warps take outputs of one head, so the rows of o_h they all read
// come from L1. Many small warps: the loads of each one are independent, and the SM has enough of
// them to hide their latency (a 4-warp-per-SM form with o_h staged in shared memory took 42 µs
// for large-v3 at batch 16, this one a few).

constexpr int kValueWarps = 4;

template <class T>
__global__ void __launch_bounds__(kValueWarps * 32)
    absorb_values_kernel(const T* __restrict__ o, const T* __restrict__ w_v, int64_t w_row_stride,
                         const T* __restrict__ bias, int rows, int heads, int head_dim,
                         int64_t width, T* __restrict__ context, int64_t context_stride) {
  allow_dependent_kernels();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = blockIdx.y, first_row = blockIdx.z * kValueRows;
  const int output = blockIdx.x * kValueWarps + warp;
  if (output >= head_dim) return;
  const int block_rows = min(kValueRows, rows - first_row);
  const T* const weights = w_v + (int64_t{head} * head_dim + output) * w_row_stride;
  const T* const first_o = o + (int64_t{first_row} * heads + head) * width;
  const int64_t o_row_stride = int64_t{heads} * width;
  // Every row's load is issued, rows past the block's reading row 0 again, so that all 17 of a
  // round are in flight together (a branch per row made them wait for each other).
  float sums[kValueRows] = {};
  for (int64_t v = lane; v < width / 8; v += 32) {
    float weight[8];
    load_pack<8>(weights + v * 8, weight);
#pragma unroll
    for (int r = 0; r < kValueRows; ++r) {
      float value[8];
      load_pack<8>(first_o + (r < block_rows ? r : 0) * o_row_stride + v * 8, value);
#pragma unroll
      for (int i = 0; i < 8; ++i) sums[r] += weight[i] * value[i];
    }
  }
  const float b = bias != nullptr ? to_float(bias[head * head_dim + output]) : 0.0f;
#pragma unroll
  for (int r = 0; r < kValueRows; ++r) {
    if (r >= block_rows) break;
    const float sum = warp_sum(sums[r]);
    if (lane == 0) {
      context[(first_row + r) * context_stride + head * head_dim + output] = from_float<T>(sum + b);
    }
  }
}

// ---- frame_attention ---------------------------------------------------------------------------

constexpr int kFrameWarps = 16;
constexpr int kFrameThreads = kFrameWarps * 32;
constexpr int kFrameTile = 16;  // frames a tile: one mma row block
constexpr int kFrameStages = 3;
constexpr int kMaxHeadTiles = 3;
constexpr int kMaxFrameHeads = 8 * kMaxHeadTiles;
constexpr int kMaxWidthTiles = 5;   // 16-wide column tiles a warp: width ≤ 16 · 16 · 5 = 1280
constexpr int kMaxFrameSplits = 8;  // the portable cluster size
constexpr int kPartialPitch = kFrameTile + 1;
constexpr int kProbabilityPitch = kFrameTile + 8;

// Shared memory, in this order: the query's heads [24][pitch] and the frame tiles
// [stages][16][pitch] of T (pitch = width + 8: rows 16 bytes apart in bank terms, so ldmatrix's
// 8 rows hit 8 different bank quads), each warp's partial scores F32 [8][24][17], the
// probabilities T [24][24], and per head the rescale factor, the final max and sum, and the
// cluster's merge coefficients F32 [8][24]. After the last tile, the tiles' space holds the CTA's
// unnormalised output F32 [24][width + 4].
struct FrameLayout {
  int64_t pitch, queries, tiles, partials, probabilities, rescale, final_max, final_sum,
      coefficients, bytes;
  template <class T>
  __host__ __device__ static FrameLayout of(int64_t width) {
    FrameLayout l;
    l.pitch = width + 8;
    l.queries = 0;
    l.tiles = l.queries + sizeof(T) * kMaxFrameHeads * l.pitch;
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
  T* const query_rows = reinterpret_cast<T*>(frame_shared + layout.queries);
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

  // The query's heads (zeros past cta_heads), then the first tiles, each a cp.async group.
  for (int i = thread; i < head_tiles * 8 * vectors; i += kFrameThreads) {
    const int h = i / vectors, v = i % vectors;
    const bool real = h < cta_heads;
    const T* source = queries + ((row * heads) + first_head + (real ? h : 0)) * width + v * 8;
    copy_async_16(query_rows + h * pitch + v * 8, source, real);
  }
  // Tiles: thread i copies row i / 16 of the tile, its 16-byte pieces i % 16, + 16, + 32, ...
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
  for (int s = 0; s < kFrameStages - 1; ++s) {
    if (tile_begin + s < tile_end) load_tile(tile_begin + s, s);
    copy_async_commit();
  }

  // Warp w's columns of the width: width_tiles tiles of 16 from warp_column (none for some warps
  // of a narrow model).
  const int all_tiles = width / 16, tiles_per_warp = (all_tiles + kFrameWarps - 1) / kFrameWarps;
  const int width_tiles = max(0, min(tiles_per_warp, all_tiles - warp * tiles_per_warp));
  const int warp_column = warp * tiles_per_warp * 16;
  const int g = lane / 4, c = lane % 4;
  // ldmatrix row addresses of this lane at the warp's first column tile (the next tile 32 bytes
  // on): X as the A operand of S (rows = frames), X transposed as the A operand of Oᵀ, the query
  // heads and the probabilities as B operands.
  const int m = lane / 8;
  const uint32_t scores_a =
      tiles_address + sizeof(T) * (((m & 1) * 8 + lane % 8) * pitch + warp_column + (m >> 1) * 8);
  const uint32_t output_a =
      tiles_address + sizeof(T) * (((m >> 1) * 8 + lane % 8) * pitch + warp_column + (m & 1) * 8);
  const uint32_t query_b =
      shared_address(query_rows) + sizeof(T) * ((lane % 8) * pitch + warp_column + (m & 1) * 8);
  const uint32_t head_tile_bytes = sizeof(T) * 8 * pitch;
  const uint32_t probability_b =
      shared_address(probabilities) + sizeof(T) * ((lane % 8) * kProbabilityPitch + (m & 1) * 8);
  // Softmax owners: half-warp `half` of warp w holds head w + 16·half, one frame a lane; its
  // running max and sum.
  const int half = lane / 16, frame_lane = lane % 16;
  const int owned_head = warp + kFrameWarps * half;
  float running_max = -INFINITY, running_sum = 0.0f;

  float acc[kMaxWidthTiles][kMaxHeadTiles][4] = {};
  for (int tile = tile_begin, step = 0; tile < tile_end; ++tile, ++step) {
    copy_async_wait<kFrameStages - 2>();
    __syncthreads();  // this tile is in, and every warp is done with the stage loaded next
    if (tile + kFrameStages - 1 < tile_end) {
      load_tile(tile + kFrameStages - 1, (step + kFrameStages - 1) % kFrameStages);
    }
    copy_async_commit();
    const uint32_t stage_offset = (step % kFrameStages) * stage_bytes;

    // S partial over this warp's columns.
    float scores[kMaxHeadTiles][4] = {};
#pragma unroll
    for (int t = 0; t < kMaxWidthTiles; ++t) {
      if (t >= width_tiles) break;
      uint32_t a[4];
      load_matrix_x4(a, scores_a + stage_offset + t * 32);
#pragma unroll
      for (int n = 0; n < kMaxHeadTiles; ++n) {
        if (n >= head_tiles) break;
        uint32_t b[2];
        load_matrix_x2(b, query_b + n * head_tile_bytes + t * 32);
        mma_16816<T>(scores[n], a, b[0], b[1]);
      }
    }
#pragma unroll
    for (int n = 0; n < kMaxHeadTiles; ++n) {
      if (n >= head_tiles) break;
      float* const p = partials + (warp * kMaxFrameHeads + n * 8 + 2 * c) * kPartialPitch;
      p[g] = scores[n][0];
      p[kPartialPitch + g] = scores[n][1];
      p[g + 8] = scores[n][2];
      p[kPartialPitch + g + 8] = scores[n][3];
    }
    __syncthreads();

    // Online softmax, a head per half-warp: heads past cta_heads get probability 0 and rescale 0.
    {
      // Half-warps past the 24 heads join the shuffles.
      const int h = owned_head;
      float score = -INFINITY;
      if (h < cta_heads && tile * kFrameTile + frame_lane < frame_count) {
        score = 0.0f;
        for (int w = 0; w < kFrameWarps; ++w) {
          score += partials[(w * kMaxFrameHeads + h) * kPartialPitch + frame_lane];
        }
      }
      float tile_max = score;
      for (int offset = 8; offset > 0; offset >>= 1) {
        tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarp, tile_max, offset));
      }
      const float new_max = fmaxf(running_max, tile_max);
      const float reference = exp_reference(new_max);
      const float probability = expf(score - reference);
      const float factor = expf(running_max - reference);
      float sum = probability;
      for (int offset = 8; offset > 0; offset >>= 1) {
        sum += __shfl_xor_sync(kFullWarp, sum, offset);
      }
      running_sum = running_sum * factor + sum;
      running_max = new_max;
      if (h < kMaxFrameHeads) {
        probabilities[h * kProbabilityPitch + frame_lane] = from_float<T>(probability);
        if (frame_lane == 0) rescale[h] = factor;
      }
    }
    __syncthreads();

    // Oᵀ += X_tileᵀ · Pᵀ over this warp's columns, after rescaling each head's column.
    uint32_t p_fragments[kMaxHeadTiles][2];
#pragma unroll
    for (int n = 0; n < kMaxHeadTiles; ++n) {
      if (n >= head_tiles) break;
      load_matrix_x2(p_fragments[n], probability_b + n * sizeof(T) * 8 * kProbabilityPitch);
      const float even = rescale[n * 8 + 2 * c], odd = rescale[n * 8 + 2 * c + 1];
#pragma unroll
      for (int t = 0; t < kMaxWidthTiles; ++t) {
        acc[t][n][0] *= even;
        acc[t][n][1] *= odd;
        acc[t][n][2] *= even;
        acc[t][n][3] *= odd;
      }
    }
#pragma unroll
    for (int t = 0; t < kMaxWidthTiles; ++t) {
      if (t >= width_tiles) break;
      uint32_t a[4];
      load_matrix_x4_transposed(a, output_a + stage_offset + t * 32);
#pragma unroll
      for (int n = 0; n < kMaxHeadTiles; ++n) {
        if (n >= head_tiles) break;
        mma_16816<T>(acc[t][n], a, p_fragments[n][0], p_fragments[n][1]);
      }
    }
  }
  copy_async_wait<0>();

  // Each head's final max and sum; the unnormalised output into shared memory.
  if (owned_head < kMaxFrameHeads && frame_lane == 0) {
    final_max[owned_head] = running_max;
    final_sum[owned_head] = running_sum;
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

int multiprocessor_count() {
  static const int count = [] {
    int device = 0, value = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device),
          "multiprocessor count");
    return value;
  }();
  return count;
}

template <class F>
void with_half_type(Element e, const char* what, F&& f) {
  if (e == Element::f16) return f(__half{});
  if (e == Element::bf16) return f(__nv_bfloat16{});
  fail(what, ": F16 or BF16 elements only");
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

bool frame_attention_runs(Element e, int heads, int64_t width) {
  return (e == Element::f16 || e == Element::bf16) && heads > 0 && heads <= kMaxFrameHeads &&
         width > 0 && width % 16 == 0 && width <= kFrameWarps * 16 * kMaxWidthTiles;
}

void absorb_query(Element e, const void* q, int64_t q_stride, int64_t rows, int heads, int head_dim,
                  const void* w_k, int64_t w_row_stride, int64_t width, float scale, void* out,
                  cudaStream_t stream) {
  if (rows <= 0) return;
  if (head_dim > kMaxAbsorbHeadDim) fail("absorb_query: head_dim ", head_dim, " > 128");
  const dim3 grid(static_cast<unsigned>(ceil_div(width, kAbsorbThreads)), heads,
                  static_cast<unsigned>(ceil_div(rows, kQueryRows)));
  with_half_type(e, "absorb_query", [&](auto zero) {
    using T = decltype(zero);
    absorb_query_kernel<T><<<grid, kAbsorbThreads, 0, stream>>>(
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
  if (!aligned16(queries) || !aligned16(frames) || !aligned16(out) || window_stride % 8 != 0) {
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
    static const bool allowed = [] {
      int device = 0, limit = 0;
      check(cudaGetDevice(&device), "cudaGetDevice");
      check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
            "shared memory per block");
      check(cudaFuncSetAttribute(frame_attention_kernel<T>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
            "frame_attention shared memory limit");
      return true;
    }();
    (void)allowed;
    launch_in_clusters(frame_attention_kernel<T>, dim3(splits, groups, static_cast<unsigned>(rows)),
                       dim3(kFrameThreads), static_cast<size_t>(layout.bytes), splits, stream,
                       "frame_attention", static_cast<const T*>(queries),
                       static_cast<const T*>(frames), window_stride,
                       static_cast<int>(rows_per_window), frame_count, heads, group_heads,
                       static_cast<int>(width), static_cast<T*>(out));
  });
}

void absorb_values(Element e, const void* o, int64_t rows, int heads, int head_dim, const void* w_v,
                   int64_t w_row_stride, const void* bias, int64_t width, void* context,
                   int64_t context_stride, cudaStream_t stream) {
  if (rows <= 0) return;
  if (width % 8 != 0 || w_row_stride % 8 != 0 || !aligned16(o) || !aligned16(w_v)) {
    fail("absorb_values: rows must be 16-byte aligned and a multiple of 8 values wide");
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(head_dim, kValueWarps)), heads,
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
