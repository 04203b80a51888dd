// Cross-attention over INT8 frames (frame_attention_sm90.h) on wgmma.
//
// frame_attention (kernels_cross_attention.cu) runs every head of a query row over one pass of
// its window's frames X: S = X · Q̃ᵀ [frames × heads], the online softmax of each head, then
// Oᵀ += Xᵀ · Pᵀ [width × heads]. Here X arrives as bytes (codes offset by 128), a 64-frame tile
// at a time through a ring of 2 stages, and both products run on wgmma:
//   - S on the integer tensor cores, straight from shared memory: codes (u8) times the queries
//     (times the channel scales) split in two signed bytes, q ≈ s₁ · hi + s₂ · lo with
//     s₂ = s₁ / 254, which keeps about 15 bits of each query value (F16 keeps 11). One
//     m64n48k32 product takes both bytes (N = 2 · 24 heads); the integer sums are exact, and the
//     codes' offset comes off as 128 · Σ hi (and lo) per head.
//   - O on the F16 tensor cores with Xᵀ as the A operand in registers: each thread loads its
//     fragments' bytes from shared memory and turns them into F16 with byte permutes (a code u
//     becomes the F16 1024 + u, exactly); B is P times the frame scales, F16, in shared memory.
//     The codes' offset, 1152 in these units, comes off at the end as 1152 · Σ P per head (the
//     sum of the F16 values the tensor cores took).
//
// A CTA of two warpgroups takes a query row and a range of frames (a split; the splits of a row
// form a cluster and merge as frame_splits.cuh does). The tiles come by TMA (one thread issues
// a tile's chunks, an mbarrier per stage counts their bytes). Per tile:
//   S: each warpgroup over half the width's 128-byte chunks (5 for large-v3), the second's
//     partial sums passed to the first through shared memory;
//   softmax: the first warpgroup scales S by the frame scales, keeps each head's running max
//     (its threads' partial sums of P stay per thread until the end) and writes P for the
//     values' product over the same shared memory, while the second waits;
//   O: each warpgroup over its half of the width's rows: 5 pairs of 64-row tiles for large-v3,
//     120 F32 accumulators a thread.
// Before the first tile the CTA quantizes its query row (quantize_query), staged in the second
// stage by one bulk copy. At batch 120 a CTA takes 24 tiles; on an H100 the launch takes
// 100-104 µs (bench/RESULTS.md, thirty-sixth session). Nsight Compute's samples of it put a
// quarter of the time in the query's quantization while its pieces came from memory one round
// trip at a time (113 µs then), and the second warpgroup waiting on the first one's softmax for
// about a tenth. With the tiles only loaded the launch took 105 µs of the 115 it took then, with
// only the products 94 (thirty-fourth session), yet issuing each tile's load as soon as its stage
// frees (two tiles in flight while the CTA waits) and a third set of O's fragments in flight
// were no faster (116 and 115 µs). A form that ran S and the softmax in a third warpgroup while
// the other two multiplied the tile before (mbarriers handing stages and two buffers of P over)
// took as long, 115-116 µs, and is in this file's history (9102331).
//
// The tile is stored as wgmma's K-major operand in the 128-byte swizzle: per 128 columns a
// [64 frames][128 bytes] block, 16-byte piece p of frame t at p ^ (t % 8). For O, 64-row tiles
// go in pairs of 128 columns (one block), and lane (g, c) of warp w holds columns 4(8w + g) .. + 3
// of the pair (one word a frame): rows 16w + g and + 8 of the pair's first tile are the first
// two, of the second tile the other two; its frames are k = 2c, 2c + 1, 2c + 8, 2c + 9 of each
// k-step, in order. A warp's 32 words then fall in 32 different banks.
#include "compute/cuda/frame_attention_sm90.h"

#include <cuda_fp16.h>

#include <cstdint>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/frame_splits.cuh"
#include "compute/cuda/hopper.cuh"
#include "compute/cuda/tensor_core.cuh"

