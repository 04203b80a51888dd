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
// and tile for 30 products. With this one, large-v3's batch-16 step is still 1.8× slower than
// over the INT8 K/V cache (4.84 against 2.62 ms; bench/RESULTS.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/frame_splits.cuh"
#include "compute/cuda/kernels.h"
#include "compute/cuda/tensor_core.cuh"

namespace hark::compute::cuda {

namespace {

// ---- absorb_query: q̃[r, h, :] = scale · Σ_j q[r, h·head_dim + j] · W_k[h·head_dim + j, :] -----
//
// On the tensor cores, a CTA per (64 columns, head, 64 rows), its operands read into shared
// memory in one round of asynchronous copies: the head's rows of W_k for those columns
// [head_dim][64] (ldmatrix reads them transposed, as the B fragments of k = j) and the query's
// [64 rows][head_dim] (the A fragments). A warp per 16 rows, all 64 columns, head_dim / 16
// k-steps. The results go back through shared memory, so that each row's 64 columns leave in
// 16-byte stores. (The form before read the query's fragments straight from global memory, a
// round trip per k-step, and stored 4-byte pairs: 14-15 µs at large-v3's batch of 120 on an
// H100, against 9-10 for this one; bench/RESULTS.md, thirty-eighth session.)

constexpr int kAbsorbWarps = 4;
constexpr int kAbsorbRows = 16 * kAbsorbWarps;
constexpr int kAbsorbColumns = 64;
// Rows of the staged weights and outputs 144 bytes apart, so that ldmatrix's 8 rows fall in 8
// bank groups; the query's rows 272 bytes apart for the same reason.
constexpr int kAbsorbPitch = kAbsorbColumns + 8;
constexpr int kMaxAbsorbHeadDim = 128;
constexpr int kAbsorbQueryPitch = kMaxAbsorbHeadDim + 8;

template <class T>
__global__ void __launch_bounds__(kAbsorbWarps * 32)
    absorb_query_kernel(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ w_k,
                        int64_t w_row_stride, int rows, int heads, int head_dim, int64_t width,
                        float scale, T* __restrict__ out) {
  // The weights' rows, then (once the products are done) the outputs' [64][kAbsorbPitch].
  __shared__ __align__(16) T weights[kMaxAbsorbHeadDim][kAbsorbPitch];
  __shared__ __align__(16) T queries[kAbsorbRows][kAbsorbQueryPitch];
  allow_dependent_kernels();
  const int head = blockIdx.y;
  const int first_row = blockIdx.z * kAbsorbRows;
  const int64_t first_column = int64_t{blockIdx.x} * kAbsorbColumns;
  const int columns = static_cast<int>(min(int64_t{kAbsorbColumns}, width - first_column));
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32, g = lane / 4,
            c = lane % 4;
  constexpr int kPieces = kAbsorbColumns / 8;  // 16-byte pieces of a staged row
  const T* const w_head = w_k + int64_t{head} * head_dim * w_row_stride + first_column;
  for (int i = thread; i < head_dim * kPieces; i += kAbsorbWarps * 32) {
    const int k = i / kPieces, piece = i % kPieces;
    const bool real = piece * 8 < columns;
    copy_async_16(&weights[k][piece * 8], w_head + k * w_row_stride + (real ? piece * 8 : 0), real);
  }
  const int query_pieces = head_dim / 8;
  for (int i = thread; i < kAbsorbRows * query_pieces; i += kAbsorbWarps * 32) {
    const int r = i / query_pieces, piece = i % query_pieces;
    const bool real = first_row + r < rows;  // rows past the end are zeros, not stored
    const int64_t row = real ? first_row + r : 0;
    copy_async_16(&queries[r][piece * 8], q + row * q_stride + head * head_dim + piece * 8, real);
  }
  copy_async_commit();
  copy_async_wait<0>();
  __syncthreads();

  float acc[kAbsorbColumns / 8][4] = {};
  const int m = lane / 8;
  for (int step = 0; step < head_dim / 16; ++step) {
    uint32_t a[4];
    load_matrix_x4(a, &queries[16 * warp + lane % 16][16 * step + (lane / 16) * 8]);
#pragma unroll
    for (int n = 0; n < kAbsorbColumns / 16; ++n) {
      uint32_t b[4];
      load_matrix_x4_transposed(
          b, &weights[16 * step + (m & 1) * 8 + lane % 8][16 * n + (m >> 1) * 8]);
      mma_16816<T>(acc[2 * n], a, b[0], b[1]);
      mma_16816<T>(acc[2 * n + 1], a, b[2], b[3]);
    }
  }
  __syncthreads();  // every warp is done with the weights: their space takes the outputs
  T(*const staged)[kAbsorbPitch] = weights;
#pragma unroll
  for (int n = 0; n < kAbsorbColumns / 8; ++n) {
    const int column = 8 * n + 2 * c, row = 16 * warp + g;
    *reinterpret_cast<uint32_t*>(&staged[row][column]) =
        pack_pair<T>(scale * acc[n][0], scale * acc[n][1]);
    *reinterpret_cast<uint32_t*>(&staged[row + 8][column]) =
        pack_pair<T>(scale * acc[n][2], scale * acc[n][3]);
  }
  __syncthreads();
  for (int i = thread; i < kAbsorbRows * kPieces; i += kAbsorbWarps * 32) {
    const int r = i / kPieces, piece = i % kPieces;
    if (first_row + r >= rows || piece * 8 >= columns) continue;
    *reinterpret_cast<uint4*>(out + (int64_t{first_row + r} * heads + head) * width + first_column +
                              piece * 8) = *reinterpret_cast<const uint4*>(&staged[r][piece * 8]);
  }
}

// ---- absorb_values: context[r, h·head_dim + j] = W_v[h·head_dim + j, :] · o[r, h, :] + b_v -----
//
// On the tensor cores: C [16 rows × 32 outputs] = O_h [16 × width] · W_v,hᵀ per CTA, the width
// split among its 8 warps, whose partial products are summed in shared memory. The fragments
// come straight from global memory in 16-byte loads (o and the weights are read once a CTA), a
// warp's loads issued before its first product: lane c of a 32-wide chunk of the width holds
// its values 8c .. 8c + 7, and the chunk's two mma k-steps take the lanes' values 0-3 and 4-7 in
// the places of k = 2c, 2c + 1, 2c + 8, 2c + 9. The products pair the same values of o and W_v,
// so the sum is the same, in another order.

constexpr int kValueWarps = 8;
constexpr int kValueRows = 16;
constexpr int kValueTiles = 4;                  // n-tiles of 8 outputs
constexpr int kValueOutputs = 8 * kValueTiles;  // outputs of a CTA
constexpr int kMaxValueChunks = 5;              // 32-wide chunks of the width a warp: ≤ 1280

// 16 bytes of read-only global memory, as volatile asm: such statements keep their order, so
// the PTX has a warp's loads before its products (mma_16816 is volatile asm too). ptxas still
// schedules them: the kernel takes 80 registers, where holding every load would take 120.
__device__ __forceinline__ uint4 load_pinned(const void* address) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(address));
  return v;
}

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
  const T* w_rows[kValueTiles];
