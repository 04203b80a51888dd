// decoder_step (decoder_step_sm90.h): a single sequence's decode step in one persistent launch.
// The Whisper decoder's default for one sequence over native K/V since the forty-eighth session
// (bench/RESULTS.md, thirty-ninth to forty-eighth sessions).
//
// One CTA an SM, kThreads threads: kComputeWarps warps compute, the last one copies. A layer is
// eight phases:
//   0  h = norm(x); q, k, v = h · W_qkvᵀ + b (k and v into the caches at the step's position)
//   1  self-attention: a CTA per (head, 64 positions), a partial softmax each
//   2  x += context · W_oᵀ + b
//   3  q = norm(x) · W_qᵀ + b
//   4  cross-attention: a CTA per (head, chunk of frames), a partial softmax each
//   5  x += context · W_oᵀ + b
//   6  hidden = GELU(norm(x) · W_1ᵀ + b)
//   7  x += hidden · W_2ᵀ + b
// A product splits its output rows evenly among the CTAs: each CTA's rows of W are one
// contiguous range of memory (with Q8_0 matrices, two: the rows' quants and their scales, which
// product_sums expands to the element type as it goes). Every CTA computes the input vector itself
// (the norm of x, or loads the context or the hidden vector), since each output row needs all of
// it. No grid-wide barrier separates the phases: x, the context and the hidden vector go as tagged
// vectors (each value with a tag naming the phase that wrote it; a reader loads until the tags are
// right), and so do q, k and v, of which an attention loads only its head's rows. Its CTAs write
// their partial softmaxes tagged too, and the CTA of the head's first chunk merges them into the
// context.
//
// What a phase reads that no phase of the step writes (the weights, biases, γ and β; the
// cross-attention's keys and values; the self-attention's of the positions before the step's) is
// copied by the copy warp into a ring that takes most of shared memory, each phase's into a
// region of its own after the previous phase's, as soon as the compute warps have freed the bytes
// (however many phases ahead), in slices of 8 KB with only a few in flight at once (copy_step
// says why). A product's share then comes from shared memory.
//
// What the CTAs hand each other (the tagged vectors, the partial softmaxes) goes through L2,
// read by loads that bypass L1 (relaxed at the GPU's scope), so that no stale line of an SM's L1
// is read. Each CTA keeps its own rows of x (the residual) in shared memory.
//
// Rounding follows the launch-per-op step: the normalised vector, q, the attention's output,
// each product's output (after bias, GELU and residual) are rounded to the element type, and
// everything else is F32.
#include "compute/cuda/decoder_step_sm90.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/error.h"
#include "compute/cuda/decode_attention.cuh"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/hopper.cuh"
#include "compute/cuda/tensor_core.cuh"

