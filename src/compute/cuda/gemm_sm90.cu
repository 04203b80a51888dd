// Hopper products with the activation, or the INT8 quantisation, in the epilogue (gemm_sm90.h).
// Compiled for sm_90a only (CMakeLists.txt): wgmma and the tensor memory accelerator (TMA) exist
// in no portable target.
//
// One persistent CTA per SM walks output tiles of 128 × 128 (in groups of row bands: see
// tile_origin). Three warpgroups share it:
//   - the producer (one thread) copies 128 × 64 tiles of x and of w into a ring of kStages
//     shared-memory stages with TMA, in the 128-byte swizzled layout that wgmma reads without
//     bank conflicts, each stage's arrival counted by its "full" barrier, tile after tile;
//   - two consumer warpgroups take the CTA's tiles in turn (ping-pong). A consumer multiplies a
//     stage with two wgmma.m64n128k16 per 16 values of k (F32 accumulators: 128 registers a
//     thread), frees it through its "empty" barrier, and after the last stage of its tile adds
//     the bias, applies the activation, rounds, and writes 64 × 64 boxes of the result into
//     shared memory, which TMA stores to global memory while the warpgroup goes on (or
//     quantises its rows' groups and stores the bytes itself: Int8Output).
// The epilogue is what decides the speed. The products alone run at cuBLASLt's rate (890
// TFLOP/s on 16,000 × 1024 × 4096 on an H200, 151 µs); with both consumers on one 128 × 256
// tile (each 64 rows), the tensor cores waited for every epilogue: 238 µs storing straight from
// registers (4-byte pieces of 8 rows a warp), 173 through shared memory and TMA. Taking tiles
// in turn, one consumer's products run while the other stores: 169 µs with SiLU, against 195
// for the cooperative 128 × 256 version and 175 for cuBLASLt without any activation (the same
// call, `hark bench --device cuda --products`).
#include "compute/cuda/gemm_sm90.h"

#include <algorithm>

#include "base/error.h"
#include "compute/cuda/activation.cuh"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/hopper.cuh"

