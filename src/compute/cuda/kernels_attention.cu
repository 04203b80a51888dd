// Attention kernels: whole sequences (encoder, decoder prompt), one query per sequence (decode
// steps, over keys and values of the element type or INT8), the K/V cache append, and the INT8
// quantisation of keys and values and its inverse.
//
// `attention` takes one of three paths. On Hopper, F16/BF16 with head_dim 64, no mask and at
// least 128 queries (Whisper's encoder) runs flash_attention_sm90 (attention_sm90.h, wgmma).
// Otherwise, F16/BF16 with head_dim 64 or 128 and 16-byte aligned rows (every real Whisper
// layer) runs a flash-attention-2 style kernel on the tensor cores
// (mma.sync m16n8k16, F32 accumulators, online softmax in F32). Everything else (F32, other head
// dims, odd strides) runs a plain F32 kernel that tiles keys through shared memory: slower, but it
// computes in F32 throughout, so F32 results stay within rounding of a double reference.
//
// `decode_attention` reads the sequence lengths on the device, so its grid cannot depend on them.
// When there are too few (sequence, head) pairs to fill the GPU, the keys of each pair are split
// among the CTAs of one thread-block cluster, and the partial softmax states are combined through
// distributed shared memory: one kernel, no scratch memory, capturable in a CUDA Graph.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "compute/cuda/attention_sm90.h"
#include "compute/cuda/decode_attention.cuh"
#include "compute/cuda/decode_attention_staged_sm90.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/kernels.h"
#include "compute/cuda/tensor_core.cuh"
#include "format/quant.h"

