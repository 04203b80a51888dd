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
// next, it costs more memory traffic than the rest of the subsampling together. Here it never
// leaves the chip, nor even a thread: the depthwise convolution keeps channels apart, so a thread
// that owns a pair of channels computes the values of s1 that its outputs read in those
// channels itself and keeps them in registers. Kernel 3, stride 2, padding 1 (every
// FastConformer) only, with the sizes below fixed at compile time.
//
// A block: one image, a band of kFusedBandRows output rows, up to kFusedStripsPerBlock strips of
// kFusedStripOutputs output columns, and one warp per strip and group of 64 channels (a lane per
// pair of channels: a warp's stores of one output pixel are contiguous, and its reads of x are
// one address, a broadcast). The block first stages the patch of x under its outputs in shared
// memory, as F32 with zeros outside the image and at rows past heights[b] (as
// conv2d_one_channel reads them). Then each thread walks down its strip: output row t reads s1
// rows 2t − 1, 2t and 2t + 1 at the strip's 2 · kFusedStripOutputs + 1 columns, and row 2t − 1
// is the last row of the outputs above, so a thread carries that row from one output row to the
// next and computes two new rows of s1 per output row. Each value of s1 is thus computed once,
// but for the column that neighbouring strips share (1/16 more) and the band's first row.
//
// A value of s1 is ReLU(bias + Σ taps · patch) rounded to T, exactly as conv2d_one_channel
// stores it, and zero outside s1 and at rows past middle_heights[b] (what depthwise_conv2d reads
// there). It goes into the sums of the outputs that read it as soon as it is computed: s1's rows
// come in the order of the taps' rows, and within a row its columns in the order of the taps'
// columns, so that both sums take their taps in the same order as the unfused kernels and the
// results are the same bits. Per s1 value that costs 9 FMAs, one conversion (ReLU and rounding in
// one instruction for bfloat16) and, per pair of values, the 16-byte load of the four patch values
// that the next pixel of the row adds; per output, 9 more FMAs. A thread holds both
// convolutions' taps (36 values), the carried row (34) and its outputs' sums (16).
constexpr int kFusedChannels = 2;                              // per thread
constexpr int kFusedStripOutputs = 8;                          // output columns per thread
constexpr int kFusedStripMiddle = 2 * kFusedStripOutputs + 1;  // the s1 columns they read
constexpr int kFusedStripsPerBlock = 4;
constexpr int kFusedWarps = 8;
constexpr int kFusedBandRows = 16;
constexpr int kFusedTileCols = kFusedStripsPerBlock * kFusedStripOutputs;
// The patch under a band and a block's columns (4 x rows or columns per output, plus 3), F32.
// Column c is stored at c + kFusedPatchLead: then the four columns that each pair of s1 pixels
// adds to a thread's window start at a 16-byte boundary.
constexpr int kFusedPatchRows = 4 * kFusedBandRows + 3;
constexpr int kFusedPatchCols = 4 * kFusedTileCols + 3;
constexpr int kFusedPatchLead = 3;
constexpr int kFusedPatchStride = (kFusedPatchLead + kFusedPatchCols + 3) / 4 * 4;
// Patch values a thread stages at a time.
constexpr int kFusedStageBatch = 8;

// A value of s1 as conv2d_one_channel stores it (ReLU, then rounded to T), back in F32. For
// bfloat16 that is one instruction: converted with ReLU into the high half of a pair whose low
// half is zero, the value's bits are those of its F32.
template <class T>
__device__ __forceinline__ float stored_relu(float value) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    uint32_t bits;
    asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(value), "f"(0.0f));
    return __uint_as_float(bits);
  } else {
    return to_float(from_float<T>(relu_value(value)));
  }
}