#pragma unroll
  for (int n = 0; n < kValueTiles; ++n) {
    const int output = first_output + n * 8 + g;
    w_rows[n] = w_v + (int64_t{head} * head_dim + (output < head_dim ? output : 0)) * w_row_stride;
  }
  const int chunks = static_cast<int>((width + 31) / 32);  // the last may be half (width % 16)
  const int chunks_per_warp = (chunks + kValueWarps - 1) / kValueWarps;
  const int first_chunk = warp * chunks_per_warp;
  const int last_chunk = min(chunks, first_chunk + chunks_per_warp);
  uint4 low[kMaxValueChunks], high[kMaxValueChunks], w[kMaxValueChunks][kValueTiles];
  bool real[kMaxValueChunks];
#pragma unroll
  for (int i = 0; i < kMaxValueChunks; ++i) {  // all of a warp's loads issued together
    // Chunks (and a half chunk's lanes) past the warp's read chunk 0 and multiply zeros.
    const int chunk = first_chunk + i;
    real[i] = chunk < last_chunk && chunk * 32 + 8 * c < width;
    const int k = real[i] ? chunk * 32 + 8 * c : 0;
    low[i] = load_pinned(o_low + k);
    high[i] = load_pinned(o_high + k);
#pragma unroll
    for (int n = 0; n < kValueTiles; ++n) w[i][n] = load_pinned(w_rows[n] + k);
  }
  float acc[kValueTiles][4] = {};
#pragma unroll
  for (int i = 0; i < kMaxValueChunks; ++i) {
    if (!real[i]) low[i] = high[i] = uint4{};
    const uint32_t first[4] = {low[i].x, high[i].x, low[i].y, high[i].y};
    const uint32_t second[4] = {low[i].z, high[i].z, low[i].w, high[i].w};
#pragma unroll
    for (int n = 0; n < kValueTiles; ++n) {
      mma_16816<T>(acc[n], first, w[i][n].x, w[i][n].y);
      mma_16816<T>(acc[n], second, w[i][n].z, w[i][n].w);
    }
  }