namespace hark::compute::cuda {

namespace {

// kDims consecutive elements as raw bits: 8 of F32, F16 or BF16 (32 or 16 bytes), 8 of INT8
// (8 bytes) or 16 of INT8 (16 bytes). Loaded as whole vectors when kVector (aligned to them),
// element by element otherwise; kept raw until used, so that loads for the next keys can be in
// flight in few registers.
template <class T, int kDims>
struct Chunk {
  static_assert(kDims == 8, "16 values a chunk are for INT8 only");
  uint4 bits[sizeof(T) / 2];
};
template <>
struct Chunk<int8_t, 8> {
  uint2 bits;
};
template <>
struct Chunk<int8_t, 16> {
  uint4 bits;
};

template <bool kVector, int kDims, class T>
__device__ __forceinline__ Chunk<T, kDims> load_chunk(const T* p) {
  Chunk<T, kDims> chunk;
  if constexpr (kVector && sizeof(T) == 1) {
    using Vector = decltype(chunk.bits);
    chunk.bits = *reinterpret_cast<const Vector*>(p);
  } else if constexpr (kVector) {
#pragma unroll
    for (size_t i = 0; i < sizeof(T) / 2; ++i) chunk.bits[i] = reinterpret_cast<const uint4*>(p)[i];
  } else {
    T elements[kDims];
#pragma unroll
    for (int i = 0; i < kDims; ++i) elements[i] = p[i];
    memcpy(&chunk, elements, sizeof chunk);
  }
  return chunk;
}

__device__ __forceinline__ void to_floats(const Chunk<float, 8>& chunk, float (&x)[8]) {
  memcpy(x, &chunk, sizeof x);
}
template <class Half2, class Convert>
__device__ __forceinline__ void halves_to_floats(const uint4& bits, float (&x)[8],
                                                 Convert convert) {
  Half2 pairs[4];
  memcpy(pairs, &bits, sizeof pairs);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = convert(pairs[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void to_floats(const Chunk<__half, 8>& chunk, float (&x)[8]) {
  halves_to_floats<__half2>(chunk.bits[0], x, [](__half2 h) { return __half22float2(h); });
}
__device__ __forceinline__ void to_floats(const Chunk<__nv_bfloat16, 8>& chunk, float (&x)[8]) {
  halves_to_floats<__nv_bfloat162>(chunk.bits[0], x,
                                   [](__nv_bfloat162 h) { return __bfloat1622float2(h); });
}
// INT8 values as they are stored (the caller applies their scale).
template <int kDims>
__device__ __forceinline__ void to_floats(const Chunk<int8_t, kDims>& chunk, float (&x)[kDims]) {
  uint32_t words[kDims / 4];
  memcpy(words, &chunk.bits, sizeof words);
#pragma unroll
  for (int i = 0; i < kDims / 4; ++i) int8x4_to_floats(words[i], x + 4 * i);
}

// ---- flash attention on the tensor cores ------------------------------------------------------
//
// One CTA per (128 queries, head, sequence). Each warp owns 16 · kRowBlocks query rows. Key/value
// tiles of 64 rows are staged in shared memory by cp.async, double-buffered so that the next tile
// loads while this one is used. Per tile, each warp computes S = Q·Kᵀ into registers, updates the
// running row maxima and sums, turns S into P in place (the accumulator layout of S is the
// A-operand layout of P·V, so P never leaves registers), and adds P·V into its output rows.
// Two row blocks per warp (head_dim 64) let every K/V fragment read from shared memory feed two
// products, which keeps the kernel bound by the tensor cores rather than by shared memory. On an
// H200 (Whisper large-v3's encoder shape: 16 windows × 20 heads × 1500²) it runs at about 275
// TFLOP/s for head_dim 64 and 235 for 128; the F32 generic kernel below, about 14.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, c = lane % 4): A registers hold (row g, cols
// 2c, 2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..); B registers hold (rows 2c, 2c+1, col g),
// (rows 2c+8.., col g); C holds (g, 2c..), (g+8, 2c..).

constexpr int kFlashRows = 128;
constexpr int kFlashKeys = 64;

// Relative positions (kRelative): a key tile of the CTA's 128 queries needs the projected
// position rows of kFlashRows + kFlashKeys − 1 relative positions, and the next tile those 64
// further on. They stay in a ring of kRingRows rows in shared memory: each key tile loads the 64
// it adds, with its keys and values, into the rows that the tile before last has finished with.
constexpr int kRingRows = 256;
static_assert(kRingRows >= kFlashRows + 2 * kFlashKeys, "a tile's band and the next one's rows");

template <int kHeadDim, bool kRelative = false>
struct FlashShape {
  // head_dim 128 needs twice the accumulators per row, so it takes one row block per warp.
  static constexpr int kRowBlocks = kHeadDim == 64 ? 2 : 1;
  static constexpr int kWarps = kFlashRows / (16 * kRowBlocks);
  static constexpr int kThreads = kWarps * 32;
  // With relative positions, head_dim 64 needs more shared memory than two CTAs of an SM have.
  static constexpr int kBlocksPerSm = kHeadDim == 64 && !kRelative ? 2 : 1;
  // 16 bytes of padding per row: ldmatrix then reads 8 rows from 8 different bank quads.
  static constexpr int kStride = kHeadDim + 8;
  // A warp's rows see kBandTiles8 · 8 relative positions per key tile (its 16 · kRowBlocks rows
  // and the tile's 64 keys span 16 · kRowBlocks + 63); their scores go through shared memory
  // (F32, rows of kBandStride: the shifted reads of the scores' owners then meet at most two to
  // a bank).
  static constexpr int kBandTiles8 = (16 * kRowBlocks + kFlashKeys) / 8;
  static constexpr int kBandStride = kBandTiles8 * 8 + 8;
  static constexpr size_t kSharedBytes =
      size_t{kFlashRows + 4 * kFlashKeys + (kRelative ? kRingRows : 0)} * kStride * 2 +
      (kRelative ? size_t{kFlashRows} * kBandStride * sizeof(float) : 0);
};

// The projected position table (RelativePositions) as the kernel reads it.
template <class T>
struct PositionTable {
  const T* rows;
  int64_t row_stride;
  int steps;
};

// Adds one head's query bias (its columns) to a warp's A fragments of Q, each sum rounded to T
// as a query loaded from memory is: per 16-column step, registers 0 and 1 hold columns 2c and
// 2c + 1 (rows g and g + 8), registers 2 and 3 columns 2c + 8 and 2c + 9 (c = pair). Once per
// block, so the bias costs the kernel nothing per key tile.
template <class T, int kRowBlocks, int kDimSteps>
__device__ __forceinline__ void add_query_bias(uint32_t (&fragments)[kRowBlocks][kDimSteps][4],
                                               const T* bias, int pair) {
#pragma unroll
  for (int step = 0; step < kDimSteps; ++step) {
    const T* columns = bias + step * 16 + pair * 2;
    const float2 low = unpack_pair<T>(*reinterpret_cast<const uint32_t*>(columns));
    const float2 high = unpack_pair<T>(*reinterpret_cast<const uint32_t*>(columns + 8));
#pragma unroll
    for (int rb = 0; rb < kRowBlocks; ++rb) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float2 add = r < 2 ? low : high;
        const float2 value = unpack_pair<T>(fragments[rb][step][r]);
        fragments[rb][step][r] = pack_pair<T>(value.x + add.x, value.y + add.y);
      }
    }
  }
}

// With kRelative, each score q·k gets its relative-position score q·p added first (q as loaded,
// before any query bias; p the table's row steps − 1 − i + j): per key tile, each warp multiplies
// its queries with the band of position rows its scores need (on the tensor cores, like Q·Kᵀ),
// and picks the shifted diagonal out of the products through shared memory. The relative shift
// happens in that read, and the [queries, 2·steps − 1] matrix of position scores never exists.
// With `lengths` (null: q_len and kv_len for every sequence), sequence b has lengths[b] valid
// queries and keys, and its query rows from there to q_len are written as zeros. With
// `query_bias` (null: none), row h of it is added to the queries of head h (add_query_bias).
template <class T, int kHeadDim, bool kRelative>
__global__ void __launch_bounds__(FlashShape<kHeadDim, kRelative>::kThreads,
                                  FlashShape<kHeadDim, kRelative>::kBlocksPerSm)
    flash_attention_kernel(const T* __restrict__ q, int64_t q_row_stride, int64_t q_batch_stride,
                           const T* __restrict__ k, const T* __restrict__ v, int64_t kv_row_stride,
                           int64_t kv_batch_stride, T* __restrict__ out, int64_t out_row_stride,
                           int64_t out_batch_stride, int q_len, int kv_len,
                           const int32_t* __restrict__ lengths, const int32_t* __restrict__ starts,
                           PositionTable<T> positions, const T* __restrict__ query_bias,
                           float scale_log2, bool causal) {
  using Shape = FlashShape<kHeadDim, kRelative>;
  constexpr int kRowBlocks = Shape::kRowBlocks;
  constexpr int kThreads = Shape::kThreads;
  constexpr int kStride = Shape::kStride;
  constexpr int kChunks = kHeadDim / 8;  // 16-byte pieces of a row
  constexpr int kDimSteps = kHeadDim / 16;
  constexpr int kKeyTiles8 = kFlashKeys / 8;
  constexpr int kDimTiles8 = kHeadDim / 8;

  extern __shared__ uint4 flash_shared[];
  T* const q_tile = reinterpret_cast<T*>(flash_shared);   // [kFlashRows][kStride]
  T* const k_tiles = q_tile + kFlashRows * kStride;       // [2][kFlashKeys][kStride]
  T* const v_tiles = k_tiles + 2 * kFlashKeys * kStride;  // [2][kFlashKeys][kStride]
  // With kRelative: [kRingRows][kStride], position rows (see below); then, per warp,
  // [16 · kRowBlocks][kBandStride] F32 scores of its queries against its band of positions.
  T* const position_ring = v_tiles + 2 * kFlashKeys * kStride;
  float* const band_scores = reinterpret_cast<float*>(position_ring + kRingRows * kStride);

  const int first_query = blockIdx.x * kFlashRows;
  const int head = blockIdx.y, sequence = blockIdx.z;
  // The rows that hold this sequence: padded, q_len (those past its length are written as
  // zeros); packed (starts), only its valid ones, which begin at starts[sequence] in every tensor,
  // so that a tile past them has nothing to do (the whole block returns at once).
  const int rows = starts != nullptr ? min(q_len, static_cast<int>(lengths[sequence])) : q_len;
  if (first_query >= rows) return;
  const int64_t first_row = starts != nullptr ? starts[sequence] : 0;
  const int64_t batch_offset = starts != nullptr ? 0 : sequence;
  q += batch_offset * q_batch_stride + first_row * q_row_stride + head * kHeadDim;
  k += batch_offset * kv_batch_stride + first_row * kv_row_stride + head * kHeadDim;
  v += batch_offset * kv_batch_stride + first_row * kv_row_stride + head * kHeadDim;
  out += batch_offset * out_batch_stride + first_row * out_row_stride + head * kHeadDim;
  if constexpr (kRelative) positions.rows += head * kHeadDim;
  if (lengths != nullptr) {
    q_len = min(q_len, static_cast<int>(lengths[sequence]));
    kv_len = min(kv_len, static_cast<int>(lengths[sequence]));
  }

  // Causal: query i sees keys j ≤ i + offset. A tile of padding rows reads no keys.
  const int offset = kv_len - q_len;
  const int kv_end = first_query >= q_len ? 0
                     : causal             ? min(kv_len, first_query + kFlashRows + offset)
                                          : kv_len;
  const int tiles = kv_end > 0 ? (kv_end + kFlashKeys - 1) / kFlashKeys : 0;

  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;

  for (int piece = thread; piece < kFlashRows * kChunks; piece += kThreads) {
    const int row = piece / kChunks, column = piece % kChunks * 8;
    const bool inside = first_query + row < q_len;
    copy_async_16(q_tile + row * kStride + column,
                  q + (inside ? first_query + row : 0) * q_row_stride + column, inside);
  }
  // Key tile t of the CTA's queries needs the position rows from first_position + 64·t, for
  // its last query and first key, through kFlashRows + kFlashKeys − 1 of them, for its first
  // query and last key. Row first_position + x sits in ring row x % kRingRows: rows 0-127 come
  // with the queries, and each key tile loads the 64 after its band's first 128. Rows outside
  // the table (for padding queries or keys) are zeros.
  const int first_position = positions.steps - 1 - (first_query + kFlashRows - 1);
  auto load_positions = [&](int first, int count) {
    for (int piece = thread; piece < count * kChunks; piece += kThreads) {
      const int x = first + piece / kChunks, column = piece % kChunks * 8;
      const int64_t position = int64_t{first_position} + x;
      const bool inside = position >= 0 && position < 2 * int64_t{positions.steps} - 1;
      copy_async_16(position_ring + (x % kRingRows) * kStride + column,
                    positions.rows + (inside ? position : 0) * positions.row_stride + column,
                    inside);
    }
  };
  if constexpr (kRelative) load_positions(0, kFlashRows);
  auto load_keys = [&](int tile, int buffer) {
    const int first_key = tile * kFlashKeys;
    for (int piece = thread; piece < kFlashKeys * kChunks; piece += kThreads) {
      const int row = piece / kChunks, column = piece % kChunks * 8;
      const bool inside = first_key + row < kv_len;
      const int64_t source = (inside ? first_key + row : 0) * kv_row_stride + column;
      const int target = (buffer * kFlashKeys + row) * kStride + column;
      copy_async_16(k_tiles + target, k + source, inside);
      copy_async_16(v_tiles + target, v + source, inside);
    }
    // The ring rows this tile loads were last read by the tile before last.
    if constexpr (kRelative) load_positions(first_key + kFlashRows, kFlashKeys);
  };
  if (tiles > 0) load_keys(0, 0);
  copy_async_commit();

  const int group = lane / 4, pair = lane % 4;
  const int warp_row = warp * 16 * kRowBlocks;  // within the CTA's rows
  // This thread's query rows: warp_row + 16 · block + group (+ 8).
  const int row_base = first_query + warp_row + group;
  // ldmatrix row addresses: lane gives row (lane % 8) of matrix lane / 8.
  const int matrix = lane / 8, matrix_row = lane % 8;

  uint32_t q_fragments[kRowBlocks][kDimSteps][4];
  float output[kRowBlocks][kDimTiles8][4];
  float row_max[kRowBlocks][2];  // of the raw scores q·k
  float row_sum[kRowBlocks][2];  // this thread's share; the row's four lanes add up at the end
#pragma unroll
  for (int rb = 0; rb < kRowBlocks; ++rb) {
#pragma unroll
    for (int n = 0; n < kDimTiles8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) output[rb][n][e] = 0.0f;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) row_max[rb][r] = -INFINITY, row_sum[rb][r] = 0.0f;
  }

  for (int tile = 0; tile < tiles; ++tile) {
    const int buffer = tile & 1;
    if (tile + 1 < tiles) {
      load_keys(tile + 1, buffer ^ 1);
      copy_async_commit();
      copy_async_wait<1>();
    } else {
      copy_async_wait<0>();
    }
    __syncthreads();

    if (tile == 0) {
      // A fragments of Q: matrices (rows 0-7, dims d), (rows 8-15, d), (0-7, d+8), (8-15, d+8).
#pragma unroll
      for (int rb = 0; rb < kRowBlocks; ++rb) {
#pragma unroll
        for (int step = 0; step < kDimSteps; ++step) {
          load_matrix_x4(q_fragments[rb][step],
                         q_tile + (warp_row + rb * 16 + matrix_row + (matrix & 1) * 8) * kStride +
                             step * 16 + (matrix >> 1) * 8);
        }
      }
      if (query_bias != nullptr) {
        add_query_bias<T>(q_fragments, query_bias + int64_t{head} * kHeadDim, pair);
      }
    }
    const T* const k_tile = k_tiles + buffer * kFlashKeys * kStride;
    const T* const v_tile = v_tiles + buffer * kFlashKeys * kStride;

    // Relative positions, before Q·Kᵀ so that the scores' registers are not live yet. The warp's
    // band: its row ρ (of 16 · kRowBlocks) and the tile's key κ need position column
    // (16 · kRowBlocks − 1 − ρ) + κ of it, the band starting band_first positions into the
    // tile's (first_position + first_key). The band's scores, from the queries as loaded
    // (without the query bias) and the ring's rows as B fragments (the same matrices as for Kᵀ),
    // go to the warp's shared scores; the products of all its 8-position tiles are in flight at
    // once (a chain of dependent products per tile otherwise waits on each one's latency).
    constexpr int kWarpRows = 16 * kRowBlocks;
    [[maybe_unused]] float* const band = band_scores + warp * kWarpRows * Shape::kBandStride;
    if constexpr (kRelative) {
      const int band_first = tile * kFlashKeys + kFlashRows - warp_row - kWarpRows;
#pragma unroll
      for (int rb = 0; rb < kRowBlocks; ++rb) {
        float products[Shape::kBandTiles8][4] = {};
#pragma unroll
        for (int step = 0; step < kDimSteps; ++step) {
          uint32_t a[4];
          load_matrix_x4(a, q_tile +
                                (warp_row + rb * 16 + matrix_row + (matrix & 1) * 8) * kStride +
                                step * 16 + (matrix >> 1) * 8);
#pragma unroll
          for (int n = 0; n < Shape::kBandTiles8; n += 2) {
            const int x = band_first + n * 8 + matrix_row + (matrix >> 1) * 8;
            uint32_t b[4];
            load_matrix_x4(
                b, position_ring + (x % kRingRows) * kStride + step * 16 + (matrix & 1) * 8);
            mma_16816<T>(products[n], a, b[0], b[1]);
            mma_16816<T>(products[n + 1], a, b[2], b[3]);
          }
        }
#pragma unroll
        for (int n = 0; n < Shape::kBandTiles8; ++n) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            *reinterpret_cast<float2*>(band + (rb * 16 + group + 8 * r) * Shape::kBandStride +
                                       n * 8 + 2 * pair) =
                make_float2(products[n][2 * r], products[n][2 * r + 1]);
          }
        }
      }
    }