namespace hark::compute::cuda {

namespace {

using namespace hopper;
using bf16 = __nv_bfloat16;

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
// The last warp copies (see kCopyWarp); the others compute, synchronising by a named barrier.
constexpr int kComputeWarps = kWarps - 1;
constexpr int kComputeThreads = kComputeWarps * 32;
constexpr int kHeadDim = 64;
constexpr int kPack = 8;                // 16-bit values in a 16-byte load
constexpr int kPartial = 2 + kHeadDim;  // a partial softmax: max, sum, then Σ p · v
constexpr int kSelfChunk = 64;          // positions a self-attention item takes
constexpr int kPhases = 8;              // a layer's
constexpr int kMarks = 3;  // HARK_CUDA_STEP_TIMING's times of a phase (Params::timings)
// The norm's values a thread: d up to 3584 (and a little more where the threads' packs cover more).
constexpr int kMaxNormPacks = static_cast<int>(ceil_div(3584, kComputeThreads* kPack));
constexpr int64_t kMaxNormWidth = kComputeThreads * kMaxNormPacks * kPack;
// A phase's copies are slices of at most kSlice bytes, each counted by an mbarrier of its own
// (a cross-attention slice: a box of kBoxRows frames), so that the copy warp can keep few bytes
// in flight (Params::slices_in_flight).
constexpr int64_t kSlice = 8 * 1024;
constexpr int kBoxRows = kSlice / (kHeadDim * 2);
constexpr int kRuns = 5;  // the runs of memory a product's share is copied from (product_runs)

struct Params {
  const StepLayer* layers;
  int n_layers, heads;
  int64_t d, ffn;
  float scale;
  void* x;  // the step's input, and its output after the last layer
  // What every CTA reads whole goes as tagged vectors (see vector_tag): x after each residual, the
  // attention's output merged (the context), the hidden vector of the feed-forward. What an
  // attention reads of a product's rows goes tagged too: the self-attention's q, and this step's k
  // and v (which also go into the caches, for the later steps), then the cross-attention's q.
  uint32_t* tagged_qkv;      // [3 · d]
  uint32_t* tagged_x;        // [d]
  uint32_t* tagged_context;  // [d]
  uint32_t* tagged_hidden;   // [ffn]
  // The attentions' partial softmaxes, each float in a 64-bit word with its tag (store_partial).
  uint64_t* self_partials;   // [heads, self_chunks, kPartial]
  uint64_t* cross_partials;  // [heads, cross_chunks, kPartial]
  // The launches so far: with the phase, it makes the tags (a 32-bit count that CTA 0 adds 1 to
  // at the end of each launch).
  unsigned* launches;
  void* keys;
  void* values;
  int64_t cache_layer_stride;
  const int32_t* positions;
  const int32_t* lengths;
  // The cross-attention's keys and values come through the tensor map (the kernel's argument):
  // a layer's keys `cross_layer_stride` elements from the previous layer's, its values
  // cross_values_column bytes from its keys.
  int64_t cross_layer_stride;
  int cross_values_column;
  // The self-attention's caches through their tensor map (the kernel's other argument), a matrix
  // of rows of d values: position t of layer l's keys is row l · self_layer_rows + t, its value
  // self_values_rows rows further.
  int self_layer_rows, self_values_rows;
  const int32_t* cross_lengths;
  int frames, cross_chunks, cross_chunk_frames, self_chunks;
  uint32_t ring_bytes;  // the ring of the copies (copy_step), at the start of shared memory
  // Where the rest of shared memory lies: the layers' pointers, the input vector of a product (or
  // in an attention a chunk's scores and the value sums of its warps), the CTA's rows of x (F32),
  // a reduction's scratch, the mbarriers, a product's sums, the plan of the copies (layout_of).
  int64_t layers_offset, vector_offset, own_offset, scores_offset, reduce_offset, scratch_offset,
      barriers_offset, sums_offset, plan_offset;
  // With HARK_CUDA_STEP_TIMING: CTA 0's clock (globaltimer, ns) at three points of each phase
  // [phases, kMarks] (its copies landed, its input vector ready, its work done), then each CTA's
  // at the end of its work [phases, ctas]; null otherwise.
  unsigned long long* timings;
  // The slices' mbarriers in shared memory (a ring of `slots`, at barriers_offset, then the word
  // through which the compute warps free the ring: see copy_step), and how many slices the copy
  // warp keeps in flight at most.
  int slots, slices_in_flight;
  int cross_boxes;  // boxes of kBoxRows frames in a cross-attention chunk, keys and values each
  // The sleep between a tagged vector's loads that found a wrong tag (HARK_CUDA_STEP_POLL_NS;
  // kPauseNs by default).
  unsigned poll_ns;
  // A diagnostic (HARK_CUDA_STEP_ONLY): kEverything, or one side of the step alone, to time it.
  int only;
  // Whether the copy warp brings the self-attention's earlier keys and values (a CTA's first
  // item); HARK_CUDA_STEP_SELF_COPIES=0 loads them from global memory in the attention instead,
  // to measure the copies against it.
  bool self_copies;
  bool q8_0;  // the matrices are Q8_0 (StepShape::q8_0)
};

// HARK_CUDA_STEP_ONLY=copies: the copy warp streams every phase's bytes and the compute warps
// free each region once its slices have landed, computing nothing (how fast the stream runs
// alone). =work: the copy warp copies nothing, and the compute warps zero the ring once (the
// values stay finite) and run every phase over it, waiting for no copy (how fast the phases and
// their waits for each other run alone). =weights: as copies, without the attentions' keys and
// values (how much of the stream's time their boxes take, 128 bytes a row from rows far apart).
// Each leaves the step's output meaningless: for timing only.
enum Only { kEverything = 0, kCopies = 1, kWork = 2, kWeights = 3 };

// How a launch divides the work, from the shape and the number of CTAs (one an SM).
struct Layout {
  int ctas = 0, cross_chunks = 0, cross_chunk_frames = 0, cross_boxes = 0, self_chunks = 0;
  int slots = 0;  // the slices' mbarriers: more than the ring can hold at once
  int64_t ring_bytes = 0, most_region = 0, shared_bytes = 0, scratch_bytes = 0;
  int64_t layers_offset = 0, vector_offset = 0, own_offset = 0, scores_offset = 0;
  int64_t reduce_offset = 0, scratch_offset = 0, barriers_offset = 0, sums_offset = 0;
  int64_t plan_offset = 0;
  // The scratch: first what must keep its place while the caches' capacity (and with it the
  // partials' size) changes, the count of launches; then the tagged vectors, the partials.
  int64_t qkv_offset = 0, x_offset = 0, context_offset = 0, hidden_offset = 0;
  int64_t self_offset = 0, cross_offset = 0;
};

__host__ __device__ constexpr int64_t round_up(int64_t value, int64_t multiple) {
  return ceil_div(value, multiple) * multiple;
}

// A Q8_0 row of `depth` values has depth / 32 scales of 2 bytes. The copies move 16-byte pieces,
// so a CTA's scales are copied from the row at or before its first whose scales start at a
// multiple of 16 bytes (a multiple of this many rows: 1 where depth is a multiple of 256, at most
// 8 since depth is a multiple of 32), to the row of such a multiple at or after its last.
__host__ __device__ constexpr int64_t scale_rows_step(int64_t depth) {
  int64_t step = 1;
  while (step * q8_0_scale_row_bytes(depth) % 16 != 0) step *= 2;
  return step;
}

// Where a product's share lies in its region of the ring: at most ceil(rows / ctas) rows of W of
// `depth` values (16-bit, or Q8_0's quants, a byte each), with Q8_0 then their scales (from the
// row scale_rows_step says), then their bias (from the row before the first that is a multiple of
// 8: the copies move 16-byte pieces), then with a norm its γ and β [d] each.
struct Share {
  int64_t scales, bias, norm, end;
};
__host__ __device__ inline Share share_of(int64_t rows, int64_t depth, int64_t ctas, int64_t d,
                                          bool normed, bool q8_0) {
  const int64_t most =
      (static_cast<uint32_t>(rows) + static_cast<uint32_t>(ctas) - 1) / static_cast<uint32_t>(ctas);
  Share share;
  share.scales = round_up(most * depth * (q8_0 ? 1 : 2), 16);
  share.bias =
      share.scales +
      (q8_0 ? round_up((most + 2 * scale_rows_step(depth)) * q8_0_scale_row_bytes(depth), 16) : 0);
  share.norm = share.bias + round_up((most + 16) * 2, 16);
  share.end = share.norm + (normed ? 2 * round_up(d * 2, 16) : 0);
  return share;
}

// The bytes a phase's copies take of the ring, rounded up to 128 (a tensor copy's destination
// must be 128-byte aligned).
__host__ __device__ constexpr int64_t region_of(int64_t bytes) {
  return round_up(bytes, 128);
}

// A phase's copies as both sides of the CTA take them, worked out once a launch (plan_copies):
// its region's place in the ring (`offset`, in bytes from the ring's start) and its end in the
// running count of the ring's bytes, which the compute warps free it by; and its slices (0: it
// copies nothing), from the count of slices before it. Working them out at each phase (a chain of
// divisions and branches) cost ~0.4 µs of a product's phase on an H100 (bench/RESULTS.md,
// forty-fifth session).
struct PhaseCopies {
  uint32_t offset, end, first_slice, slices;
};

// A phase's region as the compute warps read it: its bytes from `start` (an offset into the
// ring), wrapping at the ring's end. A region is at most half the ring (decoder_step_fits).
struct Region {
  const unsigned char* ring;
  uint32_t start, ring_bytes;
  // Where byte `offset` of the region lies. Offsets a multiple of 16 give 16 bytes in a row (the
  // ring and every start are multiples of 128).
  __device__ __forceinline__ const unsigned char* at(uint32_t offset) const {
    const uint32_t in_ring = start + offset;
    return ring + (in_ring >= ring_bytes ? in_ring - ring_bytes : in_ring);
  }
  // Whether bytes [offset, offset + bytes) lie in a row, without the ring's end between.
  __device__ __forceinline__ bool unbroken(uint32_t offset, uint32_t bytes) const {
    const uint32_t from = static_cast<uint32_t>(at(offset) - ring);
    return from + bytes <= ring_bytes;
  }
};

// `shared_limit`: the shared memory a block may take; what the rest leaves is the copies' ring.
Layout layout_of(const StepShape& s, int ctas, int64_t shared_limit) {
  Layout l;
  l.ctas = ctas;
  l.cross_chunks = std::max(1, ctas / std::max(1, s.heads));
  l.cross_chunk_frames = static_cast<int>(ceil_div(s.frames, l.cross_chunks));
  l.cross_boxes = static_cast<int>(ceil_div(l.cross_chunk_frames, kBoxRows));
  l.self_chunks = static_cast<int>(ceil_div(s.capacity, kSelfChunk));
  const Share shares[] = {share_of(3 * s.d, s.d, ctas, s.d, true, s.q8_0),
                          share_of(s.d, s.d, ctas, s.d, true, s.q8_0),
                          share_of(s.ffn, s.d, ctas, s.d, true, s.q8_0),
                          share_of(s.d, s.ffn, ctas, s.d, false, s.q8_0)};
  l.most_region = region_of(int64_t{2} * l.cross_boxes * kSlice);
  int64_t least_region = l.most_region;
  for (const Share& share : shares) {
    l.most_region = std::max(l.most_region, region_of(share.end));
    least_region = std::min(least_region, region_of(share.end));
  }
  // The slices the ring may hold at once: its bytes in slices of kSlice, and for each of the
  // regions that fit in it (at most shared_limit / least_region, and one more partly) a last
  // partial slice of each of its runs (product_runs: W, Q8_0's scales, the bias, γ and β).
  l.slots =
      static_cast<int>(ceil_div(shared_limit, kSlice) + kRuns * (shared_limit / least_region + 2));
  // The rest of shared memory, at offsets from the ring's end: the layers' pointers; the product's
  // input vector, where an attention (which has none) keeps its scores, its warps' value sums and
  // its head's rows of q (k, v) instead; the CTA's rows of x, the reductions' scratch, the
  // mbarriers and the word that frees the ring, the product's sums, the plan of the copies.
  const int64_t scores = round_up(std::max(l.cross_chunk_frames, kSelfChunk) * 4, 16);
  l.layers_offset = 0;
  l.vector_offset =
      l.layers_offset + round_up(int64_t{s.layers} * static_cast<int64_t>(sizeof(StepLayer)), 16);
  l.scores_offset = l.vector_offset;
  l.reduce_offset = l.scores_offset + scores;
  // (An attention's rows of q, k, v follow its warps' value sums: run_phase.)
  l.own_offset = l.vector_offset + std::max(round_up(std::max(s.d, s.ffn) * 2, 16),
                                            scores + kWarps * kHeadDim * 4 + 3 * kHeadDim * 2);
  l.scratch_offset = l.own_offset + round_up(ceil_div(s.d, ctas) * 4, 16);
  l.barriers_offset = l.scratch_offset + 64 * 4;
  l.sums_offset = l.barriers_offset + round_up((int64_t{l.slots} + 1) * 8, 16);
  l.plan_offset = l.sums_offset + round_up(ceil_div(std::max(3 * s.d, s.ffn), ctas) * 4, 16);
  const int64_t rest =
      l.plan_offset + int64_t{s.layers} * kPhases * static_cast<int64_t>(sizeof(PhaseCopies));
  l.ring_bytes = std::max<int64_t>(0, (shared_limit - rest) / 128 * 128);
  for (int64_t* offset :
       {&l.layers_offset, &l.vector_offset, &l.own_offset, &l.scores_offset, &l.reduce_offset,
        &l.scratch_offset, &l.barriers_offset, &l.sums_offset, &l.plan_offset}) {
    *offset += l.ring_bytes;
  }
  l.shared_bytes = l.ring_bytes + rest;
  l.qkv_offset = 16;  // after the count
  l.x_offset = l.qkv_offset + round_up(3 * s.d * 4, 16);
  l.context_offset = l.x_offset + round_up(s.d * 4, 16);
  l.hidden_offset = l.context_offset + round_up(s.d * 4, 16);
  l.self_offset = l.hidden_offset + round_up(s.ffn * 4, 16);
  l.cross_offset = l.self_offset + int64_t{s.heads} * l.self_chunks * kPartial * 8;
  l.scratch_bytes = l.cross_offset + int64_t{s.heads} * l.cross_chunks * kPartial * 8;
  return l;
}

// ---- Device helpers ---------------------------------------------------------------------------

template <class T>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[kPack]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = unpack_pair<T>(words[i]);
    out[2 * i] = pair.x;
    out[2 * i + 1] = pair.y;
  }
}

template <class T>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b, float sum) {
  const uint32_t as[4] = {a.x, a.y, a.z, a.w}, bs[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = unpack_pair<T>(as[i]), y = unpack_pair<T>(bs[i]);
    sum = fmaf(x.x, y.x, sum);
    sum = fmaf(x.y, y.y, sum);
  }
  return sum;
}

__device__ __forceinline__ unsigned long long global_time() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Between the tries of a wait: a short sleep, and after 2 s a trap, since only a bug (a count or
// a tag never reached) waits that long, and a trap fails the launch where a hang would stop the
// GPU. `since`: 0 before the first try.
constexpr unsigned kPauseNs = 32;
__device__ __forceinline__ void pause_waiting(unsigned long long& since,
                                              unsigned pause_ns = kPauseNs) {
  __nanosleep(pause_ns);
  const unsigned long long now = global_time();
  if (since == 0) {
    since = now;
  } else if (now - since > 2000000000ull) {
    printf("decoder_step: CTA %d thread %d waited 2 s; giving up\n", blockIdx.x, threadIdx.x);
    __trap();
  }
}

// ---- Tagged vectors ---------------------------------------------------------------------------
// What every CTA reads whole from all the others (x after a residual, the context, the hidden
// vector) goes without a grid-wide barrier: each 16-bit value travels in a 32-bit word whose upper
// half is a tag naming the phase (and launch) that wrote it. A 32-bit store and a load of it are
// single-copy atomic, so a reader that finds the tag it expects has the value written with it; it
// loads its words until every tag is right. A barrier takes the writes' acknowledgement (its
// release), an atomic and acquiring loads before the vector's load; a tag takes the load alone.
//
// No vector is written again before every CTA has read it: each write follows, through the data
// the phases hand on, from every CTA's read of the last one (run_phase). No tag is 0 (the scratch
// starts zeroed).
//
// A tag names the count of phases over every launch so far:
__device__ __forceinline__ uint64_t phase_count(unsigned launch, int n_layers, int phase) {
  return uint64_t{launch} * static_cast<uint64_t>(n_layers * kPhases) + phase;
}
// A vector's tag: 16 bits, the word's upper half. Each use writes every word of the vector, so a
// word that is not yet this use's holds the last use's, whose tag differs.
__device__ __forceinline__ uint32_t vector_tag(uint64_t count) {
  return static_cast<uint32_t>(count % 65535 + 1) << 16;
}
// A partial softmax's tag: 32 bits. A chunk's partial is written only while the sequence reaches
// that chunk, so an unwritten one may be any number of launches old; with 16 bits it would carry
// this phase's tag by chance one time in 65,535 (a minute of decoding at 1,000 steps a second).
__device__ __forceinline__ uint32_t partial_tag(uint64_t count) {
  return static_cast<uint32_t>(count % 0xffffffffull) + 1;
}

template <class T>
__device__ __forceinline__ void store_tagged(uint32_t* word, float value, uint32_t tag) {
  __stcg(word, pack_pair<T>(value, 0.0f) | tag);  // 0.0's bits are 0 in F16 and BF16
}

__device__ __forceinline__ uint4 load_relaxed(const uint32_t* at) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(at)
               : "memory");
  return v;
}