namespace hark::compute::cuda {

namespace {

using namespace hopper;

constexpr int kTileRows = 128;  // a consumer's tile: two wgmma of 64 rows
constexpr int kTileCols = 128;
constexpr int kTileDepth = 64;  // 64 16-bit values: one 128-byte row of the swizzle
constexpr int kStages = 6;
constexpr int kThreads = 384;  // the producer warpgroup, then the two consumers
constexpr int kStageXBytes = kTileRows * kTileDepth * 2;
constexpr int kStageWBytes = kTileCols * kTileDepth * 2;
constexpr int kStageBytes = kStageXBytes + kStageWBytes;
// The epilogue's boxes: 64 rows × 64 columns (128 bytes, the swizzle's row), two per consumer so
// that one fills while TMA still reads the other.
constexpr int kBoxCols = 64;
constexpr int kBoxBytes = 64 * kBoxCols * 2;
static_assert(kTileDepth == 64 && kBoxCols == 64, "row_major_map's boxes are 64 values wide");
constexpr int kOutputBytes = 2 * 2 * kBoxBytes;
static_assert(2 * kQuantizedGroup == kTileCols, "Int8Output: a consumer's tile holds two groups");
// The stages, the boxes, the barriers (full and empty per stage, the consumers' two turns), and
// room to align the stages to the swizzle's 1024-byte period: 225 KB of the 227 an SM gives a
// CTA.
constexpr int kBarriers = 2 * kStages + 2;
constexpr int kSharedBytes = kStages * kStageBytes + kOutputBytes + kBarriers * 8 + 1024;
static_assert(kSharedBytes <= 227 * 1024);
// setmaxnreg: the producer gives registers back so that the consumers can hold 128
// accumulators each (40 · 128 + 232 · 256 ≤ 65,536 registers of an SM).
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;

// Where a tile's results go (the kernel's Output):
//   ElementOutput: activated and rounded to the element type, [m, n] row-major through TMA
//     stores of 64 × 64 boxes;
//   Int8Output: rounded to the element type, then quantised to INT8 per group of 64 columns of a
//     row as quantize_int8 does (kernels.h), written group-major in blocks of block_rows rows
//     (group_major_strides) by each thread's own 16-byte stores.
struct ElementOutput {
  CUtensorMap map;
};

struct Int8Output {
  int8_t* q;
  float* scales;
  int64_t block_rows, groups_per_row;
};

// The epilogue, ElementOutput: bias, activation, one rounding, then the tile goes out as four
// boxes of 64 × 64 (two halves of rows, two of columns). A box is written in the 128-byte swizzle
// that the store's tensor map names (16-byte piece p of row r at p ^ (r % 8)): the eight rows a
// warp writes at once then fall in distinct banks.
template <class T, Activation kAct>
__device__ __forceinline__ void store_tile(const ElementOutput& out, const float (&d)[2][64],
                                           const T* bias, int row, int col, int /*m*/, int consumer,
                                           int thread, uint8_t* boxes) {
  const int warp = thread / 32, lane = thread % 32;
  const int box_row = warp * 16 + lane / 4;  // and box_row + 8; box_row % 8 == lane / 4
#pragma unroll
  for (int box = 0; box < 4; ++box) {
    const int half = box / 2, box_col = box % 2;
    uint8_t* target = boxes + (consumer * 2 + box % 2) * kBoxBytes;
    // The box written two boxes ago from this buffer must have been read by its store.
    if (thread == 0) tma_store_wait_read<1>();
    warpgroup_sync(1 + consumer);
#pragma unroll
    for (int piece = 0; piece < kBoxCols / 8; ++piece) {
      const int j = box_col * (kBoxCols / 8) + piece;  // the accumulators' 8-column group
      const int column = col + 8 * j + 2 * (lane % 4);
      const float bias0 = bias != nullptr ? to_float(bias[column]) : 0.0f;
      const float bias1 = bias != nullptr ? to_float(bias[column + 1]) : 0.0f;
      const int slot = ((piece ^ (lane / 4)) * 16) + 4 * (lane % 4);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        *reinterpret_cast<uint32_t*>(target + (box_row + 8 * i) * 128 + slot) =
            pack_pair<T>(activated<kAct>(d[half][4 * j + 2 * i] + bias0),
                         activated<kAct>(d[half][4 * j + 2 * i + 1] + bias1));
      }
    }
    fence_shared_for_tma();
    warpgroup_sync(1 + consumer);
    if (thread == 0) {
      tma_store(&out.map, target, col + box_col * kBoxCols, row + half * 64);
      tma_store_commit();
    }
  }
}

// One of 4 words by an index that differs between lanes, without local memory.
__device__ __forceinline__ uint32_t pick(const uint32_t (&words)[4], int index) {
  return index == 0 ? words[0] : index == 1 ? words[1] : index == 2 ? words[2] : words[3];
}

// The epilogue, Int8Output. A row's 64 columns of a group lie with the four lanes of a quad (8
// pairs each, 8 columns apart): the quad's largest magnitude by two shuffles, then lane p's word
// w holds its quantised pairs 2w and 2w + 1, the 4 bytes that lane w stores among its 16
// (columns 16w to 16w + 15: pair 2w of lanes 0-3, then pair 2w + 1 of lanes 0-3). Three
// exchanges give every lane its words from the other three. Few instructions a value, since with
// k = 1,280 the other consumer's products take about as long as this: the bias loaded once a
// tile, one multiplication by the inverse (int8_level), bytes packed by permutes. (A first form
// with a division a value and the bias loaded for each took 10.2 ms for 16 large-v3 windows, this
// one about 9, cuBLASLt's product into F16 7.6.)
template <class T, Activation>
__device__ __forceinline__ void store_tile(const Int8Output& out, const float (&d)[2][64],
                                           const T* bias, int row, int col, int m, int /*consumer*/,
                                           int thread, uint8_t* /*boxes*/) {
  const int warp = thread / 32, lane = thread % 32, quad_lane = lane % 4;
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    // The bias of this lane's pairs of group g: pair p at column 8 (8g + p) + 2 quad_lane.
    float2 bias_pairs[8];
#pragma unroll
    for (int pair = 0; pair < 8; ++pair) {
      const int column = col + 8 * (8 * g + pair) + 2 * quad_lane;
      bias_pairs[pair] = bias != nullptr
                             ? unpack_pair<T>(*reinterpret_cast<const uint32_t*>(bias + column))
                             : make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = row + half * 64 + warp * 16 + lane / 4 + 8 * i;
        float2 values[8];
        float largest = 0.0f;
#pragma unroll
        for (int pair = 0; pair < 8; ++pair) {
          const int j = 8 * g + pair;
          // The element type's rounding first, as quantize_int8 reads the product's output.
          values[pair] =
              unpack_pair<T>(pack_pair<T>(d[half][4 * j + 2 * i] + bias_pairs[pair].x,
                                          d[half][4 * j + 2 * i + 1] + bias_pairs[pair].y));
          largest = fmaxf(largest, fmaxf(fabsf(values[pair].x), fabsf(values[pair].y)));
        }
        largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, 1));
        largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, 2));
        const float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
        uint32_t words[4];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const float2 a = values[2 * w], b = values[2 * w + 1];
          words[w] = int8_word(int8_level(a.x, inverse), int8_level(a.y, inverse),
                               int8_level(b.x, inverse), int8_level(b.y, inverse));
        }
        // from[x]: the word of lane quad_lane ^ x meant for this lane.
        uint32_t from[4];
        from[0] = pick(words, quad_lane);
