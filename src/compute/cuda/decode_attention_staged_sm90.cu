// decode_attention_int8, staged (decode_attention_staged_sm90.h).
//
// The register form (kernels_attention.cu) keeps a lane's next round of keys and values in
// flight while it uses the current one: 16 KB a CTA of 4 warps, 4 CTAs an SM at most (128
// registers a thread). Here a producer warp copies each round (128 keys: their bytes, their
// values' and both scales, 17 KB) into a ring of kStages stages in shared memory, a bulk copy a
// run (group-major, a (sequence, head) pair's keys are one run), so that kStages − 1 rounds a CTA
// are in flight without registers. The four consumer warps compute as the register form's
// integer products do (decode_attention.cuh), reading shared memory, and release each stage as
// soon as they have its words in registers.
//
// What it gains (bench/RESULTS.md, thirty-fifth session, an H100): large-v3's step over INT8
// K/V took 2.66 ms at batch 16 against 2.77, and 0.07-0.12 ms less at 8-120 sequences; at 1-4
// it lost, each CTA having only a few rounds. Alone, with the caches flushed, the batch-16
// launch is no faster (29.5 against 28.9 µs, 2.2 TB/s either way): more bytes in flight did not
// raise the rate, and the gain is in how the launch sits between its neighbours in the step.
//
// Lanes: 4 a key (16 dims each), 8 keys a warp; lane group ("slot") s of the CTA takes keys
// s, s + 32, s + 64 and s + 96 of a round, so that a warp's 16-byte reads of one of them cover
// 512 consecutive bytes (no bank conflicts), and the four keys' value bytes make one dp4a word
// a dim.
#include "compute/cuda/decode_attention_staged_sm90.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "base/error.h"
#include "compute/cuda/decode_attention.cuh"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/hopper.cuh"