// Values [8 · pack, 8 · pack + 8) of a tagged vector once they carry `tag`, as pairs.
__device__ __forceinline__ uint4 load_tagged(const uint32_t* words, int64_t pack, uint32_t tag,
                                             unsigned pause_ns) {
  const uint32_t* at = words + pack * kPack;
  unsigned long long since = 0;
  for (;;) {
    const uint4 a = load_relaxed(at), b = load_relaxed(at + 4);
    const uint32_t wrong = ((a.x ^ tag) | (a.y ^ tag) | (a.z ^ tag) | (a.w ^ tag) | (b.x ^ tag) |
                            (b.y ^ tag) | (b.z ^ tag) | (b.w ^ tag)) >>
                           16;
    if (wrong == 0) {
      return make_uint4((a.x & 0xffff) | (a.y << 16), (a.z & 0xffff) | (a.w << 16),
                        (b.x & 0xffff) | (b.y << 16), (b.z & 0xffff) | (b.w << 16));
    }
    pause_waiting(since, pause_ns);
  }
}

// A float of a partial softmax in a 64-bit word (also single-copy atomic) with its tag
// (partial_tag) in the upper half.
__device__ __forceinline__ void store_partial(uint64_t* word, float value, uint32_t tag) {
  __stcg(reinterpret_cast<unsigned long long*>(word),
         (static_cast<unsigned long long>(tag) << 32) | __float_as_uint(value));
}
// Two such words from a 16-byte boundary (a vector load: each word single-copy atomic, each
// checked for its tag on its own).
__device__ __forceinline__ void load_relaxed_pair(const uint64_t* at, uint64_t& first,
                                                  uint64_t& second) {
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
               : "=l"(first), "=l"(second)
               : "l"(at)
               : "memory");
}
__device__ __forceinline__ uint64_t load_relaxed(const uint64_t* at) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(at) : "memory");
  return v;
}
__device__ __forceinline__ bool tagged_as(uint64_t word, uint32_t tag) {
  return static_cast<uint32_t>(word >> 32) == tag;
}

// This CTA's output rows of a product of `rows` rows: [first, end).
struct Rows {
  int64_t first, end;
};
// (In 32 bits: a 64-bit division is a long sequence of instructions, inlined at each use.)
__device__ __forceinline__ Rows rows_of(int64_t rows) {
  const auto n = static_cast<uint32_t>(rows);
  return {n * blockIdx.x / gridDim.x, n * (blockIdx.x + 1) / gridDim.x};
}

// The bias of output row `row` of a product whose rows the region holds (0 without a bias).
template <class T>
__device__ __forceinline__ float bias_of(const Region& region, const Share& share, const void* bias,
                                         Rows r, int64_t row) {
  if (bias == nullptr) return 0.0f;
  const auto index = static_cast<uint32_t>(row - (r.first & ~int64_t{7}));
  return to_float(*reinterpret_cast<const T*>(
      region.at(static_cast<uint32_t>(share.bias) + index * sizeof(T))));
}

// The item (head, chunk of frames) of this CTA's cross-attention; false: none.
struct CrossItem {
  int head, chunk, first, count;
};
__device__ __forceinline__ bool cross_item(const Params& p, CrossItem& item) {
  if (static_cast<int>(blockIdx.x) >= p.heads * p.cross_chunks) return false;
  item.head = blockIdx.x / p.cross_chunks;
  item.chunk = blockIdx.x % p.cross_chunks;
  item.first = item.chunk * p.cross_chunk_frames;
  item.count = max(0, min(p.cross_chunk_frames, p.frames - item.first));
  return true;
}

// What a launch reads once: the step's position and lengths, the count of launches before it;
// and the chunks of 64 positions that its self-attention reaches (Params::self_chunks is the
// caches' capacity in chunks).
struct Step {
  int64_t position;
  int length, cross_length;
  unsigned launch;
  int chunks;
};
__device__ __forceinline__ Step step_of(const Params& p) {
  const int length = p.lengths[0];
  return {p.positions[0], length, p.cross_lengths[0], __ldcg(p.launches),
          static_cast<int>(ceil_div(length, kSelfChunk))};
}

// The self-attention's items (head, chunk of 64 positions) of a step whose sequence reaches
// `chunks` chunks: chunk-major, from the last CTA down (the CTAs past heads · cross_chunks have no
// cross-attention to copy for), a CTA every item and, where there are more items than CTAs, again.
// Round 0's keys and values come by the copy warp (visit_copies); false: none in this round.
__device__ __forceinline__ bool self_item(const Params& p, int chunks, int round, int& head,
                                          int& chunk) {
  const int item = gridDim.x - 1 - blockIdx.x + round * gridDim.x;
  if (item >= chunks * p.heads) return false;
  chunk = item / p.heads;
  head = item - chunk * p.heads;
  return true;
}

// The copies of a phase into its region are bulk copies by the tensor memory accelerator, issued
// by the last warp (copy_step), which does nothing else. Not cp.async: those are issued by the
// threads that wait for them, and a CTA's ~100 KB of them in flight held up every later load of
// its SM and every memory fence until they had landed.
constexpr int kCopyWarp = kWarps - 1;

// A phase's product: W [rows, depth], its bias (null: none), and the norm before it (null γ:
// none).
struct Product {
  const void* w = nullptr;
  const void* bias = nullptr;
  int64_t rows = 0, depth = 0;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  float eps = 0.0f;
};

// Phase `phase`'s product; false for the attention phases, which have none.
__device__ __forceinline__ bool product_of(const Params& p, const StepLayer& w, int phase,
                                           Product& out) {
  switch (phase % kPhases) {
    case 0:
      out = {w.qkv, w.qkv_bias, 3 * p.d, p.d, w.self_gamma, w.self_beta, w.self_eps};
      return true;
    case 2:
      out = {w.self_out, w.self_out_bias, p.d, p.d, nullptr, nullptr, 0.0f};
      return true;
    case 3:
      out = {w.cross_q, w.cross_q_bias, p.d, p.d, w.cross_gamma, w.cross_beta, w.cross_eps};
      return true;
    case 5:
      out = {w.cross_out, w.cross_out_bias, p.d, p.d, nullptr, nullptr, 0.0f};
      return true;
    case 6:
      out = {w.fc1, w.fc1_bias, p.ffn, p.d, w.ffn_gamma, w.ffn_beta, w.ffn_eps};
      return true;
    case 7:
      out = {w.fc2, w.fc2_bias, p.d, p.ffn, nullptr, nullptr, 0.0f};
      return true;
    default:
      return false;
  }
}

// A product's share of the ring (share_of) on this launch's CTAs.
__device__ __forceinline__ Share product_share(const Params& p, const Product& product) {
  return share_of(product.rows, product.depth, gridDim.x, p.d, product.gamma != nullptr, p.q8_0);
}

// Q8_0: the first row whose scales a product's share holds (scale_rows_step), and the rows after
// it whose scales it holds.
struct ScaleRows {
  int64_t first, count;
};
__device__ __forceinline__ ScaleRows scale_rows_of(Rows r, int64_t depth) {
  const int64_t mask = scale_rows_step(depth) - 1;  // a power of 2
  const int64_t first = r.first & ~mask;
  return {first, ((r.end + mask) & ~mask) - first};
}

// A product's runs of memory to copy (kRuns of them): this CTA's rows of W (with Q8_0, their
// quants, then their scales: scale_rows_of), their bias from the row at or before the first that
// is a multiple of 8 (the copies move 16-byte pieces), and with a norm its γ and β; `to` is each
// run's place in the region. (Fixed-size arrays indexed by constants after unrolling: registers,
// not local memory.)
struct Runs {
  const unsigned char* from[kRuns];
  int64_t to[kRuns], bytes[kRuns];
};
template <class T>
__device__ __forceinline__ void product_runs(const Params& p, const Product& product, Runs& runs) {
  const Rows r = rows_of(product.rows);
  const Share share = product_share(p, product);
  const auto* w = static_cast<const unsigned char*>(product.w);
  const int64_t value_bytes = p.q8_0 ? 1 : sizeof(T);
  const ScaleRows scale_rows = scale_rows_of(r, product.depth);
  const int64_t scale_row_bytes = q8_0_scale_row_bytes(product.depth);
  const int64_t bias_first = r.first & ~int64_t{7};
  const int64_t norm_bytes = p.d * sizeof(T);
  runs = {{w + r.first * product.depth * value_bytes,
           w + q8_0_scales_offset(product.rows, product.depth) + scale_rows.first * scale_row_bytes,
           product.bias != nullptr
               ? static_cast<const unsigned char*>(product.bias) + bias_first * sizeof(T)
               : nullptr,
           static_cast<const unsigned char*>(product.gamma),
           static_cast<const unsigned char*>(product.beta)},
          {0, share.scales, share.bias, share.norm, share.norm + round_up(norm_bytes, 16)},
          {(r.end - r.first) * product.depth * value_bytes,
           p.q8_0 ? scale_rows.count * scale_row_bytes : 0,
           product.bias != nullptr ? (round_up(r.end, 8) - bias_first) * int64_t{sizeof(T)} : 0,
           product.gamma != nullptr ? norm_bytes : 0, product.gamma != nullptr ? norm_bytes : 0}};
}

