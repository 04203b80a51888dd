// Products of few rows on Hopper (skinny_linear_sm90.h). Compiled for sm_90a only
// (CMakeLists.txt), like the other wgmma kernels.
//
// The roles of x and w are swapped against gemm_sm90.cu: w's rows are wgmma's 64 rows of A and
// the product's few rows of x are its n columns (16 or 32: the rows rounded up; TMA reads the
// ones past m as zeros). A CTA takes 64 outputs and a share of the depth:
//   - a producer warp (one thread) copies 64 × 64 tiles of w and n × 64 tiles of x into a ring
//     of stages by TMA. The first stages' weights are requested before the kernel waits for the
//     one before it (programmatic dependent launch): no earlier kernel writes them, so the
//     weights' stream starts while that kernel finishes;
//   - a warpgroup multiplies each stage (four wgmma.m64nNk16) and frees it for the producer
//     once its products are done;
//   - the CTAs that share a column tile form a cluster (one a depth share: `splits`). Each writes
//     its partial sums to its shared memory; then each adds up a share of the tile's rows from
//     all of them, in the order of their ranks, and applies bias, activation and residual: the
//     same sums whatever order the CTAs ran in.
// How many splits: as many as keep every CTA resident at once (two an SM: each takes at most
// 109 KB of shared memory), up to the portable cluster size of 8, while each share keeps
// kDepthPerRow × n of depth.
//
// With a layer norm over x first (the norm's input is x; its rows are as deep as the product):
//   - x's share does not pass through the ring: it is copied whole (rows × share depth) into
//     shared memory once the kernel before has finished, and only w streams through the stages;
//   - the consumers take each row's mean and sum of squared deviations over the share, the CTAs
//     of the cluster read each other's through distributed shared memory and merge them in rank
//     order (the pairwise formula of Chan, Golub and LeVeque: the row's statistics, the same bits
//     in every CTA of the cluster);
//   - and normalise the share in place with γ and β (copied before the wait: weights), rounding
//     to the element type as layer_norm's output is rounded, before the first product.
// So the norm costs no launch of its own and no pass over x in global memory: a decode step of
// 9-32 sequences took three such launches a layer (bench/RESULTS.md).
//
// With Q8_0 weights (the device layout, kernels.h) the ring carries w's quants, 64 × 64 bytes a
// stage, half the bytes of F16. The consumers copy the scales of their 64 rows over the share
// before the wait, and expand each stage into a 16-bit tile in the 128-byte swizzle (d · q
// rounded once, as dequantize_q8_0 rounds it; two such tiles, so that one is written while the
// product before reads the other) that wgmma then reads.
#include "compute/cuda/skinny_linear_sm90.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "base/error.h"
#include "compute/cuda/activation.cuh"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/hopper.cuh"

