// The elementwise and per-row kernels of kernels.h, and the Q8_0 matrix-vector product of decode
// steps. Kernels are templated on the activations' storage type (float, half, __nv_bfloat16)
// and compute in F32; each launcher picks the instantiation from the Element it is given.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {

namespace {

using bf16 = __nv_bfloat16;

// ---- Reductions -------------------------------------------------------------------------------

// The sum over a block whose size is a multiple of 32, returned to every thread. `scratch` holds
// 32 floats; the closing barrier lets the next call reuse it.
__device__ float block_sum(float value, float* scratch) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  value = warp_sum(value);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / 32;
  float total = lane < warps ? scratch[lane] : 0.0f;
  total = warp_sum(total);
  __syncthreads();
  return total;
}

// ---- layer_norm -------------------------------------------------------------------------------

// Registers hold up to kItems · kLayerNormThreads values: rows of up to 4096 (Whisper's are at
// most 1280) stay in registers; longer ones take the kernel that rereads the row.
constexpr int kLayerNormThreads = 512;
constexpr int kLayerNormMaxItems = 8;
constexpr int kLayerNormTargetItems = 4;  // values per thread when the row allows it
constexpr int kLayerNormLongThreads = 1024;

// One block per row. Each thread keeps its kItems values of the row in registers, so the row is
// read once however many passes the two-pass mean and variance take.
template <class T, int kItems>
__global__ void __launch_bounds__(kLayerNormThreads)
    layer_norm_kernel(const T* x, const T* gamma, const T* beta, float eps, int64_t rows,
                      int64_t cols, T* y) {
  __shared__ float scratch[32];
  allow_dependent_kernels();  // for a product launched as a dependent (gemv_q8_0)
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* in = x + row * cols;
    T* out = y + row * cols;
    float values[kItems];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      values[i] = c < cols ? to_float(in[c]) : 0.0f;
      sum += values[i];
    }
    const float mean = block_sum(sum, scratch) / static_cast<float>(cols);
    float squares = 0.0f;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      const float centred = values[i] - mean;
      if (c < cols) squares = fmaf(centred, centred, squares);
    }
    const float variance = block_sum(squares, scratch) / static_cast<float>(cols);
    const float scale = 1.0f / sqrtf(variance + eps);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (c < cols) {
        out[c] = from_float<T>((values[i] - mean) * scale * to_float(gamma[c]) + to_float(beta[c]));
      }
    }
  }
}

// Rows that move in 16-byte packs, up to kWarpRowPacks packs per lane: one warp per row (no
// block barriers), the row in registers, statistics by warp shuffles. Encoder layer norms (many
// rows of 1024 or 1280 values) run about at memory speed this way.
constexpr int kWarpRowPacks = 8;
constexpr int kWarpRowsPerBlock = 8;

template <class T, int kPacks>
__global__ void __launch_bounds__(kWarpRowsPerBlock * 32)
    layer_norm_warp_kernel(const T* x, const T* gamma, const T* beta, float eps, int64_t rows,
                           int64_t cols, T* y) {
  constexpr int kPack = kWidePack<T>;
  allow_dependent_kernels();  // for a product launched as a dependent (gemv_q8_0)
  const int lane = threadIdx.x % 32;
  const int64_t packs = cols / kPack;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / 32;
       row < rows; row += static_cast<int64_t>(gridDim.x) * kWarpRowsPerBlock) {
    const T* in = x + row * cols;
    float values[kPacks][kPack];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      const int64_t pack = lane + 32 * i;
      if (pack < packs) {
        load_pack(in + pack * kPack, values[i]);
      } else {
#pragma unroll
        for (int j = 0; j < kPack; ++j) values[i][j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kPack; ++j) sum += values[i][j];
    }
    const float mean = warp_sum(sum) / static_cast<float>(cols);
    float squares = 0.0f;
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      if (lane + 32 * i < packs) {
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          const float centred = values[i][j] - mean;
          squares = fmaf(centred, centred, squares);
        }
      }
    }
    const float scale = 1.0f / sqrtf(warp_sum(squares) / static_cast<float>(cols) + eps);
    T* out = y + row * cols;
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      const int64_t pack = lane + 32 * i;
      if (pack >= packs) continue;
      float g[kPack], b[kPack];
      load_pack(gamma + pack * kPack, g);
      load_pack(beta + pack * kPack, b);
#pragma unroll
      for (int j = 0; j < kPack; ++j) values[i][j] = (values[i][j] - mean) * scale * g[j] + b[j];
      store_pack(values[i], out + pack * kPack);
    }
  }
}

template <class T, int kPacks>
void launch_layer_norm_warp(const T* x, const T* gamma, const T* beta, float eps, int64_t rows,
                            int64_t cols, T* y, cudaStream_t stream) {
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>(ceil_div(rows, kWarpRowsPerBlock), INT32_MAX));
  layer_norm_warp_kernel<T, kPacks>
      <<<blocks, kWarpRowsPerBlock * 32, 0, stream>>>(x, gamma, beta, eps, rows, cols, y);
}