// Phase `phase`'s copies piece by piece, and the bytes its region takes of the ring (0: it copies
// nothing), for a step whose self-attention reaches `chunks` chunks. For an attention,
// box(to, self, column, row) for each box (`to`: its place in the region; (column, row): its
// place in the tensor map, the self-attention's caches' or the window's): the self-attention's
// keys and values of the CTA's round-0 item, a box each (the positions before this step's,
// which earlier steps wrote; this step's comes tagged); the cross-attention's boxes of the CTA's
// chunk of frames, the keys', then the values'. For a product, run(to, from, bytes) for each of
// its runs (product_runs), in its share's layout.
template <class T, class Box, class Run>
__device__ uint32_t visit_copies(const Params& p, const StepLayer* layers, int chunks, int phase,
                                 Box box, Run run) {
  const int kind = phase % kPhases, layer = phase / kPhases;
  if (layer >= p.n_layers || ((kind == 1 || kind == 4) && p.only == kWeights)) return 0;
  if (kind == 1) {
    int head, chunk;
    if (!p.self_copies || !self_item(p, chunks, 0, head, chunk)) return 0;
    const int column = static_cast<int>(head * kHeadDim * sizeof(T));
    const int row = layer * p.self_layer_rows + chunk * kSelfChunk;
    box(0, true, column, row);
    box(kSlice, true, column, row + p.self_values_rows);
    return static_cast<uint32_t>(region_of(2 * kSlice));
  }
  if (kind == 4) {
    CrossItem item;
    if (!cross_item(p, item)) return 0;
    const int column =
        static_cast<int>((layer * p.cross_layer_stride + item.head * kHeadDim) * sizeof(T));
    for (int b = 0; b < 2 * p.cross_boxes; ++b) {
      const bool values = b >= p.cross_boxes;
      box(int64_t{b} * kSlice, false, column + (values ? p.cross_values_column : 0),
          item.first + (b - (values ? p.cross_boxes : 0)) * kBoxRows);
    }
    return static_cast<uint32_t>(region_of(2 * p.cross_boxes * kSlice));
  }
  Product product;
  product_of(p, layers[layer], phase, product);
  Runs runs;
  product_runs<T>(p, product, runs);
  // Not unrolled: the copy warp's code stays one small loop (its copy_step had grown to 55 KB).
#pragma unroll 1
  for (int i = 0; i < kRuns; ++i) {
    if (runs.bytes[i] > 0) run(runs.to[i], runs.from[i], runs.bytes[i]);
  }
  return static_cast<uint32_t>(region_of(product_share(p, product).end));
}

// What phase `phase` copies: its slices (the copy warp issues them, the compute warps wait for
// them: a box each, and a product's runs in pieces of kSlice bytes) and its region's bytes.
struct Copies {
  int slices = 0;
  uint32_t bytes = 0;
};
template <class T>
__device__ Copies copies_of(const Params& p, const StepLayer* layers, int chunks, int phase) {
  Copies copies;
  copies.bytes = visit_copies<T>(
      p, layers, chunks, phase, [&](int64_t, bool, int, int) { ++copies.slices; },
      [&](int64_t, const unsigned char*, int64_t bytes) {
        copies.slices += static_cast<int>(ceil_div(bytes, kSlice));
      });
  return copies;
}

// plan [phases] := each phase's copies (PhaseCopies), by the whole block, before it splits: each
// thread counts some phases' slices and bytes, then thread 0 places the regions in order.
//
// A region starts where the last ended, wrapping at the ring's end (regions are multiples of 128
// bytes, and so are their places). Only an attention's region (its boxes, which the attention
// reads as two arrays) starts at the ring's next turn where it would cross its end.
// Wrapping lets the largest products' regions follow each other: large-v3's fc1 and fc2 take 208
// KB a CTA together, nearly all of its 210, so that with every region contiguous fc2's copies
// could start only once fc1 was done (bench/RESULTS.md, forty-second session).
template <class T>
__device__ void plan_copies(const Params& p, const StepLayer* layers, int chunks,
                            PhaseCopies* plan) {
  const int phases = p.n_layers * kPhases;
  __syncthreads();  // the layers' pointers are in place
  for (int phase = threadIdx.x; phase < phases; phase += blockDim.x) {
    const Copies copies = copies_of<T>(p, layers, chunks, phase);
    // (`end` holds the region's bytes until thread 0 places it.)
    plan[phase] = {0, copies.bytes, 0, static_cast<uint32_t>(copies.slices)};
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  // The running count of the ring's bytes and where it stands in the ring: a region is at most
  // half the ring (decoder_step_fits), so one subtraction wraps it, and no division is needed.
  uint32_t placed = 0, offset = 0, slices = 0;
  for (int phase = 0; phase < phases; ++phase) {
    PhaseCopies& copies = plan[phase];
    const uint32_t bytes = copies.end;
    const int kind = phase % kPhases;
    if ((kind == 1 || kind == 4) && offset + bytes > p.ring_bytes) {
      placed += p.ring_bytes - offset;
      offset = 0;
    }
    copies.offset = offset;
    placed += bytes;
    offset += bytes;
    if (offset >= p.ring_bytes) offset -= p.ring_bytes;
    copies.end = placed;
    copies.first_slice = slices;
    slices += copies.slices;
  }
}

// The word through which the compute warps free the ring: the running count of bytes up to the
// end of the last region they are done with.
__device__ __forceinline__ void free_ring(uint32_t* freed, uint32_t end) {
  asm volatile("st.release.cta.shared::cta.u32 [%0], %1;" ::"r"(shared_address(freed)), "r"(end)
               : "memory");
}
__device__ __forceinline__ void wait_ring(const uint32_t* freed, uint32_t end) {
  unsigned long long since = 0;
  for (;;) {
    uint32_t seen;
    asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];"
                 : "=r"(seen)
                 : "r"(shared_address(freed))
                 : "memory");
    if (seen >= end) return;
    pause_waiting(since);
  }
}

// The copy warp's issuing: the ring of mbarriers `slots` (`count` of them), each arming the next
// slice once the slice `in_flight` before it has landed, and the ring of shared memory.
struct Copier {
  uint64_t* slots;
  uint32_t count, in_flight, issued;
  unsigned char* ring;
  uint32_t ring_bytes;
  // The mbarrier of the next slice, armed for its bytes.
  __device__ __forceinline__ uint64_t* next_slot(uint32_t bytes) {
    if (issued >= in_flight) {
      const uint32_t landed = issued - in_flight;
      barrier_wait(&slots[landed % count], (landed / count) & 1);
    }
    uint64_t* slot = &slots[issued % count];
    barrier_expect_bytes(slot, bytes);
    ++issued;
    return slot;
  }
};

// A product's run of `bytes` from `from` to offset `to` of the ring, in slices of kSlice bytes,
// each counted by an mbarrier; a slice that the ring's end cuts in two copies, counted by one.
// Inlined (called once, in visit_copies's loop over the runs, which is not unrolled): out of line,
// the copier went through the stack, and its fields were loaded again around each slice's copies.
__device__ __forceinline__ void copy_run(Copier& copier, uint32_t to, const unsigned char* from,
                                         uint32_t bytes) {
  for (uint32_t at = 0; at < bytes; at += kSlice) {
    const uint32_t slice = min(static_cast<uint32_t>(kSlice), bytes - at);
    uint64_t* slot = copier.next_slot(slice);
    uint32_t target = to + at;
    if (target >= copier.ring_bytes) target -= copier.ring_bytes;
    const uint32_t first = min(slice, copier.ring_bytes - target);
    bulk_load(copier.ring + target, from + at, first, slot);
    if (first < slice) bulk_load(copier.ring, from + at + first, slice - first, slot);
  }
}

// The copy warp's whole launch (its lane 0): every phase's slices in order, each counted by the
// next mbarrier of the ring `slots`, into the phase's region of the ring of shared memory (plan).
// The regions follow each other through the ring, wrapping at its end (plan_copies), and a phase's
// region is copied into as soon as the compute warps have freed the bytes it takes, however many
// phases ahead of theirs. At most p.slices_in_flight slices are in flight: the
// HBM queues the SMs' later loads behind the bytes already asked for (with grid barriers, ~100 KB
// a CTA issued at once held up each barrier by the 4-5 µs they took to land; bench/RESULTS.md,
// fortieth session).
//
// The mbarriers cannot wrap onto a slice not yet waited for: there are more of them than the
// slices of the regions the ring holds at once (layout_of), and a region is freed only after its
// phase, which waited for its slices.
template <class T>
__device__ __noinline__ void copy_step(const Params& p, const CUtensorMap* self_map,
                                       const CUtensorMap* cross_map, const StepLayer* layers,
                                       int chunks, const PhaseCopies* plan, unsigned char* shared,
                                       uint64_t* slots, const uint32_t* freed) {
  if (threadIdx.x % 32 != 0) return;
  Copier copier = {slots,
                   static_cast<uint32_t>(p.slots),
                   static_cast<uint32_t>(p.slices_in_flight),
                   0,
                   shared,
                   p.ring_bytes};
  const int phases = p.n_layers * kPhases;
#pragma unroll 1
  for (int phase = 0; phase < phases; ++phase) {
    const PhaseCopies copies = plan[phase];
    if (copies.slices == 0) continue;
    if (copies.end > p.ring_bytes) wait_ring(freed, copies.end - p.ring_bytes);
    const uint32_t region = copies.offset;
    // Boxes of kBoxRows rows of a tensor map (each copied whole: zeros past the tensor's end,
    // and past the frames or positions whatever the rows hold, which the attention does not
    // read; the region is contiguous); a product's runs (copy_run).
    visit_copies<T>(
        p, layers, chunks, phase,
        [&](int64_t to, bool self, int column, int row) {
          tma_load(shared + region + to, self ? self_map : cross_map, copier.next_slot(kSlice),
                   column, row);
        },
        [&](int64_t to, const unsigned char* from, int64_t bytes) {
          copy_run(copier, static_cast<uint32_t>(region + to), from, static_cast<uint32_t>(bytes));
        });
  }
}

