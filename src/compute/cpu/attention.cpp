// Multi-head scaled dot-product attention on the CPU.
//
// Work is split into (sequence, head, block of queries) tasks across threads. Long query blocks
// (the encoder, prompt prefill) use two sgemm calls per task with the scores of one block kept in
// cache; a few queries (a decode step) are done with direct dot products, because there a BLAS
// call per head would cost more than the arithmetic.
#include <algorithm>
#include <vector>

#include "compute/cpu/kernels.h"
#include "compute/cpu/simd.h"

namespace hark::compute::cpu {

namespace {

// Queries per task: their scores ([block x keys]) stay in L2, and sgemm gets rows enough to
// amortise packing each head's keys and values.
constexpr int64_t kQueryBlock = 256;
// A single query (a decode step of one sequence) is done with direct dot products; from two on,
// sgemm's reuse of each key and value row pays for the call.
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

}  // namespace

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

  // Blocks of queries go through AVX-512 tiles where the CPU has them, over keys transposed
  // once per (sequence, head) here.
  const bool tiles = queries > kDirectQueries && head_dim % 16 == 0 && has_avx512();
  const int64_t kv_sequences = shared_kv ? 1 : sequences;
  const int64_t kt_stride = (kv_length + 31) / 32 * 32;
  const int64_t kt_size = head_dim * kt_stride;
  thread_local std::vector<float> transposed;
  if (tiles) {
    if (transposed.size() < static_cast<size_t>(kv_sequences * heads * kt_size)) {
      transposed.resize(kv_sequences * heads * kt_size);
    }
    float* kt = transposed.data();
#pragma omp parallel for schedule(static) if (parallel && kv_sequences * heads > 1)
    for (int64_t sh = 0; sh < kv_sequences * heads; ++sh) {
      const int64_t b = sh / heads, h = sh % heads;
      transpose_keys_avx512(k.data() + b * capacity * width + h * head_dim, width, head_dim,
                            kv_length, kt + sh * kt_size, kt_stride);
    }
  }
  const float* kt_all = transposed.data();

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
      attend_block_avx512(head.q, kt_all + (kv_sequence * heads + h) * kt_size, kt_stride, head.v,
                          head.out, width, head_dim, rows, visible(0), causal, scale, scores);
    } else {
      attend_gemm(head, rows, keys, visible, scale, scores);
    }
  }
}

}  // namespace hark::compute::cpu
