// The elementwise and per-row kernels of kernels.h. Kernels are templated on the activations'
// storage type (float, half, __nv_bfloat16) and compute in F32; each launcher picks the
// instantiation from the Element it is given.
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
  allow_dependent_kernels();  // for a product launched as a dependent (decode_linear)
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
  allow_dependent_kernels();  // for a product launched as a dependent (decode_linear)
  const int lane = threadIdx.x % 32;
  const int64_t packs = cols / kPack;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / 32;
       row < rows; row += static_cast<int64_t>(gridDim.x) * kWarpRowsPerBlock) {
    const T* in = x + row * cols;
    float values[kPacks][kPack];
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      const int64_t pack = lane + 32 * i;
      if (pack < packs) {
        load_pack(in + pack * kPack, values[i]);
      } else {
#pragma unroll
        for (int j = 0; j < kPack; ++j) values[i][j] = 0.0f;
      }
    }
    const RowStatistics statistics = row_statistics(
        values, [&](int i) { return lane + 32 * i < packs; }, static_cast<float>(cols), eps,
        [](float value) { return warp_sum(value); });
    T* out = y + row * cols;
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      const int64_t pack = lane + 32 * i;
      if (pack >= packs) continue;
      float g[kPack], b[kPack];
      load_pack(gamma + pack * kPack, g);
      load_pack(beta + pack * kPack, b);
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        values[i][j] = (values[i][j] - statistics.mean) * statistics.inverse * g[j] + b[j];
      }
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
  allow_dependent_kernels();  // for a product launched as a dependent (decode_linear)
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

// Value i (in row order) of a Q8_0 matrix in the device layout (kernels.h): its rows are whole
// blocks of 32, so the scale's index is i / 32 whatever the row length.
__device__ __forceinline__ float q8_0_value(const int8_t* quants, const __half* scales, int64_t i) {
  return __half2float(scales[i / 32]) * static_cast<float>(quants[i]);
}

template <class T, int N, bool kQ8Tokens>
__global__ void embed_kernel(const void* tokens, const __half* token_scales, const T* positions,
                             const int32_t* ids, const int32_t* position_ids, int64_t n,
                             int64_t cols, T* y) {
  const int64_t packs = cols / N;
  HARK_ROW_LOOP(row, n) {
    const int64_t id = ids[row];
    const T* position = positions + static_cast<int64_t>(position_ids[row]) * cols;
    T* out = y + row * cols;
    HARK_PACK_LOOP(pack, packs) {
      float values[N], offsets[N];
      if constexpr (kQ8Tokens) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
          values[i] = q8_0_value(static_cast<const int8_t*>(tokens), token_scales,
                                 id * cols + pack * N + i);
        }
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

// 16 quants a thread (one 16-byte load, half a block: one scale), 16 values out.
template <class T>
__global__ void dequantize_q8_0_kernel(const uint4* quants, const __half* scales, int64_t packs,
                                       T* out) {
  HARK_FLAT_LOOP(pack, packs) {
    const uint4 q = quants[pack];
    const __half scale = scales[pack / 2];
    T* const target = out + pack * 16;
    if constexpr (sizeof(T) == 2) {
      reinterpret_cast<uint4*>(target)[0] = q8x8_times_scale<T>(q.x, q.y, scale);
      reinterpret_cast<uint4*>(target)[1] = q8x8_times_scale<T>(q.z, q.w, scale);
    } else {
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        float values[4];
        q8x4_times_scale(words[w], __half2float(scale), values);
        store_pack(values, target + 4 * w);
      }
    }
  }
}

#undef HARK_ROW_LOOP
#undef HARK_PACK_LOOP
#undef HARK_FLAT_LOOP

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

void embed(Element e, const void* tokens, const void* token_scales, const void* positions,
           const int32_t* ids, const int32_t* position_ids, int64_t n, int64_t cols, void* y,
           cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    const auto* position_table = static_cast<const T*>(positions);
    auto* out = static_cast<T*>(y);
    constexpr int kPack = kWidePack<T>;
    // A Q8_0 table is read per value, so only the element-typed operands decide on packs.
    const bool q8_tokens = token_scales != nullptr;
    const bool packed =
        packable(cols, kPack, sizeof(T), {q8_tokens ? nullptr : tokens, positions, y});
    const RowLaunch launch = row_launch(n, packed ? cols / kPack : cols);
    const auto* scales = static_cast<const __half*>(token_scales);
    auto run = [&](auto pack, auto q8) {
      embed_kernel<T, decltype(pack)::value, decltype(q8)::value>
          <<<launch.grid, launch.block, 0, stream>>>(tokens, scales, position_table, ids,
                                                     position_ids, n, cols, out);
    };
    using One = std::integral_constant<int, 1>;
    using Wide = std::integral_constant<int, kPack>;
    if (packed) {
      q8_tokens ? run(Wide{}, std::true_type{}) : run(Wide{}, std::false_type{});
    } else {
      q8_tokens ? run(One{}, std::true_type{}) : run(One{}, std::false_type{});
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

void dequantize_q8_0(const void* w, int64_t rows, int64_t cols, Element e, void* out,
                     cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count <= 0) return;
  if (cols % 32 != 0) fail("dequantize_q8_0: ", cols, " columns are not whole blocks of 32");
  if (!aligned(w, 16) || !aligned(out, 16)) {
    fail("dequantize_q8_0: the matrix and the output must be 16-byte aligned");
  }
  constexpr int kThreads = 256;
  const int64_t packs = count / 16;
  const auto* quants = static_cast<const uint4*>(w);
  const auto* scales = reinterpret_cast<const __half*>(static_cast<const uint8_t*>(w) +
                                                       q8_0_scales_offset(rows, cols));
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    dequantize_q8_0_kernel<T><<<flat_blocks(packs, kThreads), kThreads, 0, stream>>>(
        quants, scales, packs, static_cast<T*>(out));
    check_launch("dequantize_q8_0");
  });
}

}  // namespace hark::compute::cuda
