// y = epilogue(x · Wᵀ) on the CPU, for weights stored F32, F16, BF16 or Q8_0.
//
// Two strategies, chosen by the number of rows of x:
//  - many rows (encoder, prompt prefill): W is cut into panels of rows; each thread expands its
//    panel to F32 (F16/BF16/Q8_0) or uses it in place (F32) and runs a single-threaded sgemm of x
//    against it, then applies the epilogue to those columns. No F32 copy of a whole matrix ever
//    exists.
//  - a few rows (one decode step per sequence): the product is memory-bound on W, so each stored
//    row is read once and dotted directly with every row of x, converting in registers.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "compute/cpu/kernels.h"
#include "compute/cpu/simd.h"
#include "format/quant.h"

namespace hark::compute::cpu {

namespace {

// Up to this many rows of x, the direct dot kernel beats expanding panels for sgemm.
constexpr int64_t kMaxDirectRows = 8;
// F32 values per expanded panel at most (2 MiB, about L2). sgemm re-packs all of x for every
// panel, so panels are as large as that allows: one per thread when W is small enough.
constexpr int64_t kPanelFloats = 512 * 1024;
// Below this many multiply-adds a product runs on the calling thread alone. A fork-join costs
// microseconds on an idle machine but a scheduler time slice on a busy one (a thread that is not
// running stalls the barrier), so a decode step keeps only its large products parallel
// (feed-forward, logits), not the d x d projections.
constexpr int64_t kParallelWork = 1 << 20;

const float* bias_values(const Weight* bias, std::vector<float>& scratch) {
  if (bias == nullptr) return nullptr;
  if (bias->type == DType::F32) return reinterpret_cast<const float*>(bias->data);
  scratch.resize(static_cast<size_t>(bias->shape.elements()));
  weight_rows_to_f32(Weight{bias->type, Shape{1, bias->cols()}, bias->data, bias->nbytes}, 0, 1,
                     scratch.data());
  return scratch.data();
}

// y[i, n0 + j] = activation(raw[i, j] + bias[n0 + j]) + residual[i, n0 + j] for i < m, j < count.
// raw may be y + n0 (in place, then without residual) and residual may be y: each element of the
// residual is read before the same element of y is written.
void finish(const float* raw, int64_t ld_raw, float* y, int64_t ldy, int64_t m, int64_t n0,
            int64_t count, const float* bias, Activation activation, const float* residual) {
  thread_local std::vector<float> activated;
  for (int64_t i = 0; i < m; ++i) {
    const float* src = raw + i * ld_raw;
    float* dst = y + i * ldy + n0;
    const float* res = residual ? residual + i * ldy + n0 : nullptr;
    if (activation == Activation::none) {
      if (bias != nullptr && res != nullptr) {
        for (int64_t j = 0; j < count; ++j) dst[j] = src[j] + bias[n0 + j] + res[j];
      } else if (bias != nullptr) {
        for (int64_t j = 0; j < count; ++j) dst[j] = src[j] + bias[n0 + j];
      } else if (res != nullptr) {
        for (int64_t j = 0; j < count; ++j) dst[j] = src[j] + res[j];
      } else if (src != dst) {
        std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
      }
      continue;
    }
    // With an activation the row goes through a separate buffer when the residual is the output.
    float* out = dst;
    if (res == dst) {
      if (activated.size() < static_cast<size_t>(count)) activated.resize(count);
      out = activated.data();
    }
    if (bias != nullptr) {
      for (int64_t j = 0; j < count; ++j) out[j] = src[j] + bias[n0 + j];
    } else if (src != out) {
      std::memcpy(out, src, static_cast<size_t>(count) * sizeof(float));
    }
    activate_row(activation, out, count);
    if (res != nullptr) {
      for (int64_t j = 0; j < count; ++j) dst[j] = out[j] + res[j];
    }
  }
}

// ---- many rows: panels + sgemm ----

void linear_panels(const float* x, int64_t m, int64_t k, const Weight& w, float* y,
                   const float* bias, Activation activation, const float* residual) {
  const int64_t n = w.rows();
  const int n_threads = omp_get_max_threads();
  int64_t panel = (n + n_threads - 1) / n_threads;
  if (w.type != DType::F32) {
    panel = std::min(panel, std::max<int64_t>(16, kPanelFloats / std::max<int64_t>(k, 1)));
  }
  panel = std::min(n, (panel + 15) / 16 * 16);
  const int64_t n_panels = (n + panel - 1) / panel;
  const bool residual_is_y = residual == y;
  // x · Wᵀ can accumulate straight onto the residual (sgemm's beta = 1) when no activation
  // comes between them.
  const bool accumulate = residual != nullptr && activation == Activation::none;

#pragma omp parallel for schedule(dynamic, 1) if (n_panels > 1 && m * n * k >= kParallelWork)
  for (int64_t p = 0; p < n_panels; ++p) {
    thread_local std::vector<float> expanded, tile;
    const int64_t n0 = p * panel;
    const int64_t rows = std::min(panel, n - n0);
    const float* b;
    if (w.type == DType::F32) {
      b = reinterpret_cast<const float*>(w.data) + n0 * k;
    } else {
      if (expanded.size() < static_cast<size_t>(rows * k)) expanded.resize(rows * k);
      weight_rows_to_f32(w, n0, rows, expanded.data());
      b = expanded.data();
    }
    if (accumulate) {
      if (!residual_is_y) {
        for (int64_t i = 0; i < m; ++i) {
          std::memcpy(y + i * n + n0, residual + i * n + n0, rows * sizeof(float));
        }
      }
      sgemm(true, m, rows, k, 1.0f, x, k, b, k, 1.0f, y + n0, n);
      finish(y + n0, n, y, n, m, n0, rows, bias, activation, nullptr);
    } else if (residual_is_y) {
      // activation(x·Wᵀ + b) + y: the product must not overwrite y before it is added.
      if (tile.size() < static_cast<size_t>(m * rows)) tile.resize(m * rows);
      sgemm(true, m, rows, k, 1.0f, x, k, b, k, 0.0f, tile.data(), rows);
      finish(tile.data(), rows, y, n, m, n0, rows, bias, activation, residual);
    } else {
      sgemm(true, m, rows, k, 1.0f, x, k, b, k, 0.0f, y + n0, n);
      finish(y + n0, n, y, n, m, n0, rows, bias, activation, residual);
    }
  }
}

// ---- a few rows: direct dot products over the stored rows ----

// Rows of W [n, k] from first to last (exclusive), each dotted with the m rows of x [m, k]:
// out[i, r - first] for an out of leading dimension ld_out.
using DotRowsFn = void (*)(const float* x, int64_t m, int64_t k, const Weight& w, int64_t first,
                           int64_t last, float* out, int64_t ld_out);

void dot_rows_portable(const float* x, int64_t m, int64_t k, const Weight& w, int64_t first,
                       int64_t last, float* out, int64_t ld_out) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(k));
  for (int64_t r = first; r < last; ++r) {
    weight_rows_to_f32(w, r, 1, row.data());
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * k;
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += xi[j] * row[j];
      out[i * ld_out + (r - first)] = sum;
    }
  }
}

