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
#include <vector>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/kernels_conformer.h"

namespace hark::compute::cuda {

namespace {

constexpr int kThreads = 256;

// ---- Convolutional subsampling ----------------------------------------------------------------

// Both subsampling convolutions. A block computes a tile of up to tile_rows × tile_cols output
// pixels of one image (8 rows of 64 columns: whole rows of FastConformer's images): threads along
// x take packs of N channels (16 bytes when the channels allow), threads along y the tile's
// columns in turn. A thread loads the taps of its channels once, as whole packs of tap-major w,
// keeps them in registers and walks its pixels of the tile, so that loading taps, bias and
// indices is spread over many outputs; writes are whole packs, contiguous across a warp. Inputs:
//   one channel (kDepthwise false): the block first stages the patch of x that its tile reads in
//   shared memory, as F32 with zeros outside the image and at rows past the valid ones; every
//   value then goes to all packs of channels (one address per warp: a broadcast), with no bound
//   to check per tap.
//   depthwise: channel c reads channel c of channels-last x, a pack per tap, through the cache
//   (neighbouring pixels share most of their inputs, and the tile's rows are in one block).
// kKernel: the kernel size when known at compile time (3, every FastConformer), 0 for any other
// (taps then come from memory for every use).
constexpr int kConvTileRows = 8;
constexpr int kConvTileCols = 64;
// Patch values a thread of the one-channel convolution stages at a time.
constexpr int kConvStageBatch = 4;
// Shared memory a block may use without opting in to more.
constexpr int64_t kMaxSharedBytes = 48 * 1024;

template <class T, bool kDepthwise, int kKernel, int N>
__global__ void __launch_bounds__(kThreads)
    conv2d_tiles_kernel(const T* x, int64_t height, int64_t width, int64_t channels,
                        const int32_t* heights, const T* w, const T* bias, int runtime_kernel,
                        int stride, int padding, bool relu, int64_t out_height, int64_t out_width,
                        int64_t row_tiles, int tile_rows, int tile_cols, T* y) {
  // One channel: [patch_rows][patch_cols], the input rows and columns of the tile.
  extern __shared__ __align__(16) float patch[];
  const int kernel = kKernel > 0 ? kKernel : runtime_kernel;
  const int64_t b = blockIdx.x / row_tiles;
  const int64_t first_row = (blockIdx.x - b * row_tiles) * tile_rows;
  const int64_t first_col = static_cast<int64_t>(blockIdx.y) * tile_cols;
  const int rows = static_cast<int>(min(static_cast<int64_t>(tile_rows), out_height - first_row));
  const int cols = static_cast<int>(min(static_cast<int64_t>(tile_cols), out_width - first_col));
  const int64_t valid_rows = min(static_cast<int64_t>(heights[b]), height);
  const int64_t in_channels = kDepthwise ? channels : 1;
  const T* image = x + b * height * width * in_channels;
  // The input pixel under tap (0, 0) of the tile's first output.
  const int64_t top = first_row * stride - padding, left = first_col * stride - padding;
  const int patch_cols = (cols - 1) * stride + kernel;
  if constexpr (!kDepthwise) {
    // kConvStageBatch values per thread at a time, all loaded before any is stored, so that each
    // thread keeps several loads in flight.
    const int patch_values = ((rows - 1) * stride + kernel) * patch_cols;
    const int thread = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    for (int first = thread; first < patch_values; first += kConvStageBatch * threads) {
      float values[kConvStageBatch];
#pragma unroll
      for (int k = 0; k < kConvStageBatch; ++k) {
        const int at = first + k * threads;
        const int64_t row = top + at / patch_cols, col = left + at % patch_cols;
        const bool inside =
            at < patch_values && row >= 0 && row < valid_rows && col >= 0 && col < width;
        values[k] = inside ? to_float(image[row * width + col]) : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kConvStageBatch; ++k) {
        const int at = first + k * threads;
        if (at < patch_values) patch[at] = values[k];
      }
    }
    __syncthreads();
  }
  const int64_t packs = channels / N;
  for (int64_t pack = threadIdx.x; pack < packs; pack += blockDim.x) {
    const int64_t c0 = pack * N;
    constexpr int kTaps = kKernel > 0 ? kKernel * kKernel : 1;
    float taps[kTaps][N];
    if constexpr (kKernel > 0) {
#pragma unroll
      for (int k = 0; k < kTaps; ++k) load_pack(w + k * channels + c0, taps[k]);
    }
    float start[N];
    load_pack_or_zeros(bias, c0, start);
    for (int r = 0; r < rows; ++r) {
      T* out = y + ((b * out_height + first_row + r) * out_width + first_col) * channels + c0;
      for (int f = threadIdx.y; f < cols; f += blockDim.y) {
        // With kKernel > 0 both loops over taps have constant bounds: unrolled, the taps stay in
        // registers.
        float sum[N];
#pragma unroll
        for (int n = 0; n < N; ++n) sum[n] = start[n];
#pragma unroll
        for (int i = 0; i < kernel; ++i) {
          const int64_t row = top + r * stride + i;
          if (kDepthwise && (row < 0 || row >= valid_rows)) continue;
#pragma unroll
          for (int j = 0; j < kernel; ++j) {
            float in[N];
            if constexpr (kDepthwise) {
              const int64_t col = left + f * stride + j;
              if (col < 0 || col >= width) continue;
              load_pack(image + (row * width + col) * channels + c0, in);
            } else {
              const float value = patch[(r * stride + i) * patch_cols + f * stride + j];
#pragma unroll
              for (int n = 0; n < N; ++n) in[n] = value;
            }
            float tap[N];
            if constexpr (kKernel > 0) {
#pragma unroll
              for (int n = 0; n < N; ++n) tap[n] = taps[i * kernel + j][n];
            } else {
              load_pack(w + (i * kernel + j) * channels + c0, tap);
            }
#pragma unroll
            for (int n = 0; n < N; ++n) sum[n] = fmaf(tap[n], in[n], sum[n]);
          }
        }
        if (relu) {
#pragma unroll
          for (int n = 0; n < N; ++n) sum[n] = relu_value(sum[n]);
        }
        store_pack(sum, out + f * channels);
      }
    }
  }
}

template <class T, bool kDepthwise>
void launch_conv2d_tiles(const void* x, int batch, int64_t height, int64_t width, int64_t channels,
                         const int32_t* heights, const void* w, const void* bias, int kernel,
                         int stride, int padding, bool relu, int64_t out_height, int64_t out_width,
                         void* y, cudaStream_t stream) {
  const char* name = kDepthwise ? "depthwise_conv2d" : "conv2d_one_channel";
  int tile_rows = static_cast<int>(std::min<int64_t>(kConvTileRows, out_height));
  int tile_cols = static_cast<int>(std::min<int64_t>(kConvTileCols, out_width));
  auto patch_bytes = [&] {
    if (kDepthwise) return int64_t{0};
    return static_cast<int64_t>(sizeof(float)) * ((tile_rows - 1) * int64_t{stride} + kernel) *
           ((tile_cols - 1) * int64_t{stride} + kernel);
  };
  // Large kernels or strides: smaller tiles, so that the patch fits.
  while (patch_bytes() > kMaxSharedBytes && (tile_cols > 1 || tile_rows > 1)) {
    if (tile_cols > 1) {
      tile_cols = (tile_cols + 1) / 2;
    } else {
      tile_rows = (tile_rows + 1) / 2;
    }
  }
  if (patch_bytes() > kMaxSharedBytes) fail(name, ": a kernel of ", kernel, " is too large");
  const int64_t row_tiles = ceil_div(out_height, tile_rows);
  const int64_t blocks_x = batch * row_tiles, blocks_y = ceil_div(out_width, tile_cols);
  if (blocks_x > INT32_MAX || blocks_y > kMaxBlocksY) {
    fail(name, ": ", batch, " images of ", out_height, " × ", out_width, " outputs are too many");
  }
  auto launch = [&](auto kernel_size, auto pack) {
    constexpr int N = decltype(pack)::value;
    const int64_t packs = channels / N;
    const int along_x = static_cast<int>(std::min<int64_t>(kThreads, ceil_div(packs, 32) * 32));
    const int along_y = std::clamp(kThreads / along_x, 1, tile_cols);
    conv2d_tiles_kernel<T, kDepthwise, decltype(kernel_size)::value, N>
        <<<dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y)),
           dim3(along_x, along_y), static_cast<size_t>(patch_bytes()), stream>>>(
            static_cast<const T*>(x), height, width, channels, heights, static_cast<const T*>(w),
            static_cast<const T*>(bias), kernel, stride, padding, relu, out_height, out_width,
            row_tiles, tile_rows, tile_cols, static_cast<T*>(y));
  };
  // Packs of 16 bytes: 8 channels of 16-bit values, 4 of F32.
  constexpr int kChannelPack = kWidePack<T>;
  const bool packed = packable(channels, kChannelPack, sizeof(T), {w, bias, y}) &&
                      (!kDepthwise || aligned(x, kChannelPack * sizeof(T)));
  if (kernel == 3 && packed) {
    launch(std::integral_constant<int, 3>{}, std::integral_constant<int, kChannelPack>{});
  } else if (packed) {
    launch(std::integral_constant<int, 0>{}, std::integral_constant<int, kChannelPack>{});
  } else {
    launch(std::integral_constant<int, 0>{}, std::integral_constant<int, 1>{});
  }
}

