// decode_linear (kernels.h): a decode step's linear layer in one launch, with the layer norm
// before it and the bias, GELU, residual and K/V cache scatter after it.
//
// A decode step multiplies 1 to 16 rows, so the product is bound by reading W, once; the kernel
// is arranged around streaming W at full bandwidth:
//  - Each block stages its rows of x in shared memory once, normalised when asked (every block
//    recomputes the statistics: x is at most 16 rows). They are staged in the element type: 16
//    rows of 5120 (Whisper large's fc2) take 160 KB that way, where F32 would not fit, and 16-bit
//    rounding of the normalised rows is what the unfused path (layer_norm, then a product) does.
//  - A warp owns a tile of kTileRows output rows, its lanes 8 rows × 4, each lane loading 16
//    bytes of its row per chunk: a warp's load covers 64 contiguous bytes of 8 rows. A warp issues
//    the loads of a group of chunks (chunks_per_group) before using any; the first group is issued
//    before x is staged, so that the staging hides behind the weights' latency.
//  - F16 and BF16 multiply on tensor cores: a chunk is two mma.m16n8k16, x as A (16 batch rows,
//    zeros past the batch) and W as B (the tile's 8 rows), accumulating in F32. A dot product does
//    not care in which order k runs, so a lane's 8 consecutive values of W and of x stand for the
//    k positions its fragments hold (the kernel says which): loads need no shuffling.
//  - F32 multiplies on the CUDA cores (tensor cores would round x and W to TF32), one F32 sum per
//    batch row a lane, added over the row's 4 lanes at the end.
//  - Q8_0 weights (device layout, kernels.h) stream as their quants, a whole block of 32 a lane's
//    chunk (two 16-byte loads) and its scale: half as many bytes as F16 for the same loads in
//    flight, and a scale register per 32 values. Each value becomes d · q rounded once to the
//    element type, as dequantize_q8_0 rounds it (q8x8_times_scale: for F16 in half2 arithmetic,
//    exact before its one rounding; for BF16 through F32). Then the values take the F16/BF16
//    path's tensor-core products: a chunk is eight mma instead of two.
//  - Small matrices have too few tiles to keep the GPU busy: `split` warps of a block share a
//    tile, each taking every split-th chunk, and add up their sums through shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/kernels.h"
#include "compute/cuda/tensor_core.cuh"

namespace hark::compute::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 8;                  // output rows a warp owns: the mma's n
constexpr int kLanesPerRow = 32 / kTileRows;  // 4
// Chunks whose loads a warp has in flight together: for 16-bit weights 16 (8 KB a warp), which
// keeps most of a large-v3 layer's tiles in one round of loads (bench/RESULTS.md: 8 → 16 with one
// wave, below, took the batch-1 step from 1.74 to 1.55 ms); F32's sums per batch row leave
// registers for 8 only.
template <class T>
constexpr int kUnroll = std::is_same_v<T, float> ? 8 : 16;
// A Q8_0 chunk is two loads (a block of 32 quants a lane), so a group has half as many chunks:
// the same loads and bytes in flight. A single row of 16-bit W (kBatch 1) takes groups of 20:
// large-v3's fc1 and fc2 then give each warp one group instead of two (16 + 4), a round trip to
// memory fewer. With 2-16 rows the extra registers cost more than that gains (bench/RESULTS.md,
// twenty-fifth session: batch 1 1.476 → 1.457 ms; groups of 20 at batch 8 took its step from
// 2.451 to 2.473 ms).
template <class T, int kBatch, bool kQ8>
constexpr int chunks_per_group() {
  if (kQ8) return kUnroll<T> / 2;
  if (kBatch == 1 && !std::is_same_v<T, float>) return 20;
  return kUnroll<T>;
}
constexpr int kMaxRows = 16;  // batch rows a launch multiplies: the mma's m