    // S = Q·Kᵀ. B fragments of Kᵀ come from K rows: matrices (keys 0-7, dims d), (keys 0-7,
    // d+8), (keys 8-15, d), (keys 8-15, d+8) serve two 8-key column tiles at once.
    float scores[kRowBlocks][kKeyTiles8][4];
#pragma unroll
    for (int rb = 0; rb < kRowBlocks; ++rb) {
#pragma unroll
      for (int n = 0; n < kKeyTiles8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) scores[rb][n][e] = 0.0f;
      }
    }
#pragma unroll
    for (int step = 0; step < kDimSteps; ++step) {
#pragma unroll
      for (int n = 0; n < kKeyTiles8; n += 2) {
        uint32_t b[4];
        load_matrix_x4(b, k_tile + (n * 8 + matrix_row + (matrix >> 1) * 8) * kStride + step * 16 +
                              (matrix & 1) * 8);
#pragma unroll
        for (int rb = 0; rb < kRowBlocks; ++rb) {
          mma_16816<T>(scores[rb][n], q_fragments[rb][step], b[0], b[1]);
          mma_16816<T>(scores[rb][n + 1], q_fragments[rb][step], b[2], b[3]);
        }
      }
    }

    const int first_key = tile * kFlashKeys;
    if constexpr (kRelative) {
      __syncwarp();
      // This thread's scores: keys 8n + 2·pair (+1) of rows ρ = 16·rb + group (+8).
#pragma unroll
      for (int rb = 0; rb < kRowBlocks; ++rb) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int rho = rb * 16 + group + 8 * r;
          const float* const diagonal =
              band + rho * Shape::kBandStride + (kWarpRows - 1 - rho) + 2 * pair;
#pragma unroll
          for (int n = 0; n < kKeyTiles8; ++n) {
            scores[rb][n][2 * r] += diagonal[n * 8];
            scores[rb][n][2 * r + 1] += diagonal[n * 8 + 1];
          }
        }
      }
    }

    // Mask keys past the end and, for causal, past the diagonal.
    if (first_key + kFlashKeys > kv_len ||
        (causal && first_key + kFlashKeys - 1 > first_query + warp_row + offset)) {
#pragma unroll
      for (int rb = 0; rb < kRowBlocks; ++rb) {
#pragma unroll
        for (int n = 0; n < kKeyTiles8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = first_key + n * 8 + pair * 2 + (e & 1);
            const int row = row_base + rb * 16 + (e >> 1) * 8;
            if (key >= kv_len || (causal && key > row + offset)) scores[rb][n][e] = -INFINITY;
          }
        }
      }
    }

    // Online softmax per row (r = 0: row g, registers 0-1; r = 1: row g+8, registers 2-3), on raw
    // scores: scale > 0, so p = 2^(scale·log2(e)·(s − max)) is one FMA and one exp2.
#pragma unroll
    for (int rb = 0; rb < kRowBlocks; ++rb) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int n = 0; n < kKeyTiles8; ++n) {
          tile_max = fmaxf(tile_max, fmaxf(scores[rb][n][2 * r], scores[rb][n][2 * r + 1]));
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float new_max = fmaxf(row_max[rb][r], tile_max);
        const float reference = exp_reference(new_max) * scale_log2;
        const float rescale = fast_exp2(row_max[rb][r] * scale_log2 - reference);
        row_max[rb][r] = new_max;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kKeyTiles8; ++n) {
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            scores[rb][n][e] = fast_exp2(scores[rb][n][e] * scale_log2 - reference);
            sum += scores[rb][n][e];
          }
        }
        row_sum[rb][r] = row_sum[rb][r] * rescale + sum;
#pragma unroll
        for (int n = 0; n < kDimTiles8; ++n) {
          output[rb][n][2 * r] *= rescale;
          output[rb][n][2 * r + 1] *= rescale;
        }
      }
    }

    // O += P·V. The A fragment of P for keys 16s..16s+15 is the C fragments of key tiles 2s and
    // 2s+1; B fragments of V come transposed from V rows: matrices (keys 0-7, dims d), (keys
    // 8-15, d), (keys 0-7, d+8), (keys 8-15, d+8) serve two 8-dim column tiles at once.