// ---- The first convolution and the second stage's depthwise convolution, fused ---------------
//
// The first subsampling image s1 (conv2d_one_channel with ReLU: C channels at half the features'
// resolution) is the largest tensor of the encoder: written by one kernel and read back by the
// next, it costs more memory traffic than the rest of the subsampling together. Here a block
// computes the region of s1 that its tile of second-stage outputs reads into shared memory, then
// the depthwise convolution from there: s1 never leaves the chip. Kernel 3, stride 2, padding 1
// (every FastConformer) only, with the sizes below fixed at compile time.
//
// A block: one image, up to kFusedTileRows × kFusedTileCols outputs (whole rows for 128 mels
// and for 80, whose outputs are 32 and 20 columns wide) and one group of kFusedGroupPacks packs
// of N channels (16 bytes each). Threads along x take the group's packs, threads along y
// (kFusedPixelLanes) the pixels, in three phases:
//   1. the patch of x under the tile, 2 · (2 · rows + 1) + 1 rows × 2 · (2 · cols + 1) + 1
//      columns, into shared memory as F32, with zeros outside the image and at rows past
//      heights[b] (as conv2d_one_channel reads them), a warp per patch row so that loads are
//      contiguous and no index is divided; each thread's loads all in flight at once;
//   2. the region of s1, (2 · rows + 1) × (2 · cols + 1) pixels of the group's channels, each
//      computed once: ReLU(bias + Σ taps · patch) rounded to T, exactly as conv2d_one_channel
//      stores it, and zeros outside s1 and at rows past middle_heights[b] (what depthwise_conv2d
//      reads there);
//   3. the outputs from that region, written as whole packs, a pixel's group contiguous.
// Both sums take their taps in the same order as the unfused kernels, so the results are the
// same bits. A thread holds one stage's taps in registers at a time (9 · N values).
//
// Shared memory holds s1's even columns, then its odd ones ([rows][cols + 1] and [rows][cols]
// pixels of kFusedGroupPacks packs): output column f reads columns 2f, 2f + 1, 2f + 2, that is
// pixel f of the odd plane and pixels f, f + 1 of the even one, so the lanes of a warp, on
// consecutive output columns, read consecutive 16-byte words (no bank conflicts). Phase 2 walks
// each row's even columns, then its odd ones, so that its stores are consecutive words too, and
// its patch reads, 4 columns apart from lane to lane, fall in distinct banks.
//
// Rows of outputs per tile trade recomputation (a tile's s1 region overlaps the next one by a row:
// 17 rows for 16) against shared memory: 87 KB at 8 rows × 32 columns, and registers (the taps)
// allow two blocks of 256 threads per SM anyway.
constexpr int kFusedTileRows = 8;
constexpr int kFusedTileCols = 32;
constexpr int kFusedGroupPacks = 4;
constexpr int kFusedPixelLanes = kThreads / kFusedGroupPacks;
constexpr int kFusedTaps = 9;