namespace hark::compute::cuda {

namespace {

using namespace hopper;

constexpr int kOutputs = 64;    // a CTA's outputs: wgmma's 64 rows
constexpr int kTileDepth = 64;  // 64 16-bit values along k: one 128-byte row of the swizzle
constexpr int kMaxSplits = 8;   // the portable cluster size
// Shared memory a CTA may take beside its 1024 bytes of room for alignment, so that two fit an
// SM (228 KB, of which each CTA's first 1 KB is reserved).
constexpr int kSharedBudget = 108 * 1024;
// The ring's stages: as many as the budget holds, up to 8, unless HARK_CUDA_SKINNY_STAGES asks
// for fewer; at least 2 (the partial tile reuses them, and one stage alone would not overlap the
// copies with the products).
constexpr int kMaxStages = 8, kMinStages = 2;
constexpr int kThreads = 128 + 32;  // the consumer warpgroup, then the producer warp
constexpr int kConsumers = 128;
constexpr int kProducerWarp = 4;
constexpr int kWBytes = kOutputs * kTileDepth * 2;
// The depth a split keeps per column of wgmma (row of x). A split's partial sums (n × 64 F32)
// are then at most a quarter of its weights' bytes (64 × depth × 2), and adding them up through
// distributed shared memory costs less than the stream the split shortens. With no such bound,
// the step of 120 sequences took 8.75 ms where cuBLASLt's products gave 6.51; with it, products
// of 64 or more rows were still slower than cuBLASLt's (bench/RESULTS.md, twenty-eighth
// session), hence kSkinnyMaxRows.
constexpr int kDepthPerRow = 8;
// The most bytes of x's share a CTA holds for the norm: large-v3's fc1 (a share 640 deep at two
// splits) takes 40 KB at 32 rows.
constexpr int kMaxNormShareBytes = 48 * 1024;

// What a kernel is built for: kRows columns of wgmma (x's rows rounded up), a norm before the
// product, Q8_0 weights.
template <int kRowsOf, bool kNormOf, bool kQ8Of>
struct Form {
  static constexpr int kRows = kRowsOf;
  static constexpr bool kNorm = kNormOf, kQ8 = kQ8Of;
};

// The shared memory of a CTA, from its 1024-byte-aligned start:
//   - with Q8_0 weights, two 16-bit tiles of w (64 × 64) that the stages' quants expand into;
//   - the ring's stages: w's 64 × 64 tile (16-bit values, or Q8_0's bytes), then, without the
//     norm, x's kRows × 64 tile (each a multiple of the swizzle's 1024 bytes);
//   - with the norm, x's share: share_steps tiles of kRows × 64;
//   - the ring's full and empty barriers, and the share's;
//   - with the norm, γ and β over the share, then each row's mean and sum of squared deviations
//     over the share, then its mean and scale over the whole row;
//   - with Q8_0 weights, the scales of the CTA's 64 rows of w over the share, [64][share_steps]
//     pairs (a depth step is two blocks of 32).
template <class F>
struct Layout {
  static constexpr int kXBytes = F::kRows * kTileDepth * 2;
  static constexpr int kWTileBytes = F::kQ8 ? kOutputs * kTileDepth : kWBytes;
  static constexpr int kStageBytes = kWTileBytes + (F::kNorm ? 0 : kXBytes);
  static constexpr int kExpandedBytes = F::kQ8 ? 2 * kWBytes : 0;
  // The partial tile's rows (after the products, from the start): the outputs and 4 floats
  // more, so that the eight rows of x a warp's accumulators hold at once (two apart) fall in
  // distinct banks.
  static constexpr int kPartialPitch = kOutputs + 4;
  static_assert(F::kRows * kPartialPitch * 4 <= kExpandedBytes + kMinStages * kStageBytes,
                "the partial tile reuses the tiles of w and the stages");

  int stages = 0;
  int share_steps = 0;  // the depth steps of the longest share

  __host__ __device__ int ring() const { return kExpandedBytes; }
  __host__ __device__ int x_share() const { return ring() + stages * kStageBytes; }
  __host__ __device__ int barriers() const {
    return x_share() + (F::kNorm ? share_steps * kXBytes : 0);
  }
  // 2 · stages + 1 barriers, rounded up to keep what follows 16-byte aligned.
  __host__ __device__ int norm_vectors() const { return barriers() + (2 * stages + 2) * 8; }
  __host__ __device__ int row_statistics() const {
    return norm_vectors() + (F::kNorm ? 2 * share_steps * kTileDepth * 2 : 0);
  }
  __host__ __device__ int weight_scales() const {
    return row_statistics() + (F::kNorm ? 4 * F::kRows * 4 : 0);
  }
  __host__ __device__ int bytes() const {
    return weight_scales() + (F::kQ8 ? kOutputs * share_steps * 4 : 0);
  }
};

// What a launch passes besides its tensor maps.
template <class T, class F>
struct Operands {
  Layout<F> layout;
  const T* bias = nullptr;      // null: none
  const T* residual = nullptr;  // null: none
  T* y = nullptr;
  const T* gamma = nullptr;  // the norm's (F::kNorm)
  const T* beta = nullptr;
  float eps = 0.0f;
  // Q8_0 weights' scales (F::kQ8), [n][k / 32].
  const __half* weight_scales = nullptr;
  // The K/V scatter (width > 0): outputs [0, width) to y [m, width], [width, 2 · width) to
  // k_cache and the rest to v_cache, at row positions[r] of sequence r's cache.
  T* k_cache = nullptr;
  T* v_cache = nullptr;
  int64_t cache_stride = 0;
  const int32_t* positions = nullptr;
  int width = 0;
  int m = 0, n = 0, k = 0;
};

// Where output `column` (one of 8 in a row, a 16-byte group) of row `row` goes: y, or with the
// K/V scatter y's part or a cache row.
template <class T, class F>
__device__ __forceinline__ T* destination(const Operands<T, F>& p, int row, int column) {
  if (p.width == 0) return p.y + int64_t{row} * p.n + column;
  const int part = column / p.width, at = column - part * p.width;
  if (part == 0) return p.y + int64_t{row} * p.width + at;
  T* cache = part == 1 ? p.k_cache : p.v_cache;
  return cache + row * p.cache_stride + int64_t{p.positions[row]} * p.width + at;
}

// The sum over the `kLanes` consecutive lanes (a power of two) of a group, returned to each.
template <int kLanes>
__device__ __forceinline__ float group_sum(float value) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullWarp, value, offset);
  }
  return value;
}

