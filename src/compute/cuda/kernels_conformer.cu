// The kernels of kernels_conformer.h. Most are elementwise or per-output-value loops, plain and
// memory-bound; the relative-position attention is the one that does real arithmetic (see its
// section). Kernels are templated on the activations' storage type and compute in F32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/kernels_conformer.h"

namespace hark::compute::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// ReLU that keeps NaN (as the CPU ops do) instead of turning it into 0.
__device__ __forceinline__ float relu_value(float x) {
  return x < 0.0f ? 0.0f : x;
}

// ---- Convolutional subsampling ----------------------------------------------------------------

// Both subsampling convolutions. One block per output row (b, t): threads along x take packs of
// N channels (16 bytes when the channels allow), threads along y the row's columns in turn. A
// thread keeps its channels' taps in registers and reads each input pixel once for all N of them
// (one value with one input channel, N neighbouring ones for a depthwise convolution), so loads
// are 1/N of the multiply-adds; writes are whole packs; no index is divided per output.
// kDepthwise: channel c reads input channel c of channels-last x; otherwise every channel reads
// the one channel of x. kKernel: the kernel size when known at compile time (3, every
// FastConformer), 0 for any other (taps then come from memory).
template <class T, bool kDepthwise, int kKernel, int N>
__global__ void conv2d_rows_kernel(const T* x, int64_t height, int64_t width, int64_t channels,
                                   const int32_t* heights, const T* w, const T* bias,
                                   int runtime_kernel, int stride, int padding, bool relu,
                                   int64_t out_height, int64_t out_width, T* y) {
  const int kernel = kKernel > 0 ? kKernel : runtime_kernel;
  const int64_t output_row = blockIdx.x;  // b · out_height + t
  const int64_t b = output_row / out_height, t = output_row - b * out_height;
  const int64_t valid_rows = min(static_cast<int64_t>(heights[b]), height);
  const int64_t in_channels = kDepthwise ? channels : 1;
  const T* image = x + b * height * width * in_channels;
  const int64_t first_input_row = t * stride - padding;
  const int64_t packs = channels / N;
  for (int64_t pack = threadIdx.x; pack < packs; pack += blockDim.x) {
    const int64_t c0 = pack * N;
    constexpr int kTaps = kKernel > 0 ? kKernel * kKernel : 1;
    float taps[kTaps][N];
    if constexpr (kKernel > 0) {
#pragma unroll
      for (int k = 0; k < kTaps; ++k) {
#pragma unroll
        for (int n = 0; n < N; ++n) taps[k][n] = to_float(w[(c0 + n) * kTaps + k]);
      }
    }
    float start[N];
    if (bias != nullptr) {
      load_pack(bias + c0, start);
    } else {
#pragma unroll
      for (int n = 0; n < N; ++n) start[n] = 0.0f;
    }
    const T* column_c = image + (kDepthwise ? c0 : 0);
    for (int64_t f = threadIdx.y; f < out_width; f += blockDim.y) {
      float sum[N];
#pragma unroll
      for (int n = 0; n < N; ++n) sum[n] = start[n];
      const int64_t first_col = f * stride - padding;
      // With kKernel > 0 both loops have constant bounds: unrolled, the taps stay in registers.
#pragma unroll
      for (int i = 0; i < kernel; ++i) {
        const int64_t row = first_input_row + i;
        if (row < 0 || row >= valid_rows) continue;
#pragma unroll
        for (int j = 0; j < kernel; ++j) {
          const int64_t col = first_col + j;
          if (col < 0 || col >= width) continue;
          float in[N];
          if constexpr (kDepthwise) {
            load_pack(column_c + (row * width + col) * in_channels, in);
          } else {
            const float value = to_float(column_c[row * width + col]);
#pragma unroll
            for (int n = 0; n < N; ++n) in[n] = value;
          }
#pragma unroll
          for (int n = 0; n < N; ++n) {
            float tap;
            if constexpr (kKernel > 0) {
              tap = taps[i * kernel + j][n];
            } else {
              tap = to_float(w[(c0 + n) * kernel * kernel + i * kernel + j]);
            }
            sum[n] = fmaf(tap, in[n], sum[n]);
          }
        }
      }
      if (relu) {
#pragma unroll
        for (int n = 0; n < N; ++n) sum[n] = relu_value(sum[n]);
      }
      store_pack(sum, y + (output_row * out_width + f) * channels + c0);
    }
  }
}

