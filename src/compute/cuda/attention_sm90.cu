// Flash attention on Hopper (attention_sm90.h). Compiled for sm_90a only (CMakeLists.txt).
//
// One persistent CTA per SM walks work items: kQueryRows queries of one (sequence, head). Three
// warpgroups share it:
//   - the producer (one thread) copies, with TMA in the 128-byte swizzle, each item's queries
//     into one of two buffers (the next item's land while this one runs) and its keys and values
//     in tiles of kKeys rows into a ring of kStages stages, item after item;
//   - two consumer warpgroups own 64 queries each. Per key tile, S = Q·Kᵀ is one wgmma chain
//     from shared memory (64 × 128 scores, F32, in registers), the online softmax turns S into P
//     in place (the accumulator layout of S is the register A-operand layout of P·V, so P never
//     leaves registers), and O += P·V is a second chain with V read transposed from its rows.
//     The next tile's S = Q·Kᵀ is issued with this tile's P·V, and its softmax runs while P·V
//     does; the two consumers' softmaxes also interleave with each other's products.
// Why this shape: at head_dim 64 a score costs 256 flops of products and one exponential, and
// the special function unit's 16 exponentials per cycle and SM match what the tensor cores do in
// that cycle, so the products must run while the softmax does (mma.sync, which blocks its warp,
// cannot); and at 12 key tiles per item (Whisper's 1500 frames) a CTA per item would spend a
// good part of its life starting up, which the persistent loop and the second query buffer hide.
// On an H200, large-v3's encoder attention at batch 16 takes 1.08 ms a window against 1.60 for
// the mma.sync kernel (HARK_CUDA_PROFILE); three consumers (192 queries an item, 160 registers)
// measured the same as two.
#include "compute/cuda/attention_sm90.h"

#include <algorithm>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/hopper.cuh"

