// Row-wise and element-wise ops on the CPU: norms, softmax, GELU, adds, copies and gathers.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "compute/cpu/kernels.h"
#include "compute/cpu/simd512.h"

namespace hark::compute::cpu {

namespace {

// Below this many elements an op runs on the calling thread only.
constexpr int64_t kParallelElements = 32 * 1024;

// A weight vector as F32: in place when stored F32, expanded into `scratch` otherwise.
const float* vector_values(const Weight& w, std::vector<float>& scratch) {
  if (w.type == DType::F32) return reinterpret_cast<const float*>(w.data);
  scratch.resize(static_cast<size_t>(w.shape.elements()));
  weight_rows_to_f32(Weight{w.type, Shape{1, w.shape.elements()}, w.data, w.nbytes}, 0, 1,
                     scratch.data());
  return scratch.data();
}

#if HARK_X86

HARK_AVX2 float exp_shifted_row_avx2(float* x, int64_t n) {
  const int64_t whole = n / 8 * 8;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < whole; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + j));
  float max = hmax8(vmax);
  for (int64_t j = whole; j < n; ++j) max = std::max(max, x[j]);
  const __m256 shift = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < whole; j += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), shift));
    _mm256_storeu_ps(x + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = hsum8(vsum);
  if (whole < n) {
    // The tail goes through the same exp as the rest (padding lanes give exp(-inf) = 0).
    alignas(32) float tail[8];
    std::fill(tail, tail + 8, -INFINITY);
    std::copy(x + whole, x + n, tail);
    _mm256_store_ps(tail, exp8(_mm256_sub_ps(_mm256_load_ps(tail), shift)));
    for (int64_t j = whole; j < n; ++j) {
      x[j] = tail[j - whole];
      sum += x[j];
    }
  }
  return sum;
}

HARK_AVX2 void scale_row_avx2(float* x, int64_t n, float factor) {
  const int64_t whole = n / 8 * 8;
  const __m256 f = _mm256_set1_ps(factor);
  for (int64_t j = 0; j < whole; j += 8)
    _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), f));
  for (int64_t j = whole; j < n; ++j) x[j] *= factor;
}

HARK_AVX2 void layer_norm_row_avx2(const float* src, float* dst, int64_t n, const float* g,
                                   const float* b, float eps) {
  const int64_t whole = n / 8 * 8;
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < whole; j += 8) vsum = _mm256_add_ps(vsum, _mm256_loadu_ps(src + j));
  float sum = hsum8(vsum);
  for (int64_t j = whole; j < n; ++j) sum += src[j];
  const float mean = sum / static_cast<float>(n);
  const __m256 vmean = _mm256_set1_ps(mean);
  __m256 vsquares = _mm256_setzero_ps();
  for (int64_t j = 0; j < whole; j += 8) {
    __m256 d = _mm256_sub_ps(_mm256_loadu_ps(src + j), vmean);
    vsquares = _mm256_fmadd_ps(d, d, vsquares);
  }
  float squares = hsum8(vsquares);
  for (int64_t j = whole; j < n; ++j) squares += (src[j] - mean) * (src[j] - mean);
  const float inv_std = 1.0f / std::sqrt(squares / static_cast<float>(n) + eps);
  const __m256 vinv = _mm256_set1_ps(inv_std);
  for (int64_t j = 0; j < whole; j += 8) {
    __m256 normed = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(src + j), vmean), vinv);
    _mm256_storeu_ps(dst + j,
                     _mm256_fmadd_ps(normed, _mm256_loadu_ps(g + j), _mm256_loadu_ps(b + j)));
  }
  for (int64_t j = whole; j < n; ++j) dst[j] = (src[j] - mean) * inv_std * g[j] + b[j];
}

#endif  // HARK_X86

// Two passes (mean, then variance about it), as torch does: no cancellation.
void layer_norm_row(const float* src, float* dst, int64_t n, const float* g, const float* b,
                    float eps) {
#if HARK_X86
  if (has_avx2()) return layer_norm_row_avx2(src, dst, n, g, b, eps);
#endif
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += src[j];
  const float mean = sum / static_cast<float>(n);
  float squares = 0.0f;
  for (int64_t j = 0; j < n; ++j) squares += (src[j] - mean) * (src[j] - mean);
  const float inv_std = 1.0f / std::sqrt(squares / static_cast<float>(n) + eps);
  for (int64_t j = 0; j < n; ++j) dst[j] = (src[j] - mean) * inv_std * g[j] + b[j];
}

}  // namespace

namespace {
std::atomic<int> simd_limit{static_cast<int>(SimdLevel::avx512)};
}  // namespace