template <class T, bool kDepthwise>
void launch_conv2d_rows(const void* x, int batch, int64_t height, int64_t width, int64_t channels,
                        const int32_t* heights, const void* w, const void* bias, int kernel,
                        int stride, int padding, bool relu, int64_t out_height, int64_t out_width,
                        void* y, cudaStream_t stream) {
  const int64_t rows = batch * out_height;
  if (rows > INT32_MAX) fail("subsampling convolution: ", rows, " output rows are too many");
  auto launch = [&](auto kernel_size, auto pack) {
    constexpr int N = decltype(pack)::value;
    const int64_t packs = channels / N;
    const int along_x = static_cast<int>(std::min<int64_t>(kThreads, ceil_div(packs, 32) * 32));
    const int along_y = static_cast<int>(std::clamp<int64_t>(kThreads / along_x, 1, out_width));
    conv2d_rows_kernel<T, kDepthwise, decltype(kernel_size)::value, N>
        <<<static_cast<unsigned>(rows), dim3(along_x, along_y), 0, stream>>>(
            static_cast<const T*>(x), height, width, channels, heights, static_cast<const T*>(w),
            static_cast<const T*>(bias), kernel, stride, padding, relu, out_height, out_width,
            static_cast<T*>(y));
  };
  // Packs of 16 bytes: 8 channels of 16-bit values, 4 of F32.
  constexpr int kChannelPack = kWidePack<T>;
  const bool packed = packable(channels, kChannelPack, sizeof(T), {bias, y}) &&
                      (!kDepthwise || aligned(x, kChannelPack * sizeof(T)));
  if (kernel == 3 && packed) {
    launch(std::integral_constant<int, 3>{}, std::integral_constant<int, kChannelPack>{});
  } else if (kernel == 3) {
    launch(std::integral_constant<int, 3>{}, std::integral_constant<int, 1>{});
  } else {
    launch(std::integral_constant<int, 0>{}, std::integral_constant<int, 1>{});
  }
}

// ---- Elementwise ------------------------------------------------------------------------------

enum class Map { relu, silu, scale };

template <Map kMap>
__device__ __forceinline__ float mapped(float value, float factor) {
  if constexpr (kMap == Map::relu) {
    return relu_value(value);
  } else if constexpr (kMap == Map::silu) {
    return value * sigmoid(value);
  } else {
    return value * factor;
  }
}

// Packs of N values (N > 1 when x is aligned to whole packs); these maps are memory-bound.
template <class T, Map kMap, int N>
__global__ void map_kernel(T* x, int64_t packs, float factor) {
  HARK_FLAT_LOOP(pack, packs) {
    float values[N];
    load_pack(x + pack * N, values);
#pragma unroll
    for (int i = 0; i < N; ++i) values[i] = mapped<kMap>(values[i], factor);
    store_pack(values, x + pack * N);
  }
}

template <Map kMap>
void launch_map(Element e, void* x, int64_t n, float factor, cudaStream_t stream) {
  if (n <= 0) return;
  with_type(e, [&](auto type) {
    using T = decltype(type);
    constexpr int kPack = kWidePack<T>;
    if (packable(n, kPack, sizeof(T), {x})) {
      map_kernel<T, kMap, kPack><<<flat_blocks(n / kPack, kThreads), kThreads, 0, stream>>>(
          static_cast<T*>(x), n / kPack, factor);
    } else {
      map_kernel<T, kMap, 1>
          <<<flat_blocks(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(x), n, factor);
    }
  });
  check_launch("elementwise map");
}