#pragma unroll
        for (int x = 1; x < 4; ++x) {
          from[x] = __shfl_xor_sync(0xffffffffu, pick(words, quad_lane ^ x), x);
        }
        const uint32_t w0 = pick(from, quad_lane), w1 = pick(from, quad_lane ^ 1);
        const uint32_t w2 = pick(from, quad_lane ^ 2), w3 = pick(from, quad_lane ^ 3);
        if (r < m) {
          const int64_t block = r / out.block_rows, block_row = r % out.block_rows;
          const int64_t group = col / kQuantizedGroup + g;
          const int64_t run = (block * out.groups_per_row + group) * out.block_rows + block_row;
          const uint4 bytes{__byte_perm(w0, w1, 0x5410), __byte_perm(w2, w3, 0x5410),
                            __byte_perm(w0, w1, 0x7632), __byte_perm(w2, w3, 0x7632)};
          *reinterpret_cast<uint4*>(out.q + run * kQuantizedGroup + 16 * quad_lane) = bytes;
          if (quad_lane == 0) out.scales[run] = largest / 127.0f;
        }
      }
    }
  }
}

// The order of the output tiles: bands of kBandGroup × 128 rows, each swept column tile by
// column tile, the band group's row tiles of one column consecutive. The CTAs at work at once
// (one tile each) then read a few row tiles of x and a few column tiles of w, which stay in the
// L2 cache until the group has used them: w is read from memory once per band group whatever its
// size. Sweeping a single band of rows instead read all of w once per 128 rows, from memory once
// w outgrows the cache (the INT8 cross-attention K/V product's: 81,920 × 1,280, 210 MB).
constexpr int kBandGroup = 16;

struct TileOrigin {
  int row, col;
};

__device__ __forceinline__ TileOrigin tile_origin(int tile, int tiles_m, int tiles_n) {
  const int group_tiles = kBandGroup * tiles_n;
  const int first_band = tile / group_tiles * kBandGroup;
  const int bands = min(kBandGroup, tiles_m - first_band);
  const int in_group = tile % group_tiles;
  return {(first_band + in_group % bands) * kTileRows, in_group / bands * kTileCols};
}