// Rows too long for registers: the row is read from memory once per pass instead.
template <class T>
__global__ void __launch_bounds__(kLayerNormLongThreads)
    layer_norm_long_kernel(const T* x, const T* gamma, const T* beta, float eps, int64_t rows,
                           int64_t cols, T* y) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* in = x + row * cols;
    T* out = y + row * cols;
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += to_float(in[c]);
    const float mean = block_sum(sum, scratch) / static_cast<float>(cols);
    float squares = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float centred = to_float(in[c]) - mean;
      squares = fmaf(centred, centred, squares);
    }
    const float variance = block_sum(squares, scratch) / static_cast<float>(cols);
    const float scale = 1.0f / sqrtf(variance + eps);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      out[c] =
          from_float<T>((to_float(in[c]) - mean) * scale * to_float(gamma[c]) + to_float(beta[c]));
    }
  }
}

template <class T, int kItems>
void launch_layer_norm(const T* x, const T* gamma, const T* beta, float eps, int64_t rows,
                       int64_t cols, T* y, int threads, unsigned blocks, cudaStream_t stream) {
  layer_norm_kernel<T, kItems><<<blocks, threads, 0, stream>>>(x, gamma, beta, eps, rows, cols, y);
}

// ---- bias_gelu, add_rows, embed ---------------------------------------------------------------

template <class T, int N>
__global__ void bias_gelu_kernel(T* x, const T* bias, int64_t rows, int64_t cols) {
  allow_dependent_kernels();  // for a product launched as a dependent (gemv_q8_0)
  const int64_t packs = cols / N;
  HARK_ROW_LOOP(row, rows) {
    T* line = x + row * cols;
    HARK_PACK_LOOP(pack, packs) {
      float values[N];
      load_pack(line + pack * N, values);
      if (bias != nullptr) {
        float offsets[N];
        load_pack(bias + pack * N, offsets);
#pragma unroll
        for (int i = 0; i < N; ++i) values[i] += offsets[i];
      }
#pragma unroll
      for (int i = 0; i < N; ++i) values[i] = gelu_value(values[i]);
      store_pack(values, line + pack * N);
    }
  }
}

template <class T, int N>
__global__ void add_rows_kernel(T* x, const T* table, int64_t x_rows, int64_t table_rows,
                                int64_t cols) {
  const int64_t packs = cols / N;
  HARK_ROW_LOOP(row, x_rows) {
    T* line = x + row * cols;
    const T* addend = table + (row % table_rows) * cols;
    HARK_PACK_LOOP(pack, packs) {
      float values[N], offsets[N];
      load_pack(line + pack * N, values);
      load_pack(addend + pack * N, offsets);
#pragma unroll
      for (int i = 0; i < N; ++i) values[i] += offsets[i];
      store_pack(values, line + pack * N);
    }
  }
}

// GGUF's Q8_0 block: an F16 scale, then 32 int8 quants.
constexpr int kQ8Values = 32;
constexpr int kQ8Bytes = 34;

__device__ __forceinline__ float q8_0_scale(const uint8_t* block) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(block)));
}

// Value c of a Q8_0 row.
__device__ __forceinline__ float q8_0_value(const uint8_t* row, int64_t c) {
  const uint8_t* block = row + (c / kQ8Values) * kQ8Bytes;
  return q8_0_scale(block) * static_cast<float>(static_cast<int8_t>(block[2 + c % kQ8Values]));
}

template <class T, int N, bool kQ8Tokens>
__global__ void embed_kernel(const void* tokens, const T* positions, const int32_t* ids,
                             const int32_t* position_ids, int64_t n, int64_t cols, T* y) {
  const int64_t packs = cols / N;
  HARK_ROW_LOOP(row, n) {
    const int64_t id = ids[row];
    const T* position = positions + static_cast<int64_t>(position_ids[row]) * cols;
    T* out = y + row * cols;
    HARK_PACK_LOOP(pack, packs) {
      float values[N], offsets[N];
      if constexpr (kQ8Tokens) {
        const uint8_t* token =
            static_cast<const uint8_t*>(tokens) + id * (cols / kQ8Values) * kQ8Bytes;
#pragma unroll
        for (int i = 0; i < N; ++i) values[i] = q8_0_value(token, pack * N + i);
      } else {
        load_pack(static_cast<const T*>(tokens) + id * cols + pack * N, values);
      }
      load_pack(position + pack * N, offsets);
#pragma unroll
      for (int i = 0; i < N; ++i) values[i] += offsets[i];
      store_pack(values, out + pack * N);
    }
  }
}