// kOddMiddleWidth: s1's width is odd, so that its column middle_width (zero padding) is read by
// the last output column.
template <class T, bool kOddMiddleWidth>
__global__ void __launch_bounds__(kFusedWarps * 32, 2)
    conv2d_one_channel_then_depthwise_kernel(const T* x, int64_t height, int64_t width,
                                             const int32_t* heights, const int32_t* middle_heights,
                                             int64_t middle_height, int64_t middle_width,
                                             int64_t channels, const T* conv_w, const T* conv_bias,
                                             const T* depthwise_w, const T* depthwise_bias,
                                             int64_t out_height, int64_t out_width, int bands,
                                             int channel_blocks, int strips_per_block, T* y) {
  constexpr int N = kFusedChannels, F = kFusedStripOutputs, Q = kFusedStripMiddle;
  __shared__ __align__(16) float patch[kFusedPatchRows][kFusedPatchStride];
  const int channel_block = static_cast<int>(blockIdx.x) % channel_blocks;
  const int band_of_batch = static_cast<int>(blockIdx.x) / channel_blocks;
  const int64_t b = band_of_batch / bands;
  const int64_t first_row = static_cast<int64_t>(band_of_batch % bands) * kFusedBandRows;
  const int64_t tile_first_col = static_cast<int64_t>(blockIdx.y) * kFusedTileCols;

  // Phase 1: the patch. Its row 0 is x's row 4 · first_row − 3 (under tap 0 of s1's row
  // 2 · first_row − 1, the first that the band's outputs read), its column 0 likewise.
  {
    const int64_t valid_rows = min(static_cast<int64_t>(heights[b]), height);
    const T* image = x + b * height * width;
    const int64_t top = 4 * first_row - 3, left = 4 * tile_first_col - 3;
    constexpr int kValues = kFusedPatchRows * kFusedPatchCols;
    const int threads = static_cast<int>(blockDim.x);
    // All of a batch's loads are in flight before any is stored.
    for (int first = static_cast<int>(threadIdx.x); first < kValues;
         first += kFusedStageBatch * threads) {
      float values[kFusedStageBatch];
#pragma unroll
      for (int k = 0; k < kFusedStageBatch; ++k) {
        const int at = first + k * threads;
        const int patch_row = at / kFusedPatchCols, patch_col = at % kFusedPatchCols;
        const int64_t row = top + patch_row, col = left + patch_col;
        const bool inside = at < kValues && row >= 0 && row < valid_rows && col >= 0 && col < width;
        values[k] = inside ? to_float(image[row * width + col]) : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kFusedStageBatch; ++k) {
        const int at = first + k * threads;
        if (at < kValues) {
          patch[at / kFusedPatchCols][at % kFusedPatchCols + kFusedPatchLead] = values[k];
        }
      }
    }
  }
  __syncthreads();

  // The thread's channels and strip. Threads past the last channel or output column have
  // nothing more to do (there is no barrier after this one).
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int strip = warp % strips_per_block, group = warp / strips_per_block;
  const int groups_per_block = static_cast<int>(blockDim.x) / 32 / strips_per_block;
  const int64_t c0 =
      ((static_cast<int64_t>(channel_block) * groups_per_block + group) * 32 + lane) * N;
  const int64_t first_col = tile_first_col + strip * F;
  const int outputs = static_cast<int>(min(static_cast<int64_t>(F), out_width - first_col));
  if (c0 >= channels || outputs <= 0) return;

  float conv_taps[9][N], depthwise_taps[9][N], conv_start[N], depthwise_start[N];
#pragma unroll
  for (int k = 0; k < 9; ++k) {
    load_pack(conv_w + k * channels + c0, conv_taps[k]);
    load_pack(depthwise_w + k * channels + c0, depthwise_taps[k]);
  }
  load_pack_or_zeros(conv_bias, c0, conv_start);
  load_pack_or_zeros(depthwise_bias, c0, depthwise_start);

  // The strip's s1 pixel q of a row is s1 column 2 · first_col − 1 + q. Zero padding among
  // them: column −1 (q = 0 of an image's first strip) and, for an odd width, column
  // middle_width.
  const bool left_padding = first_col == 0;
  const int64_t right_padding = middle_width - 2 * first_col + 1;
  // Row m of the band's s1 rows is s1 row 2 · first_row − 1 + m; it reads patch rows 2m to
  // 2m + 2, and its pixel q patch columns 2q to 2q + 2 of the strip's.
  const int64_t valid_middle_rows = min(static_cast<int64_t>(middle_heights[b]), middle_height);
  auto row_inside = [&](int m) {
    const int64_t row = 2 * first_row - 1 + m;
    return row >= 0 && row < valid_middle_rows;
  };
  const float* strip_patch = &patch[0][kFusedPatchLead] + strip * 4 * F;
  // Computes the band's s1 row m (inside s1) pixel by pixel and hands each to
  // visit(q, values[N]), q ascending.
  auto middle_row = [&](int m, auto&& visit) {
    const float* rows[3];
#pragma unroll
    for (int i = 0; i < 3; ++i) rows[i] = strip_patch + (2 * m + i) * kFusedPatchStride;
    auto pixel = [&](int q, const float(&under)[3][3]) {
      float sum[N];
#pragma unroll
      for (int n = 0; n < N; ++n) sum[n] = conv_start[n];
#pragma unroll
      for (int i = 0; i < 3; ++i) {
#pragma unroll
        for (int j = 0; j < 3; ++j) {
#pragma unroll
          for (int n = 0; n < N; ++n) sum[n] = fmaf(conv_taps[i * 3 + j][n], under[i][j], sum[n]);
        }
      }
      const bool padding = (q == 0 && left_padding) || (kOddMiddleWidth && q == right_padding);
      float values[N];
#pragma unroll
      for (int n = 0; n < N; ++n) values[n] = padding ? 0.0f : stored_relu<T>(sum[n]);
      visit(q, values);
    };
    // A sliding window: pixels 2p and 2p + 1 read patch columns 4p to 4p + 4, of which 4p is
    // the last column the pixels before read.
    float last[3];
#pragma unroll
    for (int i = 0; i < 3; ++i) last[i] = rows[i][0];
#pragma unroll
    for (int p = 0; p < F; ++p) {
      float4 next[3];
#pragma unroll
      for (int i = 0; i < 3; ++i) next[i] = *reinterpret_cast<const float4*>(rows[i] + 4 * p + 1);
      float under[3][3];
#pragma unroll
      for (int i = 0; i < 3; ++i) {
        under[i][0] = last[i];
        under[i][1] = next[i].x;
        under[i][2] = next[i].y;
      }
      pixel(2 * p, under);
#pragma unroll
      for (int i = 0; i < 3; ++i) {
        under[i][0] = next[i].y;
        under[i][1] = next[i].z;
        under[i][2] = next[i].w;
        last[i] = next[i].w;
      }
      pixel(2 * p + 1, under);
    }
    float under[3][3];
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      const float2 next = *reinterpret_cast<const float2*>(rows[i] + 4 * F + 1);
      under[i][0] = last[i];
      under[i][1] = next.x;
      under[i][2] = next.y;
    }
    pixel(2 * F, under);
  };

  // The carried row: the band's s1 row 2t at output row t.
  float carry[Q][N];
  auto clear_carry = [&] {
#pragma unroll
    for (int q = 0; q < Q; ++q) {
#pragma unroll
      for (int n = 0; n < N; ++n) carry[q][n] = 0.0f;
    }
  };
  if (row_inside(0)) {
    middle_row(0, [&](int q, const float(&values)[N]) {
#pragma unroll
      for (int n = 0; n < N; ++n) carry[q][n] = values[n];
    });
  } else {
    clear_carry();
  }
  // Pixel q of an s1 row read through the taps' row i: tap (i, q − 2k) of output k, for the
  // one or two outputs whose columns 2k to 2k + 2 hold q; sums[k] takes its taps in order as q
  // ascends.
  float sums[F][N];
  auto add = [&](int i, int q, const float(&values)[N]) {
#pragma unroll
    for (int k = 0; k < F; ++k) {
      const int j = q - 2 * k;
      if (j >= 0 && j < 3) {
#pragma unroll
        for (int n = 0; n < N; ++n) {
          sums[k][n] = fmaf(depthwise_taps[i * 3 + j][n], values[n], sums[k][n]);
        }
      }
    }
  };
  const int rows =
      static_cast<int>(min(static_cast<int64_t>(kFusedBandRows), out_height - first_row));
  T* out = y + ((b * out_height + first_row) * out_width + first_col) * channels + c0;
  for (int t = 0; t < rows; ++t, out += out_width * channels) {
#pragma unroll
    for (int k = 0; k < F; ++k) {
#pragma unroll
      for (int n = 0; n < N; ++n) sums[k][n] = depthwise_start[n];
    }
#pragma unroll
    for (int q = 0; q < Q; ++q) add(0, q, carry[q]);
    // Rows past s1's valid ones add nothing, as depthwise_conv2d skips them.
    if (row_inside(2 * t + 1)) {
      middle_row(2 * t + 1, [&](int q, const float(&values)[N]) { add(1, q, values); });
    }
    if (row_inside(2 * t + 2)) {
      middle_row(2 * t + 2, [&](int q, const float(&values)[N]) {
        add(2, q, values);
#pragma unroll
        for (int n = 0; n < N; ++n) carry[q][n] = values[n];
      });
    } else {
      clear_carry();
    }
#pragma unroll
    for (int k = 0; k < F; ++k) {
      if (k < outputs) store_pack(sums[k], out + k * channels);
    }
  }
}

