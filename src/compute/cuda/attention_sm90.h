// Attention over whole sequences on Hopper's asynchronous tensor cores (attention_sm90.cu: wgmma
// fed by TMA, warp-specialised), for what Whisper's encoder runs: head_dim 64, no mask. On an
// H200 the flash-attention-2 kernel of kernels_attention.cu (mma.sync) spends about a quarter of
// the large-v3 encoder's time there, at under a third of the tensor cores' rate.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {

// The operands of `attention` (kernels.h), which describes them: element (b, t, c) of q at
// q + b · q_batch_stride + t · q_row_stride + c (strides in elements), likewise k, v (kv strides)
// and out.
struct DenseAttention {
  const void* q;
  int64_t q_row_stride, q_batch_stride;
  const void* k;
  const void* v;
  int64_t kv_row_stride, kv_batch_stride;
  void* out;
  int64_t out_row_stride, out_batch_stride;
  int batch, heads, head_dim, q_len, kv_len;
  float scale;
  bool causal;
};

// Whether flash_attention_sm90 runs these operands: a GPU of compute capability 9.0, F16 or BF16,
// head_dim 64, no causal mask, scale > 0, pointers 16-byte aligned and strides multiples of 8
// elements.
bool flash_attention_sm90_runs(Element e, const DenseAttention& a);

// Whether it is also the faster kernel: not for fewer queries than a work item holds (128: a
// decoder prompt's cross-attention), which leave consumers idle; the mma.sync kernel runs two
// such items per SM where this one runs one.
bool flash_attention_sm90_preferred(Element e, const DenseAttention& a);

// `attention` for what flash_attention_sm90_runs accepts (it fails otherwise): F32 accumulation,
// the online softmax in F32, the probabilities rounded to e for their product with V.
void flash_attention_sm90(Element e, const DenseAttention& a, cudaStream_t stream);

}  // namespace hark::compute::cuda
