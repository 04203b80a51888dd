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
// 97 KB of shared memory), up to the portable cluster size of 8, while each share keeps
// kDepthPerRow × n of depth.
#include "compute/cuda/skinny_linear_sm90.h"

#include <cooperative_groups.h>

#include <algorithm>

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
// Shared memory a CTA may take for its stages so that two fit an SM (227 KB).
constexpr int kStageBudget = 96 * 1024;
constexpr int kThreads = 128 + 32;  // the consumer warpgroup, then the producer warp
constexpr int kProducerWarp = 4;
constexpr int kWBytes = kOutputs * kTileDepth * 2;
// The depth a split keeps per column of wgmma (row of x). A split's partial sums (n × 64 F32)
// are then at most a quarter of its weights' bytes (64 × depth × 2), and adding them up through
// distributed shared memory costs less than the stream the split shortens. With no such bound,
// the step of 120 sequences took 8.75 ms where cuBLASLt's products gave 6.51; with it, products
// of 64 or more rows were still slower than cuBLASLt's (bench/RESULTS.md, twenty-eighth
// session), hence kSkinnyMaxRows.
constexpr int kDepthPerRow = 8;

// A CTA's shape for kRows columns of wgmma (x's rows rounded up).
template <int kRows>
struct Plan {
  static constexpr int kXBytes = kRows * kTileDepth * 2;
  static constexpr int kStageBytes = kWBytes + kXBytes;  // a multiple of the swizzle's 1024
  static constexpr int kStages = std::min(8, kStageBudget / kStageBytes);
  // The partial tile's rows in shared memory: the outputs and 4 floats more, so that the eight
  // rows of x a warp's accumulators hold at once (two apart) fall in distinct banks.
  static constexpr int kPartialPitch = kOutputs + 4;
  static_assert(kRows * kPartialPitch * 4 <= kStages * kStageBytes,
                "the partial tile reuses the stages");
  // The stages, their full and empty barriers, and room to align the stages to 1024 bytes.
  static constexpr int kSharedBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;
};

template <class T, int kRows, Activation kAct>
__global__ void __launch_bounds__(kThreads)
    skinny_linear_kernel(const __grid_constant__ CUtensorMap x_map,
                         const __grid_constant__ CUtensorMap w_map, const T* bias,
                         const T* residual, T* y, int m, int n, int k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using P = Plan<kRows>;
  namespace cg = cooperative_groups;
  extern __shared__ uint8_t shared_raw[];
  // The swizzle repeats every 1024 bytes, and the descriptors assume that it starts at a stage.
  uint8_t* shared = shared_raw + ((1024 - (shared_address(shared_raw) & 1023)) & 1023);
  auto* full = reinterpret_cast<uint64_t*>(shared + P::kStages * P::kStageBytes);
  uint64_t* empty = full + P::kStages;
  const auto w_stage = [&](int stage) { return shared + stage * P::kStageBytes; };
  const auto x_stage = [&](int stage) { return shared + stage * P::kStageBytes + kWBytes; };

  const int split = static_cast<int>(blockIdx.x), splits = static_cast<int>(gridDim.x);
  const int col = static_cast<int>(blockIdx.y) * kOutputs;
  const int depth_steps = k / kTileDepth;
  const int first = split * depth_steps / splits;
  // ≥ 1: a share is at least kDepthPerRow × kRows ≥ 2 stages deep (splits_for).
  const int steps = (split + 1) * depth_steps / splits - first;
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = thread / 32, lane = thread % 32;

  if (thread == 0) {
    for (int s = 0; s < P::kStages; ++s) {
      barrier_init(&full[s], 1);   // the producer's expect_tx; the bytes complete it
      barrier_init(&empty[s], 1);  // one thread of the consumer, once its products are done
    }
    barrier_init_fence();
  }
  __syncthreads();
  // The next kernel may place its CTAs beside these and request its own weights.
  allow_dependent_kernels();

  float d[kRows / 2];
  if (warp == kProducerWarp) {
    if (lane == 0) {
      const auto load = [&](int step, int stage, bool weights, bool rows) {
        const int depth = (first + step) * kTileDepth;
        if (weights) tma_load(w_stage(stage), &w_map, &full[stage], depth, col);
        if (rows) tma_load(x_stage(stage), &x_map, &full[stage], depth, 0);
      };
      const int preloaded = min(steps, P::kStages);
      for (int s = 0; s < preloaded; ++s) {
        barrier_expect_bytes(&full[s], P::kStageBytes);
        load(s, s, true, false);
      }
      // x and the residual come from the kernels before; the weights do not.
      wait_for_prerequisite_kernels();
      for (int s = 0; s < preloaded; ++s) load(s, s, false, true);
      for (int step = P::kStages; step < steps; ++step) {
        const int stage = step % P::kStages;
        barrier_wait(&empty[stage], (step / P::kStages - 1) & 1);
        barrier_expect_bytes(&full[stage], P::kStageBytes);
        load(step, stage, true, true);
      }
    }
    __syncwarp();
  } else {
    for (int step = 0; step < steps; ++step) {
      const int stage = step % P::kStages;
      barrier_wait(&full[stage], (step / P::kStages) & 1);
      const uint64_t a = operand_descriptor(w_stage(stage));
      const uint64_t b = operand_descriptor(x_stage(stage));
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
      if (step > 0 && thread == 0) barrier_arrive(&empty[(step - 1) % P::kStages]);
    }
    wgmma_wait<0>();
    fence_registers(d);
  }
  // The epilogue reads the residual, which the kernels before may write.
  wait_for_prerequisite_kernels();

  // The partial tile, [kRows rows of x][outputs], over the stages (every copy has landed and
  // every product has read its stage). Thread t holds d[4j + 2i + c] for output
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
          partial[row * P::kPartialPitch + output] = d[4 * j + 2 * i + c];
        }
      }
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();

  // This CTA's share of the tile's valid rows, 8 outputs (16 bytes of y) a thread at a time.
  constexpr int kGroups = kOutputs / 8;
  const int rows = min(m, kRows), items = rows * kGroups;
  const int item_end = (split + 1) * items / splits;
  for (int item = split * items / splits + thread; item < item_end; item += kThreads) {
    const int row = item / kGroups, group = item % kGroups;
    float sum[8] = {};
    for (int rank = 0; rank < splits; ++rank) {
      const float* from =
          cluster.map_shared_rank(partial + row * P::kPartialPitch + group * 8, rank);
      const float4 low = *reinterpret_cast<const float4*>(from);
      const float4 high = *reinterpret_cast<const float4*>(from + 4);
      sum[0] += low.x, sum[1] += low.y, sum[2] += low.z, sum[3] += low.w;
      sum[4] += high.x, sum[5] += high.y, sum[6] += high.z, sum[7] += high.w;
    }
    const int column = col + group * 8;
    const int64_t at = int64_t{row} * n + column;
    uint4 bias_words{}, residual_words{};
    if (bias != nullptr) bias_words = *reinterpret_cast<const uint4*>(bias + column);
    if (residual != nullptr) residual_words = *reinterpret_cast<const uint4*>(residual + at);
    const uint32_t bias_pairs[4] = {bias_words.x, bias_words.y, bias_words.z, bias_words.w};
    const uint32_t residual_pairs[4] = {residual_words.x, residual_words.y, residual_words.z,
                                        residual_words.w};
    uint32_t out[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      float2 value = make_float2(sum[2 * p], sum[2 * p + 1]);
      if (bias != nullptr) {
        const float2 b = unpack_pair<T>(bias_pairs[p]);
        value.x += b.x, value.y += b.y;
      }
      value.x = activated<kAct>(value.x), value.y = activated<kAct>(value.y);
      if (residual != nullptr) {
        const float2 r = unpack_pair<T>(residual_pairs[p]);
        value.x += r.x, value.y += r.y;
      }
      out[p] = pack_pair<T>(value.x, value.y);
    }
    *reinterpret_cast<uint4*>(y + at) = uint4{out[0], out[1], out[2], out[3]};
  }
  // The other CTAs' reads of this one's partial sums must be done before it exits.
  cluster.sync();
