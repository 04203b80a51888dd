// The end of an attention over the frames (kernels_cross_attention.cu, frame_attention_sm90.cu)
// whose frames are split among the CTAs of a thread-block cluster along x: each CTA holds, in
// shared memory, its heads' running max and sum and their unnormalised outputs, and together
// they write the normalised output.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "compute/cuda/element.cuh"
#include "compute/cuda/tensor_core.cuh"

namespace hark::compute::cuda {

constexpr int kMaxFrameHeads = 24;
constexpr int kMaxFrameSplits = 8;  // the portable cluster size

// target[h · width + column] for the CTA's cta_heads heads, from output [heads][output_pitch] F32
// (unnormalised), final_max and final_sum [heads] of every CTA of the cluster (gridDim.x of them,
// this one blockIdx.x); coefficients is [kMaxFrameSplits][kMaxFrameHeads] F32 of scratch. Every
// thread of the CTA calls it once those arrays are written and visible to the CTA. A thread
// writes four columns at a time (16-byte loads of the F32 outputs, one store): width and
// output_pitch must be multiples of 4, output 16-byte aligned and target 4 values aligned, as both
// kernels' are (their widths are multiples of 16).
template <class T, int kThreads>
__device__ void write_frame_attention(const float* output, int64_t output_pitch,
                                      const float* final_max, const float* final_sum,
                                      float* coefficients, int cta_heads, int width, T* target) {
  constexpr int kPack = 4;  // a float4
  const int splits = gridDim.x, split = blockIdx.x, thread = threadIdx.x;
  const int packs = width / kPack;
  if (splits == 1) {
    for (int i = thread; i < cta_heads * packs; i += kThreads) {
      const int h = i / packs, column = i % packs * kPack;
      const float sum = final_sum[h];
      const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
      const float4 o = *reinterpret_cast<const float4*>(output + h * output_pitch + column);
      const float values[kPack] = {o.x * inverse, o.y * inverse, o.z * inverse, o.w * inverse};
      store_pack(values, target + h * width + column);
    }
    return;
  }

  // CTA `split` merges packs of columns [split · share, (split + 1) · share) of every head from
  // all of them.
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (thread < cta_heads) {
    const int h = thread;
    float merged_max = -INFINITY;
    for (int rank = 0; rank < splits; ++rank) {
      merged_max = fmaxf(merged_max, *cluster.map_shared_rank(&final_max[h], rank));
    }
    const float reference = exp_reference(merged_max);
    float merged_sum = 0.0f;
    for (int rank = 0; rank < splits; ++rank) {
      const float weight = expf(*cluster.map_shared_rank(&final_max[h], rank) - reference);
      coefficients[rank * kMaxFrameHeads + h] = weight;
      merged_sum += *cluster.map_shared_rank(&final_sum[h], rank) * weight;
    }
    const float inverse = merged_sum > 0.0f ? 1.0f / merged_sum : 0.0f;
    for (int rank = 0; rank < splits; ++rank) coefficients[rank * kMaxFrameHeads + h] *= inverse;
  }
  __syncthreads();
  const int share = (packs + splits - 1) / splits;
  const int first_pack = split * share,
            own_packs = max(0, min(packs, first_pack + share) - first_pack);
  const float* remote[kMaxFrameSplits];
#pragma unroll
  for (int rank = 0; rank < kMaxFrameSplits; ++rank) {
    remote[rank] = cluster.map_shared_rank(output, rank < splits ? rank : 0);
  }
  // Every thread on (head, pack) pairs, all ranks' values of a pair in flight together.
  for (int i = thread; i < cta_heads * own_packs; i += kThreads) {
    const int h = i / own_packs, column = (first_pack + i % own_packs) * kPack;
    const int64_t at = h * output_pitch + column;
    float4 parts[kMaxFrameSplits];
#pragma unroll
    for (int rank = 0; rank < kMaxFrameSplits; ++rank) {
      parts[rank] = rank < splits ? *reinterpret_cast<const float4*>(remote[rank] + at)
                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float values[kPack] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int rank = 0; rank < kMaxFrameSplits; ++rank) {
      if (rank >= splits) continue;
      const float weight = coefficients[rank * kMaxFrameHeads + h];
      values[0] += weight * parts[rank].x;
      values[1] += weight * parts[rank].y;
      values[2] += weight * parts[rank].z;
      values[3] += weight * parts[rank].w;
    }
    store_pack(values, target + h * width + column);
  }
  cluster.sync();  // the other CTAs' shared memory must outlive these reads
}

}  // namespace hark::compute::cuda