// Values of the element type in one 16-byte load; the values of W in a lane's chunk (one load, or
// for Q8_0 two: a block of 32 quants); and the k a chunk covers (a row's 4 lanes).
template <class T>
constexpr int kPack = static_cast<int>(16 / sizeof(T));
template <class T, bool kQ8>
constexpr int kLaneValues = kQ8 ? 32 : kPack<T>;
template <class T, bool kQ8>
constexpr int chunk_values() {
  return kLanesPerRow * kLaneValues<T, kQ8>;
}
constexpr int kQ8Values = 32;  // values a Q8_0 scale covers

// Dynamic shared memory: each warp's partial sums (32 lanes × 4 for tensor cores, 8 rows × 16
// batch rows for F32), the norm's per-row mean and scale, then the staged rows of x.
constexpr int kPartialFloats = 128;
constexpr int kStatsOffset = kWarps * kPartialFloats * static_cast<int>(sizeof(float));
constexpr int kStageOffset = kStatsOffset + 2 * kMaxRows * static_cast<int>(sizeof(float));
static_assert(kStageOffset % 16 == 0, "staged rows are read in 16-byte loads");

// Everything a launch needs, for rows of x [batch ≤ kMaxRows] (the launcher offsets the
// pointers of later launches).
template <class T>
struct Params {
  const T* x = nullptr;
  int batch = 0;
  int staged_rows = 0;  // batch, or the F32 kernel's bucket (rows past batch staged as zeros)
  int64_t k_in = 0;
  int64_t k_pad = 0;         // k_in rounded up to whole chunks; staged rows are zero past k_in
  int64_t stride = 0;        // values from one staged row to the next
  const T* gamma = nullptr;  // null: no norm
  const T* beta = nullptr;
  float eps = 0.0f;
  const T* w = nullptr;            // W in the element type, or
  const int8_t* quants = nullptr;  // Q8_0 W's quants [n_out, k_in]
  const __half* scales = nullptr;  // and scales [n_out, k_in / 32]
  int64_t n_out = 0;
  const T* bias = nullptr;
  bool gelu = false;
  const T* residual = nullptr;
  T* y = nullptr;
  float* y_f32 = nullptr;  // instead of y: the sums in F32 (logits)
  int64_t width = 0;       // 0: no scatter
  T* k_cache = nullptr;
  T* v_cache = nullptr;
  int64_t cache_batch_stride = 0;
  const int32_t* positions = nullptr;
  int split = 1;  // warps per tile: 1, 2, 4 or 8
};

// ---- Device helpers ---------------------------------------------------------------------------

template <class T>
__device__ __forceinline__ void unpack(const uint4& raw, float (&out)[kPack<T>]) {
  T values[kPack<T>];
  memcpy(values, &raw, sizeof raw);
#pragma unroll
  for (int i = 0; i < kPack<T>; ++i) out[i] = to_float(values[i]);
}

template <class T>
__device__ __forceinline__ uint4 pack(const float (&in)[kPack<T>]) {
  T values[kPack<T>];
#pragma unroll
  for (int i = 0; i < kPack<T>; ++i) values[i] = from_float<T>(in[i]);
  uint4 raw;
  memcpy(&raw, values, sizeof raw);
  return raw;
}

template <class T>
__device__ __forceinline__ uint4 load16(const T* source) {
  return *reinterpret_cast<const uint4*>(source);
}

// ---- Staging x --------------------------------------------------------------------------------