#pragma unroll
    for (int step = 0; step < kFlashKeys / 16; ++step) {
      uint32_t p[kRowBlocks][4];
#pragma unroll
      for (int rb = 0; rb < kRowBlocks; ++rb) {
        const float(&s)[kKeyTiles8][4] = scores[rb];
        p[rb][0] = pack_pair<T>(s[2 * step][0], s[2 * step][1]);
        p[rb][1] = pack_pair<T>(s[2 * step][2], s[2 * step][3]);
        p[rb][2] = pack_pair<T>(s[2 * step + 1][0], s[2 * step + 1][1]);
        p[rb][3] = pack_pair<T>(s[2 * step + 1][2], s[2 * step + 1][3]);
      }
#pragma unroll
      for (int n = 0; n < kDimTiles8; n += 2) {
        uint32_t b[4];
        load_matrix_x4_transposed(b, v_tile +
                                         (step * 16 + matrix_row + (matrix & 1) * 8) * kStride +
                                         n * 8 + (matrix >> 1) * 8);
#pragma unroll
        for (int rb = 0; rb < kRowBlocks; ++rb) {
          mma_16816<T>(output[rb][n], p[rb], b[0], b[1]);
          mma_16816<T>(output[rb][n + 1], p[rb], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // everyone is done with this buffer before the next load overwrites it
  }
  copy_async_wait<0>();  // no tiles at all: the Q copies are still outstanding

#pragma unroll
  for (int rb = 0; rb < kRowBlocks; ++rb) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[rb][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = row_base + rb * 16 + r * 8;
      if (row >= rows) continue;
      // A row without keys, or one of padding, gets zeros.
      const float inverse = sum > 0.0f && row < q_len ? 1.0f / sum : 0.0f;
      T* const target = out + row * out_row_stride + pair * 2;
#pragma unroll
      for (int n = 0; n < kDimTiles8; ++n) {
        *reinterpret_cast<uint32_t*>(target + n * 8) =
            pack_pair<T>(output[rb][n][2 * r] * inverse, output[rb][n][2 * r + 1] * inverse);
      }
    }
  }
}

// ---- generic attention (any element type, head_dim a multiple of 8 up to 128) -----------------
//
// One CTA per (32 queries, head, sequence), 4 warps of 8 queries. Per 32-key tile, K and V are
// converted to F32 in shared memory; lane j scores key j against the warp's 8 queries, the warp
// updates its running softmax, and each lane accumulates the output dims lane, lane + 32, ...

constexpr int kGenericQueries = 32;
constexpr int kGenericKeys = 32;
constexpr int kGenericWarps = 4;
constexpr int kQueriesPerWarp = kGenericQueries / kGenericWarps;

constexpr size_t generic_shared_floats(int head_dim) {
  // Q [32][D], K [32][D + 4] (the padding keeps 16-byte row reads of 8 lanes on distinct banks),
  // V [32][D], P [warps][32 keys][8 queries].
  return size_t{kGenericQueries} * head_dim + size_t{kGenericKeys} * (head_dim + 4) +
         size_t{kGenericKeys} * head_dim + size_t{kGenericWarps} * kGenericKeys * kQueriesPerWarp;
}

template <class T>
__global__ void __launch_bounds__(kGenericWarps * 32)
    attention_generic_kernel(const T* __restrict__ q, int64_t q_row_stride, int64_t q_batch_stride,
                             const T* __restrict__ k, const T* __restrict__ v,
                             int64_t kv_row_stride, int64_t kv_batch_stride, T* __restrict__ out,
                             int64_t out_row_stride, int64_t out_batch_stride, int head_dim,
                             int q_len, int kv_len, float scale, bool causal) {
  const int dims = head_dim;
  const int key_stride = dims + 4;
  extern __shared__ float4 generic_shared[];
  float* const q_tile = reinterpret_cast<float*>(generic_shared);
  float* const k_tile = q_tile + kGenericQueries * dims;
  float* const v_tile = k_tile + kGenericKeys * key_stride;
  float* const p_tile = v_tile + kGenericKeys * dims;

  const int first_query = blockIdx.x * kGenericQueries;
  const int head = blockIdx.y, sequence = blockIdx.z;
  q += sequence * q_batch_stride + head * dims;
  k += sequence * kv_batch_stride + head * dims;
  v += sequence * kv_batch_stride + head * dims;
  out += sequence * out_batch_stride + head * dims;

  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  for (int i = thread; i < kGenericQueries * dims; i += kGenericWarps * 32) {
    const int row = i / dims, dim = i - row * dims;
    const int query = first_query + row;
    q_tile[i] = query < q_len ? to_float(q[query * q_row_stride + dim]) * scale : 0.0f;
  }

  const int offset = kv_len - q_len;
  const int kv_end = causal ? min(kv_len, first_query + kGenericQueries + offset) : kv_len;
  const int warp_first_query = first_query + warp * kQueriesPerWarp;

  float row_max[kQueriesPerWarp], lane_sum[kQueriesPerWarp], output[kQueriesPerWarp][4];
#pragma unroll
  for (int i = 0; i < kQueriesPerWarp; ++i) {
    row_max[i] = -INFINITY;
    lane_sum[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) output[i][c] = 0.0f;
  }

  for (int first_key = 0; first_key < kv_end; first_key += kGenericKeys) {
    __syncthreads();  // the last tile's readers are done (first pass: Q is stored)
    for (int i = thread; i < kGenericKeys * dims; i += kGenericWarps * 32) {
      const int row = i / dims, dim = i - row * dims;
      const int key = first_key + row;
      const bool inside = key < kv_len;
      k_tile[row * key_stride + dim] = inside ? to_float(k[key * kv_row_stride + dim]) : 0.0f;
      v_tile[i] = inside ? to_float(v[key * kv_row_stride + dim]) : 0.0f;
    }
    __syncthreads();

    float scores[kQueriesPerWarp] = {};
    const float4* const key_row = reinterpret_cast<const float4*>(k_tile + lane * key_stride);
    const float4* const queries =
        reinterpret_cast<const float4*>(q_tile + warp * kQueriesPerWarp * dims);
    for (int d4 = 0; d4 < dims / 4; ++d4) {
      const float4 kx = key_row[d4];
#pragma unroll
      for (int i = 0; i < kQueriesPerWarp; ++i) {
        const float4 qx = queries[i * (dims / 4) + d4];
        scores[i] += qx.x * kx.x + qx.y * kx.y + qx.z * kx.z + qx.w * kx.w;
      }
    }

    const int key = first_key + lane;
    float* const p_warp = p_tile + warp * kGenericKeys * kQueriesPerWarp;
#pragma unroll
    for (int i = 0; i < kQueriesPerWarp; ++i) {
      const bool visible = key < kv_len && (!causal || key <= warp_first_query + i + offset);
      const float score = visible ? scores[i] : -INFINITY;
      const float new_max = fmaxf(row_max[i], warp_max(score));
      const float reference = exp_reference(new_max);
      const float rescale = expf(row_max[i] - reference);
      const float p = expf(score - reference);
      row_max[i] = new_max;
      lane_sum[i] = lane_sum[i] * rescale + p;
#pragma unroll
      for (int c = 0; c < 4; ++c) output[i][c] *= rescale;
      p_warp[lane * kQueriesPerWarp + i] = p;
    }
    __syncwarp();

    for (int j = 0; j < kGenericKeys; ++j) {
      const float4 p0 = reinterpret_cast<const float4*>(p_warp + j * kQueriesPerWarp)[0];
      const float4 p1 = reinterpret_cast<const float4*>(p_warp + j * kQueriesPerWarp)[1];
      const float p[kQueriesPerWarp] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int dim = lane + 32 * c;
        if (dim < dims) {
          const float vx = v_tile[j * dims + dim];
#pragma unroll
          for (int i = 0; i < kQueriesPerWarp; ++i) output[i][c] += p[i] * vx;
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kQueriesPerWarp; ++i) {
    const float sum = warp_sum(lane_sum[i]);
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int query = warp_first_query + i;
    if (query >= q_len) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int dim = lane + 32 * c;
      if (dim < dims) out[query * out_row_stride + dim] = from_float<T>(output[i][c] * inverse);
    }
  }
}

// ---- decode attention -------------------------------------------------------------------------
//
// Memory-bound: each step reads every cached key and value once. One CTA of 4 warps per (key
// split, head, sequence); the splits of one (sequence, head) form a cluster. Inside a CTA, each
// key is read by a group of lanes_per_key lanes (a power of two ≥ head_dim / 8), 8 dims per lane
// in 16-byte loads, so a warp reads several keys at once, and the next round of keys is loaded
// while this one is used. Every lane group ("slot") keeps its own running softmax state; the
// states are merged (lane groups, then warps, then the cluster's CTAs) only at the end.
//
// Splits: the fewest (a power of two, at most 8) that give about 256 CTAs. On an H200 this runs
// 1500 cross-attention keys per sequence at about 3 TB/s from batch 4 up, and a batch-1 step of
// 20 heads in about 6 µs; more splits cost more at short lengths than they gain at long ones.
//
// INT8 keys and values (Kv = int8_t) take the same path, 16 values a lane in 16-byte loads (half
// the lanes a key; 8 values in 8-byte loads where rows are not 16-byte aligned), each key's and
// value's scale loaded along with it: the scale multiplies the key's partial dot product and the
// value's softmax weight, so the dims themselves are only converted.
// On Hopper, from the batches where each (row, head) pair's keys would be split among at most 2
// CTAs (8 sequences of large-v3), group-major INT8 keys and values take a staged form instead
// (decode_attention_staged_sm90.h): their rounds copied into shared memory by bulk copies.

// Where a decode step's keys and values lie: position t of head h of sequence b at row t, group
// h, block b of k and v in `strides` (kernels.h: Int8Strides), and for INT8 their scales, one per
// (position, head), likewise in k_scales and v_scales.
struct KvPlaces {
  Int8Strides strides;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  int queries_per_sequence = 1;  // query rows b · this … (b + 1) · this − 1 read sequence b
};

// ---- The query inside the attention (AttentionQuery, kernels.h) ------------------------------
//
// A cross-attention's query is the one input of a decode step's attention that the kernel before
// writes; with it computed here, the step has one launch fewer a layer, and q no round trip through
// memory. The CTAs of a (sequence, head) cluster each compute head_dim / splits of the head's rows:
// W's loads first (no kernel writes it, so they go out before the wait for the kernel before),
// then, after the wait, the first round of keys and values (whose latency the query's chain then
// hides), then the normalised row of x, staged in shared memory, then a warp a row, its lanes
// striding d. Large-v3, H200: the step at batch 1 / 4 took 1.508 / 1.945 ms with the query's own
// launch and 1.462 / 1.821 with it here (bench/RESULTS.md, twenty-third session).

// The fused query's inputs as the kernel reads them; x null: the kernel reads q instead. W is w,
// or for Q8_0 weights quants and scales (the device layout, kernels.h).
template <class T>
struct QueryProduct {
  const T* x = nullptr;
  const T* gamma = nullptr;
  const T* beta = nullptr;
  const T* w = nullptr;
  const int8_t* quants = nullptr;
  const __half* scales = nullptr;
  const T* bias = nullptr;
  float eps = 0.0f;
  int d = 0;
};

constexpr int kQueryMaxDim = 1280;                         // Whisper large's d
constexpr int kQueryPacksPerLane = kQueryMaxDim / 8 / 32;  // 16-byte packs of a W row a lane
constexpr int kQueryPacksPerThread = ceil_div(kQueryMaxDim / 8, kDecodeThreads);  // of x
constexpr int kQueryMinSplits = 4;
constexpr int kQueryMaxHeadDim = 64;
constexpr int kQueryMaxRows = kQueryMaxHeadDim / kQueryMinSplits;  // a CTA's rows of the head
constexpr int kQueryRowsPerWarp = kQueryMaxRows / kDecodeWarps;
static_assert(kQueryMaxDim % (8 * 32) == 0, "whole packs a lane");

// A warp's share of W for the fused query: rows warp, warp + kDecodeWarps, … of the CTA's rows
// of the head, each lane's packs of them (8 values a pack; for Q8_0, x and y hold the pack's
// quants and z's low half its block's scale, converted only once the kernel has waited).
struct QueryWeights {
  uint4 packs[kQueryRowsPerWarp][kQueryPacksPerLane];
};

// The CTA's rows of the head's query are [split · rows, (split + 1) · rows), rows = head_dim /
// splits. Loads this warp's share of them: no kernel writes W, so this goes before the wait for
// the kernel before.
template <class T>
__device__ __forceinline__ void load_query_weights(const QueryProduct<T>& qp, int head,
                                                   int head_dim, int splits, int split,
                                                   QueryWeights& w) {
  constexpr int kP = 8;  // 16-bit values a pack
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows = head_dim / splits, packs = qp.d / kP;
  const int64_t first_row = int64_t{head} * head_dim + int64_t{split} * rows;
#pragma unroll
  for (int r = 0; r < kQueryRowsPerWarp; ++r) {
    const int local = warp + r * kDecodeWarps;
#pragma unroll
    for (int i = 0; i < kQueryPacksPerLane; ++i) {
      const int pack = lane + 32 * i;
      uint4& loaded = w.packs[r][i];
      loaded = make_uint4(0, 0, 0, 0);
      if (local >= rows || pack >= packs) continue;
      const int64_t at = (first_row + local) * qp.d + pack * kP;
      if (qp.quants == nullptr) {
        loaded = *reinterpret_cast<const uint4*>(qp.w + at);
      } else {
        const uint2 quants = *reinterpret_cast<const uint2*>(qp.quants + at);
        loaded.x = quants.x;
        loaded.y = quants.y;
        loaded.z = __half_as_ushort(qp.scales[at / static_cast<int64_t>(quant::kQ8BlockValues)]);
      }
    }
  }
}

// The CTA's rows of the head's query for query row `row` (after the wait), each rounded to T (as
// decode_linear stores q) and times `scale`, to query_rows. `staged` holds d values of T: the
// normalised row, rounded to T as decode_linear stages it.
template <class T>
__device__ void compute_query(const QueryProduct<T>& qp, const QueryWeights& w, int row, int head,
                              int head_dim, int splits, int split, float scale, T* staged,
                              float* query_rows, float* scratch) {
  constexpr int kP = 8;  // 16-bit values a pack
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows = head_dim / splits, packs = qp.d / kP;
  const int64_t first_row = int64_t{head} * head_dim + int64_t{split} * rows;

  // The row's statistics in F32, as decode_linear's staging computes them.
  float x[kQueryPacksPerThread][kP];
#pragma unroll
  for (int j = 0; j < kQueryPacksPerThread; ++j) {
    const int pack = threadIdx.x + j * kDecodeThreads;
#pragma unroll
    for (int i = 0; i < kP; ++i) x[j][i] = 0.0f;
    if (pack < packs) to_floats(load_chunk<true, kP>(qp.x + int64_t{row} * qp.d + pack * kP), x[j]);
  }
  const RowStatistics statistics = row_statistics(
      x, [&](int j) { return threadIdx.x + j * kDecodeThreads < packs; }, static_cast<float>(qp.d),
      qp.eps, [&](float value) { return block_sum(value, scratch); });
#pragma unroll
  for (int j = 0; j < kQueryPacksPerThread; ++j) {
    const int pack = threadIdx.x + j * kDecodeThreads;
    if (pack >= packs) continue;
    float gammas[kP], betas[kP];
    to_floats(load_chunk<true, kP>(qp.gamma + pack * kP), gammas);
    to_floats(load_chunk<true, kP>(qp.beta + pack * kP), betas);
#pragma unroll
    for (int i = 0; i < kP; ++i) {
      staged[pack * kP + i] =
          from_float<T>((x[j][i] - statistics.mean) * statistics.inverse * gammas[i] + betas[i]);
    }
  }
  __syncthreads();

#pragma unroll
  for (int r = 0; r < kQueryRowsPerWarp; ++r) {
    const int local = warp + r * kDecodeWarps;
    if (local >= rows) break;  // warp-uniform
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kQueryPacksPerLane; ++i) {
      const int pack = lane + 32 * i;
      if (pack >= packs) break;
      const uint4& loaded = w.packs[r][i];
      Chunk<T, kP> chunk;
      chunk.bits[0] = qp.quants == nullptr
                          ? loaded
                          : q8x8_times_scale<T>(loaded.x, loaded.y, __ushort_as_half(loaded.z));
      float weights[kP], values[kP];
      to_floats(chunk, weights);
      to_floats(load_chunk<true, kP>(staged + pack * kP), values);
#pragma unroll
      for (int k = 0; k < kP; ++k) dot = fmaf(weights[k], values[k], dot);
    }
    dot = warp_sum(dot);
    if (lane == 0) {
      if (qp.bias != nullptr) dot += to_float(qp.bias[first_row + local]);
      query_rows[local] = to_float(from_float<T>(dot)) * scale;
    }
  }
}

// INT8's 16 values a lane would take 168 registers, 3 CTAs an SM; held to 4 CTAs they fit in 128
// without spilling. Other types keep the compiler's own choice (0: no minimum), and so does the
// fused query (kQuery: query_product.x is set), whose launches are a few hundred CTAs.
template <class T, class Kv, bool kVector, int kDims, bool kQuery, bool kIntegers>
__global__ void __launch_bounds__(kDecodeThreads, std::is_same_v<Kv, int8_t> && !kQuery ? 4 : 0)
    decode_attention_kernel(const T* __restrict__ q, int64_t q_stride, const Kv* __restrict__ k,
                            const Kv* __restrict__ v, KvPlaces kv,
                            const int32_t* __restrict__ lengths, T* __restrict__ out,
                            int64_t out_stride, int head_dim, int lanes_per_key_log2, float scale,
                            const QueryProduct<T> query_product) {
  constexpr bool kInt8 = std::is_same_v<Kv, int8_t>;
  static_assert(!kIntegers || (kInt8 && sizeof(T) == 2 && kDims == 16),
                "integer products are for INT8 keys and values, 16 a lane, with 16-bit queries");
  __shared__ DecodeMerge merge;
  __shared__ float query_rows[kQueryMaxRows];
  extern __shared__ __align__(16) unsigned char decode_shared[];  // the fused query's row of x
  namespace cg = cooperative_groups;

  // The next step's linear layer may load its weights meanwhile (it waits for this grid before it
  // reads the context written here). This one, launched as a dependent too, waits for the kernel
  // before it (which writes q, or x for the fused query, and for a self-attention this step's K
  // and V) before it reads.
  allow_dependent_kernels();
  const int splits = gridDim.x, split = blockIdx.x;
  const int head = blockIdx.y, query_row = blockIdx.z;
  static_assert(!kQuery || sizeof(T) == 2, "the fused query is for 16-bit types");
  QueryWeights query_weights;
  if constexpr (kQuery) {
    load_query_weights(query_product, head, head_dim, splits, split, query_weights);
  }
  wait_for_prerequisite_kernels();
  const int sequence = query_row / kv.queries_per_sequence;
  const int length = max(lengths[sequence], 0);
  const int chunk = (length + splits - 1) / splits;
  const int begin = min(length, split * chunk), end = min(length, begin + chunk);

  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  const int lanes_per_key = 1 << lanes_per_key_log2;
  const int slots_per_warp = 32 >> lanes_per_key_log2;
  const int slots = kDecodeWarps * slots_per_warp;
  const int part = lane & (lanes_per_key - 1), slot = lane >> lanes_per_key_log2;
  const int first_dim = part * kDims;
  const bool active = first_dim < head_dim;

  const Int8Strides& at = kv.strides;
  k += sequence * at.batch + head * at.group_stride + first_dim;
  v += sequence * at.batch + head * at.group_stride + first_dim;
  const int64_t scales_at = kInt8 ? sequence * at.scale_batch + head * at.scale_group_stride : 0;
  const float* const k_scales = kv.k_scales + scales_at;
  const float* const v_scales = kv.v_scales + scales_at;

  float query[kDims];
  if constexpr (!kQuery) {
    q += query_row * q_stride + head * head_dim + first_dim;
#pragma unroll
    for (int i = 0; i < kDims; ++i) query[i] = active ? to_float(q[i]) * scale : 0.0f;
  }

  // Slot s of warp w takes keys begin + w·slots_per_warp + s + u·slots + t·stride (with integer
  // products, begin + (w·slots_per_warp + s)·kUnroll + u + t·stride: consecutive keys). The loop
  // is warp-uniform (the lane-group sums shuffle across the whole warp), and the keys of the next
  // round are loaded before this round's are used.
  // 64 bytes of K and 64 of V in flight per lane and round.
  constexpr int kUnroll = 64 / sizeof(Chunk<Kv, kDims>);
  static_assert(!kIntegers || kUnroll == 4, "a round's weights are one word of 4 keys a slot");
  const int stride = slots * kUnroll;
  const int warp_begin = begin + warp * slots_per_warp * (kIntegers ? kUnroll : 1);
  const auto key_of = [&](int first, int u) {
    return kIntegers ? first + slot * kUnroll + u : first + slot + u * slots;
  };
  Chunk<Kv, kDims> keys[kUnroll] = {}, values[kUnroll] = {}, next_keys[kUnroll] = {},
                   next_values[kUnroll] = {};  // zeros stay in lanes without dims
  // INT8 only: the scales of those keys and values.
  float key_scales[kUnroll] = {}, value_scales[kUnroll] = {}, next_key_scales[kUnroll] = {},
        next_value_scales[kUnroll] = {};
  const auto load_round = [&](int first, Chunk<Kv, kDims>(&round_keys)[kUnroll],
                              Chunk<Kv, kDims>(&round_values)[kUnroll],
                              float(&round_key_scales)[kUnroll],
                              float(&round_value_scales)[kUnroll]) {
    if (!active || first >= end) return;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int key = min(key_of(first, u), end - 1);  // past the end: weight 0 below
      round_keys[u] = load_chunk<kVector, kDims>(k + key * at.row);
      round_values[u] = load_chunk<kVector, kDims>(v + key * at.row);
      if constexpr (kInt8) {
        round_key_scales[u] = k_scales[key * at.scale_row];
        round_value_scales[u] = v_scales[key * at.scale_row];
      }
    }
  };
  load_round(warp_begin, keys, values, key_scales, value_scales);

  // The fused query, computed with the first keys' loads already on their way.
  if constexpr (kQuery) {
    compute_query(query_product, query_weights, query_row, head, head_dim, splits, split, scale,
                  reinterpret_cast<T*>(decode_shared), query_rows, merge.warp_sums);
    // Every CTA of the cluster has its rows of the head's query (kept until the cluster's last
    // sync below, after which no CTA reads another's).
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int rows = head_dim / splits;
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int dim = first_dim + i;
      query[i] = active ? *cluster.map_shared_rank(&query_rows[dim % rows], dim / rows) : 0.0f;
    }
  }

  float m = -INFINITY, l = 0.0f, acc[kDims] = {};
  if constexpr (kIntegers) {
    const SplitQuery split_dims = split_query(query);
    for (int first = warp_begin; first < end; first += stride) {
      load_round(first + stride, next_keys, next_values, next_key_scales, next_value_scales);
      uint4 key_words[kUnroll], value_words[kUnroll];
      bool inside[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        key_words[u] = keys[u].bits;
        value_words[u] = values[u].bits;
        inside[u] = key_of(first, u) < end;
      }
      integer_round(split_dims, key_words, value_words, key_scales, value_scales, inside,
                    lanes_per_key, m, l, acc);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        keys[u] = next_keys[u];
        values[u] = next_values[u];
        key_scales[u] = next_key_scales[u];
        value_scales[u] = next_value_scales[u];
      }
    }
    m *= 1.0f / kLog2e;  // base e again, for the merges below (−inf stays −inf)
  } else {
    for (int first = warp_begin; first < end; first += stride) {
      load_round(first + stride, next_keys, next_values, next_key_scales, next_value_scales);
      float scores[kUnroll];
      float round_max = -INFINITY;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float key[kDims];
        to_floats(keys[u], key);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < kDims; ++i) s += query[i] * key[i];
        if constexpr (kInt8) s *= key_scales[u];
        for (int offset = 1; offset < lanes_per_key; offset <<= 1) {
          s += __shfl_xor_sync(0xffffffffu, s, offset);
        }
        scores[u] = key_of(first, u) < end ? s : -INFINITY;
        round_max = fmaxf(round_max, scores[u]);
      }
      const float reference = raise_maximum(m, l, acc, round_max, [](float x) { return expf(x); });
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float p = expf(scores[u] - reference);
        float value[kDims];
        to_floats(values[u], value);
        l += p;
        const float weight = kInt8 ? p * value_scales[u] : p;