// The compute warps' synchronisation: a named barrier without the copy warp, which runs its own
// loop (copy_step).
__device__ __forceinline__ void compute_sync() {
  named_barrier(1, kComputeThreads);
}

__device__ __forceinline__ float compute_sum(float value, float* scratch) {
  return block_reduce<false>(value, scratch, kComputeWarps, compute_sync);
}
__device__ __forceinline__ float compute_max(float value, float* scratch) {
  return block_reduce<true>(value, scratch, kComputeWarps, compute_sync);
}

// vector [d] := layer_norm(x) with γ, β (the phase's region holds them; F32 statistics, two
// passes over registers), rounded to T, as layer_norm and decode_linear's staging compute it.
// x: the tagged x carrying `tag`, or with tag 0 the step's input.
template <class T>
__device__ __noinline__ void norm_into(const Params& p, const Region& region, const Share& share,
                                       float eps, uint32_t tag, T* vector, float* scratch) {
  const auto gamma = static_cast<uint32_t>(share.norm);
  const auto beta = static_cast<uint32_t>(share.norm + round_up(p.d * sizeof(T), 16));
  const int64_t packs = p.d / kPack;
  const auto* x = static_cast<const uint4*>(p.x);
  float values[kMaxNormPacks][kPack];
#pragma unroll
  for (int i = 0; i < kMaxNormPacks; ++i) {
    const int64_t pack = threadIdx.x + i * kComputeThreads;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (pack < packs)
      raw = tag != 0 ? load_tagged(p.tagged_x, pack, tag, p.poll_ns) : __ldcg(x + pack);
    unpack8<T>(raw, values[i]);
  }
  const RowStatistics row = row_statistics(
      values, [&](int i) { return threadIdx.x + i * kComputeThreads < packs; },
      static_cast<float>(p.d), eps, [&](float value) { return compute_sum(value, scratch); });
#pragma unroll
  for (int i = 0; i < kMaxNormPacks; ++i) {
    const int64_t pack = threadIdx.x + i * kComputeThreads;
    if (pack >= packs) continue;
    float g[kPack], b[kPack], out[kPack];
    unpack8<T>(*reinterpret_cast<const uint4*>(region.at(gamma + pack * 16)), g);
    unpack8<T>(*reinterpret_cast<const uint4*>(region.at(beta + pack * 16)), b);
#pragma unroll
    for (int j = 0; j < kPack; ++j) out[j] = (values[i][j] - row.mean) * row.inverse * g[j] + b[j];
    uint32_t words[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) words[j] = pack_pair<T>(out[2 * j], out[2 * j + 1]);
    *reinterpret_cast<uint4*>(vector + pack * kPack) =
        make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// vector [width] := a tagged vector of the previous phase, once it carries `tag`.
template <class T>
__device__ void load_into(const uint32_t* words, int64_t width, uint32_t tag, unsigned pause_ns,
                          T* vector) {
  for (int64_t pack = threadIdx.x; pack < width / kPack; pack += kComputeThreads) {
    *reinterpret_cast<uint4*>(vector + pack * kPack) = load_tagged(words, pack, tag, pause_ns);
  }
}

// Where a chunk's attention goes: its partial softmax, tagged, for the merge of its head
// (merge_head); or where the head has a single chunk, the head's 64 values of the context itself,
// tagged, since merging one partial divides its sums as the chunk can (and the merge's round trip
// through L2 is a wait of the step's chain; bench/RESULTS.md, forty-fifth session).
struct Attended {
  uint64_t* partial;  // null: the context
  uint32_t partial_tag;
  uint32_t* context;
  uint32_t context_tag;
};

// staged [parts · 64] := the rows of head `head` in the first `parts` blocks of d of the tagged
// q, k, v (phase 0's, or q alone from phase 3), once they carry `tag`. Ends with the block
// synchronised.
template <class T>
__device__ void stage_head(const uint32_t* qkv, int64_t d, int head, int parts, uint32_t tag,
                           unsigned pause_ns, T* staged) {
  constexpr int kPacks = kHeadDim / kPack;
  if (static_cast<int>(threadIdx.x) < parts * kPacks) {
    const int part = threadIdx.x / kPacks, pack = threadIdx.x % kPacks;
    *reinterpret_cast<uint4*>(staged + part * kHeadDim + pack * kPack) =
        load_tagged(qkv + part * d + head * kHeadDim, pack, tag, pause_ns);
  }
  compute_sync();
}

// One chunk of a head's attention: `count` keys and values (rows `stride` apart, in shared or
// global memory; with `current` in shared memory, the key and value of position `current` in
// the chunk instead, which this step's phase 0 wrote), the query q [64] (shared memory); writes
// the partial softmax (the chunk's maximum score, Σ e^(s − max), Σ e^(s − max) · v) or the
// context (Attended). Ends with the block synchronised.
template <class T, bool kGlobal>
__device__ __noinline__ void attend(const T* keys, const T* values, int64_t stride, int count,
                                    const T* current_rows, int current, const T* q, float scale,
                                    float* scores, float* reduce, float* scratch,
                                    const Attended& to) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 8, part = lane % 8;  // 4 keys a warp at once, 8 lanes a key
  float query[kPack];
  unpack8<T>(reinterpret_cast<const uint4*>(q)[part], query);
  for (int first = warp * 4; first < count; first += kComputeWarps * 4) {
    const int key = first + group;
    const bool real = key < count;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (real && key == current) {
      raw = reinterpret_cast<const uint4*>(current_rows)[part];
    } else if (real) {
      const auto* at = reinterpret_cast<const uint4*>(keys + key * stride) + part;
      raw = kGlobal ? __ldcg(at) : *at;
    }
    float k[kPack];
    unpack8<T>(raw, k);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kPack; ++j) s = fmaf(query[j], k[j], s);
    s += __shfl_xor_sync(kFullWarp, s, 1);
    s += __shfl_xor_sync(kFullWarp, s, 2);
    s += __shfl_xor_sync(kFullWarp, s, 4);
    if (real && part == 0) scores[key] = s * scale;
  }
  compute_sync();
  float maximum = -INFINITY;
  for (int i = threadIdx.x; i < count; i += kComputeThreads) maximum = fmaxf(maximum, scores[i]);
  maximum = compute_max(maximum, scratch);
  float total = 0.0f;
  for (int i = threadIdx.x; i < count; i += kComputeThreads) {
    const float weight = __expf(scores[i] - maximum);
    scores[i] = weight;
    total += weight;
  }
  total = compute_sum(total, scratch);  // its barriers publish the weights too
  // Values: each warp every kComputeWarps-th key, each lane two of the 64 values.
  float low = 0.0f, high = 0.0f;
  for (int key = warp; key < count; key += kComputeWarps) {
    const auto* at = reinterpret_cast<const uint32_t*>(values + key * stride) + lane;
    const float2 v = unpack_pair<T>(
        key == current ? reinterpret_cast<const uint32_t*>(current_rows + kHeadDim)[lane]
        : kGlobal      ? __ldcg(at)
                       : *at);
    const float weight = scores[key];
    low = fmaf(weight, v.x, low);
    high = fmaf(weight, v.y, high);
  }
  *reinterpret_cast<float2*>(reduce + warp * kHeadDim + 2 * lane) = make_float2(low, high);
  compute_sync();
  // Warp 0 writes the partial, or the context as merge_head would make it of this one partial.
  if (warp == 0) {
    float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kComputeWarps; ++w) {
      const float2 part = *reinterpret_cast<const float2*>(reduce + w * kHeadDim + 2 * lane);
      sum.x += part.x;
      sum.y += part.y;
    }
    if (to.partial == nullptr) {
      store_tagged<T>(to.context + 2 * lane, total > 0.0f ? sum.x / total : 0.0f, to.context_tag);
      store_tagged<T>(to.context + 2 * lane + 1, total > 0.0f ? sum.y / total : 0.0f,
                      to.context_tag);
    } else {
      uint64_t* out = to.partial;
      store_partial(out + 2 + 2 * lane, sum.x, to.partial_tag);
      store_partial(out + 3 + 2 * lane, sum.y, to.partial_tag);
      if (lane == 0) {
        store_partial(out, maximum, to.partial_tag);
        store_partial(out + 1, total, to.partial_tag);
      }
    }
  }
  compute_sync();
}

