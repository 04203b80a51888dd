// What the decode attentions share (kernels_attention.cu, and the staged form over INT8 keys and
// values, decode_attention_staged_sm90.cu): the launch's shape, the online softmax's steps and
// merges, the INT8 integer products, and the merges that end each of them.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "compute/cuda/element.cuh"
#include "compute/cuda/tensor_core.cuh"

namespace hark::compute::cuda {

constexpr int kMaxHeadDim = 128;
constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = kDecodeWarps * 32;
static_assert(kDecodeThreads >= kMaxHeadDim, "the final merges take one thread per dim");
constexpr int kMaxSplits = 8;  // the portable cluster size limit
constexpr int kDecodeTargetBlocks = 256;

// Merges softmax state (max, sum, acc) of another part into (m, l, acc).
template <int kValues>
__device__ __forceinline__ void merge_softmax(float& m, float& l, float (&acc)[kValues],
                                              float other_m, float other_l,
                                              const float (&other_acc)[kValues]) {
  const float new_max = fmaxf(m, other_m);
  const float reference = exp_reference(new_max);
  const float mine = expf(m - reference), theirs = expf(other_m - reference);
  m = new_max;
  l = l * mine + other_l * theirs;
#pragma unroll
  for (int i = 0; i < kValues; ++i) acc[i] = acc[i] * mine + other_acc[i] * theirs;
}

// An online softmax's step to a round's largest score: m becomes the running maximum, l and acc
// are rescaled to it, and the reference for the round's exponentials is returned. `exp` is the
// exponential of the scores' base.
template <int kValues, class Exp>
__device__ __forceinline__ float raise_maximum(float& m, float& l, float (&acc)[kValues],
                                               float round_max, Exp exp) {
  const float new_max = fmaxf(m, round_max);
  const float reference = exp_reference(new_max);
  const float rescale = exp(m - reference);
  m = new_max;
  l *= rescale;
#pragma unroll
  for (int i = 0; i < kValues; ++i) acc[i] *= rescale;
  return reference;
}

// ---- INT8 keys and values in integer products ------------------------------------------------
//
// With F16/BF16 queries, decode_attention_int8 multiplies in integers (kIntegers): dp4a sums four
// INT8 products into an INT32 in one instruction, where the F32 form converts every byte to a
// float (a permute and a subtraction) and multiplies it on its own. A lane's query values (times
// the softmax scale and log2 e: scores in base 2) and a round's weights p · value scale are each
// split into two INT8 parts on a scale of their largest magnitude, x ≈ unit · (128 · high + low)
// with kQueryUnits (kWeightUnits) units to the largest: at most 1 / 32,512 (1 / 16,128) of it
// off, where the query's own F16 rounding is up to 1 / 2,048 of its value. Scores and the values'
// sums are then exact in INT32 up to that split. For the values' products, a key slot takes 4
// keys a round (the register form 4 consecutive ones, the staged form 4 keys 32 apart, the F32
// form 4 keys a slot count apart), so that each of its lanes holds the 4 keys' bytes of its dims,
// and 8 byte permutes turn 4 words of 4 dims into 4 words of 4 keys: one dp4a pair a dim
// (integer_round).
constexpr int kQueryUnits = 127 * 128;
// A value's sum over a round, |Σ 4 bytes · units| ≤ 4 · 127 · 8,064, stays under 2^22, where
// int_to_float is exact.
constexpr int kWeightUnits = 63 * 128;

// x rounded to the nearest integer, for |x| < 2^22: x + 1.5 · 2^23 keeps it in its low mantissa
// bits, rounded by the FP32 adder (F2I and I2F run at a quarter of the adder's rate on sm_90).
__device__ __forceinline__ int round_to_int(float x) {
  return __float_as_int(x + 12582912.0f) - 0x4B400000;
}
__device__ __forceinline__ float int_to_float(int x) {
  return __int_as_float(x + 0x4B400000) - 12582912.0f;
}

// units (|units| ≤ 127 · 128) as 128 · high + low, high in −127 … 127 and low in −64 … 63.
__device__ __forceinline__ void split_units(int units, int& high, int& low) {
  high = (units + 64) >> 7;
  low = units - high * 128;
}

// Four words as a 4 · 4 matrix of bytes [word][byte], transposed: out[j] holds byte j of in[0],
// in[1], in[2], in[3], lowest first.
__device__ __forceinline__ void transpose_bytes(const uint32_t (&in)[4], uint32_t (&out)[4]) {
  const uint32_t low01 = __byte_perm(in[0], in[1], 0x5140);
  const uint32_t high01 = __byte_perm(in[0], in[1], 0x7362);
  const uint32_t low23 = __byte_perm(in[2], in[3], 0x5140);
  const uint32_t high23 = __byte_perm(in[2], in[3], 0x7362);
  out[0] = __byte_perm(low01, low23, 0x5410);
  out[1] = __byte_perm(low01, low23, 0x7632);
  out[2] = __byte_perm(high01, high23, 0x5410);
  out[3] = __byte_perm(high01, high23, 0x7632);
}

// Σ a_i · high_i and Σ a_i · low_i over the four signed bytes of `bytes` (high and low packed
// likewise), added to the running sums.
__device__ __forceinline__ void split_dot(uint32_t bytes, uint32_t high, uint32_t low,
                                          int& high_sum, int& low_sum) {
  high_sum = __dp4a(static_cast<int>(bytes), static_cast<int>(high), high_sum);
  low_sum = __dp4a(static_cast<int>(bytes), static_cast<int>(low), low_sum);
}

// kCount values in units of their largest magnitude (kUnits of them to it; the unit is
// returned), split and packed: byte i of high[j] and low[j] is value 4j + i's.
template <int kUnits, int kCount>
__device__ __forceinline__ float split_values(const float (&x)[kCount],
                                              uint32_t (&high)[kCount / 4],
                                              uint32_t (&low)[kCount / 4]) {
  float largest = 0.0f;
#pragma unroll
  for (int i = 0; i < kCount; ++i) largest = fmaxf(largest, fabsf(x[i]));
  const float inverse = largest > 0.0f ? __fdividef(kUnits, largest) : 0.0f;
#pragma unroll
  for (int j = 0; j < kCount / 4; ++j) {
    int highs[4], lows[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // |x · inverse| ≤ kUnits, give or take the division's rounding, which the clamp takes.
      const int units = min(kUnits, max(-kUnits, round_to_int(x[4 * j + i] * inverse)));
      split_units(units, highs[i], lows[i]);
    }
    high[j] = int8_word(highs[0], highs[1], highs[2], highs[3]);
    low[j] = int8_word(lows[0], lows[1], lows[2], lows[3]);
  }
  return largest * (1.0f / kUnits);
}

// A lane's 16 query dims (times the softmax scale) as the integer products take them: in base 2
// (p = 2^(s − m) is then one MUFU.EX2; m goes back to base e after the rounds), split for dp4a.
struct SplitQuery {
  uint32_t high[4], low[4];
  float unit;
};
__device__ __forceinline__ SplitQuery split_query(const float (&query)[16]) {
  float query_log2[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) query_log2[i] = query[i] * kLog2e;
  SplitQuery split;
  split.unit = split_values<kQueryUnits>(query_log2, split.high, split.low);
  return split;
}

// One round of the integer products for a lane group's 4 keys, 16 dims a lane: the keys' and the
// values' bytes of those dims, their scales, and whether each key counts (one that does not scores
// −inf and weighs exactly 0, whatever its bytes and scales). A key's score sums over its
// lanes_per_key lanes; m is in base 2.
__device__ __forceinline__ void integer_round(const SplitQuery& query, const uint4 (&keys)[4],
                                              const uint4 (&values)[4],
                                              const float (&key_scales)[4],
                                              const float (&value_scales)[4],
                                              const bool (&inside)[4], int lanes_per_key, float& m,
                                              float& l, float (&acc)[16]) {
  float scores[4];
  float round_max = -INFINITY;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    uint32_t words[4];
    memcpy(words, &keys[u], sizeof words);
    int high = 0, low = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) split_dot(words[j], query.high[j], query.low[j], high, low);
    float s = static_cast<float>(high * 128 + low) * query.unit;
    for (int offset = 1; offset < lanes_per_key; offset <<= 1) {
      s += __shfl_xor_sync(0xffffffffu, s, offset);
    }
    scores[u] = inside[u] ? s * key_scales[u] : -INFINITY;
    round_max = fmaxf(round_max, scores[u]);
  }
  const float reference = raise_maximum(m, l, acc, round_max, [](float x) { return fast_exp2(x); });
  float weights[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const float p = inside[u] ? fast_exp2(scores[u] - reference) : 0.0f;
    l += p;
    weights[u] = inside[u] ? p * value_scales[u] : 0.0f;
  }
  uint32_t weights_high[1], weights_low[1];
  const float weight_unit = split_values<kWeightUnits>(weights, weights_high, weights_low);
  uint32_t words[4][4];