// Copies the launch's rows of x to shared memory (zeros past k_in, and in rows batch…staged_rows),
// then, with a norm, normalises them in place: statistics in F32 over the row, one warp a row,
// and h = (x − mean) · scale · gamma + beta as layer_norm computes it, rounded to T. Ends with
// the block synchronised.
template <class T>
__device__ void stage_rows(const Params<T>& p, T* xs, float* means, float* scales) {
  constexpr int kP = kPack<T>;
  const int packs = static_cast<int>(p.k_pad / kP), in_packs = static_cast<int>(p.k_in / kP);
  for (int i = threadIdx.x; i < p.staged_rows * packs; i += kThreads) {
    const int b = i / packs, q = i - b * packs;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (b < p.batch && q < in_packs) raw = load16(p.x + b * p.k_in + q * kP);
    *reinterpret_cast<uint4*>(xs + b * p.stride + q * kP) = raw;
  }
  __syncthreads();
  if (p.gamma == nullptr) return;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int b = warp; b < p.batch; b += kWarps) {
    const T* row = xs + b * p.stride;
    float sum = 0.0f;
    for (int q = lane; q < in_packs; q += 32) {
      float values[kP];
      unpack<T>(load16(row + q * kP), values);
#pragma unroll
      for (int i = 0; i < kP; ++i) sum += values[i];
    }
    const float mean = warp_sum(sum) / static_cast<float>(p.k_in);
    float squares = 0.0f;
    for (int q = lane; q < in_packs; q += 32) {
      float values[kP];
      unpack<T>(load16(row + q * kP), values);
#pragma unroll
      for (int i = 0; i < kP; ++i) {
        const float centred = values[i] - mean;
        squares = fmaf(centred, centred, squares);
      }
    }
    const float variance = warp_sum(squares) / static_cast<float>(p.k_in);
    if (lane == 0) {
      means[b] = mean;
      scales[b] = 1.0f / sqrtf(variance + p.eps);
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < p.batch * in_packs; i += kThreads) {
    const int b = i / in_packs, q = i - b * in_packs;
    T* at = xs + b * p.stride + q * kP;
    float values[kP], gammas[kP], betas[kP];
    unpack<T>(load16(at), values);
    unpack<T>(load16(p.gamma + q * kP), gammas);
    unpack<T>(load16(p.beta + q * kP), betas);
    const float mean = means[b], scale = scales[b];
#pragma unroll
    for (int j = 0; j < kP; ++j) values[j] = (values[j] - mean) * scale * gammas[j] + betas[j];
    *reinterpret_cast<uint4*>(at) = pack<T>(values);
  }
  __syncthreads();
}

// ---- Epilogue ---------------------------------------------------------------------------------

// Output (b, n) from its sum over k: bias, GELU, residual, then y or a cache row.
template <class T>
__device__ __forceinline__ void store_output(const Params<T>& p, int b, int64_t n, float value) {
  if (b >= p.batch || n >= p.n_out) return;
  if (p.bias != nullptr) value += to_float(p.bias[n]);
  if (p.gelu) value = gelu_value(value);
  if (p.y_f32 != nullptr) {
    p.y_f32[b * p.n_out + n] = value;
    return;
  }
  if (p.width == 0) {
    const int64_t at = b * p.n_out + n;
    if (p.residual != nullptr) value += to_float(p.residual[at]);  // read before y[at] is written
    p.y[at] = from_float<T>(value);
    return;
  }
  const int64_t part = n / p.width, column = n - part * p.width;
  if (part == 0) {
    p.y[b * p.width + column] = from_float<T>(value);
    return;
  }
  T* cache = part == 1 ? p.k_cache : p.v_cache;
  const int64_t row = p.positions[b];
  cache[b * p.cache_batch_stride + row * p.width + column] = from_float<T>(value);
}

// ---- The kernel -------------------------------------------------------------------------------