template <class T, Activation kAct, class Output>
__global__ void __launch_bounds__(kThreads, 1)
    activation_linear_kernel(const __grid_constant__ CUtensorMap x_map,
                             const __grid_constant__ CUtensorMap w_map,
                             const __grid_constant__ Output out, const T* bias, int m, int n,
                             int k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t shared_raw[];
  // The swizzle repeats every 1024 bytes, and the descriptors assume that it starts at a stage.
  uint8_t* shared = shared_raw + ((1024 - (shared_address(shared_raw) & 1023)) & 1023);
  uint8_t* x_stages = shared;
  uint8_t* w_stages = shared + kStages * kStageXBytes;
  uint8_t* boxes = shared + kStages * kStageBytes;  // 1024-aligned: stages are multiples of it
  auto* full = reinterpret_cast<uint64_t*>(boxes + kOutputBytes);
  uint64_t* empty = full + kStages;
  uint64_t* turn = empty + kStages;  // turn[c]: consumer c's products may start (see below)

  const int tiles_m = (m + kTileRows - 1) / kTileRows, tiles_n = n / kTileCols;
  const int tiles = tiles_m * tiles_n;
  const int depth_steps = k / kTileDepth;
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);   // the producer's expect_tx; the bytes complete it
      barrier_init(&empty[s], 1);  // one thread of the consumer, once its products have read
    }
    barrier_init(&turn[0], 1);
    barrier_init(&turn[1], 1);
    barrier_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegisters));
    if (threadIdx.x != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const auto [row, col] = tile_origin(tile, tiles_m, tiles_n);
      for (int step = 0; step < depth_steps; ++step) {
        barrier_wait(&empty[stage], phase ^ 1);
        barrier_expect_bytes(&full[stage], kStageBytes);
        tma_load(x_stages + stage * kStageXBytes, &x_map, &full[stage], step * kTileDepth, row);
        tma_load(w_stages + stage * kStageWBytes, &w_map, &full[stage], step * kTileDepth, col);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegisters));
  // The CTA's tiles alternate between the consumers (ping-pong): while one runs its epilogue,
  // the other's products keep the tensor cores busy. The producer fills the stages in the CTA's
  // tile order, so a consumer finds its tile's steps at fixed places of that sequence. The
  // consumers' products also take turns (consumer 0 first; each starts a tile once the other has
  // issued its tile's last products): a consumer that skips the other's steps could otherwise
  // wait on a stage two fillings ahead, which a barrier's phase parity cannot tell from the
  // filling before.
  const int consumer = warpgroup - 1;
  const int thread = threadIdx.x % 128;
  float d[2][64];  // rows 0-63 and 64-127 of the tile
  int taken = 0;   // this consumer's tiles so far
  for (int order = consumer, tile = blockIdx.x + consumer * gridDim.x; tile < tiles;
       order += 2, tile += 2 * gridDim.x, ++taken) {
    const auto [row, col] = tile_origin(tile, tiles_m, tiles_n);
    // The other consumer arrives on turn[consumer] after each of its tiles: consumer 0 waits for
    // consumer 1's tile taken − 1, consumer 1 for consumer 0's tile taken.
    if (consumer == 1) {
      barrier_wait(&turn[1], taken & 1);
    } else if (taken > 0) {
      barrier_wait(&turn[0], (taken - 1) & 1);
    }
    // One step's products stay in flight while the next step's are issued; a stage is freed once
    // the products after it have been issued and it has been read.
    int previous = -1;
    for (int step = 0; step < depth_steps; ++step) {
      const int load = order * depth_steps + step;  // the producer's count of stages filled
      const int stage = load % kStages;
      barrier_wait(&full[stage], (load / kStages) & 1);
      const uint8_t* x_tile = x_stages + stage * kStageXBytes;
      const uint64_t a0 = operand_descriptor(x_tile), a1 = operand_descriptor(x_tile + 64 * 128);
      const uint64_t b = operand_descriptor(w_stages + stage * kStageWBytes);
      fence_registers(d[0]);
      fence_registers(d[1]);
      wgmma_fence();
#pragma unroll
      for (int slice = 0; slice < kTileDepth / 16; ++slice) {
        // 16 values further along k: 32 bytes, 2 in the descriptor's 16-byte units; the
        // hardware applies the swizzle to the address it forms.
        const int accumulate = step > 0 || slice > 0;
        wgmma_64x128x16<T>(d[0], a0 + 2 * slice, b + 2 * slice, accumulate);
        wgmma_64x128x16<T>(d[1], a1 + 2 * slice, b + 2 * slice, accumulate);
      }
      wgmma_commit();
      fence_registers(d[0]);
      fence_registers(d[1]);
      wgmma_wait<1>();
      // wgmma.wait_group is collective over the warpgroup: after it, the whole warpgroup's
      // products of the previous stage are done, and one arrival speaks for all 128 threads.
      if (previous >= 0 && thread == 0) barrier_arrive(&empty[previous]);
      previous = stage;
    }
    // Every stage of the tile has been waited for and its products issued: the other consumer's
    // turn.
    if (thread == 0) barrier_arrive(&turn[1 - consumer]);
    wgmma_wait<0>();
    fence_registers(d[0]);
    fence_registers(d[1]);
    if (previous >= 0 && thread == 0) barrier_arrive(&empty[previous]);

    store_tile<T, kAct>(out, d, bias, row, col, m, consumer, thread, boxes);
  }
  // Shared memory must outlive the stores that read it.
  if (thread == 0) tma_store_wait_read<0>();