// Rows along grid y, packs of N channels along x: no index is divided.
template <class T, int N>
__global__ void glu_kernel(const T* x, int64_t rows, int64_t channels, T* y) {
  const int64_t packs = channels / N;
  HARK_ROW_LOOP(r, rows) {
    const T* row = x + r * 2 * channels;
    HARK_PACK_LOOP(pack, packs) {
      float value[N], gate[N];
      load_pack(row + pack * N, value);
      load_pack(row + channels + pack * N, gate);
#pragma unroll
      for (int i = 0; i < N; ++i) value[i] *= sigmoid(gate[i]);
      store_pack(value, y + r * channels + pack * N);
    }
  }
}

template <class T, int N>
__global__ void biased_queries_kernel(const T* q, int64_t q_row_stride, int64_t rows, int64_t width,
                                      const T* bias_u, const T* bias_v, T* y) {
  const int64_t packs = width / N;
  HARK_ROW_LOOP(r, rows) {
    HARK_PACK_LOOP(pack, packs) {
      float value[N], u[N], v[N];
      load_pack(q + r * q_row_stride + pack * N, value);
      load_pack(bias_u + pack * N, u);
      load_pack(bias_v + pack * N, v);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        u[i] += value[i];
        v[i] += value[i];
      }
      store_pack(u, y + r * 2 * width + pack * N);
      store_pack(v, y + r * 2 * width + width + pack * N);
    }
  }
}

// ---- Depthwise 1-D convolution ----------------------------------------------------------------

// Rows (b, t) along grid y, packs of N channels along x; the taps of a channel are a column
// of w, read through the cache.
template <class T, int N>
__global__ void depthwise_conv1d_kernel(const T* x, int64_t steps, int64_t rows, int64_t channels,
                                        const int32_t* lengths, const T* w, const T* bias,
                                        int kernel, bool silu, T* y) {
  const int half = (kernel - 1) / 2;
  const int64_t packs = channels / N;
  HARK_ROW_LOOP(row, rows) {
    const int64_t b = row / steps, t = row - b * steps;
    const int64_t valid = min(static_cast<int64_t>(lengths[b]), steps);
    const T* sequence = x + b * steps * channels;
    HARK_PACK_LOOP(pack, packs) {
      const int64_t c0 = pack * N;
      float sum[N];
      if (bias != nullptr) {
        load_pack(bias + c0, sum);
      } else {
#pragma unroll
        for (int i = 0; i < N; ++i) sum[i] = 0.0f;
      }
      for (int j = 0; j < kernel; ++j) {
        const int64_t source = t + j - half;
        if (source < 0 || source >= valid) continue;
        float values[N];
        load_pack(sequence + source * channels + c0, values);
#pragma unroll
        for (int i = 0; i < N; ++i)
          sum[i] = fmaf(to_float(w[(c0 + i) * kernel + j]), values[i], sum[i]);
      }
      if (silu) {
#pragma unroll
        for (int i = 0; i < N; ++i) sum[i] *= sigmoid(sum[i]);
      }
      store_pack(sum, y + row * channels + c0);
    }
  }
}

// ---- Relative-position attention --------------------------------------------------------------
//
// One block per (query tile of kQueries, head, sequence), eight warps; each warp owns four
// queries of the tile and walks the keys in tiles of 32, one key per lane, with an online
// softmax (running maximum and sum per query, the output rescaled when the maximum grows). For
// every key tile the block stages in shared memory, as F32:
//   the keys and values of the tile [32, head_dim];
//   the band of the position table that the tile's (query, key) pairs read: query i and key j
//   read row steps − 1 − i + j, so the tile's pairs read kQueries + 31 consecutive rows, and pair
//   (query row r of the tile, lane) reads band row kQueries − 1 − r + lane.
// q + u and q + v' of the tile's queries are staged once. Rows are padded to head_dim + 1 floats
// so that 32 lanes reading 32 different rows at one column hit 32 different banks. A lane keeps
// the output columns lane, lane + 32, ... of its warp's four queries in registers.