#pragma unroll
  for (int n = 0; n < kValueTiles; ++n) {
    partial[warp][g][n * 8 + 2 * c] = acc[n][0];
    partial[warp][g][n * 8 + 2 * c + 1] = acc[n][1];
    partial[warp][g + 8][n * 8 + 2 * c] = acc[n][2];
    partial[warp][g + 8][n * 8 + 2 * c + 1] = acc[n][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kValueRows * kValueOutputs; i += kValueWarps * 32) {
    const int r = i / kValueOutputs, j = i % kValueOutputs;
    const int output = first_output + j;
    if (r >= block_rows || output >= head_dim) continue;
    float sum = bias != nullptr ? to_float(bias[head * head_dim + output]) : 0.0f;
#pragma unroll
    for (int w = 0; w < kValueWarps; ++w) sum += partial[w][r][j];
    context[(first_row + r) * context_stride + head * head_dim + output] = from_float<T>(sum);
  }
}

// ---- frame_attention ---------------------------------------------------------------------------

constexpr int kFrameWarps = 8;
constexpr int kFrameThreads = kFrameWarps * 32;
constexpr int kFrameTile = 32;  // frames a tile: two mma row blocks, a frame per lane in softmax
constexpr int kFrameBlocks = kFrameTile / 16;
constexpr int kFrameStages = 2;
constexpr int kMaxHeadTiles = 3;
static_assert(kMaxFrameHeads == 8 * kMaxHeadTiles);
constexpr int kMaxWidthTiles = 10;  // 16-wide column tiles a warp: width ≤ 8 · 16 · 10 = 1280
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

  write_frame_attention<T, kFrameThreads>(output, output_pitch, final_max, final_sum, coefficients,
                                          cta_heads, width,
                                          out + (row * heads + first_head) * width);
}

// ---- quantize_frames ---------------------------------------------------------------------------
//
// Two passes over a window: each channel's largest magnitude (a CTA per 64 channels, its 8 warps
// on every 8th frame, a lane on 2 channels: 128-byte rows), then a warp per frame for its scale
// and codes.

constexpr int kChannelWarps = 8;
constexpr int kChannelsPerCta = 64;

template <class T>
__global__ void __launch_bounds__(kChannelWarps * 32)
    frame_channel_scales_kernel(const T* __restrict__ frames, int frame_count, int width,
                                float* __restrict__ channel_scales) {
  __shared__ float2 partial[kChannelWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t window = blockIdx.y;
  const int channel = blockIdx.x * kChannelsPerCta + 2 * lane;
  const bool real = channel < width;
  const T* x = frames + window * frame_count * width + (real ? channel : 0);
  float2 largest = {0.0f, 0.0f};
  for (int t = warp; t < frame_count; t += kChannelWarps) {
    const float2 pair = unpack_pair<T>(*reinterpret_cast<const uint32_t*>(x + int64_t{t} * width));
    largest.x = fmaxf(largest.x, fabsf(pair.x));
    largest.y = fmaxf(largest.y, fabsf(pair.y));
  }
  partial[warp][lane] = largest;
  __syncthreads();
  if (warp != 0 || !real) return;
  for (int w = 1; w < kChannelWarps; ++w) {
    largest.x = fmaxf(largest.x, partial[w][lane].x);
    largest.y = fmaxf(largest.y, partial[w][lane].y);
  }
  float* const out = channel_scales + window * width + channel;
  out[0] = largest.x > 0.0f ? largest.x : 1.0f;
  out[1] = largest.y > 0.0f ? largest.y : 1.0f;
}

constexpr int kCodeWarps = 8;

template <class T>
__global__ void __launch_bounds__(kCodeWarps * 32)
    frame_codes_kernel(const T* __restrict__ frames, int64_t frame_rows, int frame_count, int width,
                       const float* __restrict__ channel_scales, uint8_t* __restrict__ codes,
                       float* __restrict__ frame_scales) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t{blockIdx.x} * kCodeWarps + threadIdx.x / 32;
  if (row >= frame_rows) return;
  const T* const x = frames + row * width;
  const float* const scales = channel_scales + (row / frame_count) * width;
  // Pass 1: the frame's largest |x / channel scale|; pass 2 reads x again (from L1) to code it.
  float largest = 0.0f;
  for (int column = 8 * lane; column < width; column += 8 * 32) {
    float values[8];
    load_pack<8>(x + column, values);
#pragma unroll
    for (int i = 0; i < 8; ++i) largest = fmaxf(largest, fabsf(values[i]) / scales[column + i]);
  }
  largest = warp_max(largest);
  const float frame_scale = largest > 0.0f ? largest : 1.0f;
  if (lane == 0) frame_scales[row] = frame_scale;
  const float step = 127.0f / frame_scale;
  for (int column = 8 * lane; column < width; column += 8 * 32) {
    float values[8];
    load_pack<8>(x + column, values);
    uint32_t packed[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float scaled =
          fminf(fmaxf(rintf(values[i] / scales[column + i] * step), -127.0f), 127.0f);
      packed[i / 4] |= static_cast<uint32_t>(static_cast<int>(scaled) + 128) << (8 * (i % 4));
    }
    *reinterpret_cast<uint2*>(codes + row * width + column) = make_uint2(packed[0], packed[1]);
  }
}

}  // namespace