template <class T>
void launch_conv2d_one_channel_then_depthwise(
    const void* x, int batch, int64_t height, int64_t width, const int32_t* heights,
    const int32_t* middle_heights, int64_t middle_height, int64_t middle_width, int64_t channels,
    const void* conv_w, const void* conv_bias, const void* depthwise_w, const void* depthwise_bias,
    int64_t out_height, int64_t out_width, void* y, cudaStream_t stream) {
  if (!packable(channels, kWidePack<T>, sizeof(T),
                {conv_w, conv_bias, depthwise_w, depthwise_bias, y})) {
    fail("conv2d_one_channel_then_depthwise: ", channels,
         " channels, or weights and outputs not 16-byte aligned");
  }
  const int64_t strips = ceil_div(out_width, kFusedStripOutputs);
  const int64_t strips_per_block = std::min<int64_t>(kFusedStripsPerBlock, strips);
  const int64_t groups = ceil_div(channels, 32 * kFusedChannels);
  const int64_t groups_per_block = std::min<int64_t>(kFusedWarps / strips_per_block, groups);
  const int64_t channel_blocks = ceil_div(groups, groups_per_block);
  const int64_t bands = ceil_div(out_height, kFusedBandRows);
  const int64_t blocks_x = batch * bands * channel_blocks;
  const int64_t blocks_y = ceil_div(out_width, kFusedTileCols);
  if (blocks_x > INT32_MAX || blocks_y > kMaxBlocksY) {
    fail("conv2d_one_channel_then_depthwise: ", batch, " images of ", out_height, " × ", out_width,
         " outputs are too many");
  }
  auto launch = [&](auto odd_middle_width) {
    conv2d_one_channel_then_depthwise_kernel<T, decltype(odd_middle_width)::value>
        <<<dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y)),
           static_cast<unsigned>(32 * strips_per_block * groups_per_block), 0, stream>>>(
            static_cast<const T*>(x), height, width, heights, middle_heights, middle_height,
            middle_width, channels, static_cast<const T*>(conv_w), static_cast<const T*>(conv_bias),
            static_cast<const T*>(depthwise_w), static_cast<const T*>(depthwise_bias), out_height,
            out_width, static_cast<int>(bands), static_cast<int>(channel_blocks),
            static_cast<int>(strips_per_block), static_cast<T*>(y));
  };
  if (middle_width % 2 == 1) {
    launch(std::true_type{});
  } else {
    launch(std::false_type{});
  }
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
    static const bool configured =
        (allow_shared_memory(rel_pos_attention_kernel<T>, attention_shared_bytes(kMaxHeadDim),
                             "rel_pos_attention shared memory"),
         true);
    (void)configured;
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