constexpr int kAttentionWarps = 8;
constexpr int kQueries = 32;
constexpr int kKeys = 32;  // one per lane
constexpr int kQueriesPerWarp = kQueries / kAttentionWarps;
constexpr int kMaxHeadDim = 128;
constexpr int kColumnsPerLane = kMaxHeadDim / 32;

size_t attention_shared_bytes(int head_dim) {
  const size_t pitch = static_cast<size_t>(head_dim) + 1;
  const size_t rows = 2 * kQueries + 2 * kKeys + (kQueries + kKeys - 1);
  return rows * pitch * sizeof(float);
}

template <class T>
__global__ void __launch_bounds__(kAttentionWarps * 32)
    rel_pos_attention_kernel(const T* q, const T* k, const T* v, int64_t row_stride, const T* p,
                             int64_t p_row_stride, const T* bias_u, const T* bias_v,
                             const int32_t* lengths, int64_t steps, int head_dim, float scale,
                             T* out, int64_t out_row_stride) {
  extern __shared__ float shared[];
  const int pitch = head_dim + 1;
  float* q_u = shared;                   // [kQueries][pitch]
  float* q_v = q_u + kQueries * pitch;   // [kQueries][pitch]
  float* keys = q_v + kQueries * pitch;  // [kKeys][pitch]
  float* values = keys + kKeys * pitch;  // [kKeys][pitch]
  float* band = values + kKeys * pitch;  // [kQueries + kKeys − 1][pitch]

  const int64_t b = blockIdx.z;
  const int64_t head_offset = static_cast<int64_t>(blockIdx.y) * head_dim;
  const int64_t first_query = static_cast<int64_t>(blockIdx.x) * kQueries;
  const int64_t length = min(static_cast<int64_t>(lengths[b]), steps);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t sequence_row = b * steps;  // the sequence's first row in q, k, v, out
  const int64_t table_rows = 2 * steps - 1;

  for (int index = threadIdx.x; index < kQueries * head_dim; index += blockDim.x) {
    const int r = index / head_dim, d = index % head_dim;
    const int64_t i = first_query + r;
    const float value =
        i < length ? to_float(q[(sequence_row + i) * row_stride + head_offset + d]) : 0.0f;
    q_u[r * pitch + d] = value + to_float(bias_u[head_offset + d]);
    q_v[r * pitch + d] = value + to_float(bias_v[head_offset + d]);
  }

  float output[kQueriesPerWarp][kColumnsPerLane];
  float running_max[kQueriesPerWarp], running_sum[kQueriesPerWarp];
#pragma unroll
  for (int r = 0; r < kQueriesPerWarp; ++r) {
    running_max[r] = -INFINITY;
    running_sum[r] = 0.0f;
#pragma unroll
    for (int col = 0; col < kColumnsPerLane; ++col) output[r][col] = 0.0f;
  }

  // A tile of queries all past the length reads no keys: its rows are zeros.
  const int64_t key_end = first_query < length ? length : 0;
  for (int64_t first_key = 0; first_key < key_end; first_key += kKeys) {
    __syncthreads();  // the previous tile's readers are done
    for (int index = threadIdx.x; index < kKeys * head_dim; index += blockDim.x) {
      const int r = index / head_dim, d = index % head_dim;
      const int64_t j = first_key + r;
      const int64_t at = (sequence_row + j) * row_stride + head_offset + d;
      keys[r * pitch + d] = j < length ? to_float(k[at]) : 0.0f;
      values[r * pitch + d] = j < length ? to_float(v[at]) : 0.0f;
    }
    const int64_t first_row = steps - 1 - (first_query + kQueries - 1) + first_key;
    for (int index = threadIdx.x; index < (kQueries + kKeys - 1) * head_dim; index += blockDim.x) {
      const int r = index / head_dim, d = index % head_dim;
      const int64_t row = first_row + r;
      band[r * pitch + d] =
          row >= 0 && row < table_rows ? to_float(p[row * p_row_stride + head_offset + d]) : 0.0f;
    }
    __syncthreads();

    const int64_t j = first_key + lane;
#pragma unroll
    for (int r = 0; r < kQueriesPerWarp; ++r) {
      const int query = warp + kAttentionWarps * r;  // row within the tile
      const int64_t i = first_query + query;
      float score = -INFINITY;
      if (i < length && j < length) {
        const float* qu = q_u + query * pitch;
        const float* qv = q_v + query * pitch;
        const float* key = keys + lane * pitch;
        const float* position = band + (kQueries - 1 - query + lane) * pitch;
        float content = 0.0f, relative = 0.0f;
        for (int d = 0; d < head_dim; ++d) {
          content = fmaf(qu[d], key[d], content);
          relative = fmaf(qv[d], position[d], relative);
        }
        score = scale * content + scale * relative;  // each term scaled, as transformers does
      }
      const float new_max = fmaxf(running_max[r], warp_max(score));
      if (new_max == -INFINITY) continue;  // the same in every lane: a query past the length
      const float correction = expf(running_max[r] - new_max);
      const float weight = expf(score - new_max);
      running_sum[r] = running_sum[r] * correction + warp_sum(weight);
      running_max[r] = new_max;
#pragma unroll
      for (int col = 0; col < kColumnsPerLane; ++col) output[r][col] *= correction;
      for (int key = 0; key < kKeys; ++key) {
        const float key_weight = __shfl_sync(kFullWarp, weight, key);
        const float* value = values + key * pitch;
#pragma unroll
        for (int col = 0; col < kColumnsPerLane; ++col) {
          const int d = lane + 32 * col;
          if (d < head_dim) output[r][col] = fmaf(key_weight, value[d], output[r][col]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kQueriesPerWarp; ++r) {
    const int64_t i = first_query + warp + kAttentionWarps * r;
    if (i >= steps) continue;
    const bool valid = i < length && running_sum[r] > 0.0f;
    const float inverse = valid ? 1.0f / running_sum[r] : 0.0f;
    T* row = out + (sequence_row + i) * out_row_stride + head_offset;
#pragma unroll
    for (int col = 0; col < kColumnsPerLane; ++col) {
      const int d = lane + 32 * col;
      if (d < head_dim) row[d] = from_float<T>(valid ? output[r][col] * inverse : 0.0f);
    }
  }
}

// ---- Heads ------------------------------------------------------------------------------------

// Keeps (value, index) the larger of the two; ties go to the lower index.
__device__ __forceinline__ void keep_better(float& value, int64_t& index, float other_value,
                                            int64_t other_index) {
  if (other_value > value || (other_value == value && other_index < index)) {
    value = other_value;
    index = other_index;
  }
}

// The (value, index) of the best of a block's candidates, in every thread; `values` and
// `indices` are the block's shared slots, one per warp, reused after a closing barrier.
__device__ void block_best(float& value, int64_t& index, float* values, int64_t* indices) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_value = __shfl_xor_sync(kFullWarp, value, offset);
    const long long other_index = __shfl_xor_sync(kFullWarp, static_cast<long long>(index), offset);
    keep_better(value, index, other_value, other_index);
  }
  if (lane == 0) {
    values[warp] = value;
    indices[warp] = index;
  }
  __syncthreads();
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
    keep_better(value, index, values[w], indices[w]);
  }
  __syncthreads();
}

// One block per row: every thread scans its columns, then the block reduces.
template <class T>
__global__ void finish_logits_kernel(float* logits, const T* bias, int64_t rows, int64_t cols,
                                     int64_t split, int32_t* first, int32_t* second) {
  __shared__ float best_values[kThreads / 32];
  __shared__ int64_t best_indices[kThreads / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float* line = logits + row * cols;
    float token_value = -INFINITY, duration_value = -INFINITY;
    int64_t token = LLONG_MAX, duration = LLONG_MAX;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float logit = bias != nullptr ? line[c] + to_float(bias[c]) : line[c];
      line[c] = logit;
      if (c < split) {
        keep_better(token_value, token, logit, c);
      } else {
        keep_better(duration_value, duration, logit, c);
      }
    }
    block_best(token_value, token, best_values, best_indices);
    block_best(duration_value, duration, best_values, best_indices);
    // No column ever won (all NaN, or an empty part): the part's first one.
    if (threadIdx.x == 0) {
      first[row] = token == LLONG_MAX ? 0 : static_cast<int32_t>(token);
      if (second != nullptr)
        second[row] = duration == LLONG_MAX ? 0 : static_cast<int32_t>(duration - split);
    }
  }
}