bool frame_attention_runs(Element e, int heads, int64_t width) {
  return (e == Element::f16 || e == Element::bf16) && heads > 0 && heads <= kMaxFrameHeads &&
         width > 0 && width % 16 == 0 && width <= kFrameWarps * 16 * kMaxWidthTiles &&
         width % heads == 0 && width / heads <= kMaxAbsorbHeadDim && width / heads % 16 == 0;
}

void absorb_query(Element e, const void* q, int64_t q_stride, int64_t rows, int heads, int head_dim,
                  const void* w_k, int64_t w_row_stride, int64_t width, float scale, void* out,
                  cudaStream_t stream) {
  if (rows <= 0) return;
  if (head_dim > kMaxAbsorbHeadDim || head_dim % 16 != 0) {
    fail("absorb_query: head_dim ", head_dim, " (a multiple of 16 up to 128)");
  }
  if (width % 16 != 0 || w_row_stride % 8 != 0 || q_stride % 8 != 0 || !aligned(w_k, 16) ||
      !aligned(q, 16) || !aligned(out, 16)) {
    fail("absorb_query: rows must be 16-byte aligned and a multiple of 16 values wide");
  }
  if (ceil_div(rows, kAbsorbRows) > 65535) fail("absorb_query: ", rows, " rows");
  const dim3 grid(static_cast<unsigned>(ceil_div(width, kAbsorbColumns)), heads,
                  static_cast<unsigned>(ceil_div(rows, kAbsorbRows)));
  with_16_bit_type(e, "absorb_query", [&](auto zero) {
    using T = decltype(zero);
    absorb_query_kernel<T><<<grid, kAbsorbWarps * 32, 0, stream>>>(
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

  with_16_bit_type(e, "frame_attention", [&](auto zero) {
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
  if (width % 16 != 0 || width > 32 * kValueWarps * kMaxValueChunks || w_row_stride % 8 != 0 ||
      !aligned(o, 16) || !aligned(w_v, 16)) {
    fail("absorb_values: rows must be 16-byte aligned, a multiple of 16 values wide, at most 1280");
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(head_dim, kValueOutputs)), heads,
                  static_cast<unsigned>(ceil_div(rows, kValueRows)));
  with_16_bit_type(e, "absorb_values", [&](auto zero) {
    using T = decltype(zero);
    absorb_values_kernel<T><<<grid, kValueWarps * 32, 0, stream>>>(
        static_cast<const T*>(o), static_cast<const T*>(w_v), w_row_stride,
        static_cast<const T*>(bias), static_cast<int>(rows), heads, head_dim, width,
        static_cast<T*>(context), context_stride);
  });
  check_launch("absorb_values");
}

void quantize_frames(Element e, const void* frames, int windows, int frame_count, int64_t width,
                     uint8_t* codes, float* frame_scales, float* channel_scales,
                     cudaStream_t stream) {
  if (windows <= 0 || frame_count <= 0) return;
  if (width % 8 != 0 || !aligned(frames, 16) || !aligned(codes, 8)) {
    fail("quantize_frames: rows must be a multiple of 8 values wide and aligned");
  }
  if (windows > 65535) fail("quantize_frames: ", windows, " windows (at most 65535 a launch)");
  with_16_bit_type(e, "quantize_frames", [&](auto zero) {
    using T = decltype(zero);
    const T* x = static_cast<const T*>(frames);
    frame_channel_scales_kernel<T>
        <<<dim3(static_cast<unsigned>(ceil_div(width, kChannelsPerCta)), windows),
           kChannelWarps * 32, 0, stream>>>(x, frame_count, static_cast<int>(width),
                                            channel_scales);
    const int64_t rows = int64_t{windows} * frame_count;
    frame_codes_kernel<T>
        <<<static_cast<unsigned>(ceil_div(rows, kCodeWarps)), kCodeWarps * 32, 0, stream>>>(
            x, rows, frame_count, static_cast<int>(width), channel_scales, codes, frame_scales);
  });
  check_launch("quantize_frames");
}

}  // namespace hark::compute::cuda