namespace hark::compute::cuda {

namespace {

using namespace hopper;

constexpr int kTile = 64;  // frames a tile: the M of the score product
constexpr int kStages = 2;
constexpr int kHeads = 24;  // N of O's product and of each byte of S's: the heads, padded
static_assert(kHeads == kMaxFrameHeads);
constexpr int kMaxWidth = 1280;
constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kMaxPairs = kMaxWidth / 128 / kWarpgroups;   // pairs of 64-row O tiles a warpgroup
constexpr int kOperandRowBytes = 128;                      // the 128-byte swizzle's rows
constexpr int kTileChunkBytes = kTile * kOperandRowBytes;  // 128 columns of a tile's frames
constexpr int kQueryChunkBytes = 2 * kHeads * kOperandRowBytes;  // 128 columns of hi and lo
constexpr int kProbabilityBytes = kHeads * kTile * 2;            // P: F16 [24 heads][64 frames]
constexpr int kExchangeBytes = kTile * kHeads * 4;               // S's partial sums F32, then P
static_assert(kProbabilityBytes <= kExchangeBytes);
constexpr int kStatsBytes = 1024;     // barriers, maxima, rescales, the queries' scales (Stats)
constexpr float kLazyRescale = 8.0f;  // in log2 units (write_probabilities)
constexpr float kCodeBias = 1152.0f;  // 1024 + 128

// Shared memory: the queries (B of S: width / 128 chunks of [48 rows: hi of 24 heads, then lo]
// [128 bytes] in the 128-byte swizzle), the exchange (above; P is B of O: [24 heads][64 frames]
// F16, swizzled), the stats and the two stages of byte tiles (A of S: width / 128 chunks of [64
// frames][128 bytes], swizzled). After the last tile, the stages hold the unnormalised output
// F32 [24][width + 4] and the queries' space the finals (Finals).
struct Layout {
  int queries, exchange, stats, tiles, bytes;
  __host__ __device__ static constexpr Layout of(int width) {
    Layout l{};
    l.queries = 0;
    l.exchange = l.queries + width / 128 * kQueryChunkBytes;  // a multiple of 1024, as B must start
    l.stats = l.exchange + kExchangeBytes;
    l.tiles = l.stats + kStatsBytes;
    l.bytes = l.tiles + kStages * kTile * width;
    return l;
  }
};
static_assert(Layout::of(kMaxWidth).bytes <= 227 * 1024, "shared memory of one CTA");
static_assert(kHeads * (kMaxWidth + 4) * 4 <= kStages * kTile * kMaxWidth, "output in the stages");

// The stats' space: a barrier per stage (its tile is in), one for the query row and its window's
// channel scales (staged in the second stage before its first tile), each of the softmax's warps'
// maxima of a tile (until the first tile, the query's byte sums: each head's Σ hi and Σ lo per half
// of the width), the tile's rescale factors and whether any is not 1, and each head's s₁.
struct Stats {
  uint64_t* tile_full;
  uint64_t* query_full;
  float* warp_max;     // [4][kHeads]
  int* byte_sums;      // [2][kHeads][2], in warp_max's place
  float* rescale;      // [kHeads]
  int* rescaled;       // [1]
  float* query_scale;  // [kHeads]
  __device__ static Stats at(unsigned char* base) {
    Stats s;
    s.tile_full = reinterpret_cast<uint64_t*>(base);
    s.query_full = s.tile_full + kStages;
    s.warp_max = reinterpret_cast<float*>(s.query_full + 1);
    s.byte_sums = reinterpret_cast<int*>(s.warp_max);
    s.rescale = s.warp_max + 4 * kHeads;
    s.rescaled = reinterpret_cast<int*>(s.rescale + kHeads);
    s.query_scale = reinterpret_cast<float*>(s.rescaled + 1);
    return s;
  }
};
static_assert(8 * (kStages + 1) + 4 * (4 * kHeads + kHeads + 1 + kHeads) <= kStatsBytes);
static_assert(2 * kHeads * 2 <= 4 * kHeads, "the byte sums fit where the warps' maxima go");

// The finals, in the queries' space once the last tile's S is done: each head's max, sum and
// codes' offset, the merge's coefficients, and the softmax warps' sums of P on their way.
struct Finals {
  float *max, *sum, *offset, *coefficients;
  float* warp_sums;  // [2][4][kHeads]: P, and P times the frame scales
  __device__ static Finals at(unsigned char* queries) {
    float* const f = reinterpret_cast<float*>(queries);
    return {f, f + kMaxFrameHeads, f + 2 * kMaxFrameHeads, f + 3 * kMaxFrameHeads,
            f + (3 + kMaxFrameSplits) * kMaxFrameHeads};
  }
};
static_assert(4 * (3 + kMaxFrameSplits) * kMaxFrameHeads + 4 * 2 * 4 * kHeads <= kQueryChunkBytes);

// Where a CTA works: its query row, the row's window and its scales, and its split's tiles.
struct Place {
  int64_t row;
  int window;
  const float *frame_scales, *channel_scales;
  int tile_begin, tile_end;
};
__device__ __forceinline__ Place place_of(const Int8Frames& frames, int rows_per_window,
                                          int frame_count, int width) {
  Place p;
  const int splits = gridDim.x, split = blockIdx.x;
  p.row = blockIdx.z;
  p.window = frames.windowed ? static_cast<int>(p.row / rows_per_window) : 0;
  p.frame_scales = frames.frame_scales + p.window * frame_count;
  p.channel_scales = frames.channel_scales + p.window * width;
  const int tile_count = (frame_count + kTile - 1) / kTile;
  const int tiles_per_split = (tile_count + splits - 1) / splits;
  p.tile_begin = min(tile_count, split * tiles_per_split);
  p.tile_end = min(tile_count, p.tile_begin + tiles_per_split);
  return p;
}

__device__ __forceinline__ uint32_t load_word(const unsigned char* shared) {
  return *reinterpret_cast<const uint32_t*>(shared);
}

// Two bytes of `bytes` (0 and 1, or 2 and 3: selector 0x4140 or 0x4342) as the F16 pair
// 1024 + u of their codes u: the byte goes under the exponent of 1024, whose units are 1. The
// codes stand for u − 128, so each product's sum is 1152 · Σ P too many (taken off at the end).
__device__ __forceinline__ uint32_t biased_pair(uint32_t bytes, uint32_t selector) {
  return __byte_perm(bytes, 0x64646464u, selector);
}
constexpr uint32_t kLowPair = 0x4140, kHighPair = 0x4342;

// d += a · bᵀ for a 64 × 16 tile a in registers (the A fragment of wgmma_64x64x16_registers) and
// a 24 × 16 tile b, K-major in shared memory (its descriptor). Thread t of the warpgroup holds
// d[4j + 2i + c] at row 16·(t / 32) + (t % 32) / 4 + 8i, column 8j + 2·(t % 4) + c.
__device__ __forceinline__ void wgmma_64x24x16(float (&d)[12], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, %16, 1, 1, 1, "
      "0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

// d += a · bᵀ for a 64 × 32 tile a of bytes (u8) and a 48 × 32 tile b of signed bytes, both
// K-major in shared memory (descriptors); d as in wgmma_64x24x16 with 6 column groups j.
__device__ __forceinline__ void wgmma_64x48x32_bytes(int (&d)[24], uint64_t a, uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n48k32.s32.u8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23}, %24, %25, 1;\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]),
        "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]),
        "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]),
        "+r"(d[21]), "+r"(d[22]), "+r"(d[23])
      : "l"(a), "l"(b));
}