#pragma unroll
        for (int i = 0; i < kDims; ++i) acc[i] += weight * value[i];
        keys[u] = next_keys[u];
        values[u] = next_values[u];
        if constexpr (kInt8) {
          key_scales[u] = next_key_scales[u];
          value_scales[u] = next_value_scales[u];
        }
      }
    }
  }

  T* const target = out + query_row * out_stride + head * head_dim;
  finish_decode_attention(m, l, acc, lanes_per_key, first_dim, active, head_dim, target, merge);
}

// ---- INT8 keys and values ---------------------------------------------------------------------
//
// quantize_int8: one warp per group (a head of a row), its largest magnitude, then each value
// times 127 / largest, rounded half to even (int8_level), exactly as kernels.h states it. A one-off
// per encoded batch, bound by reading its input.

constexpr int kQuantizeWarps = 8;
constexpr int64_t kMaxQuantizeBlocks = 4096;

template <class T>
__global__ void __launch_bounds__(kQuantizeWarps * 32)
    quantize_int8_kernel(const T* __restrict__ x, int64_t first_row, int64_t rows, int64_t cols,
                         int group, int64_t block_rows, int8_t* __restrict__ q,
                         float* __restrict__ scales) {
  const int lane = threadIdx.x % 32;
  const int64_t groups_per_row = cols / group, groups = rows * groups_per_row;
  const int64_t warps = int64_t{gridDim.x} * kQuantizeWarps;
  // Warp w takes group w / rows of row w % rows: consecutive warps write consecutive runs of the
  // group-major output.
  for (int64_t w = int64_t{blockIdx.x} * kQuantizeWarps + threadIdx.x / 32; w < groups;
       w += warps) {
    const int64_t group_index = w / rows, local_row = w % rows, row = first_row + local_row;
    const T* const values = x + local_row * cols + group_index * group;
    float largest = 0.0f;
    for (int i = lane; i < group; i += 32) largest = fmaxf(largest, fabsf(to_float(values[i])));
    largest = warp_max(largest);
    const float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
    const int64_t block = row / block_rows, block_row = row % block_rows;
    const int64_t target = (block * groups_per_row + group_index) * block_rows + block_row;
    for (int i = lane; i < group; i += 32) {
      q[target * group + i] = static_cast<int8_t>(int8_level(to_float(values[i]), inverse));
    }
    if (lane == 0) scales[target] = largest / 127.0f;
  }
}

