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

// A product for skinny_linear: y[m, n] = act(norm(x)[m, k] · w[n, k]ᵀ + bias[n]) + residual[m, n]
// (norm, bias, residual null: none), row-major and dense, every value of the element type; w in
// the element type, or Q8_0 in the device layout (kernels.h), each value d · q rounded once to
// the element type as dequantize_q8_0 rounds it. With a K/V scatter (decode_linear's, kernels.h)
// the outputs go to y [m, width] and the caches instead. residual may be y; y must not overlap x
// or w.
struct SkinnyProduct {
  const void* x = nullptr;
  int64_t m = 0, k = 0;
  DecodeWeights w;
  int64_t n = 0;
  const void* bias = nullptr;
  Activation act = Activation::none;
  const void* residual = nullptr;
  void* y = nullptr;
  const DecodeNorm* norm = nullptr;
  const KvScatter* scatter = nullptr;
};

// Whether skinny_linear runs the product: a GPU of compute capability 9.0, 16-bit elements,
// 1 ≤ m ≤ kSkinnyMaxRows, n and k multiples of 64, every pointer 16-byte aligned (bias and
// residual may be null), and a CTA's share of the depth small enough for its shared memory
// (with a norm, x's share sits there whole: a few thousand values deep, which Whisper's norms
// all are); with a K/V scatter, n = 3 · its width (a multiple of 8), aligned caches and no
// residual.
bool skinny_linear_runs(Element e, const SkinnyProduct& product);

// Runs the product, F32 accumulation and one rounding to the element type (and, with the norm,
// one of the normalised x, as layer_norm rounds its output). Launched as a programmatic
// dependent of the kernel before it: its first weights are requested before that kernel's
// results are waited for, so w must not be written by the kernel just before. Fails for what
// skinny_linear_runs refuses.
void skinny_linear(Element e, const SkinnyProduct& product, cudaStream_t stream);

}  // namespace hark::compute::cuda