// The consumers' part of the norm (see the top of the file): x's share (`steps` tiles from
// `share`) normalised in place, ready for wgmma. `first` is the share's first depth step, of
// `depth_steps` cut into `splits` shares (one a CTA of the cluster).
template <class T, class F>
__device__ __forceinline__ void normalise_share(const Operands<T, F>& p, uint8_t* shared,
                                                uint64_t* x_arrived, int first, int steps,
                                                int depth_steps, int splits) {
  using L = Layout<F>;
  constexpr int kRows = F::kRows;
  const L& layout = p.layout;
  const int thread = static_cast<int>(threadIdx.x);
  const int rows = min(p.m, kRows), depth = steps * kTileDepth;
  uint8_t* share = shared + layout.x_share();
  T* gamma = reinterpret_cast<T*>(shared + layout.norm_vectors());
  T* beta = gamma + layout.share_steps * kTileDepth;
  float* share_mean = reinterpret_cast<float*>(shared + layout.row_statistics());
  float* share_squares = share_mean + kRows;
  float* row_mean = share_squares + kRows;
  float* row_scale = row_mean + kRows;

  // γ and β over the share, while x is on its way.
  const int64_t offset = int64_t{first} * kTileDepth;
  for (int pack = thread; pack < depth / 8; pack += kConsumers) {
    const uint4 g = *reinterpret_cast<const uint4*>(p.gamma + offset + 8 * pack);
    const uint4 b = *reinterpret_cast<const uint4*>(p.beta + offset + 8 * pack);
    reinterpret_cast<uint4*>(gamma)[pack] = g;
    reinterpret_cast<uint4*>(beta)[pack] = b;
  }
  barrier_wait(x_arrived, 0);

  // kThreadsPerRow consecutive threads take a row, each kPieces of its eight 16-byte pieces of
  // every tile: physical piece (part + kThreadsPerRow · (j + row)) % 8, so that the eight lanes
  // whose loads are served together read 128 distinct bytes of one or two rows.
  constexpr int kThreadsPerRow = kConsumers / kRows;
  constexpr int kPieces = 8 / kThreadsPerRow;
  const int row = thread / kThreadsPerRow, part = thread % kThreadsPerRow;
  const auto piece = [&](int j) { return (part + kThreadsPerRow * (j + row)) % 8; };
  const auto values_at = [&](int tile, int j) {
    return reinterpret_cast<T*>(share + tile * L::kXBytes + row * 128 + piece(j) * 16);
  };
  // f(value) for each value of the thread's pieces.
  const auto for_each_value = [&](auto&& f) {
    for (int tile = 0; tile < steps; ++tile) {
#pragma unroll
      for (int j = 0; j < kPieces; ++j) {
        float v[8];
        load_pack(values_at(tile, j), v);
#pragma unroll
        for (int i = 0; i < 8; ++i) f(v[i]);
      }
    }
  };
  float sum = 0.0f;
  for_each_value([&](float value) { sum += value; });
  const float mean = group_sum<kThreadsPerRow>(sum) / static_cast<float>(depth);
  float squares = 0.0f;
  for_each_value([&](float value) { squares = fmaf(value - mean, value - mean, squares); });
  squares = group_sum<kThreadsPerRow>(squares);
  if (part == 0 && row < rows) {
    share_mean[row] = mean;
    share_squares[row] = squares;
  }
  __syncwarp();  // the cluster barrier is .aligned: the whole warp executes it together

  // Every share's statistics, merged in rank order: the same in every CTA of the cluster.
  cluster_arrive();
  cluster_wait();
  if (thread < rows) {
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    float count = 0.0f, merged_mean = 0.0f, merged_squares = 0.0f;
    for (int rank = 0; rank < splits; ++rank) {
      const int rank_first = rank * depth_steps / splits;
      const int rank_steps = (rank + 1) * depth_steps / splits - rank_first;
      const auto their_count = static_cast<float>(rank_steps * kTileDepth);
      const float their_mean = *cluster.map_shared_rank(share_mean + thread, rank);
      const float their_squares = *cluster.map_shared_rank(share_squares + thread, rank);
      const float total = count + their_count;
      const float delta = their_mean - merged_mean;
      merged_mean += delta * (their_count / total);
      merged_squares += their_squares + delta * delta * (count * their_count / total);
      count = total;
    }
    row_mean[thread] = merged_mean;
    row_scale[thread] = 1.0f / sqrtf(merged_squares / count + p.eps);
  }
  warpgroup_sync(1);

  // (x − mean) · scale · γ + β, as layer_norm computes it, over the share's valid rows (those
  // past m stay zeros). The piece's values lie at its logical place p ^ (row % 8) of the depth.
  if (row < rows) {
    const float mean_of_row = row_mean[row], scale = row_scale[row];
    for (int tile = 0; tile < steps; ++tile) {
#pragma unroll
      for (int j = 0; j < kPieces; ++j) {
        T* at = values_at(tile, j);
        const int depth_at = tile * kTileDepth + (piece(j) ^ (row % 8)) * 8;
        float v[8], g[8], b[8];
        load_pack(at, v);
        load_pack(gamma + depth_at, g);
        load_pack(beta + depth_at, b);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = (v[i] - mean_of_row) * scale * g[i] + b[i];
        store_pack(v, at);
      }
    }
  }
  // wgmma reads shared memory through the async proxy, as TMA does.
  fence_shared_for_tma();
  warpgroup_sync(1);
}