// kBatch: for F16/BF16, 1 (one row, in larger groups of chunks), 8 (batch ≤ 8: the mma's rows
// past the batch are all zero) or 16; for F32, the bucket (1, 2, 4, 8, 16) of F32 sums a lane
// keeps, one per batch row. kQ8: W is Q8_0 (16-bit T only). One block: kWarps / split tiles of
// kTileRows output rows, each tile shared by `split` warps.
template <class T, int kBatch, bool kQ8>
__global__ void __launch_bounds__(kThreads, 2) decode_linear_kernel(const Params<T> p) {
  constexpr bool kTensorCores = !std::is_same_v<T, float>;
  static_assert(kTensorCores || !kQ8, "Q8_0 weights multiply on tensor cores");
  constexpr int kP = kPack<T>, kLane = kLaneValues<T, kQ8>, kK = chunk_values<T, kQ8>();
  extern __shared__ __align__(16) unsigned char shared[];
  float* partials = reinterpret_cast<float*>(shared);
  float* means = reinterpret_cast<float*>(shared + kStatsOffset);
  float* scales = means + kMaxRows;
  T* xs = reinterpret_cast<T*>(shared + kStageOffset);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / kLanesPerRow, t = lane % kLanesPerRow;
  const int split = p.split, slots = kWarps / split;
  const int slot = warp / split, part = warp % split;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * slots + slot;
  const int64_t row = tile * kTileRows + g;  // the W row this lane loads
  const bool row_loads = row < p.n_out;
  const int64_t load_row = row_loads ? row : 0;
  const T* w_row = p.w + load_row * p.k_in;
  const int8_t* quants_row = p.quants + load_row * p.k_in;
  const __half* scales_row = p.scales + load_row * (p.k_in / kQ8Values);
  const int64_t n_chunks = p.k_pad / kK;
  // The same number of groups for every warp of a tile (the last ones partly empty), so that
  // they all reach the barrier that adds up their sums.
  constexpr int kGroupChunks = chunks_per_group<T, kBatch, kQ8>();
  const int64_t groups = ceil_div(ceil_div(n_chunks, split), kGroupChunks);
  auto chunk_of = [&](int64_t group, int u) { return part + split * (group * kGroupChunks + u); };

  uint4 w[kQ8 ? 2 * kGroupChunks : kGroupChunks];
  __half scale[kQ8 ? kGroupChunks : 1];  // Q8_0: the scale of each chunk's block
  auto load_group = [&](int64_t group) {
#pragma unroll
    for (int u = 0; u < kGroupChunks; ++u) {
      const int64_t k = chunk_of(group, u) * kK + t * kLane;
      const bool loads = row_loads && k < p.k_in;  // Q8_0: k_in is whole blocks, one a lane
      // Streaming loads (evict first): W is read once a step and would only push x and the
      // caches out of L2. A 32-byte sector of scales serves 16 chunks of a row: those loads keep
      // the default policy, so that the sector stays in L1 for the next ones.
      if constexpr (kQ8) {
        const auto* quants = reinterpret_cast<const uint4*>(quants_row + k);
        w[2 * u] = loads ? __ldcs(quants) : make_uint4(0, 0, 0, 0);
        w[2 * u + 1] = loads ? __ldcs(quants + 1) : make_uint4(0, 0, 0, 0);
        scale[u] = loads ? scales_row[k / kQ8Values] : __ushort_as_half(0);
      } else {
        w[u] = loads ? __ldcs(reinterpret_cast<const uint4*>(w_row + k)) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  allow_dependent_kernels();
  load_group(0);
  wait_for_prerequisite_kernels();
  stage_rows(p, xs, means, scales);
  if (tile * kTileRows >= p.n_out) return;  // the whole slot: no barrier below waits for it

  float* mine = partials + warp * kPartialFloats;
  if constexpr (kTensorCores) {
    // Lane (g, t) multiplies batch rows g and g + 8 at its chunk's values t · 8 … t · 8 + 7:
    // values 0–3 are the first mma's k {2t, 2t + 1, 2t + 8, 2t + 9}, 4–7 the second's.
    // Rows past the batch multiply zeros. Their lanes read the last staged row (so every read
    // stays inside the staged rows, and no branch comes near the mma) and drop what they read.
    // Two accumulators, one for each of a multiply's two mma: each mma waits for the one before
    // it on its accumulator, so two halve that chain (a Q8_0 chunk is eight mma).
    float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f}, other_sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int last_row = p.batch - 1;
    const bool low_rows = g < p.batch, high_rows = g + 8 < p.batch;
    const T* x_low = xs + min(g, last_row) * p.stride + t * kLane;
    const T* x_high = xs + min(g + 8, last_row) * p.stride + t * kLane;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    // Eight values of W (a 16-byte pack of T) times the lane's eight values of x at k.
    auto multiply = [&](int64_t k, const uint4& weights) {
      uint4 lo = load16(x_low + k);
      if (!low_rows) lo = zero;
      uint4 hi = zero;
      if constexpr (kBatch > 8) {
        hi = load16(x_high + k);
        if (!high_rows) hi = zero;
      }
      // mma_16816's A (16 × 16, registers a0…a3) and B (16 × 8, b0, b1) each hold two 16-bit
      // values a register, the lower k in the low half. Lane l = 4g + t holds A's rows g (a0,
      // a2) and g + 8 (a1, a3) and B's column g, at k 2t, 2t + 1 (a0, a1, b0) and 2t + 8,
      // 2t + 9 (a2, a3, b1); sums 0, 1 are row g, columns 2t, 2t + 1, and 2, 3 row g + 8.
      // Only the pairing of A's and B's k matters to the sum, so a lane may fill "k 2t, 2t + 1"
      // and "k 2t + 8, 2t + 9" with any four values of x and the same four of W.
      const uint32_t first[4] = {lo.x, hi.x, lo.y, hi.y}, second[4] = {lo.z, hi.z, lo.w, hi.w};
      mma_16816<T>(sums, first, weights.x, weights.y);
      mma_16816<T>(other_sums, second, weights.z, weights.w);
    };
    for (int64_t group = 0; group < groups; ++group) {
      if (group > 0) load_group(group);
#pragma unroll
      for (int u = 0; u < kGroupChunks; ++u) {
        const int64_t c = chunk_of(group, u);
        if (c >= n_chunks) break;  // the same for the whole warp
        const int64_t k = c * kK;
        if constexpr (kQ8) {
          // The lane's block as four packs of 8 values d · q.
#pragma unroll
          for (int quarter = 0; quarter < 4; ++quarter) {
            const uint4& quants = w[2 * u + quarter / 2];
            const bool first_half = quarter % 2 == 0;
            multiply(k + 8 * quarter,
                     q8x8_times_scale<T>(first_half ? quants.x : quants.z,
                                         first_half ? quants.y : quants.w, scale[u]));
          }
        } else {
          multiply(k, w[u]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) sums[i] += other_sums[i];
    if (split > 1) {
      if (part != 0) {
        *reinterpret_cast<float4*>(mine + lane * 4) =
            make_float4(sums[0], sums[1], sums[2], sums[3]);
      }
      named_barrier(1 + slot, split * 32);
      if (part != 0) return;
      for (int other = 1; other < split; ++other) {
        const float4 theirs =
            *reinterpret_cast<const float4*>(mine + other * kPartialFloats + lane * 4);
        sums[0] += theirs.x;
        sums[1] += theirs.y;
        sums[2] += theirs.z;
        sums[3] += theirs.w;
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      store_output(p, g + (i / 2) * 8, tile * kTileRows + 2 * t + i % 2, sums[i]);
    }
  } else {
    // Lane (g, t) adds up row g's products with every batch row at its chunk's values
    // t · 4 … t · 4 + 3; the row's 4 lanes add up at the end.
    float sums[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) sums[b] = 0.0f;
    const T* x_lane = xs + t * kP;
    for (int64_t group = 0; group < groups; ++group) {
      if (group > 0) load_group(group);
#pragma unroll
      for (int u = 0; u < kGroupChunks; ++u) {
        const int64_t c = chunk_of(group, u);
        if (c >= n_chunks) break;  // the same for the whole warp
        const int64_t k = c * kK;
        const float4 weights = make_float4(__uint_as_float(w[u].x), __uint_as_float(w[u].y),
                                           __uint_as_float(w[u].z), __uint_as_float(w[u].w));
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const float4 values = *reinterpret_cast<const float4*>(x_lane + b * p.stride + k);
          float sum = sums[b];
          sum = fmaf(weights.x, values.x, sum);
          sum = fmaf(weights.y, values.y, sum);
          sum = fmaf(weights.z, values.z, sum);
          sum = fmaf(weights.w, values.w, sum);
          sums[b] = sum;
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      sums[b] += __shfl_xor_sync(kFullWarp, sums[b], 1);
      sums[b] += __shfl_xor_sync(kFullWarp, sums[b], 2);
    }
    if (split > 1) {
      if (part != 0 && t == 0) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) mine[g * kMaxRows + b] = sums[b];
      }
      named_barrier(1 + slot, split * 32);
      if (part != 0) return;
      for (int other = 1; other < split; ++other) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) sums[b] += mine[other * kPartialFloats + g * kMaxRows + b];
      }
    }
    // Each of the row's 4 lanes stores every 4th batch row.
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (b % kLanesPerRow == t) store_output(p, b, row, sums[b]);
    }
  }
}

// ---- Launch -----------------------------------------------------------------------------------
struct DeviceLimits {
  int multiprocessors = 0;
  int64_t shared_per_block = 0;  // opt-in maximum
  int64_t shared_per_multiprocessor = 0;
  int64_t reserved_shared_per_block = 0;
};

// Read once; hark runs on one device.
const DeviceLimits& device_limits() {
  static const DeviceLimits limits = [] {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    auto attribute = [&](cudaDeviceAttr which, const char* what) {
      int value = 0;
      check(cudaDeviceGetAttribute(&value, which, device), what);
      return value;
    };
    DeviceLimits l;
    l.multiprocessors = multiprocessor_count();
    l.shared_per_block =
        attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "shared memory per block");
    l.shared_per_multiprocessor =
        attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, "shared memory per multiprocessor");
    l.reserved_shared_per_block =
        attribute(cudaDevAttrReservedSharedMemoryPerBlock, "reserved shared memory per block");
    return l;
  }();
  return limits;
}