// ---- im2col_1d, mel_to_time_major, convert, dequantize_q8_0 ----------------------------------

// Rows are output positions (b, t); along a row, threads walk the channels fastest so that reads
// of x are coalesced.
template <class T>
__global__ void im2col_1d_kernel(const T* x, int64_t steps, int64_t channels, int kernel,
                                 int stride, int padding, int64_t out_steps, int64_t out_rows,
                                 T* out) {
  const int64_t width = channels * kernel;
  HARK_ROW_LOOP(row, out_rows) {
    const int64_t b = row / out_steps, t = row % out_steps;
    const T* sequence = x + b * steps * channels;
    T* line = out + row * width;
    HARK_PACK_LOOP(i, width) {
      // 32-bit division: a row's width is far below 2^32.
      const unsigned tap = static_cast<unsigned>(i) / static_cast<unsigned>(channels);
      const int64_t c = i - static_cast<int64_t>(tap) * channels;
      const int64_t step = t * stride - padding + tap;
      line[c * kernel + tap] =
          step >= 0 && step < steps ? sequence[step * channels + c] : from_float<T>(0.0f);
    }
  }
}

// Rows are window frames (b, t); a row is a copy of n_mels values, or zeros past the cut.
template <class T>
__global__ void mel_windows_kernel(const MelWindowCut* cuts, int64_t window_frames, int64_t n_mels,
                                   int64_t rows, T* out) {
  HARK_ROW_LOOP(row, rows) {
    const int64_t b = row / window_frames, t = row % window_frames;
    const MelWindowCut cut = cuts[b];
    const float* from = cut.first + t * n_mels;
    T* line = out + row * n_mels;
    const bool inside = t < cut.frames;
    HARK_PACK_LOOP(m, n_mels) {
      line[m] = from_float<T>(inside ? from[m] : 0.0f);
    }
  }
}

constexpr int kTransposeTile = 32;
constexpr int kTransposeRowsPerPass = 8;

// A 32×32 tile goes through shared memory so that both the read and the write are coalesced.
template <class T>
__global__ void mel_to_time_major_kernel(const float* mel, int64_t batch, int64_t n_mels,
                                         int64_t frames, T* out) {
  __shared__ float tile[kTransposeTile][kTransposeTile + 1];  // +1: no bank conflicts
  const int64_t frame0 = static_cast<int64_t>(blockIdx.x) * kTransposeTile;
  const int64_t mel0 = static_cast<int64_t>(blockIdx.y) * kTransposeTile;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const float* source = mel + b * n_mels * frames;
    T* target = out + b * frames * n_mels;
    for (int i = threadIdx.y; i < kTransposeTile; i += kTransposeRowsPerPass) {
      const int64_t m = mel0 + i, f = frame0 + threadIdx.x;
      if (m < n_mels && f < frames) tile[i][threadIdx.x] = source[m * frames + f];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTransposeTile; i += kTransposeRowsPerPass) {
      const int64_t f = frame0 + i, m = mel0 + threadIdx.x;
      if (f < frames && m < n_mels) target[f * n_mels + m] = from_float<T>(tile[threadIdx.x][i]);
    }
    __syncthreads();  // the tile is refilled for the next sequence
  }
}

template <class From, class To, int N>
__global__ void convert_kernel(const From* x, To* y, int64_t packs) {
  HARK_FLAT_LOOP(pack, packs) {
    float values[N];
    load_pack(x + pack * N, values);
    store_pack(values, y + pack * N);
  }
}

template <class T>
__global__ void dequantize_q8_0_kernel(const uint8_t* blocks, int64_t count, T* out) {
  HARK_FLAT_LOOP(i, count) out[i] = from_float<T>(q8_0_value(blocks, i));
}

#undef HARK_ROW_LOOP
#undef HARK_PACK_LOOP
#undef HARK_FLAT_LOOP

// ---- gemv_q8_0 --------------------------------------------------------------------------------
//
// A decode step's matrix-vector products are bound by reading W once, so the kernel is built
// around keeping enough of W in flight to stream it at full bandwidth:
//  - Each warp owns a group of kRows consecutive output rows at a time and walks their k in tiles
//    of kGemvTileBlocks Q8_0 blocks (544 bytes a row). The grid is only as large as the GPU holds
//    at once, so warps move on to further groups and the copy pipeline never drains between them.
//    When there are too few groups to keep every warp busy, `split` warps of a block share a
//    group, taking every split-th tile, and add up their sums through shared memory.
//  - Tiles travel from global to shared memory with asynchronous copies, kGemvStages − 1 tiles
//    ahead of the arithmetic, in 16-byte pieces (4- or 2-byte ones when W's rows are not 16-byte
//    aligned; 2-byte pieces are plain loads). They go through shared memory because 34-byte
//    blocks do not line up with any vector load a lane could decode by itself.
//  - From shared memory, four lanes share one block, eight quants each, so that the matching x
//    values are eight consecutive elements: one 16-byte load per batch row, coalesced across the
//    warp and served by L1 after the first group. Every quant is used for all batch rows and every
//    x value for all kRows rows.
//  - Quants become floats through a byte permute and one F32 subtraction (cheaper than the
//    integer-to-float conversion instruction); the block's scale multiplies the dot product of 8.