// The s1 rows or columns a tile of `outputs` second-stage rows or columns reads, and the x rows
// or columns those read (stride 2, kernel 3).
__host__ __device__ constexpr int fused_middle_size(int outputs) {
  return 2 * outputs + 1;
}
__host__ __device__ constexpr int fused_patch_size(int outputs) {
  return 2 * fused_middle_size(outputs) + 1;
}

// The shared memory of a tile: the s1 region (16-byte packs), then the patch (F32).
constexpr int64_t fused_shared_bytes(int rows, int cols) {
  return int64_t{fused_middle_size(rows)} * fused_middle_size(cols) * kFusedGroupPacks * 16 +
         int64_t{fused_patch_size(rows)} * fused_patch_size(cols) * int64_t{sizeof(float)};
}

// A 16-byte pack of kWidePack<T> values rounded to T (to nearest even, as from_float), as the
// raw word of one 16-byte store (shared or global): pairs convert in one instruction each,
// straight into the word.
template <class T>
__device__ __forceinline__ uint4 wide_pack(const float (&in)[kWidePack<T>]) {
  uint32_t words[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (std::is_same_v<T, float>) {
      words[k] = __float_as_uint(in[k]);
    } else if constexpr (std::is_same_v<T, __half>) {
      const __half2 pair = __floats2half2_rn(in[2 * k], in[2 * k + 1]);
      memcpy(&words[k], &pair, sizeof pair);
    } else {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(in[2 * k], in[2 * k + 1]);
      memcpy(&words[k], &pair, sizeof pair);
    }
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

template <class T>
__global__ void __launch_bounds__(kThreads, 2)
    conv2d_one_channel_then_depthwise_kernel(const T* x, int64_t height, int64_t width,
                                             const int32_t* heights, const int32_t* middle_heights,
                                             int64_t middle_height, int64_t middle_width,
                                             int64_t channels, const T* conv_w, const T* conv_bias,
                                             const T* depthwise_w, const T* depthwise_bias,
                                             int64_t out_height, int64_t out_width,
                                             int64_t row_tiles, int64_t groups, int tile_rows,
                                             int tile_cols, T* y) {
  constexpr int N = kWidePack<T>;
  constexpr int kGroupChannels = kFusedGroupPacks * N;
  extern __shared__ __align__(16) unsigned char fused_shared[];
  const int64_t group = blockIdx.x % groups;
  const int64_t tile = blockIdx.x / groups;
  const int64_t b = tile / row_tiles;
  const int64_t first_row = (tile - b * row_tiles) * tile_rows;
  const int64_t first_col = static_cast<int64_t>(blockIdx.y) * tile_cols;
  const int rows = static_cast<int>(min(static_cast<int64_t>(tile_rows), out_height - first_row));
  const int cols = static_cast<int>(min(static_cast<int64_t>(tile_cols), out_width - first_col));
  const int middle_rows = fused_middle_size(rows), middle_cols = fused_middle_size(cols);
  const int patch_rows = fused_patch_size(rows), patch_cols = fused_patch_size(cols);
  // The s1 pixel under tap (0, 0) of the tile's first output, and the x pixel under tap (0, 0)
  // of that s1 pixel.
  const int64_t middle_top = 2 * first_row - 1, middle_left = 2 * first_col - 1;
  const int64_t patch_top = 2 * middle_top - 1, patch_left = 2 * middle_left - 1;
  T* middle = reinterpret_cast<T*>(fused_shared);
  float* patch = reinterpret_cast<float*>(fused_shared + int64_t{middle_rows} * middle_cols *
                                                             kGroupChannels * sizeof(T));
  // Pixel slots of the s1 region: even columns first (cols + 1 of them per row), then odd ones.
  const int even_cols = cols + 1;
  const int odd_plane = middle_rows * even_cols;

  // Phase 1: the patch.
  {
    constexpr int kWarps = kThreads / 32;
    constexpr int kRowsPerWarp = ceil_div(fused_patch_size(kFusedTileRows), kWarps);
    constexpr int kColsPerLane = ceil_div(fused_patch_size(kFusedTileCols), 32);
    const int thread = threadIdx.y * blockDim.x + threadIdx.x;
    const int warp = thread / 32, lane = thread % 32;
    const int64_t valid_rows = min(static_cast<int64_t>(heights[b]), height);
    const T* image = x + b * height * width;
    float values[kRowsPerWarp][kColsPerLane];
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
#pragma unroll
      for (int m = 0; m < kColsPerLane; ++m) {
        const int patch_row = warp + k * kWarps, patch_col = lane + m * 32;
        const int64_t row = patch_top + patch_row, col = patch_left + patch_col;
        const bool inside = patch_row < patch_rows && patch_col < patch_cols && row >= 0 &&
                            row < valid_rows && col >= 0 && col < width;
        values[k][m] = inside ? to_float(image[row * width + col]) : 0.0f;
      }
    }
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
#pragma unroll
      for (int m = 0; m < kColsPerLane; ++m) {
        const int patch_row = warp + k * kWarps, patch_col = lane + m * 32;
        if (patch_row < patch_rows && patch_col < patch_cols) {
          patch[patch_row * patch_cols + patch_col] = values[k][m];
        }
      }
    }
  }
  __syncthreads();

  // Threads past the last channel (a partial last group) sit phases 2 and 3 out; there is no
  // barrier after phase 3, and the one between them is outside their branches.
  const int64_t c0 = (group * kFusedGroupPacks + threadIdx.x) * N;
  const bool has_channels = c0 < channels;
  // The pack's values in a pixel slot of the s1 region.
  const int pack_offset = threadIdx.x * N;

  // Phase 2: the s1 region. Pixel q of a row: q < even_cols is column 2q, then column
  // 2(q − even_cols) + 1. The row and pixel advance by kFusedPixelLanes without dividing.
  if (has_channels) {
    float taps[kFusedTaps][N];
#pragma unroll
    for (int k = 0; k < kFusedTaps; ++k) load_pack(conv_w + k * channels + c0, taps[k]);
    float start[N];
    load_pack_or_zeros(conv_bias, c0, start);
    const int64_t valid_rows = min(static_cast<int64_t>(middle_heights[b]), middle_height);
    const int row_step = kFusedPixelLanes / middle_cols,
              pixel_step = kFusedPixelLanes % middle_cols;
    int r = threadIdx.y / middle_cols, q = threadIdx.y % middle_cols;
    while (r < middle_rows) {
      const bool even = q < even_cols;
      const int u = even ? 2 * q : 2 * (q - even_cols) + 1;
      const int slot = even ? r * even_cols + q : odd_plane + r * cols + (q - even_cols);
      const int64_t row = middle_top + r, col = middle_left + u;
      float sum[N];
      if (row >= 0 && row < valid_rows && col >= 0 && col < middle_width) {
#pragma unroll
        for (int n = 0; n < N; ++n) sum[n] = start[n];
        const float* under = patch + 2 * r * patch_cols + 2 * u;
#pragma unroll
        for (int i = 0; i < 3; ++i) {
#pragma unroll
          for (int j = 0; j < 3; ++j) {
            const float value = under[i * patch_cols + j];
#pragma unroll
            for (int n = 0; n < N; ++n) sum[n] = fmaf(taps[i * 3 + j][n], value, sum[n]);
          }
        }
#pragma unroll
        for (int n = 0; n < N; ++n) sum[n] = relu_value(sum[n]);
      } else {
#pragma unroll
        for (int n = 0; n < N; ++n) sum[n] = 0.0f;
      }
      // Rounded to T here, as conv2d_one_channel rounds what it stores.
      *reinterpret_cast<uint4*>(middle + slot * kGroupChannels + pack_offset) = wide_pack<T>(sum);
      r += row_step;
      q += pixel_step;
      if (q >= middle_cols) {
        q -= middle_cols;
        ++r;
      }
    }
  }
  __syncthreads();

  // Phase 3: the outputs, rows × cols pixels, each from 3 × 3 pixels of the s1 region.
  if (has_channels) {
    float taps[kFusedTaps][N];
#pragma unroll
    for (int k = 0; k < kFusedTaps; ++k) load_pack(depthwise_w + k * channels + c0, taps[k]);
    float start[N];
    load_pack_or_zeros(depthwise_bias, c0, start);
    const int row_step = kFusedPixelLanes / cols, col_step = kFusedPixelLanes % cols;
    int r = threadIdx.y / cols, f = threadIdx.y % cols;
    while (r < rows) {
      float sum[N];
#pragma unroll
      for (int n = 0; n < N; ++n) sum[n] = start[n];
#pragma unroll
      for (int i = 0; i < 3; ++i) {
        const int middle_row = 2 * r + i;
        // Columns 2f, 2f + 1, 2f + 2 of the region.
        const int slots[3] = {middle_row * even_cols + f, odd_plane + middle_row * cols + f,
                              middle_row * even_cols + f + 1};
#pragma unroll
        for (int j = 0; j < 3; ++j) {
          float in[N];
          load_pack(middle + slots[j] * kGroupChannels + pack_offset, in);
#pragma unroll
          for (int n = 0; n < N; ++n) sum[n] = fmaf(taps[i * 3 + j][n], in[n], sum[n]);
        }
      }
      // Through the store intrinsic: a plain 16-byte store to global memory gets split into
      // four 4-byte ones.
      T* out = y + ((b * out_height + first_row + r) * out_width + first_col + f) * channels + c0;
      __stwb(reinterpret_cast<uint4*>(out), wide_pack<T>(sum));
      r += row_step;
      f += col_step;
      if (f >= cols) {
        f -= cols;
        ++r;
      }
    }
  }
}

