// decode_attention_int8 over group-major INT8 keys and values, staged through shared memory by the
// bulk copies of Hopper's TMA (decode_attention_staged_sm90.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {

// Whether the staged form runs these operands: a GPU of compute capability 9.0, F16 or BF16
// queries, head_dim 64, each (sequence, head) pair's keys, values and scales one run apiece
// (group_major_strides, without padding), 16-byte aligned.
bool staged_int8_attention_runs(Element e, const Int8Kv& kv, int head_dim);

// Whether the staged form is the faster for `rows` query rows of `heads` heads (where it runs):
// where the (row, head) pairs alone fill more than a quarter of the CTAs the GPU holds at once,
// so that each pair's keys are split among at most 2 CTAs. On an H100 that is 8 sequences of
// large-v3 and more: its step over INT8 K/V took 2.28 ms at 8 (2.34 in the register form), 2.65
// at 16 (2.77), 5.33 at 64 (5.40), and 1.61 at 1 (1.52) (bench/RESULTS.md, thirty-fifth session).
bool staged_int8_attention_pays(int rows, int heads);

// decode_attention_int8 (kernels.h) without a fused query, in integer products as its default
// form, the same output within their rounding (the keys are summed in another order).
void decode_attention_int8_staged(Element e, const void* q, int64_t q_stride, const Int8Kv& kv,
                                  const int32_t* lengths, void* out, int64_t out_stride, int batch,
                                  int heads, float scale, int queries_per_sequence,
                                  cudaStream_t stream);

}  // namespace hark::compute::cuda