// The head's `chunks` partial softmaxes (partials: the head's first), once they carry
// `partials_tag`, merged into the head's 64 values of the context (tagged `tag`), rounded to T
// (threads 0-63, a value each). The CTA of the head's first chunk merges (run_phase): only it
// waits for other CTAs' partials. When every CTA of the next phase merged for itself (loading
// 20 × 6 partials of 528 bytes from L2 where the tagged context is 5 KB), the step took 1.48-1.53
// ms on an H100 against 1.43 with this, the next phase's wait for its vector three times as long
// (bench/RESULTS.md, forty-seventh session).
template <class T>
__device__ __noinline__ void merge_head(const uint64_t* partials, int chunks, uint32_t partials_tag,
                                        uint32_t* context, uint32_t tag) {
  if (threadIdx.x >= kHeadDim) return;
  // One pass: each round of partials raises the running maximum and rescales the sums to it.
  float maximum = -INFINITY, weights = 0.0f, sum[1] = {0.0f};
  constexpr int kUnroll = 8;  // loads in flight together
  for (int first = 0; first < chunks; first += kUnroll) {
    float m[kUnroll], l[kUnroll], a[kUnroll];
    unsigned long long since = 0;
    for (;;) {
      bool ready = true;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t* part = partials + (first + u) * kPartial;
        const bool real = first + u < chunks;
        uint64_t words[3] = {0, 0, 0};
        if (real) {  // (a partial is 66 words: every one starts at a 16-byte boundary)
          load_relaxed_pair(part, words[0], words[1]);
          words[2] = load_relaxed(part + 2 + threadIdx.x);
        }
        ready = ready &&
                (!real || (tagged_as(words[0], partials_tag) && tagged_as(words[1], partials_tag) &&
                           tagged_as(words[2], partials_tag)));
        m[u] = real ? __uint_as_float(static_cast<uint32_t>(words[0])) : -INFINITY;
        l[u] = __uint_as_float(static_cast<uint32_t>(words[1]));  // 0.0 where not real
        a[u] = __uint_as_float(static_cast<uint32_t>(words[2]));
      }
      if (ready) break;
      pause_waiting(since);
    }
    float round_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) round_max = fmaxf(round_max, m[u]);
    const float reference =
        raise_maximum(maximum, weights, sum, round_max, [](float value) { return __expf(value); });
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float weight = __expf(m[u] - reference);
      weights = fmaf(weight, l[u], weights);
      sum[0] = fmaf(weight, a[u], sum[0]);
    }
  }
  // A sequence that is done attends to nothing (its lengths are 0): zeros, as decode_attention
  // gives it.
  store_tagged<T>(context + threadIdx.x, weights > 0.0f ? sum[0] / weights : 0.0f, tag);
}

// Where a product's Q8_0 scales lie in its region: from byte `at`, those of rows from
// `first_row` on (scale_rows_of).
struct ScalesAt {
  uint32_t at;
  int64_t first_row;
};

// The sums of a product's rows [first, end) from its region of the ring (rows of `depth` from
// its start) times the vector (shared memory) into sums[row − first], a warp a row. Not inlined,
// nor unrolled past a few packs: one copy of this code serves every product. The whole step is
// one kernel, and with each product's code inlined and unrolled its ~200 KB of instructions missed
// the instruction cache in every phase (a third of the warps' samples, in Nsight Compute).
//
// With Q8_0 weights (kQ8) a row is `depth` quants, and each pack of 8 becomes 8 values d · q of
// the element type, each rounded once as dequantize_q8_0 rounds it (q8x8_times_scale), before its
// products with the vector: as the launches' Q8_0 products take them. (A form of its own, so that
// the 16-bit form's code stays as small as it was.)
template <class T, bool kQ8>
__device__ __noinline__ void product_sums(const Region& region, Rows r, int64_t depth,
                                          ScalesAt scales, const T* vector, float* sums) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int packs = static_cast<int>(depth / kPack);
  const auto row_bytes = static_cast<uint32_t>(depth * (kQ8 ? 1 : sizeof(T)));
  const auto scale_row_bytes = static_cast<uint32_t>(q8_0_scale_row_bytes(depth));
  const auto* x = reinterpret_cast<const uint4*>(vector);
  // A row's sum with its packs from load(pack). Two sums, so that each lane's chain of dependent
  // FMAs is half as long.
  const auto row_sum = [&](auto load) {
    float even = 0.0f, odd = 0.0f;
    int pack = lane;
#pragma unroll 2
    for (; pack + 32 < packs; pack += 64) {
      even = dot8<T>(load(pack), x[pack], even);
      odd = dot8<T>(load(pack + 32), x[pack + 32], odd);
    }
    if (pack < packs) even = dot8<T>(load(pack), x[pack], even);
    return warp_sum(even + odd);
  };
  for (int64_t row = r.first + warp; row < r.end; row += kComputeWarps) {
    const auto offset = static_cast<uint32_t>(row - r.first) * row_bytes;
    float sum;
    if constexpr (kQ8) {
      // A pack's 8 quants are 8 bytes; its scale is that of its block of 32 values (4 packs).
      const uint32_t scales_offset =
          scales.at + static_cast<uint32_t>(row - scales.first_row) * scale_row_bytes;
      const auto* q_row = reinterpret_cast<const uint2*>(region.at(offset));
      const auto* d_row = reinterpret_cast<const __half*>(region.at(scales_offset));
      const auto expand = [](uint2 q, __half scale) {
        return q8x8_times_scale<T>(q.x, q.y, scale);
      };
      sum = region.unbroken(offset, row_bytes) && region.unbroken(scales_offset, scale_row_bytes)
                ? row_sum([&](int pack) { return expand(q_row[pack], d_row[pack / 4]); })
                : row_sum([&](int pack) {
                    return expand(
                        *reinterpret_cast<const uint2*>(region.at(offset + pack * 8)),
                        *reinterpret_cast<const __half*>(region.at(scales_offset + pack / 4 * 2)));
                  });
    } else {
      const auto* w_row = reinterpret_cast<const uint4*>(region.at(offset));
      // A row that the ring's end cuts (at most one a turn of the ring) finds each pack's place.
      sum = region.unbroken(offset, row_bytes)
                ? row_sum([&](int pack) { return w_row[pack]; })
                : row_sum([&](int pack) {
                    return *reinterpret_cast<const uint4*>(region.at(offset + pack * 16));
                  });
    }
    if (lane == 0) sums[row - r.first] = sum;
  }
}