constexpr int kGemvWarps = 4;
constexpr int kGemvStages = 4;
constexpr int kGemvTileBlocks = 16;
constexpr int kGemvTileBytes = kGemvTileBlocks * kQ8Bytes;
constexpr int kGemvLanesPerBlock = 4;
constexpr int kGemvQuantsPerLane = kQ8Values / kGemvLanesPerBlock;  // 8
constexpr int kGemvBlocksPerStep = 32 / kGemvLanesPerBlock;         // 8
constexpr int kGemvStepsPerTile = kGemvTileBlocks / kGemvBlocksPerStep;
// A lane reads three 4-byte words around its eight quants; the slack keeps the last one inside.
constexpr int kGemvTileStride = kGemvTileBytes + 16;
constexpr int kGemvMaxBatch = 16;

// Copies kChunkBytes bytes from global to shared memory: asynchronously (cp.async, completed by
// wait_copies) for 4, 8 or 16 bytes, with a plain load and store for 2.
template <int kChunkBytes>
__device__ __forceinline__ void copy_chunk(uint8_t* target, const uint8_t* source) {
  if constexpr (kChunkBytes == 2) {
    *reinterpret_cast<unsigned short*>(target) =
        __ldg(reinterpret_cast<const unsigned short*>(source));
  } else {
    const auto address = static_cast<unsigned>(__cvta_generic_to_shared(target));
    if constexpr (kChunkBytes == 16) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(source)
                   : "memory");
    } else {
      asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(address), "l"(source),
                   "n"(kChunkBytes)
                   : "memory");
    }
  }
}

__device__ __forceinline__ void commit_copies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed copy groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Lane `part`'s eight quants of block j of a tile in shared memory, and the block's scale.
__device__ __forceinline__ void decode_tile_part(const uint8_t* tile, int j, int part,
                                                 float (&quants)[kGemvQuantsPerLane],
                                                 float& scale) {
  scale = q8_0_scale(tile + j * kQ8Bytes);
  // The quants start at an even offset: a multiple of 4, or 2 past one, with the block's parity.
  const int offset = j * kQ8Bytes + 2 + part * kGemvQuantsPerLane;
  const unsigned* words = reinterpret_cast<const unsigned*>(tile + (offset & ~3));
  const unsigned w0 = words[0], w1 = words[1], w2 = words[2];
  const unsigned selector = (offset & 2) != 0 ? 0x5432u : 0x3210u;
  int8x4_to_floats(__byte_perm(w0, w1, selector), quants);
  int8x4_to_floats(__byte_perm(w1, w2, selector), quants + 4);
}

// Eight consecutive values of x as floats; vector loads when x allows them.
template <class T>
__device__ __forceinline__ void load_eight(const T* source, bool vector_loads,
                                           float (&out)[kGemvQuantsPerLane]) {
  if (vector_loads) {
    constexpr int kPack = kWidePack<T>;
#pragma unroll
    for (int i = 0; i < kGemvQuantsPerLane; i += kPack) {
      float part[kPack];
      load_pack(source + i, part);
#pragma unroll
      for (int j = 0; j < kPack; ++j) out[i + j] = part[j];
    }
  } else {
#pragma unroll
    for (int i = 0; i < kGemvQuantsPerLane; ++i) out[i] = to_float(source[i]);
  }
}