// Once per kernel: lets it use the opt-in maximum of shared memory, and says how many of its
// blocks registers and threads allow per multiprocessor.
template <class T, int kBatch, bool kQ8>
int blocks_by_registers() {
  static const int blocks = [] {
    const auto kernel = decode_linear_kernel<T, kBatch, kQ8>;
    allow_shared_memory(kernel, static_cast<size_t>(device_limits().shared_per_block),
                        "decode_linear shared memory limit");
    int per_multiprocessor = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, kThreads, 0),
          "decode_linear occupancy");
    return std::max(per_multiprocessor, 1);
  }();
  return blocks;
}

// Splits tiles among warps until the tiles occupy every warp the GPU holds at once (or a
// tile's warps would get fewer than two chunks each), as long as the blocks fit in one wave,
// then launches a block per kWarps / split tiles.
template <class T, int kBatch, bool kQ8>
void launch(Params<T> p, int64_t shared_bytes, cudaStream_t stream) {
  const DeviceLimits& limits = device_limits();
  const int64_t by_shared =
      limits.shared_per_multiprocessor / (shared_bytes + limits.reserved_shared_per_block);
  const int64_t per_multiprocessor =
      std::max<int64_t>(1, std::min<int64_t>(blocks_by_registers<T, kBatch, kQ8>(), by_shared));
  const int64_t resident_warps = limits.multiprocessors * per_multiprocessor * kWarps;
  const int64_t n_tiles = ceil_div(p.n_out, kTileRows);
  const int64_t n_chunks = p.k_pad / chunk_values<T, kQ8>();
  p.split = 1;
  while (p.split < kWarps && p.split * 2 <= n_chunks && n_tiles * p.split < resident_warps) {
    p.split *= 2;
  }
  // But no more blocks than run at once: a second wave would wait for the first one's whole
  // latency (staging x, the loads, the sums), which is most of a small layer's time.
  const int64_t resident_blocks = limits.multiprocessors * per_multiprocessor;
  while (p.split > 1 && ceil_div(n_tiles, kWarps / p.split) > resident_blocks) p.split /= 2;
  const int64_t blocks = ceil_div(n_tiles, kWarps / p.split);
  if (blocks > INT32_MAX) fail("decode_linear: ", p.n_out, " output rows are too many");
  // Launched as a programmatic dependent of the kernel before it (which lets it start once all
  // of that kernel's blocks run): its blocks load their first weights while that kernel finishes,
  // and wait_for_prerequisite_kernels holds them back from x until it has.
  launch_kernel(decode_linear_kernel<T, kBatch, kQ8>, dim3(static_cast<unsigned>(blocks)),
                dim3(kThreads), static_cast<size_t>(shared_bytes), 1, /*early_start=*/true, stream,
                "decode_linear launch", p);
}

