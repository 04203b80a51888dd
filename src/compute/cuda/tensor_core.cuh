// Primitives shared by the tensor-core kernels (sm_80+): cp.async copies into shared memory,
// ldmatrix loads of mma fragments, the m16n8k16 product with F32 accumulators, and the reference
// point and the exponential of an online softmax.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace hark::compute::cuda {

// The reference point for exponentials after a running maximum `m`: m itself, or 0 while nothing
// has been seen (m = −inf), so that exp(−inf − ref) is 0 rather than NaN.
__device__ __forceinline__ float exp_reference(float m) {
  return m == -INFINITY ? 0.0f : m;
}

// Softmaxes take e^x as 2^(x · log2(e)), the exponential the special function unit has.
constexpr float kLog2e = 1.4426950408889634f;

// 2^x on the special function unit; tiny results flush to zero, which P in F16/BF16 cannot hold.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared without passing through registers; fill = false writes zeros (rows
// past the end of a sequence), reading nothing from `global`.
__device__ __forceinline__ void copy_async_16(uint32_t shared, const void* global, bool fill) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(global),
               "r"(fill ? 16 : 0));
}
__device__ __forceinline__ void copy_async_16(void* shared, const void* global, bool fill) {
  copy_async_16(shared_address(shared), global, fill);
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8×8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i (as pointers, or as
// shared-memory addresses that a kernel keeps in registers and steps itself).
__device__ __forceinline__ void load_matrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void load_matrix_x4(uint32_t (&r)[4], const void* shared) {
  load_matrix_x4(r, shared_address(shared));
}
__device__ __forceinline__ void load_matrix_x4_transposed(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void load_matrix_x4_transposed(uint32_t (&r)[4], const void* shared) {
  load_matrix_x4_transposed(r, shared_address(shared));
}

// d += a · b for a 16×16 A (row-major fragment), a 16×8 B (column fragment), F32 accumulators.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace hark::compute::cuda