// kBatch: batch rows the accumulators hold (batch ≤ kBatch); kChunkBytes: the copy unit for W,
// which every row start must be aligned to. split (1, 2 or 4, at most the tiles in a row): warps
// that share a group of rows.
template <class T, int kBatch, int kRows, int kChunkBytes>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_q8_0_kernel(const T* __restrict__ x, bool x_vector_loads, int batch, int64_t k_in,
                     const uint8_t* __restrict__ w, int64_t n_out, const T* bias, const T* residual,
                     T* y, int split) {
  __shared__ __align__(16) uint8_t tiles[kGemvWarps][kGemvStages][kRows][kGemvTileStride];
  __shared__ float partial[2][kGemvWarps][kRows][kBatch];  // two: one per group parity

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slots = kGemvWarps / split;  // groups a block works on side by side
  const int slot = warp / split, part = warp % split;
  const int64_t row_blocks = k_in / kQ8Values;
  const int64_t row_bytes = row_blocks * kQ8Bytes;
  const int64_t n_tiles = ceil_div(row_blocks, kGemvTileBlocks);
  const int64_t n_groups = ceil_div(n_out, kRows);
  const int64_t group_stride = static_cast<int64_t>(gridDim.x) * slots;
  auto tile_blocks = [&](int64_t tile) {
    const int64_t left = row_blocks - tile * kGemvTileBlocks;
    return static_cast<int>(left < kGemvTileBlocks ? left : kGemvTileBlocks);
  };

  // The warp's work, in order: tiles part, part + split, … of groups slot + blockIdx.x · slots,
  // then group_stride further, and so on.
  struct Cursor {
    int64_t group, tile;
  };
  auto advance = [&](Cursor& cursor) {
    cursor.tile += split;
    if (cursor.tile >= n_tiles) {
      cursor.tile = part;
      cursor.group += group_stride;
    }
  };
  // Starts the copy of the cursor's tile into a stage; commits a (maybe empty) copy group either
  // way, so that each loop round waits for exactly one group.
  auto issue = [&](const Cursor& cursor, int stage) {
    if (cursor.group < n_groups) {
      const int chunks = tile_blocks(cursor.tile) * kQ8Bytes / kChunkBytes;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t n = cursor.group * kRows + r;
        if (n >= n_out) break;
        const uint8_t* source = w + n * row_bytes + cursor.tile * kGemvTileBytes;
        uint8_t* target = tiles[warp][stage][r];
        for (int i = lane; i < chunks; i += 32) {
          copy_chunk<kChunkBytes>(target + i * kChunkBytes, source + i * kChunkBytes);
        }
      }
    }
    commit_copies();
  };

  float sums[kRows][kBatch];
  auto clear_sums = [&] {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) sums[r][b] = 0.0f;
    }
  };
  // Adds the finished group's sums over the warp (and over the warps that share the group), then
  // writes y, one value a lane.
  auto finish_group = [&](int64_t group, int parity) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) sums[r][b] = warp_sum(sums[r][b]);
    }
    if (split > 1) {
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int b = 0; b < kBatch; ++b) partial[parity][warp][r][b] = sums[r][b];
        }
      }
      named_barrier(1 + slot, split * 32);
      if (part != 0) return;
      for (int other = 1; other < split; ++other) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int b = 0; b < kBatch; ++b) sums[r][b] += partial[parity][warp + other][r][b];
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t n = group * kRows + r;
        if ((r * kBatch + b) % 32 != lane || b >= batch || n >= n_out) continue;
        float total = sums[r][b];
        if (bias != nullptr) total += to_float(bias[n]);
        const int64_t at = b * n_out + n;
        if (residual != nullptr) total += to_float(residual[at]);  // read before y[at] is written
        y[at] = from_float<T>(total);
      }
    }
  };

  // Launched as a programmatic dependent (launch_gemv_q8_0, up to 4 rows): the first tiles of W,
  // which no kernel writes, are copied while the kernel before finishes; x only after it has.
  allow_dependent_kernels();
  Cursor ahead{slot + static_cast<int64_t>(blockIdx.x) * slots, part};
  Cursor current = ahead;
#pragma unroll
  for (int stage = 0; stage < kGemvStages - 1; ++stage) {
    issue(ahead, stage);
    advance(ahead);
  }
  wait_for_prerequisite_kernels();
  clear_sums();
  int stage = 0, parity = 0;
  while (current.group < n_groups) {
    wait_copies<kGemvStages - 2>();  // this lane's copies of the current tile have landed
    // Every lane's copies have landed, and every lane is done with the stage refilled next.
    __syncwarp();
    issue(ahead, (stage + kGemvStages - 1) % kGemvStages);
    advance(ahead);

    const int blocks = tile_blocks(current.tile);
    const int part_of_block = lane % kGemvLanesPerBlock;
#pragma unroll
    for (int step = 0; step < kGemvStepsPerTile; ++step) {
      const int j = step * kGemvBlocksPerStep + lane / kGemvLanesPerBlock;
      if (j >= blocks) continue;
      float quants[kRows][kGemvQuantsPerLane], scales[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        decode_tile_part(tiles[warp][stage][r], j, part_of_block, quants[r], scales[r]);
      }
      const int64_t k = (current.tile * kGemvTileBlocks + j) * kQ8Values +
                        static_cast<int64_t>(part_of_block) * kGemvQuantsPerLane;
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (b >= batch) break;
        float values[kGemvQuantsPerLane];
        load_eight(x + b * k_in + k, x_vector_loads, values);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < kGemvQuantsPerLane; ++i) dot = fmaf(values[i], quants[r][i], dot);
          sums[r][b] = fmaf(scales[r], dot, sums[r][b]);
        }
      }
    }

    if (current.tile + split >= n_tiles) {  // the group's last tile for this warp
      finish_group(current.group, parity);
      clear_sums();
      parity ^= 1;
    }
    advance(current);
    stage = (stage + 1) % kGemvStages;
  }
  wait_copies<0>();  // leave no copy in flight (they are all empty groups by now)
}

