// Multi-head scaled dot-product attention on the CPU.
//
// Work is split into (sequence, head, block of queries) tasks across threads. A single query (a
// decode step) is done with direct dot products, because a BLAS call per head would cost more
// than the arithmetic. Blocks of queries (the encoder, a prompt prefill) go through AVX-512
// register tiles over keys and values packed per head (attention_avx512.cpp), or without
// AVX-512 through two sgemm calls per task with the block's scores kept in cache. Keys and
// values attended to again and again (cross-attention over a window) are packed once, by
// pack_kv(), and then serve every decode step, one query or many.
#include <algorithm>
#include <utility>
#include <vector>

#include "compute/cpu/kernels.h"
#include "compute/cpu/simd512.h"

namespace hark::compute::cpu {

namespace {

// Queries per task: their scores ([block x keys]) stay in L2, and sgemm gets rows enough to
// amortise packing each head's keys and values.
constexpr int64_t kQueryBlock = 256;
// A single query is done with direct dot products; from two on, tiles (or sgemm) reuse each key
// and value row enough to pay for packing.
constexpr int64_t kDirectQueries = 1;

struct Head {
  const float* q;  // first query row of the block; rows are `stride` apart
  const float* k;  // first key row; rows are `stride` apart (same for v)
  const float* v;
  float* out;
  int64_t stride;  // the model width H·Dh
  int64_t head_dim;
};

// One query against keys [0, n): out = softmax(scale · q kᵀ) v. `scores` has room for n values.
void attend_one_portable(const float* q, const float* k, const float* v, int64_t stride,
                         int64_t head_dim, int64_t n, float scale, float* scores, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    float sum = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) sum += q[d] * k[j * stride + d];
    scores[j] = scale * sum;
  }
  const float inverse = 1.0f / exp_shifted_row(scores, n);
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t d = 0; d < head_dim; ++d) out[d] += scores[j] * v[j * stride + d];
  }
  for (int64_t d = 0; d < head_dim; ++d) out[d] *= inverse;
}

#if HARK_X86
// head_dim a multiple of 8. Scores four keys at a time (one horizontal reduction for four dot
// products); the weighted sum keeps up to 64 output values in registers across all keys.
HARK_AVX2 void attend_one_avx2(const float* q, const float* k, const float* v, int64_t stride,
                               int64_t head_dim, int64_t n, float scale, float* scores,
                               float* out) {
  const __m128 vscale = _mm_set1_ps(scale);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* k0 = k + j * stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int64_t d = 0; d < head_dim; d += 8) {
      const __m256 qv = _mm256_loadu_ps(q + d);
      a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + d), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + stride + d), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 2 * stride + d), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 3 * stride + d), a3);
    }
    // hadd pairs lanes within each 128-bit half: after two rounds each half holds the four
    // partial sums, and the halves add up to the four dot products.
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    _mm_storeu_ps(scores + j, _mm_mul_ps(sums, vscale));
  }
  for (; j < n; ++j) {
    __m256 a = _mm256_setzero_ps();
    for (int64_t d = 0; d < head_dim; d += 8) {
      a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + j * stride + d), a);
    }
    scores[j] = scale * hsum8(a);
  }
  const __m256 inverse = _mm256_set1_ps(1.0f / exp_shifted_row(scores, n));
  for (int64_t d0 = 0; d0 < head_dim; d0 += 64) {
    const int chunks = static_cast<int>(std::min<int64_t>(64, head_dim - d0) / 8);
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    const float* vj = v + d0;
    if (chunks == 8) {
      for (int64_t t = 0; t < n; ++t, vj += stride) {
        const __m256 p = _mm256_broadcast_ss(scores + t);
        for (int c = 0; c < 8; ++c)
          acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
      }
    } else {
      for (int64_t t = 0; t < n; ++t, vj += stride) {
        const __m256 p = _mm256_broadcast_ss(scores + t);
        for (int c = 0; c < chunks; ++c) {
          acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
        }
      }
    }
    for (int c = 0; c < chunks; ++c) {
      _mm256_storeu_ps(out + d0 + 8 * c, _mm256_mul_ps(acc[c], inverse));
    }
  }
}
#endif

// Query r of the block sees keys [0, visible(r)); `scores` has room for the longest row.
template <class Visible>
void attend_direct(const Head& head, int64_t rows, Visible visible, float scale,
                   std::vector<float>& scores) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* q = head.q + r * head.stride;
    float* out = head.out + r * head.stride;