namespace hark::compute::cuda {

namespace {

using namespace hopper;

constexpr int kHeadDim = 64;  // 128 bytes a row: one row of the swizzle
constexpr int kConsumers = 2;
constexpr int kConsumerRows = 64;  // one wgmma's rows
constexpr int kQueryRows = kConsumers * kConsumerRows;
constexpr int kKeys = 128;
constexpr int kStages = 4;
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kQueryBytes = kConsumerRows * kHeadDim * 2;  // one consumer's queries
constexpr int kTileBytes = kKeys * kHeadDim * 2;           // a tile of keys, or of values
// Two query buffers, the stages' keys and values, the barriers (full and empty per query buffer
// and per stage), and room to align the tiles to the swizzle's 1024-byte period.
constexpr int kBarriers = 2 * 2 + 2 * kStages;
constexpr int kSharedBytes =
    2 * kConsumers * kQueryBytes + 2 * kStages * kTileBytes + kBarriers * 8 + 1024;
static_assert(kSharedBytes <= 227 * 1024);
// setmaxnreg: the producer gives registers back for the consumers' 64 scores, 32 outputs and 32
// packed probabilities a thread (40 · 128 + 232 · 256 ≤ 65,536).
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;

// A work item's place: queries [block · kQueryRows, +kQueryRows) of one head of one sequence.
// Neighbouring items share their keys and values (the same head and sequence), which then stay
// in the L2 cache while the CTAs sweep them.
struct Item {
  int block, head, sequence;
};
__device__ __forceinline__ Item item_at(int item, int blocks, int heads) {
  return {item % blocks, item / blocks % heads, item / blocks / heads};
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    flash_attention_sm90_kernel(const __grid_constant__ CUtensorMap q_map,
                                const __grid_constant__ CUtensorMap k_map,
                                const __grid_constant__ CUtensorMap v_map, T* __restrict__ out,
                                int64_t out_row_stride, int64_t out_batch_stride, int q_len,
                                int kv_len, int heads, int items, bool shared_kv,
                                float scale_log2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t shared_raw[];
  // The swizzle repeats every 1024 bytes, and the descriptors assume that it starts at a tile.
  uint8_t* shared = shared_raw + ((1024 - (shared_address(shared_raw) & 1023)) & 1023);
  uint8_t* queries = shared;  // [2 buffers][kConsumers][64 rows × 128 bytes]
  uint8_t* keys = queries + 2 * kConsumers * kQueryBytes;  // [kStages][kKeys rows × 128 bytes]
  uint8_t* values = keys + kStages * kTileBytes;
  auto* query_full = reinterpret_cast<uint64_t*>(values + kStages * kTileBytes);
  uint64_t* query_empty = query_full + 2;
  uint64_t* full = query_empty + 2;
  uint64_t* empty = full + kStages;

  const int blocks = (q_len + kQueryRows - 1) / kQueryRows;
  const int tiles = (kv_len + kKeys - 1) / kKeys;
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      barrier_init(&query_full[b], 1);            // the producer's expect_tx
      barrier_init(&query_empty[b], kConsumers);  // each consumer, after its last product
    }
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], kConsumers);
    }
    barrier_init_fence();
  }
  __syncthreads();

  // Items are taken in the same order by the producer and the consumers, and so are the stages:
  // `load` counts the stages filled (or used) so far, from which a stage's index and the parity
  // of its barriers' phase follow.
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegisters));
    if (threadIdx.x != 0) return;
    int load = 0, taken = 0;
    for (int index = blockIdx.x; index < items; index += gridDim.x, ++taken) {
      const Item item = item_at(index, blocks, heads);
      const int buffer = taken & 1;
      barrier_wait(&query_empty[buffer], ((taken >> 1) & 1) ^ 1);
      barrier_expect_bytes(&query_full[buffer], kConsumers * kQueryBytes);
      for (int c = 0; c < kConsumers; ++c) {
        tma_load(queries + (buffer * kConsumers + c) * kQueryBytes, &q_map, &query_full[buffer],
                 item.head * kHeadDim, item.block * kQueryRows + c * kConsumerRows, item.sequence);
      }
      const int kv_sequence = shared_kv ? 0 : item.sequence;
      for (int tile = 0; tile < tiles; ++tile, ++load) {
        const int stage = load % kStages;
        barrier_wait(&empty[stage], ((load / kStages) & 1) ^ 1);
        barrier_expect_bytes(&full[stage], 2 * kTileBytes);
        tma_load(keys + stage * kTileBytes, &k_map, &full[stage], item.head * kHeadDim,
                 tile * kKeys, kv_sequence);
        tma_load(values + stage * kTileBytes, &v_map, &full[stage], item.head * kHeadDim,
                 tile * kKeys, kv_sequence);
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegisters));
  const int consumer = warpgroup - 1;
  const int thread = threadIdx.x % 128, warp = thread / 32, lane = thread % 32;
  const int group = lane / 4, pair = lane % 4;
  int load = 0, taken = 0;
  for (int index = blockIdx.x; index < items; index += gridDim.x, ++taken) {
    const Item item = item_at(index, blocks, heads);
    const int buffer = taken & 1;
    barrier_wait(&query_full[buffer], (taken >> 1) & 1);
    const uint64_t q_tile =
        operand_descriptor(queries + (buffer * kConsumers + consumer) * kQueryBytes);

    // Thread t holds scores[4j + 2i + e]: query row 16·warp + group + 8i, key 8j + 2·pair + e of
    // the tile; output[4j + 2i + e]: the same row, dimension 8j + 2·pair + e.
    float scores[64], output[32];
    uint32_t probabilities[32];  // of the tile in P·V: scores 2r and 2r + 1, rounded to T
    float row_max[2] = {-INFINITY, -INFINITY};  // of the raw scores q·k
    float row_sum[2] = {0.0f, 0.0f};  // this thread's share; a row's four lanes add up at the end
#pragma unroll
    for (int i = 0; i < 32; ++i) output[i] = 0.0f;

    // S = Q·Kᵀ for the tile in `stage`: 4 products of 16 dimensions (32 bytes, 2 in the
    // descriptor's 16-byte units; the hardware applies the swizzle to the address it forms).
    auto issue_scores = [&](int stage) {
      const uint64_t k_tile = operand_descriptor(keys + stage * kTileBytes);
#pragma unroll
      for (int step = 0; step < kHeadDim / 16; ++step) {
        wgmma_64x128x16<T>(scores, q_tile + 2 * step, k_tile + 2 * step, step > 0);
      }
      wgmma_commit();
    };
    // O += P·V for the values in `stage`: 8 products of 16 keys; keys 16s.. of P are registers
    // 4s..4s + 3, and V's rows for them start 16 rows (2048 bytes, 128 units) further on.
    auto issue_values = [&](int stage) {
      const uint64_t v_tile = transposed_operand_descriptor(values + stage * kTileBytes);
#pragma unroll
      for (int step = 0; step < kKeys / 16; ++step) {
        const uint32_t a[4] = {probabilities[4 * step], probabilities[4 * step + 1],
                               probabilities[4 * step + 2], probabilities[4 * step + 3]};
        wgmma_64x64x16_registers<T>(output, a, v_tile + 128 * step, 1);
      }
      wgmma_commit();
    };
    // The scores of the tile from first_key become probabilities in place, relative to the
    // running maxima (online softmax per row, i = 0: row group, registers 4j, 4j + 1; i = 1: row
    // group + 8, 4j + 2, 4j + 3), on raw scores: scale > 0, so p = 2^(scale·log2(e)·(s − max))
    // is one FMA and one exp2. Returns in `rescale` what the output so far is to be multiplied
    // by; the sums are rescaled here.
    auto softmax = [&](int first_key, float(&rescale)[2]) {
      if (first_key + kKeys > kv_len) {  // keys past the end (zeros from TMA) get no weight
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (first_key + 8 * j + 2 * pair + (e & 1) >= kv_len) scores[4 * j + e] = -INFINITY;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          tile_max = fmaxf(tile_max, fmaxf(scores[4 * j + 2 * i], scores[4 * j + 2 * i + 1]));
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float new_max = fmaxf(row_max[i], tile_max);
        const float reference = exp_reference(new_max) * scale_log2;
        rescale[i] = fast_exp2(row_max[i] * scale_log2 - reference);
        row_max[i] = new_max;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& p = scores[4 * j + 2 * i + e];
            p = fast_exp2(p * scale_log2 - reference);
            sum += p;
          }
        }
        row_sum[i] = row_sum[i] * rescale[i] + sum;
      }
    };
    auto rescale_output = [&](const float(&rescale)[2]) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) output[4 * j + e] *= rescale[e / 2];
      }
    };
    auto pack_probabilities = [&] {
#pragma unroll
      for (int r = 0; r < 32; ++r) {
        probabilities[r] = pack_pair<T>(scores[2 * r], scores[2 * r + 1]);
      }
    };

    // Per tile: the next tile's S = Q·Kᵀ and this tile's O += P·V go in together (in that
    // order, so that S is done first); the next tile's softmax runs while P·V still does, and
    // only the rescale of O waits for it.
    int stage = load % kStages;
    barrier_wait(&full[stage], (load / kStages) & 1);
    fence_registers(scores);
    wgmma_fence();
    issue_scores(stage);
    wgmma_wait<0>();
    fence_registers(scores);
    float rescale[2];
    softmax(0, rescale);  // nothing to rescale yet: the output is zero
    pack_probabilities();
    // (The last tile, which has no next one, is peeled off: ptxas keeps the products
    // asynchronous only where no branch separates a product from its wait.)
    for (int tile = 0; tile + 1 < tiles; ++tile) {
      const int used = stage;
      ++load;
      stage = load % kStages;
      barrier_wait(&full[stage], (load / kStages) & 1);
      fence_registers(scores);
      fence_registers(output);
      fence_registers(probabilities);
      wgmma_fence();
      issue_scores(stage);
      issue_values(used);
      wgmma_wait<1>();
      fence_registers(scores);
      softmax((tile + 1) * kKeys, rescale);
      wgmma_wait<0>();
      fence_registers(output);
      fence_registers(probabilities);
      // wgmma.wait_group is collective over the warpgroup: one arrival speaks for all of it.
      if (thread == 0) barrier_arrive(&empty[used]);
      rescale_output(rescale);
      pack_probabilities();
    }
    fence_registers(output);
    fence_registers(probabilities);
    wgmma_fence();
    issue_values(stage);
    wgmma_wait<0>();
    fence_registers(output);
    fence_registers(probabilities);
    if (thread == 0) barrier_arrive(&empty[stage]);
    ++load;
    if (thread == 0) barrier_arrive(&query_empty[buffer]);

    // Each row's sum over its four lanes, then the normalised output (rows past q_len exist only
    // in shared memory, as TMA's zeros).
    T* const target = out + item.sequence * out_batch_stride + item.head * kHeadDim + 2 * pair;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = row_sum[i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row =
          item.block * kQueryRows + consumer * kConsumerRows + 16 * warp + group + 8 * i;
      if (row >= q_len) continue;
      const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        *reinterpret_cast<uint32_t*>(target + row * out_row_stride + 8 * j) =
            pack_pair<T>(output[4 * j + 2 * i] * inverse, output[4 * j + 2 * i + 1] * inverse);
      }
    }
  }