// One thread per pack of kPack values of a group of a row, the packs of a group's rows
// consecutive: the reads of a group-major run and the writes of its rows' slices both coalesce.
template <class T, int kPack>
__global__ void dequantize_int8_kernel(const int8_t* __restrict__ q,
                                       const float* __restrict__ scales, Int8Strides strides,
                                       int64_t rows, int64_t cols, int group, int64_t packs,
                                       T* __restrict__ out) {
  const int packs_per_group = group / kPack;
  const int64_t groups = cols / group;
  HARK_FLAT_LOOP(i, packs) {
    const int64_t pack = i % packs_per_group, run = i / packs_per_group;
    const int64_t row = run % rows, g = run / rows % groups, block = run / rows / groups;
    const float scale = scales[block * strides.scale_batch + g * strides.scale_group_stride +
                               row * strides.scale_row];
    const int8_t* const source =
        q + block * strides.batch + g * strides.group_stride + row * strides.row + pack * kPack;
    float values[kPack];
    if constexpr (kPack == 1) {
      values[0] = static_cast<float>(*source);
    } else {
      using R = typename Raw<kPack>::type;
      const R raw = *reinterpret_cast<const R*>(source);
      uint32_t words[kPack / 4];
      memcpy(words, &raw, sizeof raw);
#pragma unroll
      for (int w = 0; w < kPack / 4; ++w) int8x4_to_floats(words[w], values + 4 * w);
    }
#pragma unroll
    for (int v = 0; v < kPack; ++v) values[v] *= scale;
    store_pack(values, out + (block * rows + row) * cols + g * group + pack * kPack);
  }
}

// ---- K/V cache append -------------------------------------------------------------------------

template <class Unit>
__global__ void append_kv_kernel(const Unit* __restrict__ new_k, const Unit* __restrict__ new_v,
                                 int64_t new_row_stride, int64_t new_batch_stride, int64_t width,
                                 Unit* __restrict__ k_cache, Unit* __restrict__ v_cache,
                                 int64_t cache_batch_stride,
                                 const int32_t* __restrict__ positions) {
  allow_dependent_kernels();  // for decode_attention, launched as a dependent
  const int64_t step = blockIdx.x, sequence = blockIdx.y;
  const int64_t source = sequence * new_batch_stride + step * new_row_stride;
  const int64_t target = sequence * cache_batch_stride + (positions[sequence] + step) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    k_cache[target + i] = new_k[source + i];
    v_cache[target + i] = new_v[source + i];
  }
}

// ---- launchers --------------------------------------------------------------------------------

// `attention`'s operands, and padded_attention's.
struct AttentionArguments : DenseAttention {
  const int32_t* lengths = nullptr;             // padded_attention's
  const int32_t* starts = nullptr;              // padded_attention's, packed
  const RelativePositions* relative = nullptr;  // padded_attention's
  const void* query_bias = nullptr;             // padded_attention's
};

AttentionArguments attention_arguments(const void* q, int64_t q_row_stride, int64_t q_batch_stride,
                                       const void* k, const void* v, int64_t kv_row_stride,
                                       int64_t kv_batch_stride, void* out, int64_t out_row_stride,
                                       int64_t out_batch_stride, int batch, int heads, int head_dim,
                                       int64_t q_len, int64_t kv_len, float scale, bool causal) {
  AttentionArguments a{};
  a.q = q;
  a.q_row_stride = q_row_stride;
  a.q_batch_stride = q_batch_stride;
  a.k = k;
  a.v = v;
  a.kv_row_stride = kv_row_stride;
  a.kv_batch_stride = kv_batch_stride;
  a.out = out;
  a.out_row_stride = out_row_stride;
  a.out_batch_stride = out_batch_stride;
  a.batch = batch;
  a.heads = heads;
  a.head_dim = head_dim;
  a.q_len = static_cast<int>(q_len);
  a.kv_len = static_cast<int>(kv_len);
  a.scale = scale;
  a.causal = causal;
  return a;
}

template <class T, int kHeadDim, bool kRelative>
void launch_flash_kernel(const AttentionArguments& a, cudaStream_t stream) {
  using Shape = FlashShape<kHeadDim, kRelative>;
  constexpr size_t shared_bytes = Shape::kSharedBytes;
  static const bool configured =
      (allow_shared_memory(flash_attention_kernel<T, kHeadDim, kRelative>, shared_bytes,
                           "flash attention shared memory"),
       true);
  (void)configured;
  PositionTable<T> positions{};
  if (a.relative != nullptr) {
    positions = {static_cast<const T*>(a.relative->table), a.relative->row_stride,
                 static_cast<int>(a.relative->steps)};
  }
  const dim3 grid((a.q_len + kFlashRows - 1) / kFlashRows, a.heads, a.batch);
  flash_attention_kernel<T, kHeadDim, kRelative><<<grid, Shape::kThreads, shared_bytes, stream>>>(
      static_cast<const T*>(a.q), a.q_row_stride, a.q_batch_stride, static_cast<const T*>(a.k),
      static_cast<const T*>(a.v), a.kv_row_stride, a.kv_batch_stride, static_cast<T*>(a.out),
      a.out_row_stride, a.out_batch_stride, a.q_len, a.kv_len, a.lengths, a.starts, positions,
      static_cast<const T*>(a.query_bias), a.scale * kLog2e, a.causal);
  check_launch("flash attention");
}

template <class T, int kHeadDim>
void launch_flash_attention(const AttentionArguments& a, cudaStream_t stream) {
  if (a.relative != nullptr) {
    launch_flash_kernel<T, kHeadDim, true>(a, stream);
  } else {
    launch_flash_kernel<T, kHeadDim, false>(a, stream);
  }
}

// Whether the tensor-core kernel can take these rows: it moves them in 16-byte pieces.
bool flash_aligned(const AttentionArguments& a) {
  return aligned(a.q, 16) && aligned(a.k, 16) && aligned(a.v, 16) && aligned(a.out, 16) &&
         a.q_row_stride % 8 == 0 && a.q_batch_stride % 8 == 0 && a.kv_row_stride % 8 == 0 &&
         a.kv_batch_stride % 8 == 0 && a.out_row_stride % 8 == 0 && a.out_batch_stride % 8 == 0;
}

template <class T>
void launch_generic_attention(const AttentionArguments& a, cudaStream_t stream) {
  static const bool configured =
      (allow_shared_memory(attention_generic_kernel<T>,
                           generic_shared_floats(kMaxHeadDim) * sizeof(float),
                           "attention shared memory"),
       true);
  (void)configured;
  const dim3 grid((a.q_len + kGenericQueries - 1) / kGenericQueries, a.heads, a.batch);
  const size_t shared_bytes = generic_shared_floats(a.head_dim) * sizeof(float);
  attention_generic_kernel<T><<<grid, kGenericWarps * 32, shared_bytes, stream>>>(
      static_cast<const T*>(a.q), a.q_row_stride, a.q_batch_stride, static_cast<const T*>(a.k),
      static_cast<const T*>(a.v), a.kv_row_stride, a.kv_batch_stride, static_cast<T*>(a.out),
      a.out_row_stride, a.out_batch_stride, a.head_dim, a.q_len, a.kv_len, a.scale, a.causal);
  check_launch("attention");
}