// The grid holds no more blocks than are resident at once; warps then take several groups each.
template <class T, int kBatch, int kRows, int kChunkBytes>
void launch_gemv_q8_0(const T* x, bool x_vector_loads, int batch, int64_t k_in, const uint8_t* w,
                      int64_t n_out, const T* bias, const T* residual, T* y, cudaStream_t stream) {
  constexpr auto kernel = gemv_q8_0_kernel<T, kBatch, kRows, kChunkBytes>;
  constexpr int kThreads = kGemvWarps * 32;
  // Measured once per kernel; hark runs on one device.
  static const int64_t resident_blocks = [] {
    int per_multiprocessor = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, kThreads, 0),
          "gemv_q8_0 occupancy");
    return static_cast<int64_t>(std::max(per_multiprocessor, 1)) * multiprocessor_count();
  }();
  const int64_t n_groups = ceil_div(n_out, kRows);
  const int64_t n_tiles = ceil_div(k_in / kQ8Values, kGemvTileBlocks);
  // Few groups (small matrices): warps share groups until every resident warp has work.
  int split = 1;
  while (split < kGemvWarps && split * 2 <= n_tiles &&
         n_groups * split < resident_blocks * kGemvWarps) {
    split *= 2;
  }
  const int64_t blocks = std::min(ceil_div(n_groups, kGemvWarps / split), resident_blocks);
  // Launched as a programmatic dependent up to 4 rows: large-v3's Q8_0 step went from 2.02 to
  // 1.82 ms at batch 1 and from 3.07 to 2.92 at 4, but from 7.63 to 7.79 at 16 (bench/RESULTS.md).
  constexpr bool kEarlyStart = kBatch <= 4;
  launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, 1, kEarlyStart,
                stream, "gemv_q8_0", x, x_vector_loads, batch, k_in, w, n_out, bias, residual, y,
                split);
}

template <class T, int kBatch, int kRows>
void launch_gemv_q8_0(int chunk_bytes, const T* x, bool x_vector_loads, int batch, int64_t k_in,
                      const uint8_t* w, int64_t n_out, const T* bias, const T* residual, T* y,
                      cudaStream_t stream) {
  if (chunk_bytes == 16) {
    launch_gemv_q8_0<T, kBatch, kRows, 16>(x, x_vector_loads, batch, k_in, w, n_out, bias, residual,
                                           y, stream);
  } else if (chunk_bytes == 4) {
    launch_gemv_q8_0<T, kBatch, kRows, 4>(x, x_vector_loads, batch, k_in, w, n_out, bias, residual,
                                          y, stream);
  } else {
    launch_gemv_q8_0<T, kBatch, kRows, 2>(x, x_vector_loads, batch, k_in, w, n_out, bias, residual,
                                          y, stream);
  }
}

}  // namespace

// ---- Launchers --------------------------------------------------------------------------------

void layer_norm(Element e, const void* x, const void* gamma, const void* beta, float eps,
                int64_t rows, int64_t cols, void* y, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    const auto* in = static_cast<const T*>(x);
    const auto* g = static_cast<const T*>(gamma);
    const auto* b = static_cast<const T*>(beta);
    auto* out = static_cast<T*>(y);
    constexpr int kPack = kWidePack<T>;
    const int64_t lane_packs = ceil_div(cols / kPack, 32);
    if (packable(cols, kPack, sizeof(T), {x, gamma, beta, y}) && lane_packs <= kWarpRowPacks) {
      if (lane_packs <= 1) {
        launch_layer_norm_warp<T, 1>(in, g, b, eps, rows, cols, out, stream);
      } else if (lane_packs <= 2) {
        launch_layer_norm_warp<T, 2>(in, g, b, eps, rows, cols, out, stream);
      } else if (lane_packs <= 4) {
        launch_layer_norm_warp<T, 4>(in, g, b, eps, rows, cols, out, stream);
      } else {
        launch_layer_norm_warp<T, kWarpRowPacks>(in, g, b, eps, rows, cols, out, stream);
      }
      check_launch("layer_norm");
      return;
    }
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, INT32_MAX));
    const int threads = static_cast<int>(std::clamp<int64_t>(
        ceil_div(ceil_div(cols, kLayerNormTargetItems), 32) * 32, 32, kLayerNormThreads));
    const int64_t items = ceil_div(cols, threads);
    if (items <= 1) {
      launch_layer_norm<T, 1>(in, g, b, eps, rows, cols, out, threads, blocks, stream);
    } else if (items <= 2) {
      launch_layer_norm<T, 2>(in, g, b, eps, rows, cols, out, threads, blocks, stream);
    } else if (items <= 4) {
      launch_layer_norm<T, 4>(in, g, b, eps, rows, cols, out, threads, blocks, stream);
    } else if (items <= kLayerNormMaxItems) {
      launch_layer_norm<T, kLayerNormMaxItems>(in, g, b, eps, rows, cols, out, threads, blocks,
                                               stream);
    } else {
      layer_norm_long_kernel<T>
          <<<blocks, kLayerNormLongThreads, 0, stream>>>(in, g, b, eps, rows, cols, out);
    }
    check_launch("layer_norm");
  });
}

