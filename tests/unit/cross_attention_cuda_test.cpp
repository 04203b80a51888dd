// Cross-attention over the frames (absorb_query, frame_attention, absorb_values) against the
// attention it stands for, computed in double on the CPU the usual way: keys W_k x_t and values
// W_v x_t + b_v of every frame, softmax(scale · q_h · k_t), the weighted sum of the values.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "compute/cuda/kernels.h"
#include "support/cuda_arrays.h"

namespace hark::compute::cuda {
namespace {

using namespace testing;

struct Shape {
  int rows, heads, head_dim, windows, frames;
  int64_t rows_per_window;  // row r reads window r / rows_per_window (windows 1: all of them)
};

// context [rows, heads · head_dim] the usual way, from the values the GPU holds.
std::vector<double> reference(const Shape& s, const std::vector<float>& q,
                              const std::vector<float>& x, const std::vector<float>& w_k,
                              const std::vector<float>& w_v, const std::vector<float>& b_v,
                              double scale) {
  const int64_t width = int64_t{s.heads} * s.head_dim;
  std::vector<double> context(static_cast<size_t>(s.rows * width));
  std::vector<double> keys(static_cast<size_t>(s.frames * width));
  std::vector<double> values(keys.size());
  for (int window = 0; window < s.windows; ++window) {
    const float* frames = x.data() + window * s.frames * width;
    for (int t = 0; t < s.frames; ++t) {
      for (int64_t o = 0; o < width; ++o) {
        double k = 0, v = b_v[o];
        for (int64_t i = 0; i < width; ++i) {
          k += double{w_k[o * width + i]} * frames[t * width + i];
          v += double{w_v[o * width + i]} * frames[t * width + i];
        }
        keys[t * width + o] = k;
        values[t * width + o] = v;
      }
    }
    for (int r = 0; r < s.rows; ++r) {
      if (s.windows > 1 && r / s.rows_per_window != window) continue;
      for (int h = 0; h < s.heads; ++h) {
        std::vector<double> scores(s.frames);
        double top = -INFINITY;
        for (int t = 0; t < s.frames; ++t) {
          double dot = 0;
          for (int j = 0; j < s.head_dim; ++j) {
            const int64_t c = h * s.head_dim + j;
            dot += double{q[r * width + c]} * keys[t * width + c];
          }
          scores[t] = scale * dot;
          top = std::max(top, scores[t]);
        }
        double sum = 0;
        for (double& score : scores) sum += (score = std::exp(score - top));
        for (int j = 0; j < s.head_dim; ++j) {
          const int64_t c = h * s.head_dim + j;
          double out = 0;
          for (int t = 0; t < s.frames; ++t) out += scores[t] * values[t * width + c];
          context[r * width + c] = out / sum;
        }
      }
    }
  }
  return context;
}

void check_shape(Element e, const Shape& s) {
  const int64_t width = int64_t{s.heads} * s.head_dim;
  ASSERT_TRUE(frame_attention_runs(e, s.heads, width));
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(width));
  // Frames of unit size and weights that keep keys near unit size: scores spread over a few units.
  DeviceArray q = random_array(e, s.rows * width, 1, 1.0f);
  DeviceArray x = random_array(e, int64_t{s.windows} * s.frames * width, 2, 1.0f);
  DeviceArray w_k = random_array(e, width * width, 3, 2.0f * weight_scale);
  DeviceArray w_v = random_array(e, width * width, 4, weight_scale);
  DeviceArray b_v = random_array(e, width, 5, 0.5f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));

  Buffer absorbed(element_size(e) * s.rows * s.heads * width);
  Buffer attended(absorbed.bytes());
  Buffer context(element_size(e) * s.rows * width);
  absorb_query(e, q.buffer.data(), width, s.rows, s.heads, s.head_dim, w_k.buffer.data(), width,
               width, scale, absorbed.data(), nullptr);
  frame_attention(e, absorbed.data(), s.rows, s.heads, width, x.buffer.data(), s.frames,
                  s.windows > 1 ? s.frames * width : 0, s.rows_per_window, attended.data(),
                  nullptr);
  absorb_values(e, attended.data(), s.rows, s.heads, s.head_dim, w_v.buffer.data(), width,
                b_v.buffer.data(), width, context.data(), width, nullptr);
  check(cudaDeviceSynchronize(), "cross-attention test");
  const std::vector<float> got = read_back(e, context, s.rows * width);
  const std::vector<double> want =
      reference(s, q.values, x.values, w_k.values, w_v.values, b_v.values, scale);

  double largest = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "at " << i;
    largest = std::max(largest, std::abs(want[i]));
    worst = std::max(worst, std::abs(got[i] - want[i]));
  }
  // F16/BF16 inputs, the absorbed query and the attended frames rounded to the element type.
  const double bound = e == Element::f16 ? 1e-2 : 3e-2;
  EXPECT_LE(worst / largest, bound)
      << element_name(e) << " rows " << s.rows << " heads " << s.heads << " frames " << s.frames;
}

TEST(CrossAttentionCuda, LargeV3ShapeOneWindowEveryRow) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  // large-v3: 20 heads of 64 over 1500 frames; 16 rows (a batch of 16 sequences, one window).
  check_shape(Element::f16, {16, 20, 64, 1, 1500, 16});
}

TEST(CrossAttentionCuda, OneRowSplitsAndHeadGroups) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  // A single row: the frames split over a cluster, the heads over 3 CTAs (the last 4 of 8).
  check_shape(Element::f16, {1, 20, 64, 1, 1500, 1});
  check_shape(Element::bf16, {1, 20, 64, 1, 1500, 1});
}

TEST(CrossAttentionCuda, WindowPerRowGroupAndTailTile) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  // Rows 0-2 read window 0 and rows 3-5 window 1 (a prompt of 3 tokens per sequence); 6 heads of
  // 64 (tiny: one head tile, 2 of its 8 heads unused); 37 frames end inside a tile.
  check_shape(Element::f16, {6, 6, 64, 2, 37, 3});
  check_shape(Element::bf16, {6, 6, 64, 2, 37, 3});
}

TEST(CrossAttentionCuda, NarrowModelLeavesWarpsWithoutColumns) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  // The oracle models' shape: 4 heads of 16, width 64 (4 column tiles for 8 warps).
  check_shape(Element::f16, {3, 4, 16, 3, 1500, 1});
  check_shape(Element::bf16, {1, 4, 16, 1, 1500, 1});
}

TEST(CrossAttentionCuda, ManyRowsOneCtaEach) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  // Enough rows that no split is needed: 128 rows, 8 heads of 64 (base), each its own window.
  check_shape(Element::f16, {128, 8, 64, 128, 20, 1});
}

TEST(CrossAttentionCuda, RejectsWhatItCannotRun) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  EXPECT_FALSE(frame_attention_runs(Element::f32, 20, 1280));
  EXPECT_FALSE(frame_attention_runs(Element::f16, 25, 1600));
  EXPECT_FALSE(frame_attention_runs(Element::f16, 5, 360));  // width not a multiple of 16
  EXPECT_FALSE(frame_attention_runs(Element::f16, 20, 1408));
  EXPECT_TRUE(frame_attention_runs(Element::f16, 6, 384));
  EXPECT_TRUE(frame_attention_runs(Element::f16, 4, 64));
}

}  // namespace
}  // namespace hark::compute::cuda