#else
  // Built for a GPU without wgmma: flash_attention_sm90_runs refuses every call.
  (void)out, (void)out_row_stride, (void)out_batch_stride, (void)q_len, (void)kv_len, (void)heads,
      (void)items, (void)shared_kv, (void)scale_log2;
#endif
}

int64_t work_items(const DenseAttention& a) {
  return int64_t{(a.q_len + kQueryRows - 1) / kQueryRows} * a.heads * a.batch;
}

// A [batches, rows, heads · 64] view (strides in elements) as a 3-D tensor map whose boxes are
// box_rows rows of one head. A single batch (or a stride of 0: one sequence shared by all) is a
// batch dimension of 1.
CUtensorMap head_map(Element e, const void* base, int heads, int64_t rows, int64_t row_stride,
                     int batches, int64_t batch_stride, int box_rows) {
  const bool one = batches == 1 || batch_stride == 0;
  const uint64_t sizes[3] = {static_cast<uint64_t>(heads) * kHeadDim, static_cast<uint64_t>(rows),
                             one ? 1u : static_cast<uint64_t>(batches)};
  const uint64_t row_bytes = static_cast<uint64_t>(row_stride) * 2;
  const uint64_t strides[2] = {row_bytes,
                               one ? row_bytes * rows : static_cast<uint64_t>(batch_stride) * 2};
  const uint32_t box[3] = {kHeadDim, static_cast<uint32_t>(box_rows), 1};
  return swizzled_map(e, base, 3, sizes, strides, box);
}