void bias_gelu(Element e, void* x, const void* bias, int64_t rows, int64_t cols,
               cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    auto* values = static_cast<T*>(x);
    const auto* offsets = static_cast<const T*>(bias);
    constexpr int kPack = kWidePack<T>;
    if (packable(cols, kPack, sizeof(T), {x, bias})) {
      const RowLaunch launch = row_launch(rows, cols / kPack);
      bias_gelu_kernel<T, kPack>
          <<<launch.grid, launch.block, 0, stream>>>(values, offsets, rows, cols);
    } else {
      const RowLaunch launch = row_launch(rows, cols);
      bias_gelu_kernel<T, 1><<<launch.grid, launch.block, 0, stream>>>(values, offsets, rows, cols);
    }
    check_launch("bias_gelu");
  });
}

void add_rows(Element e, void* x, const void* table, int64_t batch, int64_t rows, int64_t cols,
              cudaStream_t stream) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return;
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    auto* values = static_cast<T*>(x);
    const auto* addends = static_cast<const T*>(table);
    constexpr int kPack = kWidePack<T>;
    if (packable(cols, kPack, sizeof(T), {x, table})) {
      const RowLaunch launch = row_launch(batch * rows, cols / kPack);
      add_rows_kernel<T, kPack>
          <<<launch.grid, launch.block, 0, stream>>>(values, addends, batch * rows, rows, cols);
    } else {
      const RowLaunch launch = row_launch(batch * rows, cols);
      add_rows_kernel<T, 1>
          <<<launch.grid, launch.block, 0, stream>>>(values, addends, batch * rows, rows, cols);
    }
    check_launch("add_rows");
  });
}

void embed(Element e, const void* tokens, bool token_table_q8_0, const void* positions,
           const int32_t* ids, const int32_t* position_ids, int64_t n, int64_t cols, void* y,
           cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    const auto* position_table = static_cast<const T*>(positions);
    auto* out = static_cast<T*>(y);
    constexpr int kPack = kWidePack<T>;
    // A Q8_0 table is read per value, so only the element-typed operands decide on packs.
    const bool packed =
        packable(cols, kPack, sizeof(T), {token_table_q8_0 ? nullptr : tokens, positions, y});
    const RowLaunch launch = row_launch(n, packed ? cols / kPack : cols);
    auto run = [&](auto pack, auto q8) {
      embed_kernel<T, decltype(pack)::value, decltype(q8)::value>
          <<<launch.grid, launch.block, 0, stream>>>(tokens, position_table, ids, position_ids, n,
                                                     cols, out);
    };
    using One = std::integral_constant<int, 1>;
    using Wide = std::integral_constant<int, kPack>;
    if (packed) {
      token_table_q8_0 ? run(Wide{}, std::true_type{}) : run(Wide{}, std::false_type{});
    } else {
      token_table_q8_0 ? run(One{}, std::true_type{}) : run(One{}, std::false_type{});
    }
    check_launch("embed");
  });
}

void im2col_1d(Element e, const void* x, int64_t batch, int64_t steps, int64_t channels, int kernel,
               int stride, int padding, void* out, cudaStream_t stream) {
  const int64_t out_steps = (steps + 2 * static_cast<int64_t>(padding) - kernel) / stride + 1;
  if (batch <= 0 || channels <= 0 || out_steps <= 0) return;
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    const RowLaunch launch = row_launch(batch * out_steps, channels * kernel);
    im2col_1d_kernel<T><<<launch.grid, launch.block, 0, stream>>>(
        static_cast<const T*>(x), steps, channels, kernel, stride, padding, out_steps,
        batch * out_steps, static_cast<T*>(out));
    check_launch("im2col_1d");
  });
}

void mel_to_time_major(const float* mel, int64_t batch, int64_t n_mels, int64_t frames, Element e,
                       void* out, cudaStream_t stream) {
  if (batch <= 0 || n_mels <= 0 || frames <= 0) return;
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>(ceil_div(frames, kTransposeTile)),
                    static_cast<unsigned>(ceil_div(n_mels, kTransposeTile)),
                    static_cast<unsigned>(std::min<int64_t>(batch, kMaxBlocksY)));
    const dim3 block(kTransposeTile, kTransposeRowsPerPass);
    mel_to_time_major_kernel<T>
        <<<grid, block, 0, stream>>>(mel, batch, n_mels, frames, static_cast<T*>(out));
    check_launch("mel_to_time_major");
  });
}