#if HARK_X86

// Loaders of 8 consecutive stored values as F32 (and of one, for row tails).
struct F32Values {
  HARK_AVX2 static __m256 load8(const uint8_t* row, int64_t j) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + j);
  }
  HARK_AVX2 static float load1(const uint8_t* row, int64_t j) {
    float value;
    std::memcpy(&value, row + j * 4, 4);
    return value;
  }
};

struct F16Values {
  HARK_AVX2 static __m256 load8(const uint8_t* row, int64_t j) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j * 2)));
  }
  HARK_AVX2 static float load1(const uint8_t* row, int64_t j) {
    uint16_t half;
    std::memcpy(&half, row + j * 2, 2);
    return _cvtsh_ss(half);
  }
};

struct BF16Values {
  HARK_AVX2 static __m256 load8(const uint8_t* row, int64_t j) {
    __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j * 2)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  HARK_AVX2 static float load1(const uint8_t* row, int64_t j) {
    uint16_t bits;
    std::memcpy(&bits, row + j * 2, 2);
    uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return value;
  }
};

// R stored rows at a time against M rows of x: R·M independent accumulators hide FMA latency
// and every x load serves R rows.
template <class Values, int M, int R>
HARK_AVX2 void dot_tile(const float* x, int64_t k, const uint8_t* const* rows, float* out,
                        int64_t ld_out) {
  __m256 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) acc[r][i] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= k; j += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = Values::load8(rows[r], j);
    for (int i = 0; i < M; ++i) {
      __m256 xv = _mm256_loadu_ps(x + i * k + j);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm256_fmadd_ps(xv, wv[r], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) {
      float sum = hsum8(acc[r][i]);
      for (int64_t t = j; t < k; ++t) sum += x[i * k + t] * Values::load1(rows[r], t);
      out[i * ld_out + r] = sum;
    }
  }
}

// Q8_0: per 32-value block an F16 scale d and 32 int8 q; the scale is folded into the converted
// weights once, so the inner loop is the same FMA as for the float types.
template <int M, int R>
HARK_AVX2 void dot_tile_q8(const float* x, int64_t k, const uint8_t* const* rows, float* out,
                           int64_t ld_out) {
  __m256 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) acc[r][i] = _mm256_setzero_ps();
  const int64_t blocks = k / 32;
  for (int64_t b = 0; b < blocks; ++b) {
    __m256 scale[R];
    const uint8_t* q[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* block = rows[r] + b * quant::kQ8BlockBytes;
      uint16_t half;
      std::memcpy(&half, block, 2);
      scale[r] = _mm256_set1_ps(_cvtsh_ss(half));
      q[r] = block + 2;
    }
    for (int g = 0; g < 4; ++g) {
      __m256 wv[R];
      for (int r = 0; r < R; ++r) {
        __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q[r] + g * 8));
        wv[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), scale[r]);
      }
      for (int i = 0; i < M; ++i) {
        __m256 xv = _mm256_loadu_ps(x + i * k + b * 32 + g * 8);
        for (int r = 0; r < R; ++r) acc[r][i] = _mm256_fmadd_ps(xv, wv[r], acc[r][i]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) out[i * ld_out + r] = hsum8(acc[r][i]);
}