namespace hark::compute::cuda {

namespace {

using namespace hopper;

constexpr int kHeadDim = 64;  // bytes of a key: 4 lanes of 16
constexpr int kDims = 16;     // a lane's dims
constexpr int kLanesPerKey = kHeadDim / kDims;
constexpr int kSlots = kDecodeThreads / kLanesPerKey;  // 32
constexpr int kKeysPerSlot = 4;                        // a round's weights: one dp4a word a slot
constexpr int kRoundKeys = kSlots * kKeysPerSlot;      // 128
constexpr int kThreads = kDecodeThreads + 32;          // the consumers, then the producer warp
constexpr int kProducerWarp = kDecodeWarps;
constexpr int kStages = 4;
// A split's keys start at a multiple of this, so that every round's scales start 16-byte aligned
// (a pair's run of them does: staged_int8_attention_runs).
constexpr int kSplitKeys = 4;

// One round as the producer copies it.
struct Stage {
  int8_t keys[kRoundKeys][kHeadDim];
  int8_t values[kRoundKeys][kHeadDim];
  float key_scales[kRoundKeys];
  float value_scales[kRoundKeys];
};
static_assert(sizeof(Stage) % 16 == 0, "every part of a stage starts 16-byte aligned");

struct Ring {
  Stage stages[kStages];
  uint64_t full[kStages];   // the stage's round has landed
  uint64_t empty[kStages];  // the consumers' four warps have its words
};
// Three CTAs an SM (3 × 68 KB), so that batch 16's 320 CTAs of large-v3 are one wave.
constexpr int kCtasPerSm = 3;
static_assert(kCtasPerSm * (sizeof(Ring) + sizeof(DecodeMerge) + 1024) <= 228 * 1024,
              "shared memory of an SM");

struct StagedKv {
  const int8_t* k;
  const int8_t* v;
  const float* k_scales;
  const float* v_scales;
  int64_t batch, group_stride;              // in bytes; a key is kHeadDim bytes on
  int64_t scale_batch, scale_group_stride;  // in scales; a key's is the next
  int queries_per_sequence;
};

// The producer: lane 0 copies round r of [begin, end) into stage r % kStages once the consumers
// have released the round before in that stage. Scales past the last whole 16 bytes of a round
// (where its keys are not a multiple of 4) are copied by the lane itself before it arrives.
__device__ __forceinline__ void produce(Ring& ring, const StagedKv& kv, int64_t kv_at,
                                        int64_t scales_at, int begin, int end) {
  const int rounds = static_cast<int>(ceil_div(end - begin, kRoundKeys));
  for (int round = 0; round < rounds; ++round) {
    const int stage = round % kStages;
    if (round >= kStages) barrier_wait(&ring.empty[stage], (round / kStages - 1) & 1);
    Stage& target = ring.stages[stage];
    const int first = begin + round * kRoundKeys, count = min(kRoundKeys, end - first);
    const int whole = count & ~3;
    for (int i = whole; i < count; ++i) {
      target.key_scales[i] = kv.k_scales[scales_at + first + i];
      target.value_scales[i] = kv.v_scales[scales_at + first + i];
    }
    const uint32_t key_bytes = static_cast<uint32_t>(count * kHeadDim);
    const uint32_t scale_bytes = static_cast<uint32_t>(whole * sizeof(float));
    barrier_expect_bytes(&ring.full[stage], 2 * key_bytes + 2 * scale_bytes);
    const int64_t keys_at = kv_at + int64_t{first} * kHeadDim;
    bulk_load(target.keys, kv.k + keys_at, key_bytes, &ring.full[stage]);
    bulk_load(target.values, kv.v + keys_at, key_bytes, &ring.full[stage]);
    if (scale_bytes > 0) {
      bulk_load(target.key_scales, kv.k_scales + scales_at + first, scale_bytes, &ring.full[stage]);
      bulk_load(target.value_scales, kv.v_scales + scales_at + first, scale_bytes,
                &ring.full[stage]);
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    staged_int8_kernel(const T* __restrict__ q, int64_t q_stride, const StagedKv kv,
                       const int32_t* __restrict__ lengths, T* __restrict__ out, int64_t out_stride,
                       float scale) {
  extern __shared__ __align__(128) unsigned char shared[];
  Ring& ring = *reinterpret_cast<Ring*>(shared);
  __shared__ DecodeMerge merge;

  // As the register form: the next kernel may start its own loads, and this one reads q (and the
  // lengths) only once the kernel before it has finished.
  allow_dependent_kernels();
  const int splits = gridDim.x, split = blockIdx.x, head = blockIdx.y, query_row = blockIdx.z;
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  if (thread == 0) {
    for (int stage = 0; stage < kStages; ++stage) {
      barrier_init(&ring.full[stage], 1);
      barrier_init(&ring.empty[stage], kDecodeWarps);
    }
    barrier_init_fence();
  }
  __syncthreads();
  wait_for_prerequisite_kernels();

  const int sequence = query_row / kv.queries_per_sequence;
  const int length = max(lengths[sequence], 0);
  const int chunk = static_cast<int>(ceil_div(ceil_div(length, splits), kSplitKeys) * kSplitKeys);
  const int begin = min(length, split * chunk), end = min(length, begin + chunk);
  const int64_t kv_at = sequence * kv.batch + head * kv.group_stride;
  const int64_t scales_at = sequence * kv.scale_batch + head * kv.scale_group_stride;
  T* const target = out + query_row * out_stride + head * kHeadDim;

  float m = -INFINITY, l = 0.0f, acc[kDims] = {};
  if (warp == kProducerWarp) {
    if (lane == 0) produce(ring, kv, kv_at, scales_at, begin, end);
    __syncwarp();
    finish_decode_attention(m, l, acc, kLanesPerKey, 0, false, kHeadDim, target, merge);
    return;
  }

  const int part = lane % kLanesPerKey, slot = thread / kLanesPerKey;
  const int first_dim = part * kDims;
  float query[kDims];
  const T* const query_row_dims = q + query_row * q_stride + head * kHeadDim + first_dim;
#pragma unroll
  for (int i = 0; i < kDims; ++i) query[i] = to_float(query_row_dims[i]) * scale;
  const SplitQuery split_dims = split_query(query);

  const int rounds = static_cast<int>(ceil_div(end - begin, kRoundKeys));
  for (int round = 0; round < rounds; ++round) {
    const int stage = round % kStages;
    barrier_wait(&ring.full[stage], (round / kStages) & 1);
    const Stage& source = ring.stages[stage];
    const int first = begin + round * kRoundKeys;
    uint4 keys[kKeysPerSlot], values[kKeysPerSlot];
    float key_scales[kKeysPerSlot], value_scales[kKeysPerSlot];
    bool inside[kKeysPerSlot];
#pragma unroll
    for (int u = 0; u < kKeysPerSlot; ++u) {
      const int key = u * kSlots + slot;
      keys[u] = *reinterpret_cast<const uint4*>(&source.keys[key][first_dim]);
      values[u] = *reinterpret_cast<const uint4*>(&source.values[key][first_dim]);
      key_scales[u] = source.key_scales[key];
      value_scales[u] = source.value_scales[key];
      // Keys past `end` hold another round's bytes (or none yet).
      inside[u] = first + key < end;
    }
    __syncwarp();  // every lane of the warp has read the stage
    if (lane == 0) barrier_arrive(&ring.empty[stage]);
    integer_round(split_dims, keys, values, key_scales, value_scales, inside, kLanesPerKey, m, l,
                  acc);
  }
  m *= 1.0f / kLog2e;  // base e again, for the merges (−inf stays −inf)
  finish_decode_attention(m, l, acc, kLanesPerKey, first_dim, true, kHeadDim, target, merge);
}

// The kernel's shared memory above the default limit, set once before any launch or occupancy
// query (the query counts no CTA at all without it).
void configure() {
  static const bool configured =
      (allow_shared_memory(staged_int8_kernel<__half>, sizeof(Ring), "staged decode attention"),
       allow_shared_memory(staged_int8_kernel<__nv_bfloat16>, sizeof(Ring),
                           "staged decode attention"),
       true);
  (void)configured;
}

// The CTAs the GPU holds at once (kCtasPerSm an SM unless registers say fewer), asked once.
int64_t resident_ctas() {
  static const int64_t ctas = [] {
    configure();
    int per_sm = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, staged_int8_kernel<__half>,
                                                        kThreads, sizeof(Ring)),
          "staged decode attention: resident CTAs");
    return int64_t{per_sm} * multiprocessor_count();
  }();
  return ctas;
}

}  // namespace

bool staged_int8_attention_runs(Element e, const Int8Kv& kv, int head_dim) {
  const Int8Strides& at = kv.strides;
  return present() && e != Element::f32 && head_dim == kHeadDim && at.row == kHeadDim &&
         at.scale_row == 1 && aligned(kv.k, 16) && aligned(kv.v, 16) && at.group_stride % 16 == 0 &&
         at.batch % 16 == 0 && aligned(kv.k_scales, 16) && aligned(kv.v_scales, 16) &&
         at.scale_group_stride % 4 == 0 && at.scale_batch % 4 == 0;
}

bool staged_int8_attention_pays(int rows, int heads) {
  return present() && resident_ctas() > 0 && int64_t{rows} * heads * 4 > resident_ctas();
}

void decode_attention_int8_staged(Element e, const void* q, int64_t q_stride, const Int8Kv& kv,
                                  const int32_t* lengths, void* out, int64_t out_stride, int batch,
                                  int heads, float scale, int queries_per_sequence,
                                  cudaStream_t stream) {
  if (batch <= 0 || heads <= 0) return;
  if (!staged_int8_attention_runs(e, kv, kHeadDim)) {
    fail(
        "decode_attention_int8_staged: needs an H100/H200, 16-bit queries, head_dim 64 and "
        "group-major keys, values and scales, 16-byte aligned");
  }
  if (queries_per_sequence < 1 || batch % queries_per_sequence != 0) {
    fail("decode_attention_int8_staged: ", batch, " query rows are not a multiple of ",
         queries_per_sequence, " queries per sequence");
  }
  configure();
  // Splits of each pair's keys (a cluster each) while the grid stays one wave.
  int splits = 1;
  while (splits < kMaxSplits && int64_t{batch} * heads * splits * 2 <= resident_ctas()) {
    splits *= 2;
  }
  const StagedKv staged{kv.k,
                        kv.v,
                        kv.k_scales,
                        kv.v_scales,
                        kv.strides.batch,
                        kv.strides.group_stride,
                        kv.strides.scale_batch,
                        kv.strides.scale_group_stride,
                        queries_per_sequence};
  const dim3 grid(splits, heads, batch);
  with_16_bit_type(e, [&](auto zero) {
    using T = decltype(zero);
    launch_kernel(staged_int8_kernel<T>, grid, dim3(kThreads), sizeof(Ring), splits,
                  /*early_start=*/true, stream, "staged decode attention", static_cast<const T*>(q),
                  q_stride, staged, lengths, static_cast<T*>(out), out_stride, scale);
  });
}

}  // namespace hark::compute::cuda
