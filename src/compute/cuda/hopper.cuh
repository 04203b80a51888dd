// Hopper's asynchronous machinery, shared by the sm_90a kernels (*_sm90.cu): mbarriers, copies
// by the tensor memory accelerator (TMA) and their tensor maps, and wgmma, the warpgroup's
// asynchronous tensor-core product. Only files built for sm_90a include it: none of this exists
// in a portable target.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "base/error.h"
#include "compute/cuda/kernels.h"
#include "compute/cuda/tensor_core.cuh"

namespace hark::compute::cuda::hopper {

// ---- mbarriers ----

__device__ __forceinline__ void barrier_init(uint64_t* barrier, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)),
               "r"(arrivals));
}

// Makes the initialised barriers visible to the async proxy (TMA) and to the other threads.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void barrier_expect_bytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)),
      "r"(bytes)
      : "memory");
}

__device__ __forceinline__ void barrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier))
               : "memory");
}

// Waits until the phase of the given parity has completed (a fresh barrier is in phase 0, so
// waiting on parity 1 returns at once: a producer's first pass over its empty stages).
__device__ __forceinline__ void barrier_wait(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "retry:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra retry;\n"
      "}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}

// ---- TMA ----

// The box at (inner, outer) of the 2-D tensor `map` describes into shared memory at `target`;
// the barrier counts its bytes as they land. Rows past the tensor's end arrive as zeros.
__device__ __forceinline__ void tma_load(void* target, const CUtensorMap* map, uint64_t* barrier,
                                         int inner, int outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(shared_address(target)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(shared_address(barrier)), "r"(inner), "r"(outer)
      : "memory");
}

// The same for a 3-D tensor (inner, middle, outer).
__device__ __forceinline__ void tma_load(void* target, const CUtensorMap* map, uint64_t* barrier,
                                         int inner, int middle, int outer) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(shared_address(target)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(shared_address(barrier)), "r"(inner), "r"(middle),
      "r"(outer)
      : "memory");
}

// `bytes` (a multiple of 16) from `source` in global memory to `target` in shared memory, both
// 16-byte aligned, in one bulk copy; the barrier counts them as they land.
__device__ __forceinline__ void bulk_load(void* target, const void* source, uint32_t bytes,
                                          uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(target)),
      "l"(source), "r"(bytes), "r"(shared_address(barrier))
      : "memory");
}

// The box at `source` to (inner, outer) of the tensor `map` describes; the parts of the box past
// the tensor's end are not written. Stores of one thread complete in groups (commit, wait).
__device__ __forceinline__ void tma_store(const CUtensorMap* map, const void* source, int inner,
                                          int outer) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(shared_address(source)), "r"(inner), "r"(outer)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Waits until at most kPending committed groups of this thread's stores still read shared memory.
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
// Makes this thread's writes to shared memory visible to TMA (the async proxy).
__device__ __forceinline__ void fence_shared_for_tma() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// A barrier for the 128 threads of one warpgroup (id 0 is __syncthreads').
__device__ __forceinline__ void warpgroup_sync(int id) {
  asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

// The two halves of a barrier over every thread of a thread-block cluster, for threads that have
// work to do between them: each arrives (releasing its writes to shared memory), and once all
// have, the waits return (acquiring the others' writes). Every thread arrives once, then waits
// once, before it arrives again; a warp executes each half together.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// ---- wgmma ----

// The shared-memory operand descriptor of a tile in the 128-byte swizzle (rows of 128 bytes,
// 16-byte piece p of row r stored at p ^ (r % 8), the pattern repeating every 1024 bytes, which
// is where the tile must start). Addresses and offsets are in 16-byte units; layout type 1 is the
// 128-byte swizzle.
//   - K-major (the values multiplied together are contiguous, as in x and w of x · wᵀ): the
//     leading byte offset is unused by this layout (16), the stride byte offset is 1024, from
//     eight rows of the tile to the next eight.
//   - MN-major (rows run along k, as V's rows along the keys in P · V; the product is then
//     issued with B transposed): a row's 64 values are the whole width of one product (n = 64),
//     so only the step from eight rows of k to the next is used: 1024, given as both offsets.
__device__ __forceinline__ uint64_t operand_descriptor(const void* tile) {
  const uint64_t address = shared_address(tile);
  return ((address & 0x3FFFF) >> 4) | (uint64_t{16 >> 4} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}
__device__ __forceinline__ uint64_t transposed_operand_descriptor(const void* tile) {
  const uint64_t address = shared_address(tile);
  return ((address & 0x3FFFF) >> 4) | (uint64_t{1024 >> 4} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of registers across the asynchronous products
// that own them (accumulators, or A operands held in registers).
template <int kCount>
__device__ __forceinline__ void fence_registers(float (&values)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(values[i])::"memory");
}
// The same for 32-bit integers (uint32_t fragments, int32 sums).
template <class T, int kCount, class = std::enable_if_t<std::is_integral_v<T> && sizeof(T) == 4>>
__device__ __forceinline__ void fence_registers(T (&values)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(values[i])::"memory");
}

#define HARK_WGMMA_8_ACCUMULATORS "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define HARK_WGMMA_16_ACCUMULATORS \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define HARK_WGMMA_32_ACCUMULATORS                                                   \
  "{"                                                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"             \
  "}"
#define HARK_WGMMA_64_ACCUMULATORS                                                   \
  "{"                                                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, " \
  "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"             \
  "}"