// The consumers' copy of the Q8_0 scales of the CTA's 64 rows of w over its share (weights:
// before the wait): a depth step's two blocks a 4-byte pair, [64][share_steps].
template <class T, class F>
__device__ __forceinline__ void copy_weight_scales(const Operands<T, F>& p, uint32_t* pairs,
                                                   int col, int first, int steps) {
  const int pairs_a_row = p.k / kTileDepth;  // of the whole matrix: k / 32 scales
  const auto* from =
      reinterpret_cast<const uint32_t*>(p.weight_scales) + int64_t{col} * pairs_a_row + first;
  for (int i = static_cast<int>(threadIdx.x); i < kOutputs * steps; i += kConsumers) {
    const int row = i / steps, step = i % steps;
    pairs[row * p.layout.share_steps + step] = from[int64_t{row} * pairs_a_row + step];
  }
  warpgroup_sync(1);
}

// The consumers' expansion of a stage's Q8_0 quants (64 rows × 64 bytes, as TMA laid them) into
// a 16-bit tile in the 128-byte swizzle: 8 values (a 16-byte piece) a thread at a time, piece p
// of row r at p ^ (r % 8); then made visible to wgmma (the async proxy).
template <class T, class F>
__device__ __forceinline__ void expand_weights(const Operands<T, F>& p, const uint8_t* quants,
                                               const uint32_t* pairs, int step, uint8_t* tile) {
#pragma unroll
  for (int u = 0; u < kOutputs * 8 / kConsumers; ++u) {
    const int i = static_cast<int>(threadIdx.x) + kConsumers * u;
    const int row = i / 8, piece = i % 8;
    const uint2 q = *reinterpret_cast<const uint2*>(quants + row * kTileDepth + piece * 8);
    const uint32_t pair = pairs[row * p.layout.share_steps + step];
    // The piece's block: the first 32 values of the step, or the second.
    const uint16_t bits = static_cast<uint16_t>(piece < 4 ? pair : pair >> 16);
    *reinterpret_cast<uint4*>(tile + row * 128 + (piece ^ (row % 8)) * 16) =
        q8x8_times_scale<T>(q.x, q.y, __ushort_as_half(bits));
  }
  fence_shared_for_tma();
  warpgroup_sync(1);
}