// Phase `phase` (its layer's phase phase % kPhases; the layout at the top of the file). Every
// product takes one path (its input vector, its sums, then its epilogue by the phase), so that
// the kernel's code stays small. vector_ready() marks the time of the input vector (for
// HARK_CUDA_STEP_TIMING).
//
// A phase reads the tagged vector the phase before it wrote (tagged with that phase), and no
// phase writes a vector that some CTA may not have read yet: x, read by phases 0, 3 and 6, is
// written next by phases 2, 5 and 7, each of which takes the whole context or hidden vector, and
// with it every CTA's work of the phases between (every CTA has rows of q, k and v, and of the
// hidden vector); likewise the context (read by 2 and 5, written by 4 and the next layer's 1),
// the partial softmaxes it is merged from (read by the merging CTAs of 1 and 4 before they write
// the context, written again a layer later) and the hidden vector (read by 7, written by the next
// layer's 6).
template <class T, class Mark>
__device__ void run_phase(const Params& p, const Step& step, const StepLayer& w, int phase,
                          const Region& region, T* vector, float* own, float* scores, float* reduce,
                          float* scratch, float* sums, Mark vector_ready) {
  const int layer = phase / kPhases, kind = phase % kPhases;
  // The tags this phase writes (vectors, partials), and the one it reads (the previous phase's;
  // the first reads the step's input).
  const uint64_t phases_before = phase_count(step.launch, p.n_layers, phase);
  const uint32_t tag = vector_tag(phases_before), partials_tag = partial_tag(phases_before);
  const uint32_t read_tag = phase > 0 ? vector_tag(phases_before - 1) : 0;
  T* keys = static_cast<T*>(p.keys) + layer * p.cache_layer_stride;
  T* values = static_cast<T*>(p.values) + layer * p.cache_layer_stride;
  const int64_t d = p.d;
  Product product;
  if (product_of(p, w, phase, product)) {
    const Share share = product_share(p, product);
    if (product.gamma != nullptr) {
      norm_into<T>(p, region, share, product.eps, read_tag, vector, scratch);
    } else {
      load_into<T>(kind == 7 ? p.tagged_hidden : p.tagged_context, product.depth, read_tag,
                   p.poll_ns, vector);
    }
    compute_sync();
    vector_ready();
    const Rows r = rows_of(product.rows);
    if (p.q8_0) {
      const ScalesAt scales = {static_cast<uint32_t>(share.scales),
                               scale_rows_of(r, product.depth).first};
      product_sums<T, true>(region, r, product.depth, scales, vector, sums);
    } else {
      product_sums<T, false>(region, r, product.depth, {}, vector, sums);
    }
    compute_sync();
    for (int64_t row = r.first + threadIdx.x; row < r.end; row += kComputeThreads) {
      const float value = sums[row - r.first] + bias_of<T>(region, share, product.bias, r, row);
      if (kind == 0 || kind == 3) {  // q (k, v), tagged; this token's k and v into the caches too
        store_tagged<T>(p.tagged_qkv + row, value, tag);
        if (row >= d) {
          T* cache = row < 2 * d ? keys + step.position * d + row - d
                                 : values + step.position * d + row - 2 * d;
          *cache = from_float<T>(value);
        }
      } else if (kind == 6) {
        store_tagged<T>(p.tagged_hidden + row, gelu_value(value), tag);
      } else {  // the residual: the CTA's rows of x stay in `own`
        const T sum = from_float<T>(value + own[row - r.first]);
        own[row - r.first] = to_float(sum);
        if (phase + 1 < p.n_layers * kPhases) {
          store_tagged<T>(p.tagged_x + row, to_float(sum), tag);
        } else {  // the step's output
          static_cast<T*>(p.x)[row] = sum;
        }
      }
    }
    return;
  }
  // An attention's head's rows of q (k, v): after its warps' value sums (layout_of).
  T* staged = reinterpret_cast<T*>(reduce + kWarps * kHeadDim);
  if (kind == 1) {
    const int chunks = step.chunks;
    if (chunks == 0) {  // a sequence that is done: its context is zeros
      for (int i = blockIdx.x * kComputeThreads + threadIdx.x; i < d;
           i += gridDim.x * kComputeThreads) {
        store_tagged<T>(p.tagged_context + i, 0.0f, tag);
      }
      return;
    }
    // The head whose partials this CTA merges (it attends to the head's first chunk), once all
    // its items are done: a merge waits for other CTAs' items, and one of those may be the
    // second item of a CTA that merges another head (from 7 chunks on, past 132 items).
    int merged_head = -1;
    int head, chunk;
    for (int round = 0; self_item(p, chunks, round, head, chunk); ++round) {
      const int first = chunk * kSelfChunk;
      const int64_t at = int64_t{first} * d + head * kHeadDim;
      const int count = min(kSelfChunk, step.length - first);
      // This step's key and value, which the caches may not show yet: from the tagged rows.
      const int current = static_cast<int>(step.position - first);
      const bool here = current >= 0 && current < count;
      stage_head<T>(p.tagged_qkv, d, head, here ? 3 : 1, read_tag, p.poll_ns, staged);
      uint64_t* head_partials = p.self_partials + int64_t{head} * p.self_chunks * kPartial;
      const Attended to = {chunks > 1 ? head_partials + chunk * kPartial : nullptr, partials_tag,
                           p.tagged_context + head * kHeadDim, tag};
      if (round == 0 && p.self_copies) {  // the keys and values the copy warp brought, a box each
        const T* copied = reinterpret_cast<const T*>(region.at(0));
        attend<T, false>(copied, copied + kBoxRows * kHeadDim, kHeadDim, count, staged + kHeadDim,
                         here ? current : -1, staged, p.scale, scores, reduce, scratch, to);
      } else {
        attend<T, true>(keys + at, values + at, d, count, staged + kHeadDim, here ? current : -1,
                        staged, p.scale, scores, reduce, scratch, to);
      }
      vector_ready();
      if (chunk == 0 && chunks > 1) merged_head = head;
    }
    if (merged_head >= 0) {
      merge_head<T>(p.self_partials + int64_t{merged_head} * p.self_chunks * kPartial, chunks,
                    partials_tag, p.tagged_context + merged_head * kHeadDim, tag);
    }
    return;
  }
  CrossItem item;  // kind 4
  if (!cross_item(p, item)) return;
  const int count = max(0, min(item.count, step.cross_length - item.first));
  stage_head<T>(p.tagged_qkv, d, item.head, 1, read_tag, p.poll_ns, staged);
  const T* keys_here = reinterpret_cast<const T*>(region.at(0));
  uint64_t* head_partials = p.cross_partials + int64_t{item.head} * p.cross_chunks * kPartial;
  uint32_t* context = p.tagged_context + item.head * kHeadDim;
  const bool merged = p.cross_chunks > 1;
  attend<T, false>(
      keys_here, keys_here + int64_t{p.cross_boxes} * kBoxRows * kHeadDim, kHeadDim, count, nullptr,
      -1, staged, p.scale, scores, reduce, scratch,
      {merged ? head_partials + item.chunk * kPartial : nullptr, partials_tag, context, tag});
  vector_ready();
  if (item.chunk == 0 && merged) {
    merge_head<T>(head_partials, p.cross_chunks, partials_tag, context, tag);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    decoder_step_kernel(const __grid_constant__ Params p,
                        const __grid_constant__ CUtensorMap self_map,
                        const __grid_constant__ CUtensorMap cross_map) {
  extern __shared__ __align__(128) unsigned char shared[];
  // The slices' ring of mbarriers (each counts one slice's bytes landing), then the word that
  // frees the ring of copies.
  auto* slots = reinterpret_cast<uint64_t*>(shared + p.barriers_offset);
  auto* freed = reinterpret_cast<uint32_t*>(slots + p.slots);
  auto* layers = reinterpret_cast<StepLayer*>(shared + p.layers_offset);
  T* vector = reinterpret_cast<T*>(shared + p.vector_offset);
  float* own = reinterpret_cast<float*>(shared + p.own_offset);
  float* scores = reinterpret_cast<float*>(shared + p.scores_offset);
  float* reduce = reinterpret_cast<float*>(shared + p.reduce_offset);
  float* scratch = reinterpret_cast<float*>(shared + p.scratch_offset);
  float* sums = reinterpret_cast<float*>(shared + p.sums_offset);
  auto* plan = reinterpret_cast<PhaseCopies*>(shared + p.plan_offset);
  // The layers' pointers, the CTA's rows of x and the step's position and lengths, once.
  const int layer_words = p.n_layers * static_cast<int>(sizeof(StepLayer) / 4);
  for (int i = threadIdx.x; i < layer_words; i += kThreads) {
    reinterpret_cast<uint32_t*>(layers)[i] = reinterpret_cast<const uint32_t*>(p.layers)[i];
  }
  const Rows own_rows = rows_of(p.d);
  for (int64_t row = own_rows.first + threadIdx.x; row < own_rows.end; row += kThreads) {
    own[row - own_rows.first] = to_float(static_cast<const T*>(p.x)[row]);
  }
  const Step step = step_of(p);
  plan_copies<T>(p, layers, step.chunks, plan);
  if (threadIdx.x == 0) {
    for (int slot = 0; slot < p.slots; ++slot) barrier_init(&slots[slot], 1);
    *freed = 0;
    barrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x / 32 == kCopyWarp) {
    if (p.only != kWork) {
      copy_step<T>(p, &self_map, &cross_map, layers, step.chunks, plan, shared, slots, freed);
    }
    return;
  }

  if (p.only == kWork) {  // zeros for weights: the step's values stay finite
    for (uint32_t at = threadIdx.x * 16; at < p.ring_bytes; at += kComputeThreads * 16) {
      *reinterpret_cast<uint4*>(shared + at) = make_uint4(0, 0, 0, 0);
    }
    compute_sync();
  }
  const int phases = p.n_layers * kPhases;
  const bool timed = p.timings != nullptr && blockIdx.x == 0 && threadIdx.x == 0;
  unsigned long long* done = p.timings != nullptr && threadIdx.x == 0
                                 ? p.timings + kMarks * p.n_layers * kPhases + blockIdx.x
                                 : nullptr;
  for (int phase = 0; phase < phases; ++phase) {
    const PhaseCopies copies = plan[phase];
    for (uint32_t slice = copies.first_slice, end = slice + copies.slices;
         slice < end && p.only != kWork; ++slice) {
      barrier_wait(&slots[slice % p.slots], (slice / p.slots) & 1);
    }
    if (timed) p.timings[kMarks * phase] = global_time();
    // (HARK_CUDA_STEP_TIMING) The input vector is made; in an attention, the first partial.
    const auto vector_ready = [&] {
      if (timed) p.timings[kMarks * phase + 1] = global_time();
    };
    if (p.only != kCopies && p.only != kWeights) {
      run_phase<T>(p, step, layers[phase / kPhases], phase, {shared, copies.offset, p.ring_bytes},
                   vector, own, scores, reduce, scratch, sums, vector_ready);
    }
    compute_sync();
    if (copies.slices > 0 && threadIdx.x == 0) free_ring(freed, copies.end);
    if (timed) p.timings[kMarks * phase + 2] = global_time();
    if (done) done[phase * gridDim.x] = global_time();
  }
  // CTA 0 has read the hidden vector of every CTA's last phase 6, so every CTA has read the count
  // of launches: the next launch's tags follow this one's.
  if (blockIdx.x == 0 && threadIdx.x == 0) *p.launches = step.launch + 1;
}

// The kernel's attributes, once per instantiation: its shared memory limit raised to the most a
// block may take, and whether one block fits an SM with `shared_bytes`.
int64_t shared_per_block() {
  static const int64_t bytes =
      device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "shared memory per block");
  return bytes;
}

template <class T>
bool fits(int64_t shared_bytes) {
  static const bool raised = [] {
    allow_shared_memory(decoder_step_kernel<T>, static_cast<size_t>(shared_per_block()),
                        "decoder_step shared memory limit");
    return true;
  }();
  (void)raised;
  if (shared_bytes > shared_per_block()) return false;
  // A step asks twice (whether it runs, then the launch): the most shared memory found to fit
  // answers at once for as much or less.
  static std::atomic<int64_t> known_to_fit{0};
  if (shared_bytes <= known_to_fit.load()) return true;
  int blocks = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, decoder_step_kernel<T>, kThreads,
                                                      static_cast<size_t>(shared_bytes)),
        "decoder_step occupancy");
  if (blocks < 1) return false;
  int64_t known = known_to_fit.load();
  while (known < shared_bytes && !known_to_fit.compare_exchange_weak(known, shared_bytes)) {
  }
  return true;
}

bool cooperative_launches() {
  static const bool supported =
      device_attribute(cudaDevAttrCooperativeLaunch, "cooperative launch attribute") != 0;
  return supported;
}

bool shape_runs(Element e, const StepShape& s) {
  return (e == Element::f16 || e == Element::bf16) && s.heads > 0 && s.layers > 0 && s.frames > 0 &&
         s.capacity > 0 && s.d == int64_t{s.heads} * kHeadDim && s.d <= kMaxNormWidth &&
         s.ffn > 0 && s.ffn % (s.q8_0 ? 32 : kPack) == 0;
}

// HARK_CUDA_STEP_TIMING's table: for each of a layer's phases, CTA 0's time (µs, summed over
// the layers) waiting for its copies, making its input vector (with the wait for the tagged vector
// it reads; in an attention, the first partial softmax), and doing the rest of its work; then how
// much later than CTA 0 the slowest CTA finished the phase, and which CTA was most often slowest.
void print_timings(const unsigned long long* timings, int phases, int ctas, cudaStream_t stream) {
  std::vector<unsigned long long> t((kMarks + static_cast<size_t>(ctas)) * phases);
  download(timings, sizeof(unsigned long long) * t.size(), t.data(), stream);
  check(cudaStreamSynchronize(stream), "decoder_step timings");
  double copies[kPhases] = {}, vector[kPhases] = {}, rest[kPhases] = {}, slowest[kPhases] = {};
  std::vector<std::vector<int>> slowest_counts(kPhases, std::vector<int>(ctas, 0));
  for (int phase = 0; phase < phases; ++phase) {
    const unsigned long long* at = t.data() + kMarks * phase;
    const unsigned long long* done = t.data() + kMarks * static_cast<size_t>(phases) + phase * ctas;
    const unsigned long long ready = at[1] > at[0] ? at[1] : at[0];  // no vector: no mark
    const int k = phase % kPhases;
    int last = 0;
    for (int c = 1; c < ctas; ++c) last = done[c] > done[last] ? c : last;
    ++slowest_counts[k][last];
    if (phase > 0) copies[k] += (at[0] - at[-1]) * 1e-3;
    vector[k] += (ready - at[0]) * 1e-3;
    rest[k] += (at[2] - ready) * 1e-3;
    slowest[k] += (static_cast<double>(done[last]) - static_cast<double>(at[2])) * 1e-3;
  }
  std::fprintf(stderr, "decoder_step, CTA 0, us over %d layers: %.1f in all\n", phases / kPhases,
               (t[kMarks * static_cast<size_t>(phases) - 1] - t[0]) * 1e-3);
  for (int k = 0; k < kPhases; ++k) {
    const auto& counts = slowest_counts[k];
    const int most =
        static_cast<int>(std::max_element(counts.begin(), counts.end()) - counts.begin());
    std::fprintf(stderr,
                 "  phase %d: copies %.1f, vector %.1f, rest %.1f (slowest CTA %.1f later; CTA %d "
                 "slowest %d times)\n",
                 k, copies[k], vector[k], rest[k], slowest[k], most, counts[most]);
  }
}