void limit_simd(SimdLevel level) {
  simd_limit.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool has_avx2() {
#if HARK_X86
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                                __builtin_cpu_supports("f16c");
  return supported &&
         simd_limit.load(std::memory_order_relaxed) >= static_cast<int>(SimdLevel::avx2);
#else
  return false;
#endif
}

bool has_avx512() {
#if HARK_X86
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported && has_avx2() &&
         simd_limit.load(std::memory_order_relaxed) >= static_cast<int>(SimdLevel::avx512);
#else
  return false;
#endif
}

float exp_shifted_row(float* x, int64_t n) {
  if (n <= 0) return 0.0f;
#if HARK_X86
  if (has_avx2()) return exp_shifted_row_avx2(x, n);
#endif
  const float max = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    x[j] = std::exp(x[j] - max);
    sum += x[j];
  }
  return sum;
}

void softmax_row(float* x, int64_t n) {
  if (n <= 0) return;
  const float inverse = 1.0f / exp_shifted_row(x, n);
#if HARK_X86
  if (has_avx2()) return scale_row_avx2(x, n, inverse);
#endif
  for (int64_t j = 0; j < n; ++j) x[j] *= inverse;
}

void gelu_row(float* x, int64_t n) {
#if HARK_X86
  if (has_avx512()) return map_row_avx512<gelu16>(x, n);
  if (has_avx2()) return map_row_avx2<gelu8>(x, n);
#endif
  for (int64_t j = 0; j < n; ++j) x[j] = gelu_scalar(x[j]);
}

void layer_norm(const Tensor& x, const Weight& gamma, const Weight& beta, float eps, Tensor& y) {
  std::vector<float> gamma_scratch, beta_scratch;
  const float* g = vector_values(gamma, gamma_scratch);
  const float* b = vector_values(beta, beta_scratch);
  const int64_t rows = x.rows(), n = x.cols();
  const float* in = x.data();
  float* out = y.data();
#pragma omp parallel for schedule(static) if (rows * n > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) layer_norm_row(in + r * n, out + r * n, n, g, b, eps);
}

void softmax(Tensor& x) {
  const int64_t rows = x.rows(), n = x.cols();
  float* data = x.data();
#pragma omp parallel for schedule(static) if (rows * n > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) softmax_row(data + r * n, n);
}

void gelu(Tensor& x) {
  const int64_t total = x.elements();
  constexpr int64_t chunk = 4096;
  const int64_t n_chunks = (total + chunk - 1) / chunk;
  float* data = x.data();
#pragma omp parallel for schedule(static) if (total > kParallelElements)
  for (int64_t c = 0; c < n_chunks; ++c) {
    gelu_row(data + c * chunk, std::min(chunk, total - c * chunk));
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& y) {
  const int64_t total = a.elements();
  const float* pa = a.data();
  const float* pb = b.data();
  float* py = y.data();
#pragma omp parallel for schedule(static) if (total > kParallelElements)
  for (int64_t i = 0; i < total; ++i) py[i] = pa[i] + pb[i];
}

void transpose(const Tensor& x, Tensor& y) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  const float* in = x.data();
  float* out = y.data();
  // Tiles keep both the reads and the writes within a few cache lines.
  constexpr int64_t tile = 32;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (int64_t r0 = 0; r0 < rows; r0 += tile) {
    for (int64_t c0 = 0; c0 < cols; c0 += tile) {
      for (int64_t r = r0; r < std::min(rows, r0 + tile); ++r) {
        for (int64_t c = c0; c < std::min(cols, c0 + tile); ++c)
          out[c * rows + r] = in[r * cols + c];
      }
    }
  }
}

void embedding(const Weight& table, std::span<const int32_t> ids, Tensor& y) {
  for (size_t i = 0; i < ids.size(); ++i) weight_rows_to_f32(table, ids[i], 1, y.row(i));
}

void gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& y) {
  const int64_t width = x.cols();
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(y.row(i), x.data() + rows[i] * width, width * sizeof(float));
  }
}

void write_rows(const Tensor& src, int64_t offset, Tensor& dst) {
  const int64_t sequences = src.dim(0), steps = src.dim(1), width = src.dim(2);
  const int64_t capacity = dst.dim(1);
  for (int64_t b = 0; b < sequences; ++b) {
    std::memcpy(dst.data() + (b * capacity + offset) * width, src.data() + b * steps * width,
                steps * width * sizeof(float));
  }
}

void gather_sequences(const Tensor& src, std::span<const int> source, int64_t length, Tensor& dst) {
  const int64_t capacity = src.dim(1), width = src.dim(2);
  const size_t bytes = static_cast<size_t>(length * width) * sizeof(float);
  for (size_t i = 0; i < source.size(); ++i) {
    std::memcpy(dst.data() + i * capacity * width, src.data() + source[i] * capacity * width,
                bytes);
  }
}

}  // namespace hark::compute::cpu