template <class T>
void launch_attention(const AttentionArguments& a, cudaStream_t stream) {
  if constexpr (sizeof(T) == 2) {
    // The tensor-core kernel takes row maxima of unscaled scores (scale > 0).
    const bool fits = a.scale > 0.0f && flash_aligned(a);
    if (fits && a.head_dim == 64) return launch_flash_attention<T, 64>(a, stream);
    if (fits && a.head_dim == 128) return launch_flash_attention<T, 128>(a, stream);
  }
  launch_generic_attention<T>(a, stream);
}

// Whether INT8 keys and values with 16-bit queries take the integer products (the default), or
// the F32 form where the environment's HARK_CUDA_INT8_INTEGER_PRODUCTS says 0 (to compare them).
// Read at every call, so that a test can run each way in one process.
bool int8_integer_products() {
  return !environment_is("HARK_CUDA_INT8_INTEGER_PRODUCTS", "0");
}

// Whether INT8 keys and values take the staged form (decode_attention_staged_sm90.h) where it
// runs and no query is fused: by default where it pays (staged_int8_attention_pays), never where
// the environment's HARK_CUDA_INT8_STAGED says 0, wherever it runs where it says 1. Read at every
// call, so that a test can run each way in one process.
bool int8_staged(int rows, int heads) {
  if (environment_is("HARK_CUDA_INT8_STAGED", "0")) return false;
  return environment_is("HARK_CUDA_INT8_STAGED", "1") || staged_int8_attention_pays(rows, heads);
}

// The CTAs a decode attention splits each (query row, head) pair's keys among: only while the
// pairs alone leave the GPU idle.
int decode_splits(int rows, int heads) {
  int splits = 1;
  while (splits < kMaxSplits && int64_t{rows} * heads * splits < kDecodeTargetBlocks) splits *= 2;
  return splits;
}

template <class T, class Kv, bool kVector, int kDims>
void launch_decode_attention(const T* q, int64_t q_stride, const Kv* k, const Kv* v,
                             const KvPlaces& kv, const int32_t* lengths, T* out, int64_t out_stride,
                             int batch, int heads, int head_dim, float scale,
                             const QueryProduct<T>& query, cudaStream_t stream) {
  int lanes_per_key_log2 = 0;
  while ((kDims << lanes_per_key_log2) < head_dim) ++lanes_per_key_log2;
  const int splits = decode_splits(batch, heads);
  const auto run = [&](auto kernel, size_t shared_bytes) {
    launch_kernel(kernel, dim3(splits, heads, batch), dim3(kDecodeThreads), shared_bytes, splits,
                  /*early_start=*/true, stream, "decode attention", q, q_stride, k, v, kv, lengths,
                  out, out_stride, head_dim, lanes_per_key_log2, scale, query);
  };
  const auto run_with = [&](auto integers) {
    constexpr bool kIntegers = decltype(integers)::value;
    if constexpr (sizeof(T) == 2) {
      if (query.x != nullptr) {
        return run(decode_attention_kernel<T, Kv, kVector, kDims, true, kIntegers>,
                   query.d * sizeof(T));
      }
    }
    run(decode_attention_kernel<T, Kv, kVector, kDims, false, kIntegers>, 0);
  };
  if constexpr (std::is_same_v<Kv, int8_t> && sizeof(T) == 2 && kDims == 16) {
    if (int8_integer_products()) return run_with(std::true_type{});
  }
  run_with(std::false_type{});
}

// The typed pointers of an AttentionQuery, checked against what compute_query takes.
template <class T>
QueryProduct<T> query_product(const AttentionQuery* query, Element e, int batch, int heads,
                              int head_dim, int queries_per_sequence) {
  QueryProduct<T> product;
  if (query == nullptr) return product;
  if (queries_per_sequence != 1 ||
      !attention_query_fuses(e, batch, heads, head_dim, query->d, query->q8_0)) {
    fail("decode attention: cannot compute the query for ", batch, " rows of ", heads, " heads of ",
         head_dim, " from d = ", query->d, query->q8_0 ? " (Q8_0 weights, " : " (",
         queries_per_sequence, " queries a sequence); see attention_query_fuses");
  }
  if (query->x == nullptr || query->w == nullptr || query->gamma == nullptr ||
      query->beta == nullptr) {
    fail("decode attention: the query needs x, W, gamma and beta");
  }
  for (const void* pointer : {query->x, query->w, query->gamma, query->beta}) {
    if (!aligned(pointer, 16)) {
      fail("decode attention: the query's x, W, gamma and beta must be 16-byte aligned");
    }
  }
  product.x = static_cast<const T*>(query->x);
  product.gamma = static_cast<const T*>(query->gamma);
  product.beta = static_cast<const T*>(query->beta);
  if (query->q8_0) {
    const int64_t rows = int64_t{heads} * head_dim;
    product.quants = static_cast<const int8_t*>(query->w);
    product.scales = reinterpret_cast<const __half*>(static_cast<const uint8_t*>(query->w) +
                                                     q8_0_scales_offset(rows, query->d));
  } else {
    product.w = static_cast<const T*>(query->w);
  }
  product.bias = static_cast<const T*>(query->bias);
  product.eps = query->eps;
  product.d = static_cast<int>(query->d);
  return product;
}

// T: the queries' and the output's type; Kv: the keys' and values' (T, or int8_t with scales).
template <class T, class Kv>
void dispatch_decode_attention(const void* q, int64_t q_stride, const void* k, const void* v,
                               const KvPlaces& kv, const int32_t* lengths, void* out,
                               int64_t out_stride, int batch, int heads, int head_dim, float scale,
                               const QueryProduct<T>& query, cudaStream_t stream) {
  // Whether keys and values move in whole vectors of `bytes` (whole chunks of values a lane).
  const auto vectors_of = [&](size_t bytes) {
    const int64_t values = static_cast<int64_t>(bytes / sizeof(Kv));
    const Int8Strides& at = kv.strides;
    return aligned(k, bytes) && aligned(v, bytes) && at.row % values == 0 &&
           at.group_stride % values == 0 && at.batch % values == 0 && head_dim % values == 0;
  };
  auto launch = [&](auto kernel_vector, auto dims) {
    launch_decode_attention<T, Kv, decltype(kernel_vector)::value, decltype(dims)::value>(
        static_cast<const T*>(q), q_stride, static_cast<const Kv*>(k), static_cast<const Kv*>(v),
        kv, lengths, static_cast<T*>(out), out_stride, batch, heads, head_dim, scale, query,
        stream);
  };
  using Eight = std::integral_constant<int, 8>;
  if constexpr (std::is_same_v<Kv, int8_t>) {
    // INT8: 16 values a lane in 16-byte loads where they fit (half the load instructions of 8),
    // else 8 in 8-byte loads.
    if (vectors_of(16)) return launch(std::true_type{}, std::integral_constant<int, 16>{});
    if (vectors_of(8)) return launch(std::true_type{}, Eight{});
  } else {
    if (vectors_of(16)) return launch(std::true_type{}, Eight{});
  }
  launch(std::false_type{}, Eight{});
}

template <class Unit>
void launch_append_kv(const void* new_k, const void* new_v, int64_t new_row_stride,
                      int64_t new_batch_stride, int batch, int64_t steps, int64_t width,
                      void* k_cache, void* v_cache, int64_t cache_batch_stride,
                      const int32_t* positions, size_t element_bytes, cudaStream_t stream) {
  // Strides arrive in elements; the kernel counts in units of sizeof(Unit).
  const auto units = [&](int64_t elements) {
    return elements * static_cast<int64_t>(element_bytes) / static_cast<int64_t>(sizeof(Unit));
  };
  const dim3 grid(static_cast<unsigned>(steps), batch);
  append_kv_kernel<Unit><<<grid, 128, 0, stream>>>(
      static_cast<const Unit*>(new_k), static_cast<const Unit*>(new_v), units(new_row_stride),
      units(new_batch_stride), units(width), static_cast<Unit*>(k_cache),
      static_cast<Unit*>(v_cache), units(cache_batch_stride), positions);
  check_launch("append_kv");
}

// Whether `attention` takes the Hopper kernel: where it runs and has enough work
// (flash_attention_sm90_preferred), unless the environment's HARK_CUDA_SM90_ATTENTION says 0
// (never: to compare with the mma.sync kernel) or 1 (wherever it runs). Read at every call, so
// that a test can run each way in one process.
bool use_sm90_attention(Element e, const DenseAttention& a) {
  if (environment_is("HARK_CUDA_SM90_ATTENTION", "0")) return false;
  if (environment_is("HARK_CUDA_SM90_ATTENTION", "1")) return flash_attention_sm90_runs(e, a);
  return flash_attention_sm90_preferred(e, a);
}

}  // namespace

void attention(Element e, const void* q, int64_t q_row_stride, int64_t q_batch_stride,
               const void* k, const void* v, int64_t kv_row_stride, int64_t kv_batch_stride,
               void* out, int64_t out_row_stride, int64_t out_batch_stride, int batch, int heads,
               int head_dim, int64_t q_len, int64_t kv_len, float scale, bool causal,
               cudaStream_t stream) {
  if (batch <= 0 || heads <= 0 || q_len <= 0) return;
  const AttentionArguments arguments = attention_arguments(
      q, q_row_stride, q_batch_stride, k, v, kv_row_stride, kv_batch_stride, out, out_row_stride,
      out_batch_stride, batch, heads, head_dim, q_len, kv_len, scale, causal);
  // Whisper's encoder (head_dim 64, no mask) on Hopper: its own kernel, on wgmma.
  if (use_sm90_attention(e, arguments)) return flash_attention_sm90(e, arguments, stream);
  with_type(e, [&](auto zero) { launch_attention<decltype(zero)>(arguments, stream); });
}