template <class T>
void run(const T* x, int batch, int64_t k_in, const DecodeNorm* norm, DecodeWeights w,
         int64_t n_out, const T* bias, bool gelu, const T* residual, T* y, float* y_f32,
         const KvScatter* scatter, cudaStream_t stream) {
  constexpr bool kTensorCores = !std::is_same_v<T, float>;
  const int64_t chunk = w.q8_0 ? chunk_values<T, true>() : chunk_values<T, false>();
  const int64_t k_pad = ceil_div(k_in, chunk) * chunk;
  // 16-bit rows start 64 bytes apart modulo 128, so that the 8 lanes of a quarter warp, which
  // read 64 bytes of two consecutive rows, hit every bank once.
  int64_t row_bytes = k_pad * static_cast<int64_t>(sizeof(T));
  if (kTensorCores && row_bytes % 128 == 0) row_bytes += 64;
  int64_t max_rows =
      std::min<int64_t>(kMaxRows, (device_limits().shared_per_block - kStageOffset) / row_bytes);
  if (max_rows < 1) fail("decode_linear: k_in ", k_in, " is too long to stage a row");
  // The F32 kernel stages whole buckets, so launches take a power of two rows at most.
  if (!kTensorCores) {
    int64_t bucket = 1;
    while (bucket * 2 <= max_rows) bucket *= 2;
    max_rows = bucket;
  }

  const int64_t y_stride = scatter != nullptr ? scatter->width : n_out;
  for (int first = 0; first < batch; first += static_cast<int>(max_rows)) {
    const int count = static_cast<int>(std::min<int64_t>(max_rows, batch - first));
    Params<T> p;
    p.x = x + first * k_in;
    p.batch = count;
    p.k_in = k_in;
    p.k_pad = k_pad;
    p.stride = row_bytes / static_cast<int64_t>(sizeof(T));
    if (norm != nullptr) {
      p.gamma = static_cast<const T*>(norm->gamma);
      p.beta = static_cast<const T*>(norm->beta);
      p.eps = norm->eps;
    }
    if (w.q8_0) {
      p.quants = static_cast<const int8_t*>(w.data);
      p.scales = reinterpret_cast<const __half*>(static_cast<const uint8_t*>(w.data) +
                                                 q8_0_scales_offset(n_out, k_in));
    } else {
      p.w = static_cast<const T*>(w.data);
    }
    p.n_out = n_out;
    p.bias = bias;
    p.gelu = gelu;
    p.residual = residual != nullptr ? residual + first * n_out : nullptr;
    if (y_f32 != nullptr) {
      p.y_f32 = y_f32 + first * n_out;
    } else {
      p.y = y + first * y_stride;
    }
    if (scatter != nullptr) {
      p.width = scatter->width;
      p.cache_batch_stride = scatter->cache_batch_stride;
      p.k_cache = static_cast<T*>(scatter->k_cache) + first * p.cache_batch_stride;
      p.v_cache = static_cast<T*>(scatter->v_cache) + first * p.cache_batch_stride;
      p.positions = scatter->positions + first;
    }
    if constexpr (kTensorCores) {
      p.staged_rows = count;
      const int64_t shared_bytes = kStageOffset + count * row_bytes;
      if (w.q8_0) {
        count > 8 ? launch<T, 16, true>(p, shared_bytes, stream)
                  : launch<T, 8, true>(p, shared_bytes, stream);
      } else if (count > 8) {
        launch<T, 16, false>(p, shared_bytes, stream);
      } else {
        count > 1 ? launch<T, 8, false>(p, shared_bytes, stream)
                  : launch<T, 1, false>(p, shared_bytes, stream);
      }
    } else {
      int bucket = 1;
      while (bucket < count) bucket *= 2;
      p.staged_rows = bucket;
      const int64_t shared_bytes = kStageOffset + bucket * row_bytes;
      switch (bucket) {
        case 1:
          launch<T, 1, false>(p, shared_bytes, stream);
          break;
        case 2:
          launch<T, 2, false>(p, shared_bytes, stream);
          break;
        case 4:
          launch<T, 4, false>(p, shared_bytes, stream);
          break;
        case 8:
          launch<T, 8, false>(p, shared_bytes, stream);
          break;
        default:
          launch<T, 16, false>(p, shared_bytes, stream);
          break;
      }
    }
  }
}

}  // namespace

