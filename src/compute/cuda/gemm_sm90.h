// Products whose activation is computed in the product's epilogue, on Hopper's tensor cores
// (gemm_sm90.cu: wgmma fed by TMA, warp-specialised). cuBLASLt has no SiLU epilogue and its GELU
// epilogue is not the erf GELU that the models define, so without this kernel the hidden layer of
// a feed-forward module (16,000 × 4096 16-bit values for a Parakeet batch of 64 × 20 s) goes once
// more to memory and back through an elementwise kernel: 7 % of that batch's time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {

// compute::Activation for CUDA code, which is C++17 and cannot include compute/ops.h.
enum class Activation : uint8_t { none, gelu, silu, relu };

// Whether activation_linear runs these operands: a GPU of compute capability 9.0, 16-bit
// elements, n a multiple of 128, k a multiple of 64, every pointer 16-byte aligned.
bool activation_linear_runs(Element e, int64_t m, int64_t k, int64_t n, const void* x,
                            const void* w, const void* bias, const void* y);

// y[m, n] = act(x[m, k] · w[n, k]ᵀ + bias[n]) (bias null: none; GELU the erf one to within
// 2.6e-5, gemm_sm90.cu: fitted_gelu), row-major and dense, every value of element type e; F32
// accumulation, the activation in F32 on the accumulator, one rounding to e. Fails for what
// activation_linear_runs refuses. y must not overlap x or w.
void activation_linear(Element e, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                       const void* bias, Activation act, void* y, cudaStream_t stream);

// The INT8 cross-attention K/V straight from their product (quantize_int8's groups, kernels.h):
// the product's results never go to memory in the element type, and the K/V go out group-major,
// as a decode step reads them.
//
// The group size quantized_linear takes: half its tile's 128 columns, one Whisper head.
constexpr int kQuantizedGroup = 64;

// Whether quantized_linear runs these operands: what activation_linear needs, with
// group == kQuantizedGroup, block_rows ≥ 1, q 16-byte and scales 4-byte aligned.
bool quantized_linear_runs(Element e, int64_t m, int64_t k, int64_t n, int group,
                           int64_t block_rows, const void* x, const void* w, const void* bias,
                           const int8_t* q, const float* scales);

// y = x[m, k] · w[n, k]ᵀ + bias[n] (bias null: none), F32 accumulation rounded once to e, then
// quantised exactly as quantize_int8(e, y, 0, m, n, group, block_rows, q, scales) would: q and
// scales in group_major_strides(n, group, block_rows). Fails for what quantized_linear_runs
// refuses.
void quantized_linear(Element e, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                      const void* bias, int group, int64_t block_rows, int8_t* q, float* scales,
                      cudaStream_t stream);

}  // namespace hark::compute::cuda