template <class T, class F, Activation kAct>
__global__ void __launch_bounds__(kThreads)
    skinny_linear_kernel(const __grid_constant__ CUtensorMap x_map,
                         const __grid_constant__ CUtensorMap w_map, const Operands<T, F> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<F>;
  constexpr int kRows = F::kRows;
  namespace cg = cooperative_groups;
  extern __shared__ uint8_t shared_raw[];
  // The swizzle repeats every 1024 bytes, and the descriptors assume that it starts at a tile.
  uint8_t* shared = shared_raw + ((1024 - (shared_address(shared_raw) & 1023)) & 1023);
  const L& layout = p.layout;
  const int stages = layout.stages;
  auto* full = reinterpret_cast<uint64_t*>(shared + layout.barriers());
  uint64_t* empty = full + stages;
  uint64_t* x_arrived = empty + stages;  // the norm's share of x
  auto* weight_scales = reinterpret_cast<uint32_t*>(shared + layout.weight_scales());
  const auto w_tile = [&](int stage) { return shared + layout.ring() + stage * L::kStageBytes; };
  // The tile of x of depth step `step`, in stage `stage`: in that stage, or with the norm in the
  // share.
  const auto x_tile = [&](int stage, int step) {
    return F::kNorm ? shared + layout.x_share() + step * L::kXBytes
                    : w_tile(stage) + L::kWTileBytes;
  };
  // The 16-bit tile of w a step multiplies: its stage's, or the quants' expansion.
  const auto expanded_tile = [&](int step) { return shared + (step % 2) * kWBytes; };

  const int split = static_cast<int>(blockIdx.x), splits = static_cast<int>(gridDim.x);
  const int col = static_cast<int>(blockIdx.y) * kOutputs;
  const int depth_steps = p.k / kTileDepth;
  const int first = split * depth_steps / splits;
  // ≥ 1: one share holds the whole depth (at least one step), and more shares are each at
  // least kDepthPerRow × kRows ≥ 2 steps deep (splits_for).
  const int steps = (split + 1) * depth_steps / splits - first;
  const auto depth_of = [&](int step) { return (first + step) * kTileDepth; };
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = thread / 32, lane = thread % 32;

  if (thread == 0) {
    for (int s = 0; s < stages; ++s) {
      barrier_init(&full[s], 1);   // the producer's expect_tx; the bytes complete it
      barrier_init(&empty[s], 1);  // one thread of the consumer, once its products are done
    }
    if constexpr (F::kNorm) barrier_init(x_arrived, 1);
    barrier_init_fence();
  }
  __syncthreads();
  // The next kernel may place its CTAs beside these and request its own weights.
  allow_dependent_kernels();

  float d[kRows / 2];
  if (warp == kProducerWarp) {
    const int preloaded = min(steps, stages);
    if (lane == 0) {
      for (int s = 0; s < preloaded; ++s) {
        barrier_expect_bytes(&full[s], L::kStageBytes);
        tma_load(w_tile(s), &w_map, &full[s], depth_of(s), col);
      }
      // x and the residual come from the kernels before; the weights do not.
      wait_for_prerequisite_kernels();
      if constexpr (F::kNorm) {
        barrier_expect_bytes(x_arrived, steps * L::kXBytes);
        for (int s = 0; s < steps; ++s) tma_load(x_tile(0, s), &x_map, x_arrived, depth_of(s), 0);
      } else {
        for (int s = 0; s < preloaded; ++s)
          tma_load(x_tile(s, s), &x_map, &full[s], depth_of(s), 0);
      }
    }
    __syncwarp();
    // The consumers wait for the whole cluster at the norm's statistics: this warp has nothing
    // to give there.
    if constexpr (F::kNorm) cluster_arrive();
    if (lane == 0) {
      int stage = 0;
      uint32_t phase = 0;  // of the empty barriers' second pass over the ring
      for (int step = stages; step < steps; ++step) {
        barrier_wait(&empty[stage], phase);
        barrier_expect_bytes(&full[stage], L::kStageBytes);
        tma_load(w_tile(stage), &w_map, &full[stage], depth_of(step), col);
        if constexpr (!F::kNorm) {
          tma_load(x_tile(stage, step), &x_map, &full[stage], depth_of(step), 0);
        }
        if (++stage == stages) stage = 0, phase ^= 1;
      }
    }
    __syncwarp();
    if constexpr (F::kNorm) cluster_wait();
  } else {
    if constexpr (F::kQ8) copy_weight_scales(p, weight_scales, col, first, steps);
    if constexpr (F::kNorm) {
      normalise_share(p, shared, x_arrived, first, steps, depth_steps, splits);
    }
    int stage = 0, previous = 0;
    uint32_t phase = 0;
    for (int step = 0; step < steps; ++step) {
      barrier_wait(&full[stage], phase);
      // (The products two steps back, which read this expanded tile, are done: wgmma_wait<1>.)
      if constexpr (F::kQ8) {
        expand_weights(p, w_tile(stage), weight_scales, step, expanded_tile(step));
      }
      const uint64_t a = operand_descriptor(F::kQ8 ? expanded_tile(step) : w_tile(stage));
      const uint64_t b = operand_descriptor(x_tile(stage, step));
      fence_registers(d);
      wgmma_fence();
#pragma unroll
      for (int slice = 0; slice < kTileDepth / 16; ++slice) {
        // 16 values further along k: 32 bytes, 2 in the descriptor's 16-byte units.
        wgmma_64xNx16<T, kRows>(d, a + 2 * slice, b + 2 * slice, step > 0 || slice > 0);
      }
      wgmma_commit();
      fence_registers(d);
      wgmma_wait<1>();
      // The warpgroup's products of the step before are done: one arrival frees its stage.
      if (step > 0 && thread == 0) barrier_arrive(&empty[previous]);
      previous = stage;
      if (++stage == stages) stage = 0, phase ^= 1;
    }
    wgmma_wait<0>();
    fence_registers(d);
  }
  // The epilogue reads the residual, which the kernels before may write.
  wait_for_prerequisite_kernels();

  // The partial tile, [kRows rows of x][outputs], from the start of shared memory (every copy
  // has landed and every product has read its tiles). Thread t holds d[4j + 2i + c] for output
  // 16·(t / 32) + (t % 32) / 4 + 8i and row 8j + 2·(t % 4) + c.
  __syncthreads();
  auto* partial = reinterpret_cast<float*>(shared);
  if (warp < kProducerWarp) {
#pragma unroll
    for (int j = 0; j < kRows / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int output = 16 * warp + lane / 4 + 8 * i, row = 8 * j + 2 * (lane % 4) + c;
          partial[row * L::kPartialPitch + output] = d[4 * j + 2 * i + c];
        }
      }
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();

  // This CTA's share of the tile's valid rows, 8 outputs (16 bytes of y) a thread at a time.
  constexpr int kGroups = kOutputs / 8;
  const int rows = min(p.m, kRows), items = rows * kGroups;
  const int item_end = (split + 1) * items / splits;
  for (int item = split * items / splits + thread; item < item_end; item += kThreads) {
    const int row = item / kGroups, group = item % kGroups;
    float sum[8] = {};
    for (int rank = 0; rank < splits; ++rank) {
      const float* from =
          cluster.map_shared_rank(partial + row * L::kPartialPitch + group * 8, rank);
      const float4 low = *reinterpret_cast<const float4*>(from);
      const float4 high = *reinterpret_cast<const float4*>(from + 4);
      sum[0] += low.x, sum[1] += low.y, sum[2] += low.z, sum[3] += low.w;
      sum[4] += high.x, sum[5] += high.y, sum[6] += high.z, sum[7] += high.w;
    }
    const int column = col + group * 8;
    const int64_t at = int64_t{row} * p.n + column;
    uint4 bias_words{}, residual_words{};
    if (p.bias != nullptr) bias_words = *reinterpret_cast<const uint4*>(p.bias + column);
    if (p.residual != nullptr) residual_words = *reinterpret_cast<const uint4*>(p.residual + at);
    const uint32_t bias_pairs[4] = {bias_words.x, bias_words.y, bias_words.z, bias_words.w};
    const uint32_t residual_pairs[4] = {residual_words.x, residual_words.y, residual_words.z,
                                        residual_words.w};
    uint32_t out[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float2 value = make_float2(sum[2 * q], sum[2 * q + 1]);
      if (p.bias != nullptr) {
        const float2 b = unpack_pair<T>(bias_pairs[q]);
        value.x += b.x, value.y += b.y;
      }
      value.x = activated<kAct>(value.x), value.y = activated<kAct>(value.y);
      if (p.residual != nullptr) {
        const float2 r = unpack_pair<T>(residual_pairs[q]);
        value.x += r.x, value.y += r.y;
      }
      out[q] = pack_pair<T>(value.x, value.y);
    }
    *reinterpret_cast<uint4*>(destination(p, row, column)) = uint4{out[0], out[1], out[2], out[3]};
  }
  // The other CTAs' reads of this one's partial sums must be done before it exits.
  cluster.sync();
#else
  // Built for a GPU without wgmma: skinny_linear_runs refuses every call.
  (void)p;
#endif
}

