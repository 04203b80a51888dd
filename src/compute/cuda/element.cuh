// Element types in the CUDA kernels: conversions, and the dispatch from Element to a storage
// type. Conversions: every kernel loads its storage type (float, half,
// bfloat16) into F32 registers, computes in F32, and rounds once when it stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "base/error.h"
#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {

__device__ __forceinline__ float to_float(float value) {
  return value;
}
__device__ __forceinline__ float to_float(__half value) {
  return __half2float(value);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 value) {
  return __bfloat162float(value);
}

template <class T>
__device__ __forceinline__ T from_float(float value);
template <>
__device__ __forceinline__ float from_float<float>(float value) {
  return value;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float value) {
  return __float2half_rn(value);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}

// Calls f with a value of the storage type that `e` names; f's parameter type picks the kernel.
template <class F>
void with_type(Element e, F&& f) {
  switch (e) {
    case Element::f32:
      f(float{});
      return;
    case Element::f16:
      f(__half{});
      return;
    case Element::bf16:
      f(__nv_bfloat16{});
      return;
  }
  fail("CUDA kernels: unknown element type ", static_cast<int>(e));
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace hark::compute::cuda