void mel_windows_to_time_major(const MelWindowCut* cuts, int64_t batch, int64_t window_frames,
                               int64_t n_mels, Element e, void* out, cudaStream_t stream) {
  if (batch <= 0 || window_frames <= 0 || n_mels <= 0) return;
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    const RowLaunch launch = row_launch(batch * window_frames, n_mels);
    mel_windows_kernel<T><<<launch.grid, launch.block, 0, stream>>>(
        cuts, window_frames, n_mels, batch * window_frames, static_cast<T*>(out));
    check_launch("mel_windows_to_time_major");
  });
}

void convert(Element from, const void* x, Element to, void* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  constexpr int kPack = 4;  // 16 bytes of F32, 8 of F16 or BF16
  with_type(from, [&](auto from_tag) {
    with_type(to, [&](auto to_tag) {
      using From = decltype(from_tag);
      using To = decltype(to_tag);
      const auto* source = static_cast<const From*>(x);
      auto* target = static_cast<To*>(y);
      if (n % kPack == 0 && aligned(x, kPack * sizeof(From)) && aligned(y, kPack * sizeof(To))) {
        convert_kernel<From, To, kPack>
            <<<flat_blocks(n / kPack, kThreads), kThreads, 0, stream>>>(source, target, n / kPack);
      } else {
        convert_kernel<From, To, 1>
            <<<flat_blocks(n, kThreads), kThreads, 0, stream>>>(source, target, n);
      }
      check_launch("convert");
    });
  });
}

void dequantize_q8_0(const void* blocks, int64_t rows, int64_t cols, Element e, void* out,
                     cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count <= 0) return;
  constexpr int kThreads = 256;
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    dequantize_q8_0_kernel<T><<<flat_blocks(count, kThreads), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(blocks), count, static_cast<T*>(out));
    check_launch("dequantize_q8_0");
  });
}

void gemv_q8_0(Element e, const void* x, int64_t batch, int64_t k_in, const void* w, int64_t n_out,
               const void* bias, const void* residual, void* y, cudaStream_t stream) {
  if (batch <= 0 || n_out <= 0) return;
  if (k_in <= 0 || k_in % kQ8Values != 0)
    fail("gemv_q8_0: k_in ", k_in, " is not a whole number of blocks");
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    const auto* weights = static_cast<const uint8_t*>(w);
    // Copies of W need every row start aligned to the copy unit; a row is 34 · k/32 bytes, a
    // multiple of 16 when k/32 is a multiple of 8, and of 4 when k/32 is even.
    const int64_t row_bytes = k_in / kQ8Values * kQ8Bytes;
    const int chunk_bytes = aligned(w, 16) && row_bytes % 16 == 0 ? 16
                            : aligned(w, 4) && row_bytes % 4 == 0 ? 4
                                                                  : 2;
    // Rows of x start 16-byte aligned when x does, since k is a multiple of 32.
    const bool x_vector_loads = aligned(x, 16);
    for (int64_t b0 = 0; b0 < batch; b0 += kGemvMaxBatch) {
      const int count = static_cast<int>(std::min<int64_t>(kGemvMaxBatch, batch - b0));
      const T* xs = static_cast<const T*>(x) + b0 * k_in;
      const T* bias_values = static_cast<const T*>(bias);
      const T* residuals =
          residual == nullptr ? nullptr : static_cast<const T*>(residual) + b0 * n_out;
      T* ys = static_cast<T*>(y) + b0 * n_out;
      // Few batch rows: two output rows a warp keep registers few and warps many; more batch
      // rows: four output rows a warp reuse each x load more.
      if (count <= 1) {
        launch_gemv_q8_0<T, 1, 2>(chunk_bytes, xs, x_vector_loads, count, k_in, weights, n_out,
                                  bias_values, residuals, ys, stream);
      } else if (count <= 2) {
        launch_gemv_q8_0<T, 2, 2>(chunk_bytes, xs, x_vector_loads, count, k_in, weights, n_out,
                                  bias_values, residuals, ys, stream);
      } else if (count <= 4) {
        launch_gemv_q8_0<T, 4, 2>(chunk_bytes, xs, x_vector_loads, count, k_in, weights, n_out,
                                  bias_values, residuals, ys, stream);
      } else if (count <= 8) {
        launch_gemv_q8_0<T, 8, 4>(chunk_bytes, xs, x_vector_loads, count, k_in, weights, n_out,
                                  bias_values, residuals, ys, stream);
      } else {
        launch_gemv_q8_0<T, 16, 4>(chunk_bytes, xs, x_vector_loads, count, k_in, weights, n_out,
                                   bias_values, residuals, ys, stream);
      }
    }
  });
}

}  // namespace hark::compute::cuda