// The depth shares a column tile is cut into (the cluster's size): a power of two, as many as
// keep all CTAs resident at once (two an SM), at most kMaxSplits, each of at least kDepthPerRow
// × rows values.
int splits_for(int64_t tiles, int64_t depth_steps, int rows) {
  const int64_t resident = 2 * int64_t{multiprocessor_count()};
  int splits = 1;
  while (splits * 2 <= kMaxSplits && tiles * splits * 2 <= resident &&
         depth_steps * kTileDepth / (splits * 2) >= kDepthPerRow * rows) {
    splits *= 2;
  }
  return splits;
}

// The stages asked for: HARK_CUDA_SKINNY_STAGES (2 to 8), else kMaxStages. Fewer stages leave
// room on an SM for the next kernel's CTAs to start their weights' stream early. Read at every
// launch, so that a benchmark or a test can compare them in one process.
int requested_stages() {
  const char* text = std::getenv("HARK_CUDA_SKINNY_STAGES");
  if (text == nullptr || *text == '\0') return kMaxStages;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < kMinStages || value > kMaxStages) {
    fail("HARK_CUDA_SKINNY_STAGES is '", text, "': expected a number from ", kMinStages, " to ",
         kMaxStages);
  }
  return static_cast<int>(value);
}

// The shared memory of a product of depth k cut into `splits` shares: stages = 0 where the
// budget does not hold kMinStages of them (or, with the norm, x's share is too large).
template <class F>
Layout<F> layout_for(int64_t k, int splits) {
  using L = Layout<F>;
  L layout;
  layout.share_steps = static_cast<int>(ceil_div(k / kTileDepth, splits));
  const int fixed = layout.bytes();  // with no stages
  const int per_stage = L::kStageBytes + 2 * 8;
  const int stages = std::min(requested_stages(), (kSharedBudget - fixed) / per_stage);
  const bool share_fits = !F::kNorm || layout.share_steps * L::kXBytes <= kMaxNormShareBytes;
  layout.stages = stages >= kMinStages && share_fits ? stages : 0;
  return layout;
}