#define HARK_WGMMA_8_OUTPUTS(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define HARK_WGMMA_16_OUTPUTS(d)                                                          \
  HARK_WGMMA_8_OUTPUTS(d), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), \
      "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define HARK_WGMMA_32_OUTPUTS(d)                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define HARK_WGMMA_64_OUTPUTS(d)                                                                 \
  HARK_WGMMA_32_OUTPUTS(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),     \
      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
      "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// The products' type names in the instructions: the same instruction for F16 and BF16 but for
// them.
#define HARK_WGMMA_FOR_TYPE(T, WGMMA)               \
  if constexpr (std::is_same_v<T, __nv_bfloat16>) { \
    WGMMA("bf16");                                  \
  } else {                                          \
    WGMMA("f16");                                   \
  }

// d (+)= a · bᵀ for a 64 × 16 tile a and a 128 × 16 tile b, both K-major in shared memory
// (descriptors); scale_d 0 overwrites d. Thread t of the warpgroup holds d[4j + 2i + c] at row
// 16·(t / 32) + (t % 32) / 4 + 8i, column 8j + 2·(t % 4) + c.
template <class T>
__device__ __forceinline__ void wgmma_64x128x16(float (&d)[64], uint64_t a, uint64_t b,
                                                int scale_d) {
#define HARK_WGMMA(type)                                                                          \
  asm volatile(                                                                                   \
      "{\n"                                                                                       \
      ".reg .pred accumulate;\n"                                                                  \
      "setp.ne.b32 accumulate, %66, 0;\n"                                                         \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." type "." type " " HARK_WGMMA_64_ACCUMULATORS \
      ", %64, %65, accumulate, 1, 1, 0, 0;\n"                                                     \
      "}\n"                                                                                       \
      : HARK_WGMMA_64_OUTPUTS(d)                                                                  \
      : "l"(a), "l"(b), "r"(scale_d))
  HARK_WGMMA_FOR_TYPE(T, HARK_WGMMA)
#undef HARK_WGMMA
}

// The same for an n × 16 tile b with n = 16 or 32 (a step's few rows as wgmma's columns): d holds
// n / 2 accumulators a thread, in n / 8 column groups j.
template <class T, int kN>
__device__ __forceinline__ void wgmma_64xNx16(float (&d)[kN / 2], uint64_t a, uint64_t b,
                                              int scale_d) {
  static_assert(kN == 16 || kN == 32, "wgmma_64xNx16: n of 16 or 32");
#define HARK_WGMMA(type)                                                                           \
  if constexpr (kN == 32) {                                                                        \
    asm volatile(                                                                                  \
        "{\n"                                                                                      \
        ".reg .pred accumulate;\n"                                                                 \
        "setp.ne.b32 accumulate, %18, 0;\n"                                                        \
        "wgmma.mma_async.sync.aligned.m64n32k16.f32." type "." type " " HARK_WGMMA_16_ACCUMULATORS \
        ", %16, %17, accumulate, 1, 1, 0, 0;\n"                                                    \
        "}\n"                                                                                      \
        : HARK_WGMMA_16_OUTPUTS(d)                                                                 \
        : "l"(a), "l"(b), "r"(scale_d));                                                           \
  } else {                                                                                         \
    asm volatile(                                                                                  \
        "{\n"                                                                                      \
        ".reg .pred accumulate;\n"                                                                 \
        "setp.ne.b32 accumulate, %10, 0;\n"                                                        \
        "wgmma.mma_async.sync.aligned.m64n16k16.f32." type "." type " " HARK_WGMMA_8_ACCUMULATORS  \
        ", %8, %9, accumulate, 1, 1, 0, 0;\n"                                                      \
        "}\n"                                                                                      \
        : HARK_WGMMA_8_OUTPUTS(d)                                                                  \
        : "l"(a), "l"(b), "r"(scale_d));                                                           \
  }
  HARK_WGMMA_FOR_TYPE(T, HARK_WGMMA)
#undef HARK_WGMMA
}

// d += a · b for a 64 × 16 tile a in registers (per warp, the A fragment of mma.m16n8k16 for
// the warp's 16 rows: (row g, k 2c..2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..), g = lane / 4,
// c = lane % 4) and a 16 × 64 tile b, MN-major in shared memory (its descriptor; the product
// reads it transposed); scale_d 0 overwrites d. d as in wgmma_64x128x16, with 8 column groups j.
template <class T>
__device__ __forceinline__ void wgmma_64x64x16_registers(float (&d)[32], const uint32_t (&a)[4],
                                                         uint64_t b, int scale_d) {
#define HARK_WGMMA(type)                                                                         \
  asm volatile(                                                                                  \
      "{\n"                                                                                      \
      ".reg .pred accumulate;\n"                                                                 \
      "setp.ne.b32 accumulate, %37, 0;\n"                                                        \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." type "." type " " HARK_WGMMA_32_ACCUMULATORS \
      ", {%32, %33, %34, %35}, %36, accumulate, 1, 1, 1;\n"                                      \
      "}\n"                                                                                      \
      : HARK_WGMMA_32_OUTPUTS(d)                                                                 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d))
  HARK_WGMMA_FOR_TYPE(T, HARK_WGMMA)
#undef HARK_WGMMA
}

