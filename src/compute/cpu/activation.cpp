// Element-wise ops added for the Conformer family: SiLU, ReLU and the sigmoid gate of GLU (with
// AVX2 and AVX-512 variants chosen at run time, like GELU's), scaled adds, and row shuffles.
#include <algorithm>
#include <cstring>
#include <vector>

#include "compute/cpu/kernels.h"
#include "compute/cpu/simd512.h"

namespace hark::compute::cpu {

namespace {

// Below this many elements an op runs on the calling thread only (as in elementwise.cpp).
constexpr int64_t kParallelElements = 32 * 1024;

// x / (1 + e^-x) and 1 / (1 + e^-x): for x far below zero e^-x saturates at exp's clamp, which
// still gives 0 to within a denormal; NaN stays NaN through exp.
inline float silu_scalar(float x) {
  return x / (1.0f + std::exp(-x));
}
inline float sigmoid_scalar(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

#if HARK_X86

HARK_AVX2 inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

HARK_AVX2 inline __m256 silu8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

HARK_AVX512 inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

HARK_AVX512 inline __m512 silu16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(x, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// y[j] = a[j] · σ(b[j]) for j < n.
HARK_AVX512 void gate_row_avx512(const float* a, const float* b, float* y, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    _mm512_storeu_ps(y + j,
                     _mm512_mul_ps(_mm512_loadu_ps(a + j), sigmoid16(_mm512_loadu_ps(b + j))));
  }
  if (j < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1u);
    const __m512 gate = sigmoid16(_mm512_maskz_loadu_ps(tail, b + j));
    _mm512_mask_storeu_ps(y + j, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, a + j), gate));
  }
}

HARK_AVX2 void gate_row_avx2(const float* a, const float* b, float* y, int64_t n) {
  const int64_t whole = n / 8 * 8;
  for (int64_t j = 0; j < whole; j += 8) {
    _mm256_storeu_ps(y + j,
                     _mm256_mul_ps(_mm256_loadu_ps(a + j), sigmoid8(_mm256_loadu_ps(b + j))));
  }
  for (int64_t j = whole; j < n; ++j) y[j] = a[j] * sigmoid_scalar(b[j]);
}

#endif  // HARK_X86

void gate_row(const float* a, const float* b, float* y, int64_t n) {
#if HARK_X86
  if (has_avx512()) return gate_row_avx512(a, b, y, n);
  if (has_avx2()) return gate_row_avx2(a, b, y, n);
#endif
  for (int64_t j = 0; j < n; ++j) y[j] = a[j] * sigmoid_scalar(b[j]);
}

}  // namespace

void silu_row(float* x, int64_t n) {
#if HARK_X86
  if (has_avx512()) return map_row_avx512<silu16>(x, n);
  if (has_avx2()) return map_row_avx2<silu8>(x, n);
#endif
  for (int64_t j = 0; j < n; ++j) x[j] = silu_scalar(x[j]);
}

void relu_row(float* x, int64_t n) {
  // `x < 0 ? 0 : x` rather than std::max, so that NaN stays NaN (as torch.relu).
  for (int64_t j = 0; j < n; ++j) x[j] = x[j] < 0.0f ? 0.0f : x[j];
}

void activate_row(Activation activation, float* x, int64_t n) {
  switch (activation) {
    case Activation::none:
      return;
    case Activation::gelu:
      return gelu_row(x, n);
    case Activation::silu:
      return silu_row(x, n);
    case Activation::relu:
      return relu_row(x, n);
  }
}

const float* weight_values(const Weight& w, std::vector<float>& scratch) {
  if (w.type == DType::F32) return reinterpret_cast<const float*>(w.data);
  const int64_t n = w.shape.elements();
  scratch.resize(static_cast<size_t>(n));
  weight_rows_to_f32(Weight{w.type, Shape{1, n}, w.data, w.nbytes}, 0, 1, scratch.data());
  return scratch.data();
}

void activate(Tensor& x, Activation activation) {
  if (activation == Activation::none) return;
  const int64_t total = x.elements();
  constexpr int64_t chunk = 4096;
  const int64_t n_chunks = (total + chunk - 1) / chunk;
  float* data = x.data();
#pragma omp parallel for schedule(static) if (total > kParallelElements)
  for (int64_t c = 0; c < n_chunks; ++c) {
    activate_row(activation, data + c * chunk, std::min(chunk, total - c * chunk));
  }
}

void scale(Tensor& x, float factor) {
  const int64_t total = x.elements();
  float* data = x.data();
#pragma omp parallel for schedule(static) if (total > kParallelElements)
  for (int64_t i = 0; i < total; ++i) data[i] *= factor;
}

void add_scaled(const Tensor& a, const Tensor& b, float alpha, Tensor& y) {
  const int64_t total = a.elements();
  const float* pa = a.data();
  const float* pb = b.data();
  float* py = y.data();
#pragma omp parallel for schedule(static) if (total > kParallelElements)
  for (int64_t i = 0; i < total; ++i) py[i] = pa[i] + alpha * pb[i];
}

void glu(const Tensor& x, Tensor& y) {
  const int64_t rows = y.rows(), half = y.cols();
  const float* in = x.data();
  float* out = y.data();
#pragma omp parallel for schedule(static) if (rows * half > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * 2 * half;
    gate_row(row, row + half, out + r * half, half);
  }
}

void scatter_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& y) {
  const int64_t width = x.cols();
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(y.data() + rows[i] * width, x.row(static_cast<int64_t>(i)),
                static_cast<size_t>(width) * sizeof(float));
  }
}

void swap_last_axes(const Tensor& x, Tensor& y) {
  const int rank = x.shape().rank();
  const int64_t matrices = rank == 3 ? x.dim(0) : 1;
  const int64_t rows = x.dim(rank - 2), cols = x.dim(rank - 1);
  // Tiles keep both the reads and the writes within a few cache lines (as transpose does).
  constexpr int64_t tile = 32;
  const int64_t row_tiles = (rows + tile - 1) / tile;
  const float* in = x.data();
  float* out = y.data();
#pragma omp parallel for schedule(static) if (x.elements() > kParallelElements)
  for (int64_t task = 0; task < matrices * row_tiles; ++task) {
    const int64_t a = task / row_tiles, r0 = (task % row_tiles) * tile;
    const float* src = in + a * rows * cols;
    float* dst = out + a * rows * cols;
    for (int64_t c0 = 0; c0 < cols; c0 += tile) {
      for (int64_t r = r0; r < std::min(rows, r0 + tile); ++r) {
        for (int64_t c = c0; c < std::min(cols, c0 + tile); ++c)
          dst[c * rows + r] = src[r * cols + c];
      }
    }
  }
}

}  // namespace hark::compute::cpu