template <class T>
__global__ void embedding_kernel(const T* table, const int32_t* ids, int64_t n, int64_t cols,
                                 T* y) {
  const int64_t count = n * cols;
  HARK_FLAT_LOOP(i, count) {
    const int64_t row = i / cols, c = i % cols;
    const int32_t id = ids[row];
    if (id >= 0) y[i] = table[static_cast<int64_t>(id) * cols + c];
  }
}

template <class T>
__global__ void lstm_cell_kernel(const T* gates, const int32_t* ids, int64_t batch, int64_t hidden,
                                 float* c, T* h) {
  const int64_t count = batch * hidden;
  HARK_FLAT_LOOP(i, count) {
    const int64_t b = i / hidden, j = i % hidden;
    if (ids[b] < 0) continue;
    const T* row = gates + b * 4 * hidden;
    const float input_gate = sigmoid(to_float(row[j]));
    const float forget_gate = sigmoid(to_float(row[hidden + j]));
    const float candidate = tanhf(to_float(row[2 * hidden + j]));
    const float output_gate = sigmoid(to_float(row[3 * hidden + j]));
    const float cell = forget_gate * c[i] + input_gate * candidate;
    c[i] = cell;
    h[i] = from_float<T>(output_gate * tanhf(cell));
  }
}

template <class T>
__global__ void copy_rows_where_kernel(const T* x, const int32_t* ids, int64_t rows, int64_t cols,
                                       T* y) {
  const int64_t count = rows * cols;
  HARK_FLAT_LOOP(i, count) {
    if (ids[i / cols] >= 0) y[i] = x[i];
  }
}