template <class Values, int M, int R>
struct FloatTile {
  HARK_AVX2 static void run(const float* x, int64_t k, const uint8_t* const* rows, float* out,
                            int64_t ld_out) {
    dot_tile<Values, M, R>(x, k, rows, out, ld_out);
  }
};

template <class Unused, int M, int R>
struct Q8Tile {
  HARK_AVX2 static void run(const float* x, int64_t k, const uint8_t* const* rows, float* out,
                            int64_t ld_out) {
    dot_tile_q8<M, R>(x, k, rows, out, ld_out);
  }
};

// Has DotRowsFn's signature (m is the template's M) so that instances can fill a table.
template <template <class, int, int> class Tile, class Values, int M>
HARK_AVX2 void dot_rows_fixed(const float* x, int64_t, int64_t k, const Weight& w, int64_t first,
                              int64_t last, float* out, int64_t ld_out) {
  // Stored rows per step: as many as keep R·M accumulators, R weight vectors and one x vector
  // within AVX2's 16 registers.
  constexpr int R = M <= 2 ? 4 : M <= 4 ? 3 : M <= 6 ? 2 : 1;
  const size_t row_bytes = w.row_bytes();
  int64_t r = first;
  for (; r + R <= last; r += R) {
    const uint8_t* rows[R];
    for (int t = 0; t < R; ++t) rows[t] = w.data + static_cast<size_t>(r + t) * row_bytes;
    Tile<Values, M, R>::run(x, k, rows, out + (r - first), ld_out);
  }
  for (; r < last; ++r) {
    const uint8_t* row = w.data + static_cast<size_t>(r) * row_bytes;
    Tile<Values, M, 1>::run(x, k, &row, out + (r - first), ld_out);
  }
}

template <template <class, int, int> class Tile, class Values>
DotRowsFn pick_rows(int64_t m) {
  static constexpr DotRowsFn by_rows[kMaxDirectRows] = {
      dot_rows_fixed<Tile, Values, 1>, dot_rows_fixed<Tile, Values, 2>,
      dot_rows_fixed<Tile, Values, 3>, dot_rows_fixed<Tile, Values, 4>,
      dot_rows_fixed<Tile, Values, 5>, dot_rows_fixed<Tile, Values, 6>,
      dot_rows_fixed<Tile, Values, 7>, dot_rows_fixed<Tile, Values, 8>};
  return by_rows[m - 1];
}

#endif  // HARK_X86

DotRowsFn pick_dot_rows(DType type, int64_t m) {
#if HARK_X86
  if (has_avx2()) {
    switch (type) {
      case DType::F32:
        return pick_rows<FloatTile, F32Values>(m);
      case DType::F16:
        return pick_rows<FloatTile, F16Values>(m);
      case DType::BF16:
        return pick_rows<FloatTile, BF16Values>(m);
      case DType::Q8_0:
        return pick_rows<Q8Tile, void>(m);
      default:
        break;
    }
  }
#endif
  (void)type;
  (void)m;
  return dot_rows_portable;
}

void linear_direct(const float* x, int64_t m, int64_t k, const Weight& w, float* y,
                   const float* bias, Activation activation, const float* residual) {
  const int64_t n = w.rows();
  const DotRowsFn dot_rows = pick_dot_rows(w.type, m);
  // Chunks of stored rows small enough to balance the threads, large enough to amortise the
  // per-chunk epilogue.
  const int64_t chunk = 64;
  const int64_t n_chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n_chunks > 1 && m * n * k >= kParallelWork)
  for (int64_t c = 0; c < n_chunks; ++c) {
    float raw[kMaxDirectRows * chunk];
    const int64_t n0 = c * chunk;
    const int64_t count = std::min(chunk, n - n0);
    dot_rows(x, m, k, w, n0, n0 + count, raw, chunk);
    finish(raw, chunk, y, n, m, n0, count, bias, activation, residual);
  }
}

}  // namespace

void weight_rows_to_f32(const Weight& w, int64_t first, int64_t count, float* out) {
  quant::to_f32_rows(w.type, w.data, w.cols(), first, count, out);
}

void linear(const Tensor& x, const Weight& w, Tensor& y, const Epilogue& epilogue) {
  configure_blas();
  thread_local std::vector<float> bias_scratch;
  const float* bias = bias_values(epilogue.bias, bias_scratch);
  const float* residual = epilogue.residual ? epilogue.residual->data() : nullptr;
  const int64_t m = x.rows();
  if (m == 0 || w.rows() == 0) return;
  if (m <= kMaxDirectRows) {
    linear_direct(x.data(), m, x.cols(), w, y.data(), bias, epilogue.activation, residual);
  } else {
    linear_panels(x.data(), m, x.cols(), w, y.data(), bias, epilogue.activation, residual);
  }
}

}  // namespace hark::compute::cpu
