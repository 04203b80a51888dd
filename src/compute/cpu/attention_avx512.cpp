// Block attention (the encoder's, a prefill's) with AVX-512 register tiles instead of sgemm.
//
// Through sgemm, the scores of a head cost a BLAS call with an inner dimension of only head_dim
// (64), and the weighted sum of values re-packs every probability once more. Here each head's
// keys are packed once (transposed, in blocks of 32, so 16 consecutive keys are one vector; the
// values made contiguous), and six query rows at a time go through the scores (6 x 32
// accumulators), the softmax, and the sum over values (6 x 64 accumulators) without leaving
// registers and L1/L2.

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu/kernels.h"
#include "compute/cpu/simd512.h"

namespace hark::compute::cpu {

#if HARK_X86

namespace {

constexpr int kTileRows = 6;   // query rows per register tile
constexpr int kTileKeys = 32;  // keys per score tile (two vectors)

// s[r, j0 .. j0 + 32) = scale · q_r · keys j0 .. j0 + 32 for R query rows; `block` is the keys'
// packed [head_dim][32] block.
template <int R>
HARK_AVX512 void score_tile(const float* q, int64_t q_stride, const float* block, int64_t head_dim,
                            float scale, float* s, int64_t s_stride) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t d = 0; d < head_dim; ++d) {
    const __m512 k0 = _mm512_loadu_ps(block + d * kTileKeys);
    const __m512 k1 = _mm512_loadu_ps(block + d * kTileKeys + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r * q_stride + d]);
      acc[r][0] = _mm512_fmadd_ps(qv, k0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(qv, k1, acc[r][1]);
    }
  }
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(s + r * s_stride, _mm512_mul_ps(acc[r][0], vscale));
    _mm512_storeu_ps(s + r * s_stride + 16, _mm512_mul_ps(acc[r][1], vscale));
  }
}

// x[0, n) = exp(x - max) and x[n, padded) = 0; returns the sum of the exponentials.
HARK_AVX512 float exp_row(float* x, int64_t n, int64_t padded) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(x + j));
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1u);
  vmax = _mm512_mask_max_ps(vmax, tail, vmax, _mm512_maskz_loadu_ps(tail, x + j));
  const __m512 shift = _mm512_set1_ps(hmax16(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (j = 0; j + 16 <= n; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), shift));
    _mm512_storeu_ps(x + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  if (j < n) {
    const __m512 e = _mm512_maskz_mov_ps(tail, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), shift)));
    _mm512_storeu_ps(x + j, e);  // zeros past n, inside the padded row
    vsum = _mm512_add_ps(vsum, e);
    j += 16;
  }
  for (; j < padded; j += 16) _mm512_storeu_ps(x + j, _mm512_setzero_ps());
  return hsum16(vsum);
}

// out_r[0, 16·C) = inverse_r · Σ_{j < keys} p[r, j] · v_j[0, 16·C) for R rows.
template <int R, int C>
HARK_AVX512 void value_tile(const float* p, int64_t p_stride, const float* v, int64_t v_stride,
                            int64_t keys, const float* inverse, float* out, int64_t out_stride) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < keys; ++j) {
    __m512 vv[C];
    for (int c = 0; c < C; ++c) vv[c] = _mm512_loadu_ps(v + j * v_stride + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 weight = _mm512_set1_ps(p[r * p_stride + j]);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(weight, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 scale = _mm512_set1_ps(inverse[r]);
    for (int c = 0; c < C; ++c) {
      _mm512_storeu_ps(out + r * out_stride + 16 * c, _mm512_mul_ps(acc[r][c], scale));
    }
  }
}

using ScoreTileFn = void (*)(const float*, int64_t, const float*, int64_t, float, float*, int64_t);
using ValueTileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, const float*,
                             float*, int64_t);

constexpr ScoreTileFn kScoreTiles[kTileRows] = {score_tile<1>, score_tile<2>, score_tile<3>,
                                                score_tile<4>, score_tile<5>, score_tile<6>};

template <int R>
constexpr ValueTileFn value_tile_for(int chunks) {
  return chunks == 1   ? value_tile<R, 1>
         : chunks == 2 ? value_tile<R, 2>
         : chunks == 3 ? value_tile<R, 3>
                       : value_tile<R, 4>;
}