#if HARK_X86
    if (has_avx2() && head.head_dim % 8 == 0) {
      attend_one_avx2(q, head.k, head.v, head.stride, head.head_dim, visible(r), scale,
                      scores.data(), out);
      continue;
    }
#endif
    attend_one_portable(q, head.k, head.v, head.stride, head.head_dim, visible(r), scale,
                        scores.data(), out);
  }
}

template <class Visible>
void attend_gemm(const Head& head, int64_t rows, int64_t keys, Visible visible, float scale,
                 std::vector<float>& scores) {
  float* s = scores.data();
  sgemm(true, rows, keys, head.head_dim, scale, head.q, head.stride, head.k, head.stride, 0.0f, s,
        keys);
  // exp(s - max) without the division: the output rows are divided by the sums after the
  // product, Dh values per row instead of `keys`.
  float inverse_sums[kQueryBlock];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = visible(r);
    inverse_sums[r] = 1.0f / exp_shifted_row(s + r * keys, n);
    // Masked keys get weight 0, so one product over `keys` columns serves every row.
    std::fill(s + r * keys + n, s + (r + 1) * keys, 0.0f);
  }
  sgemm(false, rows, head.head_dim, keys, 1.0f, s, keys, head.v, head.stride, 0.0f, head.out,
        head.stride);
  for (int64_t r = 0; r < rows; ++r) {
    float* out = head.out + r * head.stride;
    for (int64_t d = 0; d < head.head_dim; ++d) out[d] *= inverse_sums[r];
  }
}

// Queries against one head packed by pack_head_avx512 (keys in [head_dim][32] blocks, then the
// values [keys][head_dim]), without AVX-512: only when tests cap the instruction set after
// packing, so plain loops will do.
void attend_packed_portable(const float* q, const float* packed, float* out, int64_t stride,
                            int64_t head_dim, int64_t keys, int64_t rows, float scale,
                            std::vector<float>& scores) {
  const float* values = packed + (keys + 31) / 32 * 32 * head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = q + r * stride;
    for (int64_t j = 0; j < keys; ++j) {
      const float* key_block = packed + (j / 32) * head_dim * 32 + j % 32;
      float sum = 0.0f;
      for (int64_t d = 0; d < head_dim; ++d) sum += qr[d] * key_block[d * 32];
      scores[j] = scale * sum;
    }
    const float inverse = 1.0f / exp_shifted_row(scores.data(), keys);
    float* o = out + r * stride;
    std::fill(o, o + head_dim, 0.0f);
    for (int64_t j = 0; j < keys; ++j) {
      for (int64_t d = 0; d < head_dim; ++d) o[d] += scores[j] * values[j * head_dim + d];
    }
    for (int64_t d = 0; d < head_dim; ++d) o[d] *= inverse;
  }
}

}  // namespace

void pack_kv(Tensor k, Tensor v, int heads, PackedKv& kv) {
  kv.heads = heads;
  kv.length = k.dim(1);
  kv.width = k.dim(2);
  const int64_t head_dim = kv.width / heads;
  if (!has_avx512() || head_dim % 16 != 0) {
    kv.keys = std::move(k);
    kv.values = std::move(v);
    kv.packed = Tensor();
    return;
  }
  const int64_t size = packed_head_floats(head_dim, kv.length);
  kv.packed.resize(Shape{heads * size});
  float* packed = kv.packed.data();
#pragma omp parallel for schedule(static) if (heads > 1 && kv.length * kv.width >= 256 * 1024)
  for (int h = 0; h < heads; ++h) {
    pack_head_avx512(k.data() + h * head_dim, v.data() + h * head_dim, kv.width, head_dim,
                     kv.length, packed + h * size);
  }
  kv.keys = Tensor();
  kv.values = Tensor();
}