// The descriptor unit is 16 bytes: a k-step (16 F16 values or 32 bytes) is 2 units on; chunks
// of the tile and of the queries 512 and 384.
constexpr uint64_t kStepUnits = 32 / 16;
constexpr uint64_t kTileChunkUnits = kTileChunkBytes / 16, kQueryChunkUnits = kQueryChunkBytes / 16;

// A tile by TMA into a stage (kTile · width bytes), its 128-byte chunks of columns one box each
// (frames past the window's end arrive as zeros); `full` counts its bytes.
__device__ __forceinline__ void load_tile(const CUtensorMap* codes_map, unsigned char* target,
                                          uint64_t* full, int width, int tile, int window) {
  barrier_expect_bytes(full, static_cast<uint32_t>(kTile * width));
  for (int chunk = 0; chunk < width / 128; ++chunk) {
    tma_load(target + chunk * kTileChunkBytes, codes_map, full, chunk * 128, tile * kTile, window);
  }
}

// The query row and its window's channel scales, copied by thread 0 into `staging` (the second
// stage, free until the loop asks for the second tile): one round trip to memory instead of one
// per piece of the query (at batch 120 the pieces' round trips took a quarter of the kernel:
// bench/RESULTS.md, thirty-sixth session).
__device__ __forceinline__ void stage_query(const __half* query, const float* channel_scales,
                                            int heads, int width, unsigned char* staging,
                                            uint64_t* full) {
  const uint32_t query_bytes = static_cast<uint32_t>(heads * width * 2);
  barrier_expect_bytes(full, query_bytes + static_cast<uint32_t>(width * 4));
  bulk_load(staging, query, query_bytes, full);
  bulk_load(staging + query_bytes, channel_scales, static_cast<uint32_t>(width * 4), full);
}

// The staged query row times the channel scales as two signed bytes a value (above), into the
// queries' chunks: warp w takes heads w, w + 8 and w + 16 (kHeads = 24: three each, the padding
// heads' bytes zero), its lanes 16 columns at a time. First each head's largest magnitude (its
// s₁ = largest / 127), then the bytes, with each head's Σ hi and Σ lo over the first
// `first_chunks` chunks and over the rest. Every thread of the CTA calls it; it ends with the
// CTA synchronised and the chunks visible to wgmma.
__device__ __forceinline__ void quantize_query(const unsigned char* staging, int heads, int width,
                                               int first_chunks, unsigned char* query_chunks,
                                               const Stats& stats) {
  static_assert(kHeads == 3 * kThreads / 32, "three heads a warp");
  const __half* const query = reinterpret_cast<const __half*>(staging);
  const float* const channel_scales = reinterpret_cast<const float*>(staging + heads * width * 2);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, pieces = width / 16;
  const auto scaled_query = [&](int h, int column, float(&values)[16]) {
    __half raw[16];
    *reinterpret_cast<uint4*>(raw) = *reinterpret_cast<const uint4*>(query + h * width + column);
    *reinterpret_cast<uint4*>(raw + 8) =
        *reinterpret_cast<const uint4*>(query + h * width + column + 8);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 scales = *reinterpret_cast<const float4*>(channel_scales + column + 4 * q);
      values[4 * q] = __half2float(raw[4 * q]) * scales.x;
      values[4 * q + 1] = __half2float(raw[4 * q + 1]) * scales.y;
      values[4 * q + 2] = __half2float(raw[4 * q + 2]) * scales.z;
      values[4 * q + 3] = __half2float(raw[4 * q + 3]) * scales.w;
    }
  };