ValueTileFn pick_value_tile(int rows, int chunks) {
  switch (rows) {
    case 1:
      return value_tile_for<1>(chunks);
    case 2:
      return value_tile_for<2>(chunks);
    case 3:
      return value_tile_for<3>(chunks);
    case 4:
      return value_tile_for<4>(chunks);
    case 5:
      return value_tile_for<5>(chunks);
    default:
      return value_tile_for<6>(chunks);
  }
}

}  // namespace

HARK_AVX512 void pack_head_avx512(const float* k, const float* v, int64_t stride, int64_t head_dim,
                                  int64_t keys, float* packed) {
  // Keys: blocks of 32 keys, each [head_dim][32] (one score tile reads 8 KiB in a row), the
  // last block zero-padded. 16 x 16 sub-blocks go through a small buffer.
  alignas(64) float block[16][16];
  const int64_t padded = (keys + kTileKeys - 1) / kTileKeys * kTileKeys;
  for (int64_t j0 = 0; j0 < padded; j0 += 16) {
    float* key_block = packed + (j0 / kTileKeys) * head_dim * kTileKeys + j0 % kTileKeys;
    for (int64_t d0 = 0; d0 < head_dim; d0 += 16) {
      for (int jj = 0; jj < 16; ++jj) {
        const int64_t j = j0 + jj;
        _mm512_store_ps(block[jj],
                        j < keys ? _mm512_loadu_ps(k + j * stride + d0) : _mm512_setzero_ps());
      }
      for (int dd = 0; dd < 16; ++dd) {
        float* dst = key_block + (d0 + dd) * kTileKeys;
        for (int jj = 0; jj < 16; ++jj) dst[jj] = block[jj][dd];
      }
    }
  }
  // Values: the head's rows made contiguous ([keys][head_dim]), a stream the prefetcher follows
  // (rows `stride` apart cross a page every other row).
  float* values = packed + padded * head_dim;
  for (int64_t j = 0; j < keys; ++j) {
    for (int64_t d = 0; d < head_dim; d += 16) {
      _mm512_storeu_ps(values + j * head_dim + d, _mm512_loadu_ps(v + j * stride + d));
    }
  }
}

void attend_block_avx512(const float* q, const float* packed, float* out, int64_t stride,
                         int64_t head_dim, int64_t keys_total, int64_t rows, int64_t first_visible,
                         bool causal, float scale, std::vector<float>& scratch) {
  const int64_t max_keys = causal ? first_visible + rows - 1 : first_visible;
  const int64_t padded = (max_keys + kTileKeys - 1) / kTileKeys * kTileKeys;
  if (scratch.size() < static_cast<size_t>(kTileRows * padded)) scratch.resize(kTileRows * padded);
  float* s = scratch.data();
  const float* values = packed + (keys_total + kTileKeys - 1) / kTileKeys * kTileKeys * head_dim;
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int tile_rows = static_cast<int>(std::min<int64_t>(kTileRows, rows - r0));
    auto visible = [&](int64_t r) { return causal ? first_visible + r0 + r : first_visible; };
    const int64_t keys = visible(tile_rows - 1);
    const int64_t tile_padded = (keys + kTileKeys - 1) / kTileKeys * kTileKeys;
    const float* q_tile = q + r0 * stride;
    for (int64_t j0 = 0; j0 < tile_padded; j0 += kTileKeys) {
      kScoreTiles[tile_rows - 1](q_tile, stride, packed + j0 * head_dim, head_dim, scale, s + j0,
                                 padded);
    }
    float inverse[kTileRows];
    for (int r = 0; r < tile_rows; ++r) {
      inverse[r] = 1.0f / exp_row(s + r * padded, visible(r), tile_padded);
    }
    for (int64_t d0 = 0; d0 < head_dim; d0 += 64) {
      const int chunks = static_cast<int>(std::min<int64_t>(64, head_dim - d0) / 16);
      pick_value_tile(tile_rows, chunks)(s, padded, values + d0, head_dim, keys, inverse,
                                         out + r0 * stride + d0, stride);
    }
  }
}

#else

void pack_head_avx512(const float*, const float*, int64_t, int64_t, int64_t, float*) {}
void attend_block_avx512(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t,
                         int64_t, bool, float, std::vector<float>&) {}

#endif  // HARK_X86

}  // namespace hark::compute::cpu
