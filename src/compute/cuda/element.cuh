// What the CUDA kernel files share: element types (conversions, and the dispatch from Element to
// a storage type), packs and launch shapes, ReLU, warp reductions, and the two halves of
// programmatic dependent launch.
// Conversions: every kernel loads its storage type (float, half, bfloat16) into F32 registers,
// computes in F32, and rounds once when it stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "base/error.h"
#include "compute/cuda/device.h"
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

// The same for kernels of 16-bit types only: F32 fails, `what` (the kernel) naming it.
template <class F>
void with_16_bit_type(Element e, const char* what, F&& f) {
  if (e == Element::f32) fail(what, ": F16 or BF16 elements only");
  if (e == Element::bf16) {
    f(__nv_bfloat16{});
  } else {
    f(__half{});
  }
}
// For kernels whose callers have refused F32 before.
template <class F>
void with_16_bit_type(Element e, F&& f) {
  with_16_bit_type(e, "a 16-bit CUDA kernel", std::forward<F>(f));
}

// ReLU that keeps NaN (as the CPU ops do) instead of turning it into 0.
__device__ __forceinline__ float relu_value(float x) {
  return x < 0.0f ? 0.0f : x;
}

// The activations as the models define them (the CPU ops' formulas): x · σ(x), and GELU with
// erf, not its tanh approximation.
__device__ __forceinline__ float sigmoid_value(float x) {
  return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float silu_value(float x) {
  return x * sigmoid_value(x);
}
__device__ __forceinline__ float gelu_value(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

// Two 16-bit values as one 32-bit register (of a tensor-core fragment, or a pair stored
// together): `low` is the element of the smaller column.
template <class T>
__device__ __forceinline__ uint32_t pack_pair(float low, float high);
template <>
__device__ __forceinline__ uint32_t pack_pair<__half>(float low, float high) {
  const __half2 pair = __floats2half2_rn(low, high);
  uint32_t bits;
  memcpy(&bits, &pair, sizeof bits);
  return bits;
}
template <>
__device__ __forceinline__ uint32_t pack_pair<__nv_bfloat16>(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  uint32_t bits;
  memcpy(&bits, &pair, sizeof bits);
  return bits;
}

// The two values of such a register as F32, `low` in x.
template <class T>
__device__ __forceinline__ float2 unpack_pair(uint32_t bits);
template <>
__device__ __forceinline__ float2 unpack_pair<__half>(uint32_t bits) {
  __half2 pair;
  memcpy(&pair, &bits, sizeof pair);
  return __half22float2(pair);
}
template <>
__device__ __forceinline__ float2 unpack_pair<__nv_bfloat16>(uint32_t bits) {
  __nv_bfloat162 pair;
  memcpy(&pair, &bits, sizeof pair);
  return __bfloat1622float2(pair);
}

// Four signed bytes packed in a word (the lowest first) as floats, exactly, without the
// integer-to-float conversion instruction, which runs at a quarter of an add's rate (it bounded
// the INT8 decode attention): with its sign bit flipped a byte is b + 128 (0…255), which as the
// low mantissa byte of 2^23 makes the float 2^23 + b + 128 (one byte permute); one subtraction
// leaves b.
__device__ __forceinline__ void int8x4_to_floats(uint32_t word, float* out) {
  const uint32_t biased = word ^ 0x80808080u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Byte i of the word, then bytes 0, 0 and 3 of 2^23 (0x4B000000: selectors 4, 4, 7).
    out[i] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7440u + i)) - 8388736.0f;
  }
}

// The same four bytes times a Q8_0 scale d in F32, where d · q is exact.
__device__ __forceinline__ void q8x4_times_scale(uint32_t word, float scale, float* out) {
  int8x4_to_floats(word, out);
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] *= scale;
}

// The same four bytes times a Q8_0 scale d, as two pairs of halves (the lowest bytes in `low`),
// each d · q rounded once to F16 as F32's exact product would be: with its sign bit flipped a byte
// is b + 128, which as the low mantissa byte of 1024 (0x6400) makes the half 1024 + b + 128 (one
// byte permute a pair); one half2 subtraction leaves b exactly, and one half2 multiply rounds
// d · b. Seven instructions for four values, where the F32 route takes fourteen.
__device__ __forceinline__ void q8x4_times_scale(uint32_t word, __half2 scale, uint32_t& low,
                                                 uint32_t& high) {
  const uint32_t biased = word ^ 0x80808080u;
  const __half2 offset = __half2half2(__ushort_as_half(0x6480));  // 1152 = 1024 + 128
  // Bytes 0 and 1 (then 2 and 3) of the word, each under byte 0x64 of the second operand.
  const uint32_t pairs[2] = {__byte_perm(biased, 0x64646464u, 0x4140u),
                             __byte_perm(biased, 0x64646464u, 0x4342u)};
  uint32_t out[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    __half2 pair;
    memcpy(&pair, &pairs[i], sizeof pair);
    const __half2 product = __hmul2(__hsub2(pair, offset), scale);
    memcpy(&out[i], &product, sizeof product);
  }
  low = out[0];
  high = out[1];
}

