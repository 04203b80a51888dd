// Transformer-XL relative-position self-attention on the CPU (FastConformer's encoder).
//
// transformers computes the position term as the [T, 2T − 1] product of q + v with the whole
// projected position table and then shifts it (_rel_shift) so that entry [i, j] is column
// T − 1 − i + j. Query i only ever needs the T table rows T − 1 − i .. 2T − 2 − i, so a block of
// R consecutive queries needs T + R − 1 consecutive rows: one sgemm gives their [R, T + R − 1]
// band, from which query r of the block takes columns R − 1 − r + j. That costs (T + R − 1) / T
// of the content term instead of twice it.
//
// Work is split into (sequence, head, block of queries) tasks across threads; each task runs
// three single-threaded sgemms (content scores, position band, weights · values), as the plain
// attention op does without AVX-512.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu/kernels.h"

namespace hark::compute::cpu {

namespace {

// Queries per task: the scores and the band ([R, T] and [R, T + R − 1]) stay in L2 for the
// lengths of real utterances, and the band's extra R − 1 columns stay small next to T.
constexpr int64_t kQueryBlock = 64;

}  // namespace

void relative_positions(int64_t steps, int64_t width, Tensor& y) {
  const int64_t half = width / 2;
  // F32 throughout, in transformers' order of operations: 1 / 10000^(2m / width), then the
  // angle as one F32 product.
  std::vector<float> frequencies(static_cast<size_t>(half));
  for (int64_t m = 0; m < half; ++m) {
    const float exponent = static_cast<float>(2 * m) / static_cast<float>(width);
    frequencies[m] = 1.0f / std::pow(10000.0f, exponent);
  }
  const int64_t rows = 2 * steps - 1;
  float* out = y.data();
#pragma omp parallel for schedule(static) if (rows * width > 64 * 1024)
  for (int64_t k = 0; k < rows; ++k) {
    const float position = static_cast<float>(steps - 1 - k);
    float* row = out + k * width;
    for (int64_t m = 0; m < half; ++m) {
      const float angle = position * frequencies[m];
      row[2 * m] = std::sin(angle);
      row[2 * m + 1] = std::cos(angle);
    }
  }
}

void rel_pos_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& p,
                       const Weight& pos_bias_u, const Weight& pos_bias_v, int heads, float scale,
                       std::span<const int64_t> lengths, Tensor& out) {
  configure_blas();
  const bool batched = q.shape().rank() == 3;
  const int64_t sequences = batched ? q.dim(0) : 1;
  const int64_t steps = batched ? q.dim(1) : q.dim(0);
  const int64_t width = q.cols();
  const int64_t head_dim = width / heads;
  std::vector<float> u_scratch, v_scratch;
  const float* bias_u = weight_values(pos_bias_u, u_scratch);
  const float* bias_v = weight_values(pos_bias_v, v_scratch);

  const int64_t blocks = (steps + kQueryBlock - 1) / kQueryBlock;
  const int64_t tasks = sequences * heads * blocks;
  const bool parallel = tasks > 1 && sequences * steps * steps * width >= 256 * 1024;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t task = 0; task < tasks; ++task) {
    thread_local std::vector<float> q_u, q_v, scores, band;
    const int64_t b = task / (heads * blocks);
    const int64_t h = (task / blocks) % heads;
    const int64_t i0 = (task % blocks) * kQueryBlock;
    const int64_t keys = lengths.empty() ? steps : lengths[b];
    const int64_t rows = std::min(kQueryBlock, steps - i0);
    const int64_t offset = b * steps * width + h * head_dim;  // row 0 of this head
    float* head_out = out.data() + offset + i0 * width;
    // Queries past the sequence's length: zeros (rows = valid ones below, the rest after).
    const int64_t valid = std::clamp<int64_t>(keys - i0, 0, rows);
    for (int64_t r = valid; r < rows; ++r) {
      std::fill(head_out + r * width, head_out + r * width + head_dim, 0.0f);
    }
    if (valid == 0) continue;

    // q + u and q + v for the block's valid queries, [valid, head_dim] each.
    q_u.resize(static_cast<size_t>(valid * head_dim));
    q_v.resize(static_cast<size_t>(valid * head_dim));
    const float* head_q = q.data() + offset + i0 * width;
    for (int64_t r = 0; r < valid; ++r) {
      for (int64_t d = 0; d < head_dim; ++d) {
        const float value = head_q[r * width + d];
        q_u[r * head_dim + d] = value + bias_u[h * head_dim + d];
        q_v[r * head_dim + d] = value + bias_v[h * head_dim + d];
      }
    }
    // Content term, scaled: [valid, keys].
    scores.resize(static_cast<size_t>(valid * keys));
    sgemm(true, valid, keys, head_dim, scale, q_u.data(), head_dim, k.data() + offset, width, 0.0f,
          scores.data(), keys);
    // Position term: table rows from T − 1 − (last query) on, keys + valid − 1 of them.
    const int64_t band_width = keys + valid - 1;
    const int64_t first_row = steps - 1 - (i0 + valid - 1);
    band.resize(static_cast<size_t>(valid * band_width));
    sgemm(true, valid, band_width, head_dim, scale, q_v.data(), head_dim,
          p.data() + first_row * width + h * head_dim, width, 0.0f, band.data(), band_width);
    // Query i0 + r and key j want table row T − 1 − (i0 + r) + j, column valid − 1 − r + j of
    // the band. Then exp(s − max) without the division: the output rows are divided by the
    // sums after the product, head_dim values per row instead of `keys`.
    float inverse_sums[kQueryBlock];
    for (int64_t r = 0; r < valid; ++r) {
      float* s = scores.data() + r * keys;
      const float* position = band.data() + r * band_width + (valid - 1 - r);
      for (int64_t j = 0; j < keys; ++j) s[j] += position[j];
      inverse_sums[r] = 1.0f / exp_shifted_row(s, keys);
    }
    sgemm(false, valid, head_dim, keys, 1.0f, scores.data(), keys, v.data() + offset, width, 0.0f,
          head_out, width);
    for (int64_t r = 0; r < valid; ++r) {
      float* o = head_out + r * width;
      for (int64_t d = 0; d < head_dim; ++d) o[d] *= inverse_sums[r];
    }
  }
}

}  // namespace hark::compute::cpu