#pragma unroll 1
  for (int h = warp; h < kHeads; h += kThreads / 32) {
    float largest = 0.0f;
    if (h < heads) {
      for (int piece = lane; piece < pieces; piece += 32) {
        float values[16];
        scaled_query(h, piece * 16, values);
#pragma unroll
        for (int j = 0; j < 16; ++j) largest = fmaxf(largest, fabsf(values[j]));
      }
#pragma unroll
      for (int mask = 16; mask > 0; mask /= 2) {
        largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, mask));
      }
    }
    const float high_step = largest > 0.0f ? largest / 127.0f : 1.0f;
    // Multiplications by the steps' reciprocals: the bytes are an approximation of the query
    // to half a step either way, and a division's exact rounding buys nothing there.
    const float per_high = 1.0f / high_step, per_low = 254.0f * per_high;
    int hi_sums[2] = {0, 0}, lo_sums[2] = {0, 0};
    for (int piece = lane; piece < pieces; piece += 32) {
      const int column = piece * 16;
      uint32_t hi[4] = {0u, 0u, 0u, 0u}, lo[4] = {0u, 0u, 0u, 0u};
      if (h < heads) {
        float values[16];
        scaled_query(h, column, values);
        int hi_sum = 0, lo_sum = 0;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const float high = rintf(values[j] * per_high);
          const float low =
              fminf(fmaxf(rintf((values[j] - high * high_step) * per_low), -127.0f), 127.0f);
          hi_sum += static_cast<int>(high);
          lo_sum += static_cast<int>(low);
          hi[j / 4] |= (static_cast<uint32_t>(static_cast<int>(high)) & 0xFFu) << (8 * (j % 4));
          lo[j / 4] |= (static_cast<uint32_t>(static_cast<int>(low)) & 0xFFu) << (8 * (j % 4));
        }
        // Registers, not an array indexed at run time (which would live in local memory).
        const bool first_half = column / 128 < first_chunks;
        hi_sums[0] += first_half ? hi_sum : 0;
        hi_sums[1] += first_half ? 0 : hi_sum;
        lo_sums[0] += first_half ? lo_sum : 0;
        lo_sums[1] += first_half ? 0 : lo_sum;
      }
      unsigned char* const chunk = query_chunks + (column / 128) * kQueryChunkBytes;
      const int at = column % 128 / 16;
      *reinterpret_cast<uint4*>(chunk + h * kOperandRowBytes + ((at ^ (h & 7)) * 16)) =
          make_uint4(hi[0], hi[1], hi[2], hi[3]);
      const int low_row = kHeads + h;
      *reinterpret_cast<uint4*>(chunk + low_row * kOperandRowBytes + ((at ^ (low_row & 7)) * 16)) =
          make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int mask = 16; mask > 0; mask /= 2) {
        hi_sums[half] += __shfl_xor_sync(0xffffffffu, hi_sums[half], mask);
        lo_sums[half] += __shfl_xor_sync(0xffffffffu, lo_sums[half], mask);
      }
    }
    if (lane == 0) {
      stats.query_scale[h] = largest;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        stats.byte_sums[(half * kHeads + h) * 2] = hi_sums[half];
        stats.byte_sums[(half * kHeads + h) * 2 + 1] = lo_sums[half];
      }
    }
  }
  fence_shared_for_tma();
  __syncthreads();
}

// Lane (g, c) holds, in the accumulator layout of wgmma_64x24x16, six heads 8j + 2c + e: head
// `index` 2j + e of the lane, and its element k (4j + 2i + e) is of the lane's head 2j + e.
__device__ __forceinline__ int lane_head(int index, int c) {
  return 8 * (index / 2) + 2 * c + index % 2;
}
__device__ __forceinline__ int head_index_of_element(int k) {
  return 2 * (k / 4) + k % 2;
}

// The lane's six heads 8j + 2c + e (index 2j + e): their s₁, and 128 Σ hi and 128 Σ lo over
// half `half` of the width, the codes' offset of S over that half's chunks.
struct LaneQuery {
  float high_steps[6];
  int hi_offsets[6], lo_offsets[6];
};
__device__ __forceinline__ LaneQuery lane_query(const Stats& stats, int c, int half) {
  LaneQuery q;
#pragma unroll
  for (int k = 0; k < 6; ++k) {
    const int h = lane_head(k, c);
    const float largest = stats.query_scale[h];
    q.high_steps[k] = largest > 0.0f ? largest / 127.0f : 1.0f;
    q.hi_offsets[k] = 128 * stats.byte_sums[(half * kHeads + h) * 2];
    q.lo_offsets[k] = 128 * stats.byte_sums[(half * kHeads + h) * 2 + 1];
  }
  return q;
}

// S over chunks [first_chunk, first_chunk + chunk_count) of a tile: hi and lo of every head at
// once, in integers, then s₁ (hi − 128 Σ hi) + s₂ (lo − 128 Σ lo) per head (the codes' offset
// off), into the lane's scores (index 4j + 2i + e: frame 16 warp + g + 8i, head 8j + 2c + e).
__device__ __forceinline__ void score_chunks(const unsigned char* tile_bytes,
                                             const unsigned char* query_chunks, int first_chunk,
                                             int chunk_count, const LaneQuery& q,
                                             float (&scores)[12]) {
  int sums[24];
#pragma unroll
  for (int k = 0; k < 24; ++k) sums[k] = 0;
  fence_registers(sums);
  wgmma_fence();
  const uint64_t x_descriptor = operand_descriptor(tile_bytes);
  const uint64_t query_descriptor = operand_descriptor(query_chunks);
  for (int chunk = first_chunk; chunk < first_chunk + chunk_count; ++chunk) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      wgmma_64x48x32_bytes(sums, x_descriptor + chunk * kTileChunkUnits + k * kStepUnits,
                           query_descriptor + chunk * kQueryChunkUnits + k * kStepUnits);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(sums);
#pragma unroll
  for (int k = 0; k < 12; ++k) {
    const int head = head_index_of_element(k);
    scores[k] = q.high_steps[head] * static_cast<float>(sums[k] - q.hi_offsets[head]) +
                q.high_steps[head] * (1.0f / 254.0f) *
                    static_cast<float>(sums[k + 12] - q.lo_offsets[head]);
  }
}