// Eight values d · q of a Q8_0 block (their quants in two words, the lowest byte first) as a
// 16-byte pack of F16 or BF16, each rounded once, as dequantize_q8_0 rounds d · q: F16 in half2
// arithmetic (above), BF16 through F32, where d · q is exact (its 8 mantissa bits cannot hold
// 1152 + q).
template <class T>
__device__ __forceinline__ uint4 q8x8_times_scale(uint32_t low_word, uint32_t high_word,
                                                  __half scale) {
  static_assert(sizeof(T) == 2, "a pack of eight 16-bit values");
  uint4 pack;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 scales = __half2half2(scale);
    q8x4_times_scale(low_word, scales, pack.x, pack.y);
    q8x4_times_scale(high_word, scales, pack.z, pack.w);
  } else {
    float products[8];
    q8x4_times_scale(low_word, __half2float(scale), products);
    q8x4_times_scale(high_word, __half2float(scale), products + 4);
    T values[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) values[i] = from_float<T>(products[i]);
    memcpy(&pack, values, sizeof pack);
  }
  return pack;
}

// INT8 quantisation (kernels.h: quantize_int8): the level of x for the inverse 127 / largest of
// its group's largest magnitude, rounded half to even. |x| ≤ largest keeps it within ±127, so
// there is nothing to clamp; a group without a finite largest has inverse 0 and levels 0.
__device__ __forceinline__ int int8_level(float x, float inverse) {
  return __float2int_rn(x * inverse);
}

// The low bytes of four levels as one word, a's first.
__device__ __forceinline__ uint32_t int8_word(int a, int b, int c, int d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// ---- Packs ------------------------------------------------------------------------------------
//
// A pack of N consecutive values moves in one load or store of this raw type, which is why
// launchers only pick packs of more than one value when every pointer is aligned to the pack.
template <int kBytes>
struct Raw;
template <>
struct Raw<2> {
  using type = unsigned short;
};
template <>
struct Raw<4> {
  using type = unsigned int;
};
template <>
struct Raw<8> {
  using type = uint2;
};
template <>
struct Raw<16> {
  using type = uint4;
};

template <int N, class T>
__device__ __forceinline__ void load_pack(const T* source, float (&out)[N]) {
  using R = typename Raw<static_cast<int>(N * sizeof(T))>::type;
  const R raw = *reinterpret_cast<const R*>(source);
  T values[N];
  memcpy(values, &raw, sizeof raw);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float(values[i]);
}

template <int N, class T>
__device__ __forceinline__ void store_pack(const float (&in)[N], T* target) {
  using R = typename Raw<static_cast<int>(N * sizeof(T))>::type;
  T values[N];
#pragma unroll
  for (int i = 0; i < N; ++i) values[i] = from_float<T>(in[i]);
  R raw;
  memcpy(&raw, values, sizeof raw);
  *reinterpret_cast<R*>(target) = raw;
}

// The pack of a vector that may be absent (a bias): its values from `first` on, or zeros when
// `vector` is null.
template <int N, class T>
__device__ __forceinline__ void load_pack_or_zeros(const T* vector, int64_t first,
                                                   float (&out)[N]) {
  if (vector != nullptr) {
    load_pack(vector + first, out);
    return;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = 0.0f;
}

// Values in a 16-byte pack: the widest single load.
template <class T>
constexpr int kWidePack = static_cast<int>(16 / sizeof(T));
// ---- Launch shapes ----------------------------------------------------------------------------

// The launch attribute that groups a grid's CTAs into thread-block clusters of `cluster_x` along x.
inline cudaLaunchAttribute cluster_attribute(unsigned cluster_x) {
  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = cluster_x;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  return cluster;
}

// Launches `kernel` over `grid`, `shared_bytes` of dynamic shared memory a block, in thread-block
// clusters of `cluster_x` CTAs along x (1: no clusters); `what` names it in errors. With
// `early_start`, as a programmatic dependent of the kernel before it: its blocks may start once
// that kernel's have all called allow_dependent_kernels, and must wait_for_prerequisite_kernels
// before they read what it writes.
template <class... Parameters, class... Arguments>
void launch_kernel(void (*kernel)(Parameters...), dim3 grid, dim3 block, size_t shared_bytes,
                   unsigned cluster_x, bool early_start, cudaStream_t stream, const char* what,
                   Arguments&&... arguments) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2] = {};
  unsigned count = 0;
  if (cluster_x > 1) attributes[count++] = cluster_attribute(cluster_x);
  if (early_start) {
    cudaLaunchAttribute& dependent = attributes[count++];
    dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    dependent.val.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = attributes;
  config.numAttrs = count;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Arguments>(arguments)...), what);
  check_launch(what);
}

