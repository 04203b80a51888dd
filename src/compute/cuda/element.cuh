// What the CUDA kernel files share: element types (conversions, and the dispatch from Element to
// a storage type), warp reductions, and the two halves of programmatic dependent launch.
// Conversions: every kernel loads its storage type (float, half, bfloat16) into F32 registers,
// computes in F32, and rounds once when it stores.
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

// ---- Warp reductions -------------------------------------------------------------------------

constexpr unsigned kFullWarp = 0xffffffffu;

// The sum and the maximum over a warp's 32 lanes, returned to every lane.
__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullWarp, value, offset);
  }
  return value;
}
__device__ __forceinline__ float warp_max(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(kFullWarp, value, offset));
  }
  return value;
}

// ---- Programmatic dependent launch ----------------------------------------------------------

// With programmatic dependent launch, waits for the kernels this one depends on (their writes
// become visible); launched the ordinary way, it returns at once. Before it, a kernel may read
// only what no earlier kernel writes (weights).
__device__ __forceinline__ void wait_for_prerequisite_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel, when it is launched as a programmatic dependent, start its blocks now:
// it still waits for this whole grid before it reads anything this one writes.
__device__ __forceinline__ void allow_dependent_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace hark::compute::cuda