// Visits the lane's scores: index 4j + 2i + e, at frame 16 warp + g + 8i of the tile, of head
// 8j + 2c + e (the lane's head 2j + e).
template <class Visit>
__device__ __forceinline__ void for_each_score(int c, Visit visit) {
#pragma unroll
  for (int j = 0; j < 3; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) visit(4 * j + 2 * i + e, i, 2 * j + e, 8 * j + 2 * c + e);
    }
  }
}

// The frame scales of a tile's rows 16 warp + g and + 8 (0 past the frames).
__device__ __forceinline__ void load_frame_scales(const Place& place, int frame_count, int tile,
                                                  int warp, int g, float (&frame_scale)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int frame = tile * kTile + 16 * warp + g + 8 * i;
    frame_scale[i] = frame < frame_count ? place.frame_scales[frame] : 0.0f;
  }
}

// The softmax's state for the lane's six heads (index 2j + e): the running max (in log2 units),
// and per thread until the end, the sum of P and of P times the frame scales as the tensor cores
// take them (F16).
struct Softmax {
  float running_max[6], partial_sum[6], scaled_sum[6];
  __device__ Softmax() {
#pragma unroll
    for (int k = 0; k < 6; ++k) running_max[k] = -INFINITY, partial_sum[k] = scaled_sum[k] = 0.0f;
  }
};

// A tile's scores scaled by the frames' scales (the codes' 1/127 too) and log2(e), for exp2
// (frames past the end score −inf), and each warp's maxima of them into warp_max.
__device__ __forceinline__ void tile_maxima(float (&scores)[12], const float (&frame_scale)[2],
                                            float* warp_max, int warp, int g, int c) {
  float tile_max[6];
#pragma unroll
  for (int k = 0; k < 6; ++k) tile_max[k] = -INFINITY;
  for_each_score(c, [&](int k, int i, int head, int) {
    scores[k] =
        frame_scale[i] > 0.0f ? scores[k] * (frame_scale[i] * (kLog2e / 127.0f)) : -INFINITY;
    tile_max[head] = fmaxf(tile_max[head], scores[k]);
  });
#pragma unroll
  for (int k = 0; k < 6; ++k) {
#pragma unroll
    for (int mask = 4; mask < 32; mask *= 2) {
      tile_max[k] = fmaxf(tile_max[k], __shfl_xor_sync(0xffffffffu, tile_max[k], mask));
    }
  }
  if (g == 0) {
#pragma unroll
    for (int k = 0; k < 6; ++k) warp_max[warp * kHeads + lane_head(k, c)] = tile_max[k];
  }
}

// Once every warp's maxima are in: the running max moves only when the tile's exceeds it by
// more than kLazyRescale (so that P stays under 2^kLazyRescale), which most tiles then leave O
// alone for; each head's factor goes to rescale, whether any is not 1 to *rescaled. Then P, and
// P times the frame scale, into `probabilities` as B of O: head h's row, frame t at 16-byte
// piece t / 8 ^ h % 8, made visible to wgmma.
__device__ __forceinline__ void write_probabilities(
    const float (&scores)[12], const float (&frame_scale)[2], const float* warp_max, Softmax& state,
    float* rescale, int* rescaled, unsigned char* probabilities, int warp, int g, int c) {
  float reference[6];
  bool raised = false;
#pragma unroll
  for (int k = 0; k < 6; ++k) {
    const int h = lane_head(k, c);
    float tile_best = warp_max[h];
#pragma unroll
    for (int w = 1; w < 4; ++w) tile_best = fmaxf(tile_best, warp_max[w * kHeads + h]);
    const bool raise = tile_best > state.running_max[k] + kLazyRescale;
    const float factor = raise ? fast_exp2(state.running_max[k] - tile_best) : 1.0f;
    if (raise) state.running_max[k] = tile_best;
    reference[k] = exp_reference(state.running_max[k]);
    state.partial_sum[k] *= factor;
    state.scaled_sum[k] *= factor;
    raised |= raise;
    if (warp == 0 && g == 0) rescale[h] = factor;
  }
  raised = __any_sync(0xffffffffu, raised);
  if (warp == 0 && (g | c) == 0) *rescaled = raised;
  for_each_score(c, [&](int k, int i, int head, int h) {
    const int t = 16 * warp + g + 8 * i;
    const float p = fast_exp2(scores[k] - reference[head]);
    const __half scaled = __float2half(p * frame_scale[i]);
    state.partial_sum[head] += p;
    state.scaled_sum[head] += __half2float(scaled);
    *reinterpret_cast<__half*>(probabilities + h * kOperandRowBytes + (((t / 8) ^ (h & 7)) * 16) +
                               (t % 8) * 2) = scaled;
  });
  fence_shared_for_tma();
}

// A warpgroup's accumulators of O: [pair of 64-row tiles][tile of the pair][element].
using ValueAccumulators = float[kMaxPairs][2][12];
__device__ __forceinline__ void clear(ValueAccumulators& acc) {
#pragma unroll
  for (int p = 0; p < kMaxPairs; ++p) {
#pragma unroll
    for (int k = 0; k < 12; ++k) acc[p][0][k] = acc[p][1][k] = 0.0f;
  }
}