template <class T>
__global__ void joint_hidden_kernel(const T* encoder, const T* prediction, const int32_t* rows,
                                    int64_t n, int64_t cols, T* y) {
  const int64_t count = n * cols;
  HARK_FLAT_LOOP(i, count) {
    const int64_t step = i / cols, c = i % cols;
    const float sum = to_float(encoder[static_cast<int64_t>(rows[step]) * cols + c]) +
                      to_float(prediction[static_cast<int64_t>(rows[n + step]) * cols + c]);
    y[i] = from_float<T>(relu_value(sum));
  }
}

#undef HARK_FLAT_LOOP

int64_t conv_output_size(int64_t size, int kernel, int stride, int padding) {
  return (size + 2 * padding - kernel) / stride + 1;
}

}  // namespace

void conv2d_one_channel(Element e, const void* x, int batch, int64_t height, int64_t width,
                        const int32_t* heights, const void* w, const void* bias, int64_t channels,
                        int kernel, int stride, int padding, bool relu, void* y,
                        cudaStream_t stream) {
  const int64_t out_height = conv_output_size(height, kernel, stride, padding);
  const int64_t out_width = conv_output_size(width, kernel, stride, padding);
  if (batch <= 0 || out_height <= 0 || out_width <= 0 || channels <= 0) return;
  with_type(e, [&](auto type) {
    launch_conv2d_rows<decltype(type), false>(x, batch, height, width, channels, heights, w, bias,
                                              kernel, stride, padding, relu, out_height, out_width,
                                              y, stream);
  });
  check_launch("conv2d_one_channel");
}

