// Element conversions for the CUDA kernels: every kernel loads its storage type (float, half,
// bfloat16) into F32 registers, computes in F32, and rounds once when it stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

}  // namespace hark::compute::cuda
