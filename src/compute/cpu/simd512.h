// AVX-512 building blocks, for the kernels that gain from 16 lanes (attention tiles, GELU) on
// CPUs that have AVX-512F; chosen at run time with has_avx512(), like simd.h's AVX2 ones.
#pragma once

// GCC 12's avx512fintrin.h passes _mm512_undefined_ps() through unmasked intrinsics and then
// warns about it where they are inlined (a GCC 12 header bug, fixed in GCC 13): silence that in
// the files that include this header (they include it first).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "compute/cpu/simd.h"

#if HARK_X86
#define HARK_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#else
#define HARK_AVX512
#endif

namespace hark::compute::cpu {

// True when the CPU has AVX-512F (and everything has_avx2() asks for).
bool has_avx512();

#if HARK_X86

HARK_AVX512 inline float hsum16(__m512 v) {
  const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), high));
}

HARK_AVX512 inline float hmax16(__m512 v) {
  const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return hmax8(_mm256_max_ps(_mm512_castps512_ps256(v), high));
}

// exp16: exp8's algorithm on 16 lanes (see simd.h).
HARK_AVX512 inline __m512 exp16(__m512 input) {
  const __m512 lo = _mm512_set1_ps(-87.3365478515625f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(input, lo, _CMP_LT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(input, input, _CMP_UNORD_Q);
  __m512 x = _mm512_max_ps(_mm512_min_ps(input, _mm512_set1_ps(88.3762626647949f)), lo);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512i exponent = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
  __m512 result = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), exponent));
  result = _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), result);
  return _mm512_mask_mov_ps(result, nan, input);
}

// erf16 / gelu16: erf8 / gelu8 on 16 lanes (see simd.h).
HARK_AVX512 inline __m512 erf16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 a = _mm512_abs_ps(x);
  const __m512 denominator = _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), a, one);
  __m512 t = _mm512_rcp14_ps(denominator);
  t = _mm512_mul_ps(t, _mm512_fnmadd_ps(denominator, t, _mm512_set1_ps(2.0f)));
  __m512 p = _mm512_set1_ps(1.061405429f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
  p = _mm512_mul_ps(p, t);
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(a, a)));
  const __m512 y = _mm512_fnmadd_ps(p, e, one);
  // Copy the sign of x onto y.
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
      _mm512_castps_si512(y), _mm512_castps_si512(x), _mm512_set1_epi32(0x80000000), 0xd8));
}

HARK_AVX512 inline __m512 gelu16(__m512 x) {
  const __m512 e = erf16(_mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f)));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x),
                       _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// x[j] = f(x[j]) for a row of n values, 16 at a time (the tail masked).
template <__m512 (*f)(__m512)>
HARK_AVX512 void map_row_avx512(float* x, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(x + j, f(_mm512_loadu_ps(x + j)));
  if (j < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1u);
    _mm512_mask_storeu_ps(x + j, tail, f(_mm512_maskz_loadu_ps(tail, x + j)));
  }
}

#endif  // HARK_X86

}  // namespace hark::compute::cpu
