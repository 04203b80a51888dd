// The activations of the Hopper products' epilogues (gemm_sm90.cu, skinny_linear_sm90.cu), in
// F32 on the accumulator before the one rounding to the element type.
#pragma once

#include <type_traits>

#include "base/error.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/gemm_sm90.h"

namespace hark::compute::cuda {

// The epilogue's time is time the tensor cores wait, and its activation runs on the special
// function unit (16 results per cycle and SM): SiLU as x · (1 + tanh(x / 2)) / 2, one
// tanh.approx (relative error 2^-11, about the one rounding to 16 bits that follows) where
// x / (1 + e^-x) takes two (exponential, reciprocal): 205 → 184 µs (16,000 × 1024 × 4096, H200).
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// GELU, x · Φ(x), as x · σ(x · P(x²)): P of degree 2 fitted to the erf form on |x| ≤ 10
// (Lawson's reweighting toward minimax), its argument clamped to ±10, where σ is 0 or 1 in F32
// anyway. The largest error is 2.6e-5 (checked in double up to |x| = 30), about one rounding to
// F16 (half a unit at 0.125 is 3.1e-5), and σ's tail stays relative: 1 / (1 + e^-z) loses
// nothing for z < 0, where 1 + tanh would cancel. The coefficients carry −log2(e), so that e^-z
// is one ex2. Why not erff: two special-function results an element where erff takes one and
// about 20 other instructions, and the epilogue's instructions are time the tensor cores wait:
// large-v3's encoder fc1 (24,000 × 1280 × 5120) 498.5 → 425.5 µs, cuBLASLt's product alone
// 382.9 (`hark bench --device cuda --products`, bench/RESULTS.md, fifteenth session). The tanh
// form (tanh.approx of √(2/π) · (x + 0.044715 x³)) was about as fast, but 17 times as far from
// a double reference as the erf form in F16, for negative x (activation_linear_cuda_test).
__device__ __forceinline__ float fitted_gelu(float x) {
  const float clamped = fminf(fmaxf(x, -10.0f), 10.0f), squared = clamped * clamped;
  const float exponent = x * fmaf(fmaf(1.0138142e-3f, squared, -0.10677359f), squared, -2.3011232f);
  float e_minus_z, sigma;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e_minus_z) : "f"(exponent));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(sigma) : "f"(1.0f + e_minus_z));
  return x * sigma;
}

template <Activation kAct>
__device__ __forceinline__ float activated(float value) {
  if constexpr (kAct == Activation::silu) {
    return 0.5f * value * (1.0f + fast_tanh(0.5f * value));
  } else if constexpr (kAct == Activation::gelu) {
    return fitted_gelu(value);
  } else if constexpr (kAct == Activation::relu) {
    return relu_value(value);
  } else {
    return value;
  }
}

// Calls f(std::integral_constant<Activation, act>{}): a launcher's one switch from the run-time
// activation to the kernel instantiated for it.
template <class F>
void with_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::none:
      return f(std::integral_constant<Activation, Activation::none>{});
    case Activation::gelu:
      return f(std::integral_constant<Activation, Activation::gelu>{});
    case Activation::silu:
      return f(std::integral_constant<Activation, Activation::silu>{});
    case Activation::relu:
      return f(std::integral_constant<Activation, Activation::relu>{});
  }
  fail("CUDA products: unknown activation");
}

}  // namespace hark::compute::cuda