#undef HARK_WGMMA_FOR_TYPE
#undef HARK_WGMMA_8_ACCUMULATORS
#undef HARK_WGMMA_16_ACCUMULATORS
#undef HARK_WGMMA_32_ACCUMULATORS
#undef HARK_WGMMA_64_ACCUMULATORS
#undef HARK_WGMMA_8_OUTPUTS
#undef HARK_WGMMA_16_OUTPUTS
#undef HARK_WGMMA_32_OUTPUTS
#undef HARK_WGMMA_64_OUTPUTS

// ---- host side ----

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                           cudaEnableDefault, &found),
          "cuTensorMapEncodeTiled");
    if (found != cudaDriverEntryPointSuccess || function == nullptr) {
      fail("CUDA: the driver has no cuTensorMapEncodeTiled");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encode;
}

// A tensor of `type` values with `rank` dimensions (sizes[0] the contiguous one; strides[i] in
// bytes from index i + 1 of dimension i + 1 to the next, multiples of 16), copied in boxes of
// box[] values (box[0] · the value's size a multiple of 16 bytes), in the given swizzle. Loads
// read what lies past the tensor's end as zeros; stores leave it alone.
inline CUtensorMap tensor_map(CUtensorMapDataType type, const void* base, int rank,
                              const uint64_t* sizes, const uint64_t* strides, const uint32_t* box,
                              CUtensorMapSwizzle swizzle) {
  CUtensorMap map{};
  cuuint64_t size[3]{}, stride[2]{};
  cuuint32_t box_size[3]{}, element_stride[3]{};
  for (int i = 0; i < rank; ++i) {
    size[i] = sizes[i];
    box_size[i] = box[i];
    element_stride[i] = 1;
    if (i + 1 < rank) stride[i] = strides[i];
  }
  const CUresult status =
      tensor_map_encoder()(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), size,
                           stride, box_size, element_stride, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) fail("CUDA: cuTensorMapEncodeTiled failed (", status, ")");
  return map;
}

// The same in the 128-byte swizzle, whose rows are the box's rows of 128 bytes (box[0] = 64
// 16-bit values or 128 bytes): the operand tiles of wgmma.
inline CUtensorMap swizzled_map(CUtensorMapDataType type, const void* base, int rank,
                                const uint64_t* sizes, const uint64_t* strides,
                                const uint32_t* box) {
  return tensor_map(type, base, rank, sizes, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

// The same for 16-bit elements of type e.
inline CUtensorMap swizzled_map(Element e, const void* base, int rank, const uint64_t* sizes,
                                const uint64_t* strides, const uint32_t* box) {
  return swizzled_map(
      e == Element::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, base,
      rank, sizes, strides, box);
}

// A row-major [rows, cols] matrix of 16-bit values of type e in boxes of box_rows × 64 values
// (128 bytes, the swizzle's row): the operand tiles of a product, or the boxes its results are
// stored from.
inline CUtensorMap row_major_map(Element e, const void* matrix, int64_t rows, int64_t cols,
                                 int box_rows) {
  const uint64_t sizes[2] = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)};
  const uint64_t strides[1] = {static_cast<uint64_t>(cols) * 2};
  const uint32_t box[2] = {64, static_cast<uint32_t>(box_rows)};
  return swizzled_map(e, matrix, 2, sizes, strides, box);
}

// A row-major [rows, cols] matrix of bytes in boxes of box_rows × box_cols (a multiple of 16),
// unswizzled: each box lands as its rows one after another, for a kernel that reads it itself.
inline CUtensorMap byte_matrix_map(const void* matrix, int64_t rows, int64_t cols, int box_rows,
                                   int box_cols) {
  const uint64_t sizes[2] = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)};
  const uint64_t strides[1] = {static_cast<uint64_t>(cols)};
  const uint32_t box[2] = {static_cast<uint32_t>(box_cols), static_cast<uint32_t>(box_rows)};
  return tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, matrix, 2, sizes, strides, box,
                    CU_TENSOR_MAP_SWIZZLE_NONE);
}

// Whether the current device has compute capability 9.0, the only one sm_90a code runs on; asked
// once. (Its SM count is device.h's multiprocessor_count().)
inline bool present() {
  static const bool found = [] {
    int id = 0, major = 0, minor = 0;
    if (cudaGetDevice(&id) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, id) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, id) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major == 9 && minor == 0;
  }();
  return found;
}

}  // namespace hark::compute::cuda::hopper