bool padded_attention_runs(Element e, int head_dim) {
  return e != Element::f32 && (head_dim == 64 || head_dim == 128);
}

void padded_attention(Element e, const void* q, int64_t q_row_stride, int64_t q_batch_stride,
                      const void* k, const void* v, int64_t kv_row_stride, int64_t kv_batch_stride,
                      void* out, int64_t out_row_stride, int64_t out_batch_stride,
                      const int32_t* lengths, const int32_t* starts,
                      const RelativePositions* relative, const void* query_bias, int batch,
                      int heads, int head_dim, int64_t steps, float scale, cudaStream_t stream) {
  if (batch <= 0 || heads <= 0 || steps <= 0) return;
  AttentionArguments a = attention_arguments(
      q, q_row_stride, q_batch_stride, k, v, kv_row_stride, kv_batch_stride, out, out_row_stride,
      out_batch_stride, batch, heads, head_dim, steps, steps, scale, /*causal=*/false);
  a.lengths = lengths;
  a.starts = lengths != nullptr ? starts : nullptr;
  a.relative = relative;
  a.query_bias = query_bias;
  if (!padded_attention_runs(e, head_dim) || !(scale > 0.0f) || !flash_aligned(a) ||
      (relative != nullptr && (!aligned(relative->table, 16) || relative->row_stride % 8 != 0 ||
                               relative->steps != steps)) ||
      (query_bias != nullptr && !aligned(query_bias, 16))) {
    fail(
        "padded attention: needs F16/BF16, head_dim 64 or 128, scale > 0 and 16-byte aligned "
        "rows (got head_dim ",
        head_dim, ")");
  }
  with_type(e, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (sizeof(T) == 2) {
      if (head_dim == 64) {
        launch_flash_attention<T, 64>(a, stream);
      } else {
        launch_flash_attention<T, 128>(a, stream);
      }
    }
  });
}

bool attention_query_fuses(Element e, int batch, int heads, int head_dim, int64_t d, bool q8_0) {
  if (e == Element::f32 || batch <= 0 || heads <= 0 || head_dim <= 0) return false;
  if (head_dim > kQueryMaxHeadDim || d <= 0 || d % 8 != 0 || d > kQueryMaxDim) return false;
  if (q8_0 && d % static_cast<int64_t>(quant::kQ8BlockValues) != 0) return false;
  const int splits = decode_splits(batch, heads);
  return splits >= kQueryMinSplits && head_dim % splits == 0;
}

bool attention_query_in_one_wave(Element e, int batch, int heads, int head_dim) {
  if (e == Element::f32 || batch <= 0 || heads <= 0 || head_dim <= 0) return false;
  const int splits = decode_splits(batch, heads);
  // The CTAs the GPU holds at once, asked once per type and split count (one device a process):
  // the kernel's registers bound them (about 160 a thread: 3 CTAs an SM on sm_90), and a
  // cluster's CTAs must share a GPC. Native K/V in 16-byte vectors: the form Whisper's step takes.
  static std::atomic<int64_t> resident[2][kMaxSplits + 1] = {};
  std::atomic<int64_t>& known = resident[e == Element::f16 ? 0 : 1][splits];
  if (known.load() == 0) {
    with_type(e, [&](auto zero) {
      using T = decltype(zero);
      if constexpr (sizeof(T) == 2) {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(splits);
        config.blockDim = dim3(kDecodeThreads);
        config.dynamicSmemBytes = kQueryMaxDim * sizeof(T);  // the row of x, at its largest
        cudaLaunchAttribute cluster = cluster_attribute(static_cast<unsigned>(splits));
        config.attrs = &cluster;
        config.numAttrs = 1;
        int clusters = 0;
        check(cudaOccupancyMaxActiveClusters(
                  &clusters, decode_attention_kernel<T, T, true, 8, true, false>, &config),
              "decode attention: resident clusters");
        known.store(int64_t{clusters} * splits);
      }
    });
  }
  return int64_t{batch} * heads * splits <= known.load();
}

void decode_attention(Element e, const void* q, int64_t q_stride, const void* k, const void* v,
                      int64_t kv_row_stride, int64_t kv_batch_stride, const int32_t* lengths,
                      void* out, int64_t out_stride, int batch, int heads, int head_dim,
                      float scale, cudaStream_t stream, const AttentionQuery* query) {
  if (batch <= 0 || heads <= 0) return;
  KvPlaces kv;
  kv.strides.row = kv_row_stride;
  kv.strides.group_stride = head_dim;
  kv.strides.batch = kv_batch_stride;
  with_type(e, [&](auto zero) {
    using T = decltype(zero);
    dispatch_decode_attention<T, T>(q, q_stride, k, v, kv, lengths, out, out_stride, batch, heads,
                                    head_dim, scale,
                                    query_product<T>(query, e, batch, heads, head_dim, 1), stream);
  });
}

void decode_attention_int8(Element e, const void* q, int64_t q_stride, const Int8Kv& kv,
                           const int32_t* lengths, void* out, int64_t out_stride, int batch,
                           int heads, int head_dim, float scale, cudaStream_t stream,
                           int queries_per_sequence, const AttentionQuery* query) {
  if (batch <= 0 || heads <= 0) return;
  if (queries_per_sequence < 1 || batch % queries_per_sequence != 0) {
    fail("decode_attention_int8: ", batch, " query rows are not a multiple of ",
         queries_per_sequence, " queries per sequence");
  }
  if (query == nullptr && int8_integer_products() && staged_int8_attention_runs(e, kv, head_dim) &&
      int8_staged(batch, heads)) {
    return decode_attention_int8_staged(e, q, q_stride, kv, lengths, out, out_stride, batch, heads,
                                        scale, queries_per_sequence, stream);
  }
  const KvPlaces places{kv.strides, kv.k_scales, kv.v_scales, queries_per_sequence};
  with_type(e, [&](auto zero) {
    using T = decltype(zero);
    dispatch_decode_attention<T, int8_t>(
        q, q_stride, kv.k, kv.v, places, lengths, out, out_stride, batch, heads, head_dim, scale,
        query_product<T>(query, e, batch, heads, head_dim, queries_per_sequence), stream);
  });
}

void quantize_int8(Element e, const void* x, int64_t first_row, int64_t rows, int64_t cols,
                   int group, int64_t block_rows, int8_t* q, float* scales, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t groups = rows * (cols / group);
  const int64_t blocks = std::min<int64_t>(ceil_div(groups, kQuantizeWarps), kMaxQuantizeBlocks);
  with_type(e, [&](auto zero) {
    using T = decltype(zero);
    quantize_int8_kernel<T><<<static_cast<unsigned>(blocks), kQuantizeWarps * 32, 0, stream>>>(
        static_cast<const T*>(x), first_row, rows, cols, group, block_rows, q, scales);
  });
  check_launch("quantize_int8");
}

void dequantize_int8(const int8_t* q, const float* scales, const Int8Strides& strides, int batch,
                     int64_t rows, int64_t cols, int group, Element e, void* out,
                     cudaStream_t stream) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return;
  with_type(e, [&](auto zero) {
    using T = decltype(zero);
    // Packs of 16 bytes of output (8 bytes of INT8 for 16-bit types) where everything aligns.
    constexpr int kPack = kWidePack<T>;
    const bool packed = group % kPack == 0 && aligned(q, kPack) && aligned(out, 16) &&
                        strides.row % kPack == 0 && strides.group_stride % kPack == 0 &&
                        strides.batch % kPack == 0;
    const int pack = packed ? kPack : 1;
    const int64_t packs = int64_t{batch} * rows * cols / pack;
    constexpr int kThreads = 256;
    auto launch = [&](auto kernel) {
      kernel<<<flat_blocks(packs, kThreads), kThreads, 0, stream>>>(
          q, scales, strides, rows, cols, group, packs, static_cast<T*>(out));
    };
    if (packed) {
      launch(dequantize_int8_kernel<T, kPack>);
    } else {
      launch(dequantize_int8_kernel<T, 1>);
    }
  });
  check_launch("dequantize_int8");
}

void append_kv(Element e, const void* new_k, const void* new_v, int64_t new_row_stride,
               int64_t new_batch_stride, int batch, int64_t steps, int64_t width, void* k_cache,
               void* v_cache, int64_t cache_batch_stride, const int32_t* positions,
               cudaStream_t stream) {
  if (batch <= 0 || steps <= 0 || width <= 0) return;
  const size_t element_bytes = element_size(e);
  // The widest copy unit that every address and stride allows.
  const auto fits = [&](size_t unit) {
    const auto whole = [&](int64_t elements) {
      return static_cast<size_t>(elements) * element_bytes % unit == 0;
    };
    return aligned(new_k, unit) && aligned(new_v, unit) && aligned(k_cache, unit) &&
           aligned(v_cache, unit) && whole(new_row_stride) && whole(new_batch_stride) &&
           whole(width) && whole(cache_batch_stride);
  };
  const auto launch = [&](auto unit) {
    launch_append_kv<decltype(unit)>(new_k, new_v, new_row_stride, new_batch_stride, batch, steps,
                                     width, k_cache, v_cache, cache_batch_stride, positions,
                                     element_bytes, stream);
  };
  if (fits(16)) {
    launch(uint4{});
  } else if (fits(8)) {
    launch(uint2{});
  } else if (fits(4)) {
    launch(uint32_t{});
  } else {
    launch(uint16_t{});
  }
}

}  // namespace hark::compute::cuda