// A warpgroup's pairs of O's 64-row tiles, which are also its chunks of S: the first takes
// [0, ⌈chunks / 2⌉), the second the rest.
struct Pairs {
  int first, count;
};
__device__ __forceinline__ Pairs pairs_of(int warpgroup, int chunks) {
  const int first_count = (chunks + 1) / 2;
  return warpgroup == 0 ? Pairs{0, first_count} : Pairs{first_count, chunks - first_count};
}
// O's accumulators: each head's column times its rescale factor, where a factor is not 1
// (*rescaled read through a shuffle: uniform, as ptxas must see).
__device__ __forceinline__ void rescale_values(ValueAccumulators& acc, const float* rescale,
                                               const int* rescaled, int c) {
  if (!__shfl_sync(0xffffffffu, *rescaled, 0)) return;
  float factor[6];
#pragma unroll
  for (int k = 0; k < 6; ++k) factor[k] = rescale[lane_head(k, c)];
#pragma unroll
  for (int p = 0; p < kMaxPairs; ++p) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int k = 0; k < 12; ++k) acc[p][half][k] *= factor[head_index_of_element(k)];
      fence_registers(acc[p][half]);
    }
  }
}

// Oᵀ += Xᵀ · Pᵀ over pairs [first_pair, first_pair + pair_count) of a tile's 64-row tiles, P
// at probability_descriptor: two fragments a commit, two sets of registers in turn, each
// group's words loaded before the previous group's products are waited for; the function
// returns with them done.
__device__ __forceinline__ void multiply_tile(ValueAccumulators& acc,
                                              const unsigned char* tile_bytes,
                                              uint64_t probability_descriptor, int first_pair,
                                              int pair_count, int warp, int g, int c) {
  // The words of frames t, t + 1, t + 8, t + 9 (t = 16 step + 2c) at the lane's 4 columns of
  // pair p; rows t and t + 8 share t's swizzle, t + 1 and t + 9 that of t + 1.
  const int word = 4 * (8 * warp + g);  // byte of the pair's 128 columns
  const int even_at = ((word / 16) ^ (2 * c)) * 16 + word % 16;
  const int odd_at = ((word / 16) ^ (2 * c + 1)) * 16 + word % 16;
  const auto load_words = [&](int p, int step, uint32_t(&words)[4]) {
    const unsigned char* const rows =
        tile_bytes + (first_pair + p) * kTileChunkBytes + (16 * step + 2 * c) * kOperandRowBytes;
    words[0] = load_word(rows + even_at);
    words[1] = load_word(rows + kOperandRowBytes + odd_at);
    words[2] = load_word(rows + 8 * kOperandRowBytes + even_at);
    words[3] = load_word(rows + 9 * kOperandRowBytes + odd_at);
  };
  uint32_t fragments[2][2][4] = {};  // [set][tile of the pair]
  uint32_t next_words[4] = {};
  if (pair_count > 0) load_words(0, 0, next_words);
#pragma unroll
  for (int p = 0; p < kMaxPairs; ++p) {
    if (p >= pair_count) break;
#pragma unroll
    for (int step = 0; step < kTile / 16; ++step) {
      const uint32_t w0 = next_words[0], w1 = next_words[1], w8 = next_words[2], w9 = next_words[3];
      if (step + 1 < kTile / 16) {
        load_words(p, step + 1, next_words);
      } else if (p + 1 < pair_count) {
        load_words(p + 1, 0, next_words);
      }
      const int b = step % 2;  // sets alternate whatever the pair count
      wgmma_wait<1>();
      fence_registers(fragments[b][0]);
      fence_registers(fragments[b][1]);
      // Bytes of frames (t, t + 1) and (t + 8, t + 9) interleaved: columns 0, 1, then 2, 3.
      const uint32_t early_low = __byte_perm(w0, w1, 0x5140);
      const uint32_t early_high = __byte_perm(w0, w1, 0x7362);
      const uint32_t late_low = __byte_perm(w8, w9, 0x5140);
      const uint32_t late_high = __byte_perm(w8, w9, 0x7362);
      uint32_t(&first)[4] = fragments[b][0];
      uint32_t(&second)[4] = fragments[b][1];
      first[0] = biased_pair(early_low, kLowPair);
      first[1] = biased_pair(early_low, kHighPair);
      first[2] = biased_pair(late_low, kLowPair);
      first[3] = biased_pair(late_low, kHighPair);
      second[0] = biased_pair(early_high, kLowPair);
      second[1] = biased_pair(early_high, kHighPair);
      second[2] = biased_pair(late_high, kLowPair);
      second[3] = biased_pair(late_high, kHighPair);
      wgmma_fence();
      const uint64_t b_step = probability_descriptor + step * kStepUnits;
      wgmma_64x24x16(acc[p][0], first, b_step);
      wgmma_64x24x16(acc[p][1], second, b_step);
      wgmma_commit();
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int p = 0; p < kMaxPairs; ++p) {
    fence_registers(acc[p][0]);
    fence_registers(acc[p][1]);
  }
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    fence_registers(fragments[b][0]);
    fence_registers(fragments[b][1]);
  }
}