template <class T>
void launch_conv2d_one_channel_then_depthwise(
    const void* x, int batch, int64_t height, int64_t width, const int32_t* heights,
    const int32_t* middle_heights, int64_t middle_height, int64_t middle_width, int64_t channels,
    const void* conv_w, const void* conv_bias, const void* depthwise_w, const void* depthwise_bias,
    int64_t out_height, int64_t out_width, void* y, cudaStream_t stream) {
  constexpr int N = kWidePack<T>;
  if (!packable(channels, N, sizeof(T), {conv_w, conv_bias, depthwise_w, depthwise_bias, y})) {
    fail("conv2d_one_channel_then_depthwise: ", channels,
         " channels, or weights and outputs not 16-byte aligned");
  }
  const int tile_rows = static_cast<int>(std::min<int64_t>(kFusedTileRows, out_height));
  const int tile_cols = static_cast<int>(std::min<int64_t>(kFusedTileCols, out_width));
  const int64_t row_tiles = ceil_div(out_height, tile_rows);
  const int64_t groups = ceil_div(channels, kFusedGroupPacks * N);
  // The channel groups of one tile are neighbouring blocks: they read the same patch of x, which
  // the first of them brings into the cache.
  const int64_t blocks_x = batch * row_tiles * groups, blocks_y = ceil_div(out_width, tile_cols);
  if (blocks_x > INT32_MAX || blocks_y > kMaxBlocksY) {
    fail("conv2d_one_channel_then_depthwise: ", batch, " images of ", out_height, " × ", out_width,
         " outputs are too many");
  }
  // More than the default 48 KB of shared memory must be asked for (once per instantiation).
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      conv2d_one_channel_then_depthwise_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(fused_shared_bytes(kFusedTileRows, kFusedTileCols)));
  check(opted_in, "conv2d_one_channel_then_depthwise shared memory");
  conv2d_one_channel_then_depthwise_kernel<T>
      <<<dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y)),
         dim3(kFusedGroupPacks, kFusedPixelLanes),
         static_cast<size_t>(fused_shared_bytes(tile_rows, tile_cols)), stream>>>(
          static_cast<const T*>(x), height, width, heights, middle_heights, middle_height,
          middle_width, channels, static_cast<const T*>(conv_w), static_cast<const T*>(conv_bias),
          static_cast<const T*>(depthwise_w), static_cast<const T*>(depthwise_bias), out_height,
          out_width, row_tiles, groups, tile_rows, tile_cols, static_cast<T*>(y));
}