#else
  // Built for a GPU without wgmma: activation_linear_runs refuses every call.
  (void)bias, (void)m, (void)n, (void)k;
#endif
}

// ---- Host side ----

template <class T, Activation kAct, class Output>
void launch(const void* x, int64_t m, int64_t k, const void* w, int64_t n, const void* bias,
            const Output& out, Element e, cudaStream_t stream) {
  static const bool configured =
      (allow_shared_memory(activation_linear_kernel<T, kAct, Output>, kSharedBytes,
                           "activation_linear shared memory"),
       true);
  (void)configured;
  const CUtensorMap x_map = row_major_map(e, x, m, k, kTileRows);
  const CUtensorMap w_map = row_major_map(e, w, n, k, kTileCols);
  const int64_t tiles = (m + kTileRows - 1) / kTileRows * (n / kTileCols);
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(tiles, multiprocessor_count()));
  activation_linear_kernel<T, kAct, Output><<<blocks, kThreads, kSharedBytes, stream>>>(
      x_map, w_map, out, static_cast<const T*>(bias), static_cast<int>(m), static_cast<int>(n),
      static_cast<int>(k));
  check_launch("activation_linear");
}

// The shapes and alignments both outputs need.
bool product_runs(Element e, int64_t m, int64_t k, int64_t n, const void* x, const void* w,
                  const void* bias) {
  return hopper::present() && e != Element::f32 && m >= 1 && m <= INT32_MAX && n % kTileCols == 0 &&
         n <= INT32_MAX && k % kTileDepth == 0 && k >= kTileDepth && k <= INT32_MAX &&
         m * n <= INT64_MAX / 2 && aligned(x, 16) && aligned(w, 16) &&
         (bias == nullptr || aligned(bias, 16));
}

}  // namespace

bool activation_linear_runs(Element e, int64_t m, int64_t k, int64_t n, const void* x,
                            const void* w, const void* bias, const void* y) {
  return product_runs(e, m, k, n, x, w, bias) && aligned(y, 16);
}

void activation_linear(Element e, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                       const void* bias, Activation act, void* y, cudaStream_t stream) {
  if (!activation_linear_runs(e, m, k, n, x, w, bias, y)) {
    fail("activation_linear: a ", m, " x ", n, " x ", k,
         " product it cannot run (needs compute capability 9.0, 16-bit elements, n % 128 == 0, "
         "k % 64 == 0, 16-byte alignment)");
  }
  with_16_bit_type(e, [&](auto type) {
    using T = decltype(type);
    const ElementOutput out{row_major_map(e, y, m, n, 64)};
    with_activation(act, [&](auto kind) {
      launch<T, decltype(kind)::value>(x, m, k, w, n, bias, out, e, stream);
    });
  });
}

bool quantized_linear_runs(Element e, int64_t m, int64_t k, int64_t n, int group,
                           int64_t block_rows, const void* x, const void* w, const void* bias,
                           const int8_t* q, const float* scales) {
  return product_runs(e, m, k, n, x, w, bias) && group == kQuantizedGroup && block_rows >= 1 &&
         aligned(q, 16) && aligned(scales, 4);
}

void quantized_linear(Element e, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                      const void* bias, int group, int64_t block_rows, int8_t* q, float* scales,
                      cudaStream_t stream) {
  if (!quantized_linear_runs(e, m, k, n, group, block_rows, x, w, bias, q, scales)) {
    fail("quantized_linear: a ", m, " x ", n, " x ", k, " product in groups of ", group,
         " it cannot run (needs compute capability 9.0, 16-bit elements, groups of ",
         kQuantizedGroup, ", n % 128 == 0, k % 64 == 0, 16-byte alignment)");
  }
  const Int8Output out{q, scales, block_rows, n / kQuantizedGroup};
  with_16_bit_type(e, [&](auto type) {
    launch<decltype(type), Activation::none>(x, m, k, w, n, bias, out, e, stream);
  });
}

}  // namespace hark::compute::cuda