namespace {

// What every decode_linear launch needs of x, W and the norm.
void check_inputs(Element e, const void* x, int64_t k_in, const DecodeNorm* norm, DecodeWeights w) {
  // Rows of x and W move in 16-byte loads.
  if (k_in <= 0 || k_in % 8 != 0) {
    fail("decode_linear: k_in ", k_in, " is not a positive multiple of 8");
  }
  if (w.q8_0) {
    if (e == Element::f32) fail("decode_linear: Q8_0 weights need a 16-bit element type");
    if (k_in % kQ8Values != 0) {
      fail("decode_linear: k_in ", k_in, " is not a whole number of Q8_0 blocks");
    }
  }
  if (!aligned(x, 16) || !aligned(w.data, 16)) {
    fail("decode_linear: x and W must be 16-byte aligned");
  }
  if (norm != nullptr) {
    if (norm->gamma == nullptr || norm->beta == nullptr) {
      fail("decode_linear: a norm needs gamma and beta");
    }
    if (!aligned(norm->gamma, 16) || !aligned(norm->beta, 16)) {
      fail("decode_linear: the norm's gamma and beta must be 16-byte aligned");
    }
  }
}

}  // namespace

void decode_linear(Element e, const void* x, int batch, int64_t k_in, const DecodeNorm* norm,
                   DecodeWeights w, int64_t n_out, const void* bias, bool gelu,
                   const void* residual, void* y, const KvScatter* scatter, cudaStream_t stream) {
  if (batch <= 0 || n_out <= 0) return;
  check_inputs(e, x, k_in, norm, w);
  if (scatter != nullptr) {
    if (scatter->width <= 0 || n_out != 3 * scatter->width) {
      fail("decode_linear: a K/V scatter needs n_out = 3 · width, not ", n_out, " for width ",
           scatter->width);
    }
    if (residual != nullptr) fail("decode_linear: a K/V scatter takes no residual");
    if (scatter->k_cache == nullptr || scatter->v_cache == nullptr ||
        scatter->positions == nullptr) {
      fail("decode_linear: a K/V scatter needs both caches and the positions");
    }
  }
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    run<T>(static_cast<const T*>(x), batch, k_in, norm, w, n_out, static_cast<const T*>(bias), gelu,
           static_cast<const T*>(residual), static_cast<T*>(y), nullptr, scatter, stream);
  });
}

void decode_linear_f32_out(Element e, const void* x, int batch, int64_t k_in,
                           const DecodeNorm* norm, DecodeWeights w, int64_t n_out, float* y,
                           cudaStream_t stream) {
  if (batch <= 0 || n_out <= 0) return;
  check_inputs(e, x, k_in, norm, w);
  with_type(e, [&](auto tag) {
    using T = decltype(tag);
    run<T>(static_cast<const T*>(x), batch, k_in, norm, w, n_out, nullptr, false, nullptr, nullptr,
           y, nullptr, stream);
  });
}

}  // namespace hark::compute::cuda