void depthwise_conv2d(Element e, const void* x, int batch, int64_t height, int64_t width,
                      int64_t channels, const int32_t* heights, const void* w, const void* bias,
                      int kernel, int stride, int padding, void* y, cudaStream_t stream) {
  const int64_t out_height = conv_output_size(height, kernel, stride, padding);
  const int64_t out_width = conv_output_size(width, kernel, stride, padding);
  if (batch <= 0 || out_height <= 0 || out_width <= 0 || channels <= 0) return;
  with_type(e, [&](auto type) {
    launch_conv2d_rows<decltype(type), true>(x, batch, height, width, channels, heights, w, bias,
                                             kernel, stride, padding, /*relu=*/false, out_height,
                                             out_width, y, stream);
  });
  check_launch("depthwise_conv2d");
}

void relu(Element e, void* x, int64_t n, cudaStream_t stream) {
  launch_map<Map::relu>(e, x, n, 1.0f, stream);
}

void silu(Element e, void* x, int64_t n, cudaStream_t stream) {
  launch_map<Map::silu>(e, x, n, 1.0f, stream);
}

void scale(Element e, void* x, int64_t n, float factor, cudaStream_t stream) {
  launch_map<Map::scale>(e, x, n, factor, stream);
}

void glu(Element e, const void* x, int64_t rows, int64_t channels, void* y, cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  with_type(e, [&](auto type) {
    using T = decltype(type);
    auto launch = [&](auto pack) {
      constexpr int N = decltype(pack)::value;
      const RowLaunch shape = row_launch(rows, channels / N);
      glu_kernel<T, N><<<shape.grid, shape.block, 0, stream>>>(static_cast<const T*>(x), rows,
                                                               channels, static_cast<T*>(y));
    };
    if (packable(channels, kWidePack<T>, sizeof(T), {x, y})) {
      launch(std::integral_constant<int, kWidePack<T>>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
  });
  check_launch("glu");
}

void biased_queries(Element e, const void* q, int64_t q_row_stride, int64_t rows, int64_t width,
                    const void* bias_u, const void* bias_v, void* y, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return;
  with_type(e, [&](auto type) {
    using T = decltype(type);
    auto launch = [&](auto pack) {
      constexpr int N = decltype(pack)::value;
      const RowLaunch shape = row_launch(rows, width / N);
      biased_queries_kernel<T, N><<<shape.grid, shape.block, 0, stream>>>(
          static_cast<const T*>(q), q_row_stride, rows, width, static_cast<const T*>(bias_u),
          static_cast<const T*>(bias_v), static_cast<T*>(y));
    };
    if (packable(width, kWidePack<T>, sizeof(T), {q, bias_u, bias_v, y}) &&
        q_row_stride % kWidePack<T> == 0) {
      launch(std::integral_constant<int, kWidePack<T>>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
  });
  check_launch("biased_queries");
}

void depthwise_conv1d(Element e, const void* x, int batch, int64_t steps, int64_t channels,
                      const int32_t* lengths, const void* w, const void* bias, int kernel,
                      bool silu, void* y, cudaStream_t stream) {
  const int64_t rows = batch * steps;
  if (rows <= 0 || channels <= 0) return;
  with_type(e, [&](auto type) {
    using T = decltype(type);
    auto launch = [&](auto pack) {
      constexpr int N = decltype(pack)::value;
      const RowLaunch shape = row_launch(rows, channels / N);
      depthwise_conv1d_kernel<T, N><<<shape.grid, shape.block, 0, stream>>>(
          static_cast<const T*>(x), steps, rows, channels, lengths, static_cast<const T*>(w),
          static_cast<const T*>(bias), kernel, silu, static_cast<T*>(y));
    };
    if (packable(channels, kWidePack<T>, sizeof(T), {x, bias, y})) {
      launch(std::integral_constant<int, kWidePack<T>>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
  });
  check_launch("depthwise_conv1d");
}

void rel_pos_attention(Element e, const void* q, const void* k, const void* v, int64_t row_stride,
                       const void* p, int64_t p_row_stride, const void* bias_u, const void* bias_v,
                       const int32_t* lengths, int batch, int64_t steps, int heads, int head_dim,
                       float scale, void* out, int64_t out_row_stride, cudaStream_t stream) {
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    fail("rel_pos_attention: head size ", head_dim, " (1 to ", kMaxHeadDim, " supported)");
  }
  if (batch <= 0 || steps <= 0 || heads <= 0) return;
  if (batch > 65535 || heads > 65535 || ceil_div(steps, kQueries) > INT_MAX) {
    fail("rel_pos_attention: ", batch, " sequences of ", steps, " steps and ", heads,
         " heads are too many for one launch");
  }
  const size_t shared_bytes = attention_shared_bytes(head_dim);
  const dim3 grid(static_cast<unsigned>(ceil_div(steps, kQueries)), static_cast<unsigned>(heads),
                  static_cast<unsigned>(batch));
  with_type(e, [&](auto type) {
    using T = decltype(type);
    // More than the default 48 KB of shared memory must be asked for (once per instantiation).
    static const cudaError_t opted_in = cudaFuncSetAttribute(
        rel_pos_attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(attention_shared_bytes(kMaxHeadDim)));
    check(opted_in, "rel_pos_attention shared memory");
    rel_pos_attention_kernel<T><<<grid, kAttentionWarps * 32, shared_bytes, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), row_stride,
        static_cast<const T*>(p), p_row_stride, static_cast<const T*>(bias_u),
        static_cast<const T*>(bias_v), lengths, steps, head_dim, scale, static_cast<T*>(out),
        out_row_stride);
  });
  check_launch("rel_pos_attention");
}

void finish_logits(Element e, float* logits, const void* bias, int64_t rows, int64_t cols,
                   int64_t split, int32_t* first, int32_t* second, cudaStream_t stream) {
  if (rows <= 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65535));
  with_type(e, [&](auto type) {
    using T = decltype(type);
    finish_logits_kernel<T><<<blocks, kThreads, 0, stream>>>(logits, static_cast<const T*>(bias),
                                                             rows, cols, split, first, second);
  });
  check_launch("finish_logits");
}

void embedding(Element e, const void* table, const int32_t* ids, int64_t n, int64_t cols, void* y,
               cudaStream_t stream) {
  const int64_t count = n * cols;
  if (count <= 0) return;
  with_type(e, [&](auto type) {
    using T = decltype(type);
    embedding_kernel<T><<<flat_blocks(count, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(table), ids, n, cols, static_cast<T*>(y));
  });
  check_launch("embedding");
}

void lstm_cell(Element e, const void* gates, const int32_t* ids, int64_t batch, int64_t hidden,
               float* c, void* h, cudaStream_t stream) {
  const int64_t count = batch * hidden;
  if (count <= 0) return;
  with_type(e, [&](auto type) {
    using T = decltype(type);
    lstm_cell_kernel<T><<<flat_blocks(count, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(gates), ids, batch, hidden, c, static_cast<T*>(h));
  });
  check_launch("lstm_cell");
}

void copy_rows_where(Element e, const void* x, const int32_t* ids, int64_t rows, int64_t cols,
                     void* y, cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count <= 0) return;
  with_type(e, [&](auto type) {
    using T = decltype(type);
    copy_rows_where_kernel<T><<<flat_blocks(count, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), ids, rows, cols, static_cast<T*>(y));
  });
  check_launch("copy_rows_where");
}

void joint_hidden(Element e, const void* encoder, const void* prediction, const int32_t* rows,
                  int64_t n, int64_t cols, void* y, cudaStream_t stream) {
  const int64_t count = n * cols;
  if (count <= 0) return;
  with_type(e, [&](auto type) {
    using T = decltype(type);
    joint_hidden_kernel<T><<<flat_blocks(count, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(encoder), static_cast<const T*>(prediction), rows, n, cols,
        static_cast<T*>(y));
  });
  check_launch("joint_hidden");
}

}  // namespace hark::compute::cuda