#pragma unroll
  for (int u = 0; u < 4; ++u) memcpy(words[u], &values[u], sizeof words[u]);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t by_key[4] = {words[0][j], words[1][j], words[2][j], words[3][j]};
    uint32_t by_dim[4];
    transpose_bytes(by_key, by_dim);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      int high = 0, low = 0;
      split_dot(by_dim[i], weights_high[0], weights_low[0], high, low);
      acc[4 * j + i] = fmaf(int_to_float(high * 128 + low), weight_unit, acc[4 * j + i]);
    }
  }
}

// Shared memory for the merges that end a decode attention.
struct DecodeMerge {
  float warp_max[kDecodeWarps], warp_sums[kDecodeWarps];
  float warp_outputs[kDecodeWarps][kMaxHeadDim];
  float block_max, block_sum;
  float block_output[kMaxHeadDim];
};

// The end of a decode attention: each lane's softmax state (m in base e, over the dims
// [first_dim, first_dim + kDims) where `active`) merged across the lane groups of its warp (lanes
// lanes_per_key apart hold the same dims), then across the CTA's first kDecodeWarps warps
// (thread d < head_dim combines dim d; warps past them, a producer's, bring nothing), then across
// the CTAs of the cluster (gridDim.x of them, the key splits), whose rank 0 writes the head's
// output at `target`. Every thread of the CTA calls it.
template <class T, int kDims>
__device__ __forceinline__ void finish_decode_attention(float m, float l, float (&acc)[kDims],
                                                        int lanes_per_key, int first_dim,
                                                        bool active, int head_dim, T* target,
                                                        DecodeMerge& merge) {
  namespace cg = cooperative_groups;
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  const int slot = lane / lanes_per_key, splits = gridDim.x;
  // Lane groups of a warp: lanes with the same `part` hold the same dims.
  for (int offset = lanes_per_key; offset < 32; offset <<= 1) {
    float other_acc[kDims];
#pragma unroll
    for (int i = 0; i < kDims; ++i) other_acc[i] = __shfl_xor_sync(0xffffffffu, acc[i], offset);
    const float other_m = __shfl_xor_sync(0xffffffffu, m, offset);
    const float other_l = __shfl_xor_sync(0xffffffffu, l, offset);
    merge_softmax(m, l, acc, other_m, other_l, other_acc);
  }
  if (slot == 0 && warp < kDecodeWarps) {
    if (lane == 0) merge.warp_max[warp] = m, merge.warp_sums[warp] = l;
    if (active) {
#pragma unroll
      for (int i = 0; i < kDims; ++i) merge.warp_outputs[warp][first_dim + i] = acc[i];
    }
  }
  __syncthreads();

  // Warps of the CTA: thread d < head_dim combines dim d.
  float block_m = -INFINITY;
  for (int w = 0; w < kDecodeWarps; ++w) block_m = fmaxf(block_m, merge.warp_max[w]);
  const float reference = exp_reference(block_m);
  float block_l = 0.0f, block_acc = 0.0f;
  for (int w = 0; w < kDecodeWarps; ++w) {
    const float weight = expf(merge.warp_max[w] - reference);
    block_l += merge.warp_sums[w] * weight;
    if (thread < head_dim) block_acc += merge.warp_outputs[w][thread] * weight;
  }
  if (splits == 1) {
    if (thread < head_dim) target[thread] = from_float<T>(block_l > 0.0f ? block_acc / block_l : 0);
    return;
  }

  // The cluster's CTAs: rank 0 reads the others' states from their shared memory.
  if (thread < head_dim) merge.block_output[thread] = block_acc;
  if (thread == 0) merge.block_max = block_m, merge.block_sum = block_l;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (cluster.block_rank() == 0 && thread < head_dim) {
    float m_all = -INFINITY, l_all = 0.0f, acc_all[1] = {0.0f};
    for (int rank = 0; rank < splits; ++rank) {
      const float other_m = *cluster.map_shared_rank(&merge.block_max, rank);
      const float other_l = *cluster.map_shared_rank(&merge.block_sum, rank);
      const float other_acc[1] = {*cluster.map_shared_rank(&merge.block_output[thread], rank)};
      merge_softmax(m_all, l_all, acc_all, other_m, other_l, other_acc);
    }
    target[thread] = from_float<T>(l_all > 0.0f ? acc_all[0] / l_all : 0.0f);
  }
  cluster.sync();  // the other CTAs' shared memory must outlive rank 0's reads
}

}  // namespace hark::compute::cuda