// The environment's `name` as a positive number, or `fallback` where it is not one.
int positive_setting(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : fallback;
}

// Whether a launch of `l` takes the step of `shape`. The ring must hold the largest region; twice
// that lets the copies run a phase ahead. Every CTA must have rows of every product (d of them at
// least), since no vector is written again before every CTA's rows of the next product show that
// it has read it (run_phase).
bool layout_fits(const StepShape& shape, const Layout& l) {
  return shape.heads <= l.ctas && shape.d >= l.ctas && l.ring_bytes >= 2 * l.most_region;
}

}  // namespace

bool decoder_step_fits(Element e, const StepShape& shape, int multiprocessors,
                       int64_t shared_per_block) {
  return shape_runs(e, shape) && multiprocessors > 0 &&
         layout_fits(shape, layout_of(shape, multiprocessors, shared_per_block));
}

bool decoder_step_runs(Element e, const StepShape& shape) {
  if (!shape_runs(e, shape) || !present() || !cooperative_launches()) return false;
  const Layout l = layout_of(shape, multiprocessor_count(), shared_per_block());
  return layout_fits(shape, l) &&
         (e == Element::f16 ? fits<__half>(l.shared_bytes) : fits<bf16>(l.shared_bytes));
}

size_t decoder_step_scratch_bytes(const StepShape& shape) {
  return static_cast<size_t>(
      layout_of(shape, multiprocessor_count(), shared_per_block()).scratch_bytes);
}

void decoder_step(const DecoderStep& step, cudaStream_t stream) {
  const StepShape& s = step.shape;
  if (!decoder_step_runs(step.e, s)) {
    fail("decoder_step: the step of d ", s.d, ", ffn ", s.ffn, ", ", s.heads, " heads, ", s.frames,
         " frames does not run on this GPU");
  }
  for (const void* pointer : std::initializer_list<const void*>{
           step.x, step.keys, step.values, step.cross_keys, step.cross_values, step.scratch}) {
    if (!aligned(pointer, 16)) fail("decoder_step: pointers must be 16-byte aligned");
  }
  // The caches as a byte matrix of rows of d values from the first layer's keys (the
  // self-attention's tensor map, below).
  const int64_t element = 2;
  const int64_t row_bytes = s.d * element;
  const auto values_bytes =
      static_cast<const unsigned char*>(step.values) - static_cast<const unsigned char*>(step.keys);
  if (step.cache_layer_stride % s.d != 0 || values_bytes < s.capacity * row_bytes ||
      values_bytes % row_bytes != 0) {
    fail(
        "decoder_step: the caches must be one matrix of rows of d values, each layer's keys a "
        "whole number of rows from the last's and its values from its keys, past its capacity");
  }
  const Layout l = layout_of(s, multiprocessor_count(), shared_per_block());
  auto* scratch = static_cast<unsigned char*>(step.scratch);
  Params p = {};
  p.layers = step.layers;
  p.n_layers = s.layers;
  p.heads = s.heads;
  p.d = s.d;
  p.ffn = s.ffn;
  p.scale = step.scale;
  p.x = step.x;
  p.tagged_qkv = reinterpret_cast<uint32_t*>(scratch + l.qkv_offset);
  p.tagged_x = reinterpret_cast<uint32_t*>(scratch + l.x_offset);
  p.tagged_context = reinterpret_cast<uint32_t*>(scratch + l.context_offset);
  p.tagged_hidden = reinterpret_cast<uint32_t*>(scratch + l.hidden_offset);
  p.self_partials = reinterpret_cast<uint64_t*>(scratch + l.self_offset);
  p.cross_partials = reinterpret_cast<uint64_t*>(scratch + l.cross_offset);
  p.launches = reinterpret_cast<unsigned*>(scratch);
  p.slots = l.slots;
  p.cross_boxes = l.cross_boxes;
  // The kilobytes a CTA's copy warp keeps in flight: 64, or HARK_CUDA_STEP_IN_FLIGHT's. With grid
  // barriers 16 was best (more held them up); without, large-v3 on an H200 stepped in 1.544 ms
  // with 16, 1.504 with 32, 1.500 with 64, 1.503 with 128 (bench/RESULTS.md, forty-first session).
  static const int in_flight_kb = positive_setting("HARK_CUDA_STEP_IN_FLIGHT", 64);
  p.slices_in_flight =
      static_cast<int>(std::clamp<int64_t>(int64_t{in_flight_kb} * 1024 / kSlice, 1, l.slots / 2));
  static const int poll_ns = positive_setting("HARK_CUDA_STEP_POLL_NS", kPauseNs);
  p.poll_ns = static_cast<unsigned>(poll_ns);
  static const int only = [] {
    const char* value = std::getenv("HARK_CUDA_STEP_ONLY");
    if (value == nullptr || *value == 0) return int{kEverything};
    if (std::string(value) == "copies") return int{kCopies};
    if (std::string(value) == "work") return int{kWork};
    if (std::string(value) == "weights") return int{kWeights};
    fail("HARK_CUDA_STEP_ONLY: expected copies, weights or work, got ", value);
  }();
  p.only = only;
  // (Read at each call, as HARK_CUDA_STEP_KERNEL is, so that a test can compare both.)
  p.self_copies = !environment_is("HARK_CUDA_STEP_SELF_COPIES", "0");
  p.q8_0 = s.q8_0;
  p.keys = step.keys;
  p.values = step.values;
  p.cache_layer_stride = step.cache_layer_stride;
  p.positions = step.positions;
  p.lengths = step.lengths;
  p.cross_layer_stride = step.cross_layer_stride;
  p.cross_lengths = step.cross_lengths;
  p.frames = s.frames;
  p.cross_chunks = l.cross_chunks;
  p.cross_chunk_frames = l.cross_chunk_frames;
  p.self_chunks = l.self_chunks;
  p.ring_bytes = static_cast<uint32_t>(l.ring_bytes);
  p.layers_offset = l.layers_offset;
  p.vector_offset = l.vector_offset;
  p.own_offset = l.own_offset;
  p.scores_offset = l.scores_offset;
  p.reduce_offset = l.reduce_offset;
  p.scratch_offset = l.scratch_offset;
  p.barriers_offset = l.barriers_offset;
  p.sums_offset = l.sums_offset;
  p.plan_offset = l.plan_offset;

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(l.ctas));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(l.shared_bytes);
  config.stream = stream;
  cudaLaunchAttribute cooperative = {};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  const auto kernel =
      step.e == Element::f16 ? decoder_step_kernel<__half> : decoder_step_kernel<bf16>;
  // HARK_CUDA_STEP_TIMING: the launches outside a capture (a decode's first step) time CTA 0's
  // phases and print them, summed over the layers, to stderr (a diagnostic: it waits for the GPU).
  static unsigned long long* timings = nullptr;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capturing), "decoder_step capture status");
  const bool timed =
      std::getenv("HARK_CUDA_STEP_TIMING") != nullptr && capturing == cudaStreamCaptureStatusNone;
  const int phases = s.layers * kPhases;
  const size_t timing_bytes = sizeof(unsigned long long) * (kMarks + l.ctas) * phases;
  if (timed) {
    static size_t allocated = 0;
    if (allocated < timing_bytes) {
      if (timings != nullptr) check(cudaFree(timings), "decoder_step timings");
      check(cudaMalloc(&timings, timing_bytes), "decoder_step timings");
      allocated = timing_bytes;
    }
    check(cudaMemsetAsync(timings, 0, timing_bytes, stream), "decoder_step timings");
    p.timings = timings;
  }
  // The window's keys and values as a byte matrix [frames, a row of every layer's K and V], in
  // boxes of a chunk's frames × one head's 64 values.
  p.cross_values_column = static_cast<int>((static_cast<const unsigned char*>(step.cross_values) -
                                            static_cast<const unsigned char*>(step.cross_keys)));
  const CUtensorMap cross_map =
      byte_matrix_map(step.cross_keys, s.frames, step.cross_row_stride * element, kBoxRows,
                      static_cast<int>(kHeadDim * element));
  // The caches, in boxes of 64 positions × one head's 64 values.
  p.self_layer_rows = static_cast<int>(step.cache_layer_stride / s.d);
  p.self_values_rows = static_cast<int>(values_bytes / row_bytes);
  const int64_t cache_rows =
      int64_t{s.layers - 1} * p.self_layer_rows + p.self_values_rows + s.capacity;
  const CUtensorMap self_map = byte_matrix_map(step.keys, cache_rows, row_bytes, kBoxRows,
                                               static_cast<int>(kHeadDim * element));
  check(cudaLaunchKernelEx(&config, kernel, p, self_map, cross_map), "decoder_step launch");
  check_launch("decoder_step");
  if (timed) print_timings(timings, phases, l.ctas, stream);
}

}  // namespace hark::compute::cuda