// Calls `f` with the Form of a product (an empty struct: its type is what counts).
template <class Fn>
void with_form(const SkinnyProduct& product, Fn&& f) {
  const auto with_rows = [&](auto norm, auto q8) {
    constexpr bool kNorm = decltype(norm)::value, kQ8 = decltype(q8)::value;
    if (product.m <= 16) return f(Form<16, kNorm, kQ8>{});
    f(Form<32, kNorm, kQ8>{});
  };
  static_assert(kSkinnyMaxRows == 32, "a form for every row count up to kSkinnyMaxRows");
  const auto with_q8 = [&](auto norm) {
    if (product.w.q8_0) return with_rows(norm, std::true_type{});
    with_rows(norm, std::false_type{});
  };
  if (product.norm != nullptr) return with_q8(std::true_type{});
  with_q8(std::false_type{});
}

// A launch's cluster size (the depth's shares) and a CTA's shared memory.
template <class F>
struct Plan {
  int splits = 0;
  Layout<F> layout;  // stages = 0: the product does not fit
};

template <class F>
Plan<F> plan_for(const SkinnyProduct& product) {
  Plan<F> plan;
  plan.splits = splits_for(product.n / kOutputs, product.k / kTileDepth, F::kRows);
  plan.layout = layout_for<F>(product.k, plan.splits);
  return plan;
}

// Whether the shared memory of a CTA holds the product's stages and shares.
bool fits(const SkinnyProduct& product) {
  bool fitting = false;
  with_form(product,
            [&](auto form) { fitting = plan_for<decltype(form)>(product).layout.stages > 0; });
  return fitting;
}