void attention(const Tensor& q, const PackedKv& kv, float scale, Tensor& out) {
  if (!kv.is_packed()) {
    return cpu::attention(q, kv.keys, kv.values, kv.length, kv.heads, scale, false, out);
  }
  // Every query row of every sequence sees all keys: one [rows, width] matrix of queries.
  const int64_t rows = q.dim(0) * q.dim(1), width = kv.width, heads = kv.heads;
  const int64_t head_dim = width / heads;
  const int64_t size = packed_head_floats(head_dim, kv.length);
  const int64_t blocks = (rows + kQueryBlock - 1) / kQueryBlock;
  const int64_t tasks = heads * blocks;
  const bool parallel = tasks > 1 && rows * kv.length * width >= 256 * 1024;
  const bool avx512 = has_avx512();
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t task = 0; task < tasks; ++task) {
    thread_local std::vector<float> scores;
    const int64_t h = task / blocks;
    const int64_t i0 = (task % blocks) * kQueryBlock;
    const int64_t count = std::min(kQueryBlock, rows - i0);
    const float* head_q = q.data() + i0 * width + h * head_dim;
    const float* head_kv = kv.packed.data() + h * size;
    float* head_out = out.data() + i0 * width + h * head_dim;
    if (avx512) {
      attend_block_avx512(head_q, head_kv, head_out, width, head_dim, kv.length, count, kv.length,
                          false, scale, scores);
    } else {
      if (scores.size() < static_cast<size_t>(kv.length)) scores.resize(kv.length);
      attend_packed_portable(head_q, head_kv, head_out, width, head_dim, kv.length, count, scale,
                             scores);
    }
  }
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_length, int heads,
               float scale, bool causal, Tensor& out) {
  configure_blas();
  int64_t sequences = q.dim(0), queries = q.dim(1);
  const int64_t width = q.dim(2);
  const int64_t head_dim = width / heads;
  const bool shared_kv = k.dim(0) == 1;
  const int64_t capacity = k.dim(1);
  if (shared_kv && !causal) {
    // Every sequence attends to the same keys with the same visibility: their queries are rows
    // of one [sequences·queries, width] matrix, so each head's keys are read once for all.
    queries *= sequences;
    sequences = 1;
  }
  const int64_t blocks = (queries + kQueryBlock - 1) / kQueryBlock;
  const int64_t tasks = sequences * heads * blocks;
  // Position of query 0 (causal): the queries are the last `queries` of the kv_length positions.
  const int64_t first_position = kv_length - queries;
  // Parallel from about 1 MiB of keys and values per query row on (cross-attention over a
  // window; not the short self-attention of a decode step: see linear.cpp's kParallelWork).
  const bool parallel = tasks > 1 && sequences * queries * kv_length * width >= 256 * 1024;

  // Blocks of queries go through AVX-512 tiles where the CPU has them, over keys and values
  // packed once per (sequence, head) here.
  const bool tiles = queries > kDirectQueries && head_dim % 16 == 0 && has_avx512();
  const int64_t kv_sequences = shared_kv ? 1 : sequences;
  const int64_t packed_size = packed_head_floats(head_dim, kv_length);
  thread_local std::vector<float> packed;
  if (tiles) {
    if (packed.size() < static_cast<size_t>(kv_sequences * heads * packed_size)) {
      packed.resize(kv_sequences * heads * packed_size);
    }
    float* all = packed.data();
#pragma omp parallel for schedule(static) if (parallel && kv_sequences * heads > 1)
    for (int64_t sh = 0; sh < kv_sequences * heads; ++sh) {
      const int64_t offset = (sh / heads) * capacity * width + (sh % heads) * head_dim;
      pack_head_avx512(k.data() + offset, v.data() + offset, width, head_dim, kv_length,
                       all + sh * packed_size);
    }
  }
  const float* packed_all = packed.data();

#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t task = 0; task < tasks; ++task) {
    thread_local std::vector<float> scores;
    const int64_t b = task / (heads * blocks);
    const int64_t h = (task / blocks) % heads;
    const int64_t i0 = (task % blocks) * kQueryBlock;
    const int64_t rows = std::min(kQueryBlock, queries - i0);
    const int64_t kv_sequence = shared_kv ? 0 : b;
    Head head{q.data() + (b * queries + i0) * width + h * head_dim,
              k.data() + kv_sequence * capacity * width + h * head_dim,
              v.data() + kv_sequence * capacity * width + h * head_dim,
              out.data() + (b * queries + i0) * width + h * head_dim,
              width,
              head_dim};
    auto visible = [&](int64_t r) { return causal ? first_position + i0 + r + 1 : kv_length; };
    const int64_t keys = visible(rows - 1);
    if (scores.size() < static_cast<size_t>(rows * keys)) scores.resize(rows * keys);
    if (rows <= kDirectQueries) {
      attend_direct(head, rows, visible, scale, scores);
    } else if (tiles) {
      attend_block_avx512(head.q, packed_all + (kv_sequence * heads + h) * packed_size, head.out,
                          width, head_dim, kv_length, rows, visible(0), causal, scale, scores);
    } else {
      attend_gemm(head, rows, keys, visible, scale, scores);
    }
  }
}

}  // namespace hark::compute::cpu