// Each head's final max (back in the natural log's units), sum and codes' offset, from the
// softmax's four warps: called by the 128 threads of the first warpgroup.
__device__ __forceinline__ void write_finals(Softmax& state, const Finals& finals, int warp, int g,
                                             int c) {
#pragma unroll
  for (int k = 0; k < 6; ++k) {
#pragma unroll
    for (int mask = 4; mask < 32; mask *= 2) {
      state.partial_sum[k] += __shfl_xor_sync(0xffffffffu, state.partial_sum[k], mask);
      state.scaled_sum[k] += __shfl_xor_sync(0xffffffffu, state.scaled_sum[k], mask);
    }
  }
  if (g == 0) {
#pragma unroll
    for (int k = 0; k < 6; ++k) {
      const int h = lane_head(k, c);
      finals.warp_sums[warp * kHeads + h] = state.partial_sum[k];
      finals.warp_sums[(4 + warp) * kHeads + h] = state.scaled_sum[k];
    }
  }
  warpgroup_sync(1);
  if (warp == 0 && g == 0) {
#pragma unroll
    for (int k = 0; k < 6; ++k) {
      const int h = lane_head(k, c);
      float sum = 0.0f, scaled = 0.0f;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        sum += finals.warp_sums[w * kHeads + h];
        scaled += finals.warp_sums[(4 + w) * kHeads + h];
      }
      finals.max[h] = state.running_max[k] * (1.0f / kLog2e);
      finals.sum[h] = sum;
      finals.offset[h] = kCodeBias * scaled;
    }
  }
}

// A warpgroup's unnormalised output less the codes' offset, times the channel scales and
// the codes' 1/127, into output F32 [kHeads][output_pitch] (once the finals are in).
__device__ __forceinline__ void write_values(const ValueAccumulators& acc, const Finals& finals,
                                             const float* channel_scales, float* output,
                                             int output_pitch, int first_pair, int pair_count,
                                             int warp, int g, int c) {
  float offset[6];
#pragma unroll
  for (int k = 0; k < 6; ++k) offset[k] = finals.offset[lane_head(k, c)];
#pragma unroll
  for (int p = 0; p < kMaxPairs; ++p) {
    if (p >= pair_count) break;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int column = (first_pair + p) * 128 + 4 * (8 * warp + g) + 2 * half + i;
        const float scale = channel_scales[column] * (1.0f / 127.0f);
#pragma unroll
        for (int j = 0; j < 3; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            output[(8 * j + 2 * c + e) * output_pitch + column] =
                (acc[p][half][4 * j + 2 * i + e] - offset[2 * j + e]) * scale;
          }
        }
      }
    }
  }
}

// Two warpgroups, each on half of S and half of O; the first runs the softmax.
__global__ void __launch_bounds__(kThreads, 1)
    frame_attention_int8_kernel(const __half* __restrict__ queries,
                                const __grid_constant__ CUtensorMap codes_map, Int8Frames frames,
                                int rows_per_window, int frame_count, int heads, int width,
                                __half* __restrict__ out) {
  extern __shared__ __align__(1024) unsigned char shared[];
  const Layout layout = Layout::of(width);
  unsigned char* const query_chunks = shared + layout.queries;
  unsigned char* const exchange = shared + layout.exchange;
  const Stats stats = Stats::at(shared + layout.stats);
  unsigned char* const tiles = shared + layout.tiles;
  const Finals finals = Finals::at(query_chunks);
  // The swizzled operands assume the 1024-byte alignment asked for above, which dynamic shared
  // memory without static shared memory has; there is no room to align it here.
  if ((shared_address(shared) & 1023) != 0) __trap();

  allow_dependent_kernels();
  const Place place = place_of(frames, rows_per_window, frame_count, width);
  // The warpgroup through a shuffle: ptxas then knows it is the same in every lane, and so are
  // the loops and branches it decides, without which it serialises every wgmma of the kernel.
  const int thread = threadIdx.x, group_thread = thread % 128;
  const int warpgroup = __shfl_sync(0xffffffffu, thread / 128, 0);
  const int warp = group_thread / 32, lane = thread % 32, g = lane / 4, c = lane % 4;
  const int stage_bytes = kTile * width;
  if (thread == 0) {
    for (int stage = 0; stage < kStages; ++stage) barrier_init(&stats.tile_full[stage], 1);
    barrier_init(stats.query_full, 1);
    barrier_init_fence();
    stage_query(queries + place.row * heads * width, place.channel_scales, heads, width,
                tiles + stage_bytes, stats.query_full);
    if (place.tile_begin < place.tile_end) {
      load_tile(&codes_map, tiles, &stats.tile_full[0], width, place.tile_begin, place.window);
    }
  }
  __syncthreads();  // the barriers are initialised

  // Each warpgroup's S takes the chunks of its pairs of O.
  const Pairs pairs = pairs_of(warpgroup, width / 128);
  barrier_wait(stats.query_full, 0);
  quantize_query(tiles + stage_bytes, heads, width, pairs_of(1, width / 128).first, query_chunks,
                 stats);
  const LaneQuery lane_of_query = lane_query(stats, c, warpgroup);
  const int first_pair = pairs.first, pair_count = pairs.count;

  Softmax state;
  ValueAccumulators acc;
  clear(acc);

  // The first warpgroup's frame scales, a tile ahead: in flight during the tile before.
  float next_frame_scale[2] = {0.0f, 0.0f};
  if (warpgroup == 0 && place.tile_begin < place.tile_end) {
    load_frame_scales(place, frame_count, place.tile_begin, warp, g, next_frame_scale);
  }
  for (int tile = place.tile_begin, round = 0; tile < place.tile_end; ++tile, ++round) {
    barrier_wait(&stats.tile_full[round % kStages], (round / kStages) & 1);
    __syncthreads();  // the last tile's products are done with the exchange and the other stage
    if (thread == 0 && tile + 1 < place.tile_end) {
      const int next = (round + 1) % kStages;
      load_tile(&codes_map, tiles + next * stage_bytes, &stats.tile_full[next], width, tile + 1,
                place.window);
    }
    const unsigned char* const x = tiles + (round % kStages) * stage_bytes;
    const float frame_scale[2] = {next_frame_scale[0], next_frame_scale[1]};
    if (warpgroup == 0 && tile + 1 < place.tile_end) {
      load_frame_scales(place, frame_count, tile + 1, warp, g, next_frame_scale);
    }

    float scores[12];
    score_chunks(x, query_chunks, first_pair, pair_count, lane_of_query, scores);
    if (warpgroup == 1) {
      float* const partial = reinterpret_cast<float*>(exchange) + group_thread * 12;
#pragma unroll
      for (int k = 0; k < 12; ++k) partial[k] = scores[k];
    }
    __syncthreads();

    if (warpgroup == 0) {
      const float* const partial = reinterpret_cast<const float*>(exchange) + group_thread * 12;
#pragma unroll
      for (int k = 0; k < 12; ++k) scores[k] += partial[k];
      tile_maxima(scores, frame_scale, stats.warp_max, warp, g, c);
      warpgroup_sync(1);  // also: every thread has read its partial S before P overwrites it
      write_probabilities(scores, frame_scale, stats.warp_max, state, stats.rescale, stats.rescaled,
                          exchange, warp, g, c);
    }
    __syncthreads();  // P and the rescales are in

    rescale_values(acc, stats.rescale, stats.rescaled, c);
    multiply_tile(acc, x, operand_descriptor(exchange), first_pair, pair_count, warp, g, c);
  }
  __syncthreads();  // the tiles, the queries and the exchange are free

  if (warpgroup == 0) write_finals(state, finals, warp, g, c);
  __syncthreads();
  float* const output = reinterpret_cast<float*>(tiles);
  write_values(acc, finals, place.channel_scales, output, width + 4, first_pair, pair_count, warp,
               g, c);
  __syncthreads();
  write_frame_attention<__half, kThreads>(output, width + 4, finals.max, finals.sum,
                                          finals.coefficients, heads, width,
                                          out + place.row * heads * width);
}

}  // namespace