// Whether the product's shapes, pointers, norm and scatter are ones the kernel takes (its
// shared memory aside: fits).
bool takes_operands(Element e, const SkinnyProduct& p) {
  const bool shape = present() && e != Element::f32 && p.m >= 1 && p.m <= kSkinnyMaxRows &&
                     p.n % kOutputs == 0 && p.n >= kOutputs && p.n / kOutputs <= 65535 &&
                     p.k % kTileDepth == 0 && p.k >= kTileDepth && p.k <= INT32_MAX &&
                     aligned(p.x, 16) && aligned(p.w.data, 16) && aligned(p.y, 16) &&
                     (p.bias == nullptr || aligned(p.bias, 16)) &&
                     (p.residual == nullptr || aligned(p.residual, 16));
  if (!shape) return false;
  // The scatter's parts take whole 16-byte groups of outputs; it writes y's own part, so no
  // residual.
  const KvScatter* scatter = p.scatter;
  if (scatter != nullptr &&
      (p.residual != nullptr || scatter->width <= 0 || scatter->width % 8 != 0 ||
       p.n != 3 * scatter->width || scatter->positions == nullptr ||
       !aligned(scatter->k_cache, 16) || !aligned(scatter->v_cache, 16) ||
       scatter->cache_batch_stride % 8 != 0)) {
    return false;
  }
  return p.norm == nullptr || (aligned(p.norm->gamma, 16) && aligned(p.norm->beta, 16));
}

[[noreturn]] void refuse(const SkinnyProduct& product) {
  fail("skinny_linear: a ", product.m, " x ", product.n, " x ", product.k,
       product.w.q8_0 ? " Q8_0" : "", product.norm != nullptr ? " normed" : "",
       product.scatter != nullptr ? " scattered" : "",
       " product it cannot run (needs compute capability 9.0, 16-bit elements, 1 to ",
       kSkinnyMaxRows, " rows, n and k multiples of 64, 16-byte alignment, shares that fit in",
       " shared memory; with the scatter, n three parts of a multiple of 8 and no residual)");
}

template <class T, class F, Activation kAct>
void launch(Element e, const SkinnyProduct& c, cudaStream_t stream) {
  const auto kernel = skinny_linear_kernel<T, F, kAct>;
  static const bool configured =
      (allow_shared_memory(kernel, kSharedBudget + 1024, "skinny_linear shared memory"), true);
  (void)configured;
  const Plan<F> plan = plan_for<F>(c);
  if (plan.layout.stages == 0) refuse(c);
  Operands<T, F> p;
  p.layout = plan.layout;
  p.bias = static_cast<const T*>(c.bias);
  p.residual = static_cast<const T*>(c.residual);
  p.y = static_cast<T*>(c.y);
  if (c.norm != nullptr) {
    p.gamma = static_cast<const T*>(c.norm->gamma);
    p.beta = static_cast<const T*>(c.norm->beta);
    p.eps = c.norm->eps;
  }
  if (c.w.q8_0) {
    p.weight_scales = reinterpret_cast<const __half*>(static_cast<const uint8_t*>(c.w.data) +
                                                      q8_0_scales_offset(c.n, c.k));
  }
  if (c.scatter != nullptr) {
    p.k_cache = static_cast<T*>(c.scatter->k_cache);
    p.v_cache = static_cast<T*>(c.scatter->v_cache);
    p.cache_stride = c.scatter->cache_batch_stride;
    p.positions = c.scatter->positions;
    p.width = static_cast<int>(c.scatter->width);
  }
  p.m = static_cast<int>(c.m);
  p.n = static_cast<int>(c.n);
  p.k = static_cast<int>(c.k);
  const CUtensorMap x_map = row_major_map(e, c.x, c.m, c.k, F::kRows);
  const CUtensorMap w_map = F::kQ8 ? byte_matrix_map(c.w.data, c.n, c.k, kOutputs, kTileDepth)
                                   : row_major_map(e, c.w.data, c.n, c.k, kOutputs);
  const auto splits = static_cast<unsigned>(plan.splits);
  launch_kernel(kernel, dim3(splits, static_cast<unsigned>(c.n / kOutputs)), dim3(kThreads),
                static_cast<size_t>(p.layout.bytes() + 1024), splits, /*early_start=*/true, stream,
                "skinny_linear", x_map, w_map, p);
}

}  // namespace

bool skinny_linear_runs(Element e, const SkinnyProduct& product) {
  return takes_operands(e, product) && fits(product);
}

void skinny_linear(Element e, const SkinnyProduct& product, cudaStream_t stream) {
  // (Whether it fits, launch asks: its plan is the launch's.)
  if (!takes_operands(e, product)) refuse(product);
  with_16_bit_type(e, [&](auto type) {
    with_activation(product.act, [&](auto kind) {
      with_form(product, [&](auto form) {
        launch<decltype(type), decltype(form), decltype(kind)::value>(e, product, stream);
      });
    });
  });
}

}  // namespace hark::compute::cuda