#else
  // Built for a GPU without wgmma: skinny_linear_runs refuses every call.
  (void)bias, (void)residual, (void)y, (void)m, (void)n, (void)k;
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

template <class T, int kRows, Activation kAct>
void launch(Element e, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
            const void* bias, const void* residual, void* y, cudaStream_t stream) {
  using P = Plan<kRows>;
  static const bool configured =
      (allow_shared_memory(skinny_linear_kernel<T, kRows, kAct>, P::kSharedBytes,
                           "skinny_linear shared memory"),
       true);
  (void)configured;
  const CUtensorMap x_map = row_major_map(e, x, m, k, kRows);
  const CUtensorMap w_map = row_major_map(e, w, n, k, kOutputs);
  const int64_t tiles = n / kOutputs;
  const int splits = splits_for(tiles, k / kTileDepth, kRows);
  launch_kernel(skinny_linear_kernel<T, kRows, kAct>,
                dim3(static_cast<unsigned>(splits), static_cast<unsigned>(tiles)), dim3(kThreads),
                P::kSharedBytes, static_cast<unsigned>(splits), /*early_start=*/true, stream,
                "skinny_linear", x_map, w_map, static_cast<const T*>(bias),
                static_cast<const T*>(residual), static_cast<T*>(y), static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k));
}

template <class T, Activation kAct>
void launch_rows(Element e, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                 const void* bias, const void* residual, void* y, cudaStream_t stream) {
  static_assert(kSkinnyMaxRows == 32, "a form for every row count up to kSkinnyMaxRows");
  if (m <= 16) return launch<T, 16, kAct>(e, x, m, k, w, n, bias, residual, y, stream);
  launch<T, 32, kAct>(e, x, m, k, w, n, bias, residual, y, stream);
}

}  // namespace

bool skinny_linear_runs(Element e, int64_t m, int64_t k, int64_t n, const void* x, const void* w,
                        const void* bias, const void* residual, const void* y) {
  return present() && e != Element::f32 && m >= 1 && m <= kSkinnyMaxRows && n % kOutputs == 0 &&
         n >= kOutputs && n / kOutputs <= 65535 && k % kTileDepth == 0 && k >= kTileDepth &&
         k <= INT32_MAX && aligned(x, 16) && aligned(w, 16) && aligned(y, 16) &&
         (bias == nullptr || aligned(bias, 16)) && (residual == nullptr || aligned(residual, 16));
}

void skinny_linear(Element e, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                   const void* bias, Activation act, const void* residual, void* y,
                   cudaStream_t stream) {
  if (!skinny_linear_runs(e, m, k, n, x, w, bias, residual, y)) {
    fail("skinny_linear: a ", m, " x ", n, " x ", k,
         " product it cannot run (needs compute capability 9.0, 16-bit elements, 1 to ",
         kSkinnyMaxRows, " rows, n and k multiples of 64, 16-byte alignment)");
  }
  with_16_bit_type(e, [&](auto type) {
    with_activation(act, [&](auto kind) {
      launch_rows<decltype(type), decltype(kind)::value>(e, x, m, k, w, n, bias, residual, y,
                                                         stream);
    });
  });
}

}  // namespace hark::compute::cuda