// ---- Elementwise ------------------------------------------------------------------------------

enum class Map { relu, silu, scale };

template <Map kMap>
__device__ __forceinline__ float mapped(float value, float factor) {
  if constexpr (kMap == Map::relu) {
    return relu_value(value);
  } else if constexpr (kMap == Map::silu) {
    return silu_value(value);
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

// ---- The conv module's GLU and depthwise 1-D convolution --------------------------------------
//
// One block per (tile of kGluTileSteps steps, slice of kGluSlicePacks packs of kGluPack channels,
// sequence). The block first stages g, the GLU of its slice, for the tile's steps and the
// kernel − 1 around them that the convolution reaches (zeros outside [0, length)), in shared
// memory as F32: each g is computed once, though `kernel` outputs read it. Then each thread
// computes its pack's outputs from there with its taps in registers. With the kernel size known
// at compile time (9, every FastConformer), a thread takes kGluStepsPerThread consecutive steps
// and reads each staged row it needs once for all of them (kGluStepsPerThread + kernel − 1 rows
// instead of kGluStepsPerThread · kernel: shared memory's bandwidth would be the limit); with any
// other kernel its taps come from memory and it reads `kernel` rows per step.
//
// Packs are of four channels (8 bytes of 16-bit values, 16 of F32) rather than 16 bytes: a
// thread's taps and sums then fit in few enough registers for several blocks per SM, which keep
// loads in flight while others compute. A staged row holds the slice's packs side by side, so
// that the lanes of a warp read consecutive 16-byte words (no bank conflicts).
constexpr int kGluPack = 4;
constexpr int kGluSlicePacks = 16;   // threads along x
constexpr int kGluStepThreads = 16;  // threads along y
constexpr int kGluStepsPerThread = 4;
constexpr int kGluTileSteps = kGluStepThreads * kGluStepsPerThread;
constexpr int kGluStageBatch = 5;  // staged rows per thread at a time: (64 + 9 − 1) / 16 rounded up

// Pack p of a staged row of the slice (floats N · p ...), as one 16-byte word when N is 4.
template <int N>
__device__ __forceinline__ void store_staged(const float (&values)[N], float* row, int p) {
  if constexpr (N == 4) {
    reinterpret_cast<float4*>(row)[p] = make_float4(values[0], values[1], values[2], values[3]);
  } else {
#pragma unroll
    for (int n = 0; n < N; ++n) row[p * N + n] = values[n];
  }
}

template <int N>
__device__ __forceinline__ void load_staged(const float* row, int p, float (&values)[N]) {
  if constexpr (N == 4) {
    const float4 word = reinterpret_cast<const float4*>(row)[p];
    values[0] = word.x;
    values[1] = word.y;
    values[2] = word.z;
    values[3] = word.w;
  } else {
#pragma unroll
    for (int n = 0; n < N; ++n) values[n] = row[p * N + n];
  }
}

int64_t glu_staged_bytes(int kernel, int pack) {
  return static_cast<int64_t>(sizeof(float)) * (kGluTileSteps + int64_t{kernel} - 1) *
         kGluSlicePacks * pack;
}

template <class T, int kKernel, int N>
__global__ void __launch_bounds__(kGluSlicePacks* kGluStepThreads)
    glu_depthwise_conv1d_kernel(const T* x, int64_t steps, int64_t channels, const int32_t* lengths,
                                const int32_t* starts, const T* w, const T* bias,
                                int runtime_kernel, bool silu, T* y) {
  static_assert(N == 1 || N == 4, "staged rows hold packs of one or four values");
  constexpr int kRowFloats = kGluSlicePacks * N;
  // [kGluTileSteps + kernel − 1][kRowFloats]: row r is step first_staged + r.
  extern __shared__ __align__(16) float gated[];
  const int kernel = kKernel > 0 ? kKernel : runtime_kernel;
  const int64_t b = blockIdx.z;
  const int64_t first_step = static_cast<int64_t>(blockIdx.x) * kGluTileSteps;
  const int64_t first_staged = first_step - (kernel - 1) / 2;
  const int p = threadIdx.x;  // the thread's pack in the slice
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * kGluSlicePacks + p) * N;
  const bool has_pack = c0 < channels;  // the last slice may be partial
  const int64_t length = min(static_cast<int64_t>(lengths[b]), steps);
  // Packed (starts): the sequence's rows are its valid ones alone, and only they are written.
  // (Both recomputed where needed rather than kept: at 64 registers four blocks fit an SM.)
  auto first_row = [&] { return starts != nullptr ? int64_t{starts[b]} : b * steps; };
  auto written = [&](int64_t t) { return t < steps && (starts == nullptr || t < length); };
  if (!written(first_step)) return;  // the whole block: no barrier is left waiting
  const T* sequence = x + first_row() * 2 * channels;

  if (has_pack) {
    // kGluStageBatch rows per thread at a time (for kernel 9 all of its rows), all loaded before
    // any is used, so that each thread keeps several loads in flight. Outside the sequence, value
    // and gate read as 0, and g = 0 · σ(0) = 0.
    const int staged_rows = kGluTileSteps + kernel - 1;
    for (int first = threadIdx.y; first < staged_rows; first += kGluStageBatch * kGluStepThreads) {
      float value[kGluStageBatch][N], gate[kGluStageBatch][N];
#pragma unroll
      for (int k = 0; k < kGluStageBatch; ++k) {
        const int64_t t = first_staged + first + k * kGluStepThreads;
        if (first + k * kGluStepThreads < staged_rows && t >= 0 && t < length) {
          load_pack(sequence + t * 2 * channels + c0, value[k]);
          load_pack(sequence + t * 2 * channels + channels + c0, gate[k]);
        } else {
#pragma unroll
          for (int n = 0; n < N; ++n) value[k][n] = gate[k][n] = 0.0f;
        }
      }
#pragma unroll
      for (int k = 0; k < kGluStageBatch; ++k) {
        const int r = first + k * kGluStepThreads;
        if (r >= staged_rows) break;
#pragma unroll
        for (int n = 0; n < N; ++n) value[k][n] *= sigmoid_value(gate[k][n]);
        store_staged(value[k], gated + r * kRowFloats, p);
      }
    }
  }
  __syncthreads();
  if (!has_pack) return;

  float start[N];
  load_pack_or_zeros(bias, c0, start);
  T* out = y + first_row() * channels + c0;
  auto finish = [&](float(&sum)[N], int64_t t) {
    if (silu) {
#pragma unroll
      for (int n = 0; n < N; ++n) sum[n] *= sigmoid_value(sum[n]);
    }
    store_pack(sum, out + t * channels);
  };
  if constexpr (kKernel > 0) {
    float taps[kKernel][N];
#pragma unroll
    for (int j = 0; j < kKernel; ++j) load_pack(w + j * channels + c0, taps[j]);
    const int first = threadIdx.y * kGluStepsPerThread;  // the thread's first step in the tile
    float sum[kGluStepsPerThread][N];
#pragma unroll
    for (int s = 0; s < kGluStepsPerThread; ++s) {
#pragma unroll
      for (int n = 0; n < N; ++n) sum[s][n] = start[n];
    }
    // Step first + s takes staged row first + s + j with tap j: row first + row feeds every step
    // s with 0 ≤ row − s < kKernel.
#pragma unroll
    for (int row = 0; row < kGluStepsPerThread + kKernel - 1; ++row) {
      float g[N];
      load_staged(gated + (first + row) * kRowFloats, p, g);
#pragma unroll
      for (int s = 0; s < kGluStepsPerThread; ++s) {
        const int j = row - s;
        if (j < 0 || j >= kKernel) continue;
#pragma unroll
        for (int n = 0; n < N; ++n) sum[s][n] = fmaf(taps[j][n], g[n], sum[s][n]);
      }
    }
#pragma unroll
    for (int s = 0; s < kGluStepsPerThread; ++s) {
      const int64_t t = first_step + first + s;
      if (written(t)) finish(sum[s], t);
    }
  } else {
    for (int s = threadIdx.y; s < kGluTileSteps; s += kGluStepThreads) {
      const int64_t t = first_step + s;
      if (!written(t)) break;
      float sum[N];
#pragma unroll
      for (int n = 0; n < N; ++n) sum[n] = start[n];
      for (int j = 0; j < kernel; ++j) {
        float g[N], tap[N];
        load_staged(gated + (s + j) * kRowFloats, p, g);
        load_pack(w + j * channels + c0, tap);
#pragma unroll
        for (int n = 0; n < N; ++n) sum[n] = fmaf(tap[n], g[n], sum[n]);
      }
      finish(sum, t);
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
                             const int32_t* lengths, const int32_t* starts, int64_t steps,
                             int head_dim, float scale, T* out, int64_t out_row_stride) {
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
  // The sequence's first row in q, k, v, out; packed (starts), it has no rows past its length.
  const int64_t sequence_row = starts != nullptr ? starts[b] : b * steps;
  const int64_t written = starts != nullptr ? length : steps;
  const int64_t table_rows = 2 * steps - 1;

  for (int index = threadIdx.x; index < kQueries * head_dim; index += blockDim.x) {
    const int r = index / head_dim, d = index % head_dim;
    const int64_t i = first_query + r;
    const float value =
        i < length ? to_float(q[(sequence_row + i) * row_stride + head_offset + d]) : 0.0f;
    q_u[r * pitch + d] = value + (bias_u != nullptr ? to_float(bias_u[head_offset + d]) : 0.0f);
    q_v[r * pitch + d] = value + (bias_v != nullptr ? to_float(bias_v[head_offset + d]) : 0.0f);
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
    if (i >= written) continue;
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

// ---- Packed batches ---------------------------------------------------------------------------

// One block per (tile of kCopyRows rows, sequence); its threads walk the tile's rows in units of
// Unit (16 bytes when every row allows it).
constexpr int kCopyRows = 16;
constexpr int kCopyThreads = 256;

template <class Unit>
__global__ void __launch_bounds__(kCopyThreads)
    copy_sequence_rows_kernel(const Unit* x, const int32_t* x_starts, int64_t x_steps, Unit* y,
                              const int32_t* y_starts, int64_t y_steps, const int32_t* lengths,
                              int64_t row_units) {
  const int64_t b = blockIdx.y;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kCopyRows;
  const int64_t rows = min(static_cast<int64_t>(kCopyRows), lengths[b] - first);
  if (rows <= 0) return;
  const Unit* from = x + ((x_starts != nullptr ? x_starts[b] : b * x_steps) + first) * row_units;
  Unit* to = y + ((y_starts != nullptr ? y_starts[b] : b * y_steps) + first) * row_units;
  for (int64_t i = threadIdx.x; i < rows * row_units; i += blockDim.x) to[i] = from[i];
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
__global__ void finish_logits_kernel(float* logits, int64_t row_stride, const T* bias, int64_t rows,
                                     int64_t cols, int64_t split, int32_t* first, int32_t* second) {
  __shared__ float best_values[kThreads / 32];
  __shared__ int64_t best_indices[kThreads / 32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float* line = logits + row * row_stride;
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
__global__ void lstm_cell_kernel(const T* gates, const T* input_gates, const int32_t* ids,
                                 int64_t batch, int64_t hidden, float* c, T* h) {
  const int64_t count = batch * hidden;
  HARK_FLAT_LOOP(i, count) {
    const int64_t b = i / hidden, j = i % hidden;
    const int32_t id = ids[b];
    if (id < 0) continue;
    const T* row = gates + b * 4 * hidden;
    const T* input = input_gates != nullptr ? input_gates + id * 4 * hidden : nullptr;
    auto gate = [&](int64_t column) {
      return to_float(row[column]) + (input != nullptr ? to_float(input[column]) : 0.0f);
    };
    const float input_gate = sigmoid_value(gate(j));
    const float forget_gate = sigmoid_value(gate(hidden + j));
    const float candidate = tanhf(gate(2 * hidden + j));
    const float output_gate = sigmoid_value(gate(3 * hidden + j));
    const float cell = forget_gate * c[i] + input_gate * candidate;
    c[i] = cell;
    h[i] = from_float<T>(output_gate * tanhf(cell));
  }
}

#undef HARK_FLAT_LOOP

int64_t conv_output_size(int64_t size, int kernel, int stride, int padding) {
  return (size + 2 * padding - kernel) / stride + 1;
}

}  // namespace

std::vector<float> tap_major(const float* weights, int64_t channels, int64_t taps) {
  std::vector<float> reordered(static_cast<size_t>(channels * taps));
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t k = 0; k < taps; ++k) reordered[k * channels + c] = weights[c * taps + k];
  }
  return reordered;
}

void conv2d_one_channel(Element e, const void* x, int batch, int64_t height, int64_t width,
                        const int32_t* heights, const void* w, const void* bias, int64_t channels,
                        int kernel, int stride, int padding, bool relu, void* y,
                        cudaStream_t stream) {
  const int64_t out_height = conv_output_size(height, kernel, stride, padding);
  const int64_t out_width = conv_output_size(width, kernel, stride, padding);
  if (batch <= 0 || out_height <= 0 || out_width <= 0 || channels <= 0) return;
  with_type(e, [&](auto type) {
    launch_conv2d_tiles<decltype(type), false>(x, batch, height, width, channels, heights, w, bias,
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
    launch_conv2d_tiles<decltype(type), true>(x, batch, height, width, channels, heights, w, bias,
                                              kernel, stride, padding, /*relu=*/false, out_height,
                                              out_width, y, stream);
  });
  check_launch("depthwise_conv2d");
}

bool conv2d_one_channel_then_depthwise_supported(int kernel, int stride, int padding,
                                                 int64_t channels) {
  return kernel == 3 && stride == 2 && padding == 1 && channels > 0 && channels % 8 == 0;
}

void conv2d_one_channel_then_depthwise(Element e, const void* x, int batch, int64_t height,
                                       int64_t width, const int32_t* heights,
                                       const int32_t* middle_heights, const void* conv_w,
                                       const void* conv_bias, int64_t channels,
                                       const void* depthwise_w, const void* depthwise_bias,
                                       int kernel, int stride, int padding, void* y,
                                       cudaStream_t stream) {
  if (!conv2d_one_channel_then_depthwise_supported(kernel, stride, padding, channels)) {
    fail("conv2d_one_channel_then_depthwise: kernel ", kernel, ", stride ", stride, ", padding ",
         padding, " and ", channels, " channels are not supported");
  }
  const int64_t middle_height = conv_output_size(height, kernel, stride, padding);
  const int64_t middle_width = conv_output_size(width, kernel, stride, padding);
  const int64_t out_height = conv_output_size(middle_height, kernel, stride, padding);
  const int64_t out_width = conv_output_size(middle_width, kernel, stride, padding);
  if (batch <= 0 || out_height <= 0 || out_width <= 0) return;
  with_type(e, [&](auto type) {
    launch_conv2d_one_channel_then_depthwise<decltype(type)>(
        x, batch, height, width, heights, middle_heights, middle_height, middle_width, channels,
        conv_w, conv_bias, depthwise_w, depthwise_bias, out_height, out_width, y, stream);
  });
  check_launch("conv2d_one_channel_then_depthwise");
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

void glu_depthwise_conv1d(Element e, const void* x, int batch, int64_t steps, int64_t channels,
                          const int32_t* lengths, const int32_t* starts, const void* w,
                          const void* bias, int kernel, bool silu, void* y, cudaStream_t stream) {
  if (kernel < 1 || kernel % 2 == 0) {
    fail("glu_depthwise_conv1d: 'same' padding needs an odd kernel, got ", kernel);
  }
  if (batch <= 0 || steps <= 0 || channels <= 0) return;
  const int64_t step_tiles = ceil_div(steps, kGluTileSteps);
  if (batch > kMaxBlocksY || step_tiles > INT_MAX) {
    fail("glu_depthwise_conv1d: ", batch, " sequences of ", steps, " steps are too many");
  }
  with_type(e, [&](auto type) {
    using T = decltype(type);
    auto launch = [&](auto kernel_size, auto pack) {
      constexpr int N = decltype(pack)::value;
      const int64_t slices = ceil_div(channels / N, kGluSlicePacks);
      if (slices > kMaxBlocksY) fail("glu_depthwise_conv1d: ", channels, " channels are too many");
      glu_depthwise_conv1d_kernel<T, decltype(kernel_size)::value, N>
          <<<dim3(static_cast<unsigned>(step_tiles), static_cast<unsigned>(slices),
                  static_cast<unsigned>(batch)),
             dim3(kGluSlicePacks, kGluStepThreads),
             static_cast<size_t>(glu_staged_bytes(kernel, N)), stream>>>(
              static_cast<const T*>(x), steps, channels, lengths, starts, static_cast<const T*>(w),
              static_cast<const T*>(bias), kernel, silu, static_cast<T*>(y));
    };
    // Value by value when the channels are not whole packs, or when a kernel so large that the
    // packed slice's rows would not fit in shared memory.
    const bool packed = packable(channels, kGluPack, sizeof(T), {x, w, bias, y}) &&
                        glu_staged_bytes(kernel, kGluPack) <= kMaxSharedBytes;
    if (packed && kernel == 9) {
      launch(std::integral_constant<int, 9>{}, std::integral_constant<int, kGluPack>{});
    } else if (packed) {
      launch(std::integral_constant<int, 0>{}, std::integral_constant<int, kGluPack>{});
    } else {
      if (glu_staged_bytes(kernel, 1) > kMaxSharedBytes) {
        fail("glu_depthwise_conv1d: a kernel of ", kernel, " is too large");
      }
      launch(std::integral_constant<int, 0>{}, std::integral_constant<int, 1>{});
    }
  });
  check_launch("glu_depthwise_conv1d");
}

void rel_pos_attention(Element e, const void* q, const void* k, const void* v, int64_t row_stride,
                       const void* p, int64_t p_row_stride, const void* bias_u, const void* bias_v,
                       const int32_t* lengths, const int32_t* starts, int batch, int64_t steps,
                       int heads, int head_dim, float scale, void* out, int64_t out_row_stride,
                       cudaStream_t stream) {
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
        static_cast<const T*>(bias_v), lengths, starts, steps, head_dim, scale,
        static_cast<T*>(out), out_row_stride);
  });
  check_launch("rel_pos_attention");
}

void copy_sequence_rows(const void* x, const int32_t* x_starts, int64_t x_steps, void* y,
                        const int32_t* y_starts, int64_t y_steps, const int32_t* lengths, int batch,
                        int64_t max_length, int64_t row_bytes, cudaStream_t stream) {
  if (batch <= 0 || max_length <= 0 || row_bytes <= 0) return;
  const int64_t tiles = ceil_div(max_length, kCopyRows);
  if (batch > kMaxBlocksY || tiles > INT_MAX) {
    fail("copy_sequence_rows: ", batch, " sequences of ", max_length, " rows are too many");
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(batch));
  // Whole rows are contiguous, so a row of 16-byte units copies as units when it is one.
  if (row_bytes % 16 == 0 && aligned(x, 16) && aligned(y, 16)) {
    copy_sequence_rows_kernel<uint4><<<grid, kCopyThreads, 0, stream>>>(
        static_cast<const uint4*>(x), x_starts, x_steps, static_cast<uint4*>(y), y_starts, y_steps,
        lengths, row_bytes / 16);
  } else {
    copy_sequence_rows_kernel<uint8_t><<<grid, kCopyThreads, 0, stream>>>(
        static_cast<const uint8_t*>(x), x_starts, x_steps, static_cast<uint8_t*>(y), y_starts,
        y_steps, lengths, row_bytes);
  }
  check_launch("copy_sequence_rows");
}

void finish_logits(Element e, float* logits, int64_t row_stride, const void* bias, int64_t rows,
                   int64_t cols, int64_t split, int32_t* first, int32_t* second,
                   cudaStream_t stream) {
  if (rows <= 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65535));
  with_type(e, [&](auto type) {
    using T = decltype(type);
    finish_logits_kernel<T><<<blocks, kThreads, 0, stream>>>(
        logits, row_stride, static_cast<const T*>(bias), rows, cols, split, first, second);
  });
  check_launch("finish_logits");
}

void lstm_cell(Element e, const void* gates, const void* input_gates, const int32_t* ids,
               int64_t batch, int64_t hidden, float* c, void* h, cudaStream_t stream) {
  const int64_t count = batch * hidden;
  if (count <= 0) return;
  with_type(e, [&](auto type) {
    using T = decltype(type);
    lstm_cell_kernel<T><<<flat_blocks(count, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(gates), static_cast<const T*>(input_gates), ids, batch, hidden, c,
        static_cast<T*>(h));
  });
  check_launch("lstm_cell");
}

}  // namespace hark::compute::cuda