template <class T>
void launch(const DenseAttention& a, Element e, cudaStream_t stream) {
  static const bool configured = (allow_shared_memory(flash_attention_sm90_kernel<T>, kSharedBytes,
                                                      "flash_attention_sm90 shared memory"),
                                  true);
  (void)configured;
  const CUtensorMap q_map =
      head_map(e, a.q, a.heads, a.q_len, a.q_row_stride, a.batch, a.q_batch_stride, kConsumerRows);
  const CUtensorMap k_map =
      head_map(e, a.k, a.heads, a.kv_len, a.kv_row_stride, a.batch, a.kv_batch_stride, kKeys);
  const CUtensorMap v_map =
      head_map(e, a.v, a.heads, a.kv_len, a.kv_row_stride, a.batch, a.kv_batch_stride, kKeys);
  const int64_t items = work_items(a);
  const auto ctas = static_cast<unsigned>(std::min<int64_t>(items, multiprocessor_count()));
  flash_attention_sm90_kernel<T><<<ctas, kThreads, kSharedBytes, stream>>>(
      q_map, k_map, v_map, static_cast<T*>(a.out), a.out_row_stride, a.out_batch_stride, a.q_len,
      a.kv_len, a.heads, static_cast<int>(items), a.kv_batch_stride == 0 && a.batch > 1,
      a.scale * kLog2e);
  check_launch("flash_attention_sm90");
}

}  // namespace

bool flash_attention_sm90_runs(Element e, const DenseAttention& a) {
  const auto stride_ok = [](int64_t stride) { return stride % 8 == 0 && stride >= 0; };
  return hopper::present() && e != Element::f32 && a.head_dim == kHeadDim && !a.causal &&
         a.scale > 0.0f && a.batch >= 1 && a.heads >= 1 && a.q_len >= 1 && a.kv_len >= 1 &&
         (a.batch == 1 || (a.q_batch_stride > 0 && a.out_batch_stride > 0)) &&
         work_items(a) <= INT32_MAX && aligned(a.q, 16) && aligned(a.k, 16) && aligned(a.v, 16) &&
         aligned(a.out, 16) && stride_ok(a.q_row_stride) && stride_ok(a.q_batch_stride) &&
         stride_ok(a.kv_row_stride) && stride_ok(a.kv_batch_stride) &&
         stride_ok(a.out_row_stride) && stride_ok(a.out_batch_stride) &&
         a.q_row_stride >= int64_t{a.heads} * kHeadDim &&
         a.kv_row_stride >= int64_t{a.heads} * kHeadDim;
}

bool flash_attention_sm90_preferred(Element e, const DenseAttention& a) {
  return flash_attention_sm90_runs(e, a) && a.q_len >= kQueryRows;
}

void flash_attention_sm90(Element e, const DenseAttention& a, cudaStream_t stream) {
  if (!flash_attention_sm90_runs(e, a)) {
    fail(
        "flash_attention_sm90: operands it cannot run (needs compute capability 9.0, 16-bit "
        "elements, head_dim 64, no causal mask, 16-byte alignment; head_dim ",
        a.head_dim, ")");
  }
  with_16_bit_type(e, [&](auto type) { launch<decltype(type)>(a, e, stream); });
}

}  // namespace hark::compute::cuda
