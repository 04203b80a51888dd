// AVX2/FMA/F16C building blocks for the CPU kernels.
//
// The library is compiled for baseline x86-64 (so the same binary runs anywhere), and the hot
// kernels are compiled a second time for AVX2 with a function attribute and chosen at run time
// with has_avx2(). exp and erf are vectorised here because the encoder's softmax and GELU call
// them ~10^8 times per window: libm's scalar versions would cost as much as a GEMM.
#pragma once

#include <cmath>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HARK_X86 1
#define HARK_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define HARK_X86 0
#define HARK_AVX2
#endif

namespace hark::compute::cpu {

// True when the CPU has AVX2, FMA and F16C (every x86-64-v3 machine).
bool has_avx2();

// Tests run every kernel variant on one machine by capping the instruction sets used (the CPU's
// own support still applies). Not for production use: it is a process-wide switch.
enum class SimdLevel { portable = 0, avx2 = 1, avx512 = 2 };
void limit_simd(SimdLevel level);

// GELU with the exact (erf) form, as torch.nn.functional.gelu(approximate="none").
inline float gelu_scalar(float x) {
  return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
}

#if HARK_X86

HARK_AVX2 inline float hsum8(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}

HARK_AVX2 inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// e^x to about 2 ulp (Cephes' range reduction and polynomial). Inputs below -87.3 (where the
// result would be denormal) give 0, as masked softmax scores need; NaN stays NaN.
HARK_AVX2 inline __m256 exp8(__m256 input) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f);
  const __m256 lo = _mm256_set1_ps(-87.3365478515625f);
  const __m256 underflow = _mm256_cmp_ps(input, lo, _CMP_LT_OQ);
  const __m256 nan = _mm256_cmp_ps(input, input, _CMP_UNORD_Q);
  __m256 x = _mm256_max_ps(_mm256_min_ps(input, hi), lo);
  // x = n ln2 + r, |r| <= ln2 / 2; ln2 split in two so that n ln2 is exact.
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // Multiply by 2^n by adding n to the exponent field.
  __m256i exponent = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  __m256 result = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), exponent));
  // The clamp above would turn NaN into a number: put it back, so that NaN propagates.
  result = _mm256_andnot_ps(underflow, result);
  return _mm256_or_ps(result, _mm256_and_ps(nan, input));
}

// erf(x) with absolute error below 2e-7 (Abramowitz & Stegun 7.1.26), enough for F32 GELU.
HARK_AVX2 inline __m256 erf8(__m256 x) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  __m256 sign = _mm256_and_ps(x, sign_mask);
  __m256 a = _mm256_andnot_ps(sign_mask, x);
  __m256 one = _mm256_set1_ps(1.0f);
  // t = 1 / (1 + p a): the approximate reciprocal plus one Newton step (~23 bits) costs a
  // fraction of a division.
  __m256 denominator = _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), a, one);
  __m256 t = _mm256_rcp_ps(denominator);
  t = _mm256_mul_ps(t, _mm256_fnmadd_ps(denominator, t, _mm256_set1_ps(2.0f)));
  __m256 p = _mm256_set1_ps(1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  p = _mm256_mul_ps(p, t);
  __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(a, a)));
  __m256 y = _mm256_fnmadd_ps(p, e, one);
  return _mm256_or_ps(y, sign);
}

HARK_AVX2 inline __m256 gelu8(__m256 x) {
  __m256 e = erf8(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                       _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// x[j] = f(x[j]) for a row of n values, 8 at a time (the tail through a padded copy).
template <__m256 (*f)(__m256)>
HARK_AVX2 void map_row_avx2(float* x, int64_t n) {
  const int64_t whole = n / 8 * 8;
  for (int64_t j = 0; j < whole; j += 8) _mm256_storeu_ps(x + j, f(_mm256_loadu_ps(x + j)));
  if (whole < n) {
    alignas(32) float tail[8] = {};
    for (int64_t j = whole; j < n; ++j) tail[j - whole] = x[j];
    _mm256_store_ps(tail, f(_mm256_load_ps(tail)));
    for (int64_t j = whole; j < n; ++j) x[j] = tail[j - whole];
  }
}

#endif  // HARK_X86

}  // namespace hark::compute::cpu
