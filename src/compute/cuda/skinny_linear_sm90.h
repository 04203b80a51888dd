// Products of few rows (a batched decode step's: 1 to 32) on Hopper's tensor cores, with the
// bias, the activation and the residual in the epilogue (skinny_linear_sm90.cu). A step of 16
// sequences spent 44 µs a layer in cuBLASLt's six products and their split-K reduction, whose
// weights take 11 µs at the HBM's rate (bench/RESULTS.md, twelfth session): cuBLASLt's tiles
// leave most SMs idle and each launch waits for the one before to end. This kernel spreads W over
// every SM instead (64 outputs a CTA, the depth split among the CTAs of a cluster, which add
// their partial sums through distributed shared memory in a fixed order: the results do not
// depend on timing), and requests its first weights before the kernel before it has finished.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "compute/cuda/gemm_sm90.h"
#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {

// The most rows skinny_linear takes. From 64 rows on, its form with 64 or 128 columns of wgmma
// lost to cuBLASLt's products (bench/RESULTS.md, twenty-eighth session).
constexpr int64_t kSkinnyMaxRows = 32;

// Whether skinny_linear runs these operands: a GPU of compute capability 9.0, 16-bit elements,
// 1 ≤ m ≤ kSkinnyMaxRows, n and k multiples of 64, every pointer 16-byte aligned (bias and
// residual may be null).
bool skinny_linear_runs(Element e, int64_t m, int64_t k, int64_t n, const void* x, const void* w,
                        const void* bias, const void* residual, const void* y);

// y[m, n] = act(x[m, k] · w[n, k]ᵀ + bias[n]) + residual[m, n] (bias, residual null: none), row-
// major and dense, every value of element type e; F32 accumulation, one rounding to e. residual
// may be y; y must not overlap x or w. Launched as a programmatic dependent of the kernel before
// it: its first weights are requested before that kernel's results are waited for. Fails for
// what skinny_linear_runs refuses.
void skinny_linear(Element e, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                   const void* bias, Activation act, const void* residual, void* y,
                   cudaStream_t stream);

}  // namespace hark::compute::cuda