// Raises a kernel's dynamic shared memory limit past the default 48 KiB to `bytes`; a launcher
// calls it once per kernel (a static), with the most any of its launches asks for.
template <class... Parameters>
void allow_shared_memory(void (*kernel)(Parameters...), size_t bytes, const char* what) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes)),
        what);
}

inline bool aligned(const void* pointer, size_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

// Whether rows of `cols` values starting at each pointer (null ones are skipped) can move in
// packs of `pack` values.
inline bool packable(int64_t cols, int pack, size_t element_bytes,
                     std::initializer_list<const void*> pointers) {
  if (cols % pack != 0) return false;
  for (const void* pointer : pointers) {
    if (pointer != nullptr && !aligned(pointer, pack * element_bytes)) return false;
  }
  return true;
}

// Grid-stride loops past these sizes, so that any shape launches.
constexpr int64_t kMaxBlocksX = 4096;
constexpr int64_t kMaxBlocksY = 65535;

// Row-wise kernels: threads along x cover a row's packs, blocks along y cover rows.
struct RowLaunch {
  dim3 grid, block;
};

inline RowLaunch row_launch(int64_t rows, int64_t packs) {
  const int64_t threads = std::clamp<int64_t>(ceil_div(packs, 32) * 32, 32, 256);
  const int64_t blocks_x = std::min(ceil_div(packs, threads), kMaxBlocksX);
  const int64_t blocks_y = std::min(rows, kMaxBlocksY);
  return {dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y)),
          dim3(static_cast<unsigned>(threads))};
}

// Flat kernels: one grid-stride loop over `count` items.
inline unsigned flat_blocks(int64_t count, int threads) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(count, threads), 1, kMaxBlocksX * 16));
}

// Grid-stride loops: over rows (grid y), over a row's packs (grid x), and over flat indices.
#define HARK_ROW_LOOP(row, rows) for (int64_t row = blockIdx.y; row < (rows); row += gridDim.y)
#define HARK_PACK_LOOP(pack, packs)                                                                \
  for (int64_t pack = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; pack < (packs); \
       pack += static_cast<int64_t>(blockDim.x) * gridDim.x)
#define HARK_FLAT_LOOP(i, count)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

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

// The sum (or, with kMaximum, the maximum) over the first `warps` warps of a block, returned to
// each of their threads; `sync` synchronises those warps. `scratch` holds a float a warp (32 at
// most); the closing barrier lets the next call reuse it.
template <bool kMaximum, class Sync>
__device__ __forceinline__ float block_reduce(float value, float* scratch, int warps, Sync sync) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  value = kMaximum ? warp_max(value) : warp_sum(value);
  if (lane == 0) scratch[warp] = value;
  sync();
  const float none = kMaximum ? -INFINITY : 0.0f;
  float total = lane < warps ? scratch[lane] : none;
  total = kMaximum ? warp_max(total) : warp_sum(total);
  sync();
  return total;
}
// The same over the whole block, whose size is a multiple of 32.
template <bool kMaximum>
__device__ __forceinline__ float block_reduce(float value, float* scratch) {
  return block_reduce<kMaximum>(value, scratch, blockDim.x / 32, [] { __syncthreads(); });
}
__device__ __forceinline__ float block_sum(float value, float* scratch) {
  return block_reduce<false>(value, scratch);
}
__device__ __forceinline__ float block_max(float value, float* scratch) {
  return block_reduce<true>(value, scratch);
}

// A layer norm's statistics of a row of `width` values that a group of threads holds in
// registers, kPacks packs of kValues each a thread: pack i is this thread's where held(i), zeros
// elsewhere; `sum` adds a float over the group. F32, in two passes over the registers (the mean,
// then the squares about it), as every layer norm here computes them.
struct RowStatistics {
  float mean, inverse;  // inverse: 1 / √(variance + eps)
};
template <int kPacks, int kValues, class Held, class Sum>
__device__ __forceinline__ RowStatistics row_statistics(const float (&values)[kPacks][kValues],
                                                        Held held, float width, float eps,
                                                        Sum sum) {
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kPacks; ++i) {
#pragma unroll
    for (int j = 0; j < kValues; ++j) total += values[i][j];
  }
  const float mean = sum(total) / width;
  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < kPacks; ++i) {
    if (!held(i)) continue;
#pragma unroll
    for (int j = 0; j < kValues; ++j) {
      const float centred = values[i][j] - mean;
      squares = fmaf(centred, centred, squares);
    }
  }
  return {mean, 1.0f / sqrtf(sum(squares) / width + eps)};
}

// A barrier for `threads` threads (whole warps) on barrier `id` (1…15; 0 is __syncthreads).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
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