bool frame_attention_int8_runs(Element e, int heads, int64_t width) {
  return e == Element::f16 && present() && heads > 0 && heads <= kHeads && width > 0 &&
         width % 128 == 0 && width <= kMaxWidth;
}

void frame_attention_int8(Element e, const void* queries, int64_t rows, int heads, int64_t width,
                          const Int8Frames& frames, int frame_count, int64_t rows_per_window,
                          void* out, cudaStream_t stream) {
  if (rows <= 0) return;
  if (!frame_attention_int8_runs(e, heads, width)) {
    fail("frame_attention_int8: ", heads, " heads of width ", width,
         " (wants an H100/H200, F16, at most 24 heads, a width that is a multiple of 128 up to "
         "1280)");
  }
  if (!aligned(queries, 16) || !aligned(frames.codes, 16) || !aligned(frames.channel_scales, 16) ||
      !aligned(out, 16)) {
    fail("frame_attention_int8: queries, codes, channel scales and output must be 16-byte aligned");
  }
  if (frame_count <= 0) fail("frame_attention_int8: ", frame_count, " frames");
  if (rows > 65535) fail("frame_attention_int8: ", rows, " rows (at most 65535 a launch)");
  // A CTA per row, then splits of the frames (a cluster each) while the GPU is not full.
  const int sms = multiprocessor_count();
  const int tiles = (frame_count + kTile - 1) / kTile;
  int splits = 1;
  while (splits < kMaxFrameSplits && splits * 2 <= tiles && rows * splits < sms * 9 / 10) {
    splits *= 2;
  }
  const Layout layout = Layout::of(static_cast<int>(width));
  // The codes [windows][frame_count][width] as bytes, boxes of 128 columns × a tile of frames.
  const int64_t windows = frames.windowed ? (rows + rows_per_window - 1) / rows_per_window : 1;
  const uint64_t sizes[3] = {static_cast<uint64_t>(width), static_cast<uint64_t>(frame_count),
                             static_cast<uint64_t>(windows)};
  const uint64_t strides[2] = {static_cast<uint64_t>(width),
                               static_cast<uint64_t>(width) * static_cast<uint64_t>(frame_count)};
  const uint32_t box[3] = {128, kTile, 1};
  const CUtensorMap codes_map =
      swizzled_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, frames.codes, 3, sizes, strides, box);
  static const bool configured =
      (allow_shared_memory(frame_attention_int8_kernel, Layout::of(kMaxWidth).bytes,
                           "frame_attention_int8 shared memory"),
       true);
  (void)configured;
  launch_kernel(frame_attention_int8_kernel, dim3(splits, 1, static_cast<unsigned>(rows)),
                dim3(kThreads), static_cast<size_t>(layout.bytes), splits, /*early_start=*/false,
                stream, "frame_attention_int8", static_cast<const __half*>(queries), codes_map,
                frames, static_cast<int>(rows_per_window), frame_count, heads,
                static_cast<int>(width), static_cast<__half*>(out));
}

}  // namespace hark::compute::cuda
