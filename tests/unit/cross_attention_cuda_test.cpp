// Cross-attention over the frames (absorb_query, frame_attention, absorb_values) against the
// attention it stands for, computed in double on the CPU the usual way: keys W_k x_t and values
// W_v x_t + b_v of every frame, softmax(scale · q_h · k_t), the weighted sum of the values. The
// same over INT8 frames (quantize_frames, frame_attention_int8): against that attention over the
// frames the codes stand for, and over the frames before quantisation.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "compute/cuda/frame_attention_sm90.h"
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

// The frames as quantize_frames codes them, (code − 128) · channel scale · frame scale / 127, from
// what it wrote; and how far they are from x, in units of their step (at most 0.5 plus rounding).
struct Dequantized {
  std::vector<float> frames;
  double worst_steps = 0;
};
Dequantized dequantize(const Shape& s, const std::vector<float>& x, const Buffer& codes,
                       const Buffer& frame_scales, const Buffer& channel_scales) {
  const int64_t width = int64_t{s.heads} * s.head_dim, rows = int64_t{s.windows} * s.frames;
  std::vector<uint8_t> code(static_cast<size_t>(rows * width));
  std::vector<float> frame_scale(static_cast<size_t>(rows));
  std::vector<float> channel_scale(static_cast<size_t>(s.windows * width));
  download(codes.data(), code.size(), code.data());
  download(frame_scales.data(), sizeof(float) * frame_scale.size(), frame_scale.data());
  download(channel_scales.data(), sizeof(float) * channel_scale.size(), channel_scale.data());
  Dequantized out;
  out.frames.resize(code.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) {
      const double step = double{channel_scale[(r / s.frames) * width + c]} * frame_scale[r] / 127;
      const size_t at = static_cast<size_t>(r * width + c);
      out.frames[at] = static_cast<float>((code[at] - 128) * step);
      out.worst_steps = std::max(out.worst_steps, std::abs(out.frames[at] - x[at]) / step);
    }
  }
  return out;
}

// Outlier channels: every 37th channel of the frames 20 times larger, as a Transformer's
// residual stream has a few.
struct Options {
  bool int8 = false;
  bool outliers = false;
};

void check_shape(Element e, const Shape& s, Options options = {}) {
  const int64_t width = int64_t{s.heads} * s.head_dim;
  ASSERT_TRUE(options.int8 ? frame_attention_int8_runs(e, s.heads, width)
                           : frame_attention_runs(e, s.heads, width));
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(width));
  // Frames of unit size and weights that keep keys near unit size: scores spread over a few units.
  DeviceArray q = random_array(e, s.rows * width, 1, 1.0f);
  DeviceArray x = random_array(e, int64_t{s.windows} * s.frames * width, 2, 1.0f);
  if (options.outliers) {
    std::vector<float> values = x.values;
    for (size_t i = 0; i < values.size(); ++i) {
      if (i % width % 37 == 5) values[i] *= 20.0f;
    }
    x = upload_values(e, values);
  }
  DeviceArray w_k = random_array(e, width * width, 3, 2.0f * weight_scale);
  DeviceArray w_v = random_array(e, width * width, 4, weight_scale);
  DeviceArray b_v = random_array(e, width, 5, 0.5f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));

  Buffer absorbed(element_size(e) * s.rows * s.heads * width);
  Buffer attended(absorbed.bytes());
  Buffer context(element_size(e) * s.rows * width);
  absorb_query(e, q.buffer.data(), width, s.rows, s.heads, s.head_dim, w_k.buffer.data(), width,
               width, scale, absorbed.data(), nullptr);
  const int64_t frame_rows = int64_t{s.windows} * s.frames;
  Buffer codes(frame_rows * width), frame_scales(sizeof(float) * frame_rows);
  Buffer channel_scales(sizeof(float) * s.windows * width);
  if (options.int8) {
    quantize_frames(e, x.buffer.data(), s.windows, s.frames, width, codes.as<uint8_t>(),
                    frame_scales.as<float>(), channel_scales.as<float>(), nullptr);
    Int8Frames frames{codes.as<uint8_t>(), frame_scales.as<float>(), channel_scales.as<float>(),
                      s.windows > 1};
    frame_attention_int8(e, absorbed.data(), s.rows, s.heads, width, frames, s.frames,
                         s.rows_per_window, attended.data(), nullptr);
  } else {
    frame_attention(e, absorbed.data(), s.rows, s.heads, width, x.buffer.data(), s.frames,
                    s.windows > 1 ? s.frames * width : 0, s.rows_per_window, attended.data(),
                    nullptr);
  }
  absorb_values(e, attended.data(), s.rows, s.heads, s.head_dim, w_v.buffer.data(), width,
                b_v.buffer.data(), width, context.data(), width, nullptr);
  check(cudaDeviceSynchronize(), "cross-attention test");
  const std::vector<float> got = read_back(e, context, s.rows * width);
  const auto error_against = [&](const std::vector<float>& frames) {
    const std::vector<double> want =
        reference(s, q.values, frames, w_k.values, w_v.values, b_v.values, scale);
    double largest = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(std::isfinite(got[i])) << "at " << i;
      largest = std::max(largest, std::abs(want[i]));
      worst = std::max(worst, std::abs(got[i] - want[i]));
    }
    return worst / largest;
  };
  const std::string what = std::string(element_name(e)) + " rows " + std::to_string(s.rows) +
                           " heads " + std::to_string(s.heads) + " frames " +
                           std::to_string(s.frames);
  if (!options.int8) {
    // F16/BF16 inputs, the absorbed query and the attended frames rounded to the element type.
    EXPECT_LE(error_against(x.values), e == Element::f16 ? 1e-2 : 3e-2) << what;
    return;
  }
  const Dequantized coded = dequantize(s, x.values, codes, frame_scales, channel_scales);
  EXPECT_LE(coded.worst_steps, 0.5 + 1e-3) << what;
  // Over the frames the codes stand for, the kernel's own error: the query times the channel
  // scales and the probabilities times the frame scales rounded to F16, as frame_attention
  // rounds its query and probabilities.
  const double kernel_error = error_against(coded.frames);
  // Over the frames themselves: the quantisation's too (a step is 1/254 of a channel's range).
  const double total_error = error_against(x.values);
  std::printf("%s: %.2e off the attention over the coded frames, %.2e off the frames\n",
              what.c_str(), kernel_error, total_error);
  EXPECT_LE(kernel_error, 1e-2) << what;
  // With outlier channels the largest outputs come from them, each off by up to half a step of
  // its channel (measured: 3.05e-2 for large-v3's shape; 0.7-1.3e-2 without).
  EXPECT_LE(total_error, options.outliers ? 5e-2 : 3e-2) << what;
}

// absorb_query and absorb_values alone, against their sums in double: the largest error relative
// to the largest output (each output is one F32 sum rounded once to the element type).
void check_absorbs(Element e, int rows, int heads, int head_dim) {
  const int64_t width = int64_t{heads} * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  DeviceArray q = random_array(e, rows * width, 11, 1.0f);
  DeviceArray w = random_array(e, width * width, 12, 1.0f / std::sqrt(static_cast<float>(width)));
  DeviceArray o = random_array(e, rows * heads * width, 13, 1.0f);
  DeviceArray bias = random_array(e, width, 14, 0.5f);
  Buffer absorbed(element_size(e) * rows * heads * width), context(element_size(e) * rows * width);
  absorb_query(e, q.buffer.data(), width, rows, heads, head_dim, w.buffer.data(), width, width,
               scale, absorbed.data(), nullptr);
  absorb_values(e, o.buffer.data(), rows, heads, head_dim, w.buffer.data(), width,
                bias.buffer.data(), width, context.data(), width, nullptr);
  check(cudaDeviceSynchronize(), "absorb test");
  const auto relative_error = [](const std::vector<float>& got, const std::vector<double>& want) {
    double largest = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      largest = std::max(largest, std::abs(want[i]));
      worst = std::max(worst, std::abs(got[i] - want[i]));
    }
    return worst / largest;
  };
  std::vector<double> want_absorbed(static_cast<size_t>(rows * heads * width));
  std::vector<double> want_context(static_cast<size_t>(rows * width));
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      for (int64_t c = 0; c < width; ++c) {
        double sum = 0;
        for (int j = 0; j < head_dim; ++j) {
          const int64_t k = int64_t{h} * head_dim + j;
          sum += double{q.values[r * width + k]} * w.values[k * width + c];
        }
        want_absorbed[(int64_t{r} * heads + h) * width + c] = scale * sum;
      }
      for (int j = 0; j < head_dim; ++j) {
        const int64_t output = int64_t{h} * head_dim + j;
        double sum = bias.values[output];
        for (int64_t c = 0; c < width; ++c) {
          sum +=
              double{w.values[output * width + c]} * o.values[(int64_t{r} * heads + h) * width + c];
        }
        want_context[r * width + output] = sum;
      }
    }
  }
  const double bound = e == Element::f16 ? 2e-3 : 1e-2;
  const std::string what = std::string(element_name(e)) + " rows " + std::to_string(rows) +
                           " heads " + std::to_string(heads) + " of " + std::to_string(head_dim);
  EXPECT_LE(relative_error(read_back(e, absorbed, want_absorbed.size()), want_absorbed), bound)
      << "absorb_query, " << what;
  EXPECT_LE(relative_error(read_back(e, context, want_context.size()), want_context), bound)
      << "absorb_values, " << what;
}

TEST(CrossAttentionCuda, AbsorbsAgainstDouble) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  // large-v3's batch of 120: two CTAs of 64 query rows (the second part empty), four of 32 rows
  // of the values, each over four slices of the width.
  check_absorbs(Element::f16, 120, 20, 64);
  check_absorbs(Element::bf16, 7, 20, 64);
  // Width 80: a last column tile of 16 for the query, five slices of 16 for the values.
  check_absorbs(Element::f16, 5, 5, 16);
  // Heads of 128: 16 warps a CTA of the values.
  check_absorbs(Element::f16, 70, 2, 128);
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

// Whether frame_attention_int8 runs here: a GPU of compute capability 9.0 (every shape below
// is one it takes; check_shape asserts that).
bool on_hopper() {
  return available() && frame_attention_int8_runs(Element::f16, 20, 1280);
}

TEST(CrossAttentionInt8Cuda, LargeV3ShapeOneWindowEveryRow) {
  if (!on_hopper()) GTEST_SKIP() << "no H100/H200: " << describe();
  // 16 rows over one window: 8 splits a row, each 3 tiles of 64 frames (the last one 28).
  check_shape(Element::f16, {16, 20, 64, 1, 1500, 16}, {.int8 = true});
  // 120 rows (the standard workload's batch): no splits, 24 tiles a CTA, each stage of the ring
  // refilled a dozen times.
  check_shape(Element::f16, {120, 20, 64, 1, 1500, 120}, {.int8 = true});
}

TEST(CrossAttentionInt8Cuda, OneRowWithOutlierChannels) {
  if (!on_hopper()) GTEST_SKIP() << "no H100/H200: " << describe();
  check_shape(Element::f16, {1, 20, 64, 1, 1500, 1}, {.int8 = true, .outliers = true});
}

TEST(CrossAttentionInt8Cuda, WindowPerRowGroupAndTailTile) {
  if (!on_hopper()) GTEST_SKIP() << "no H100/H200: " << describe();
  // tiny's width (6 heads of 64: 3 pairs of output tiles, 2 and 1 for the warpgroups); rows 0-2
  // read window 0 and 3-5 window 1; 37 frames, one partial tile.
  check_shape(Element::f16, {6, 6, 64, 2, 37, 3}, {.int8 = true});
}

TEST(CrossAttentionInt8Cuda, ManyRowsAndTheNarrowestWidth) {
  if (!on_hopper()) GTEST_SKIP() << "no H100/H200: " << describe();
  // 128 rows, each its own window, no splits (base's width, 8 heads of 64).
  check_shape(Element::f16, {128, 8, 64, 128, 20, 1}, {.int8 = true});
  // Width 128: the second warpgroup has no output tiles; 100 frames end inside the second tile.
  check_shape(Element::f16, {3, 2, 64, 3, 100, 1}, {.int8 = true});
}

TEST(CrossAttentionInt8Cuda, RejectsWhatItCannotRun) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  EXPECT_FALSE(frame_attention_int8_runs(Element::bf16, 20, 1280));
  EXPECT_FALSE(frame_attention_int8_runs(Element::f16, 25, 1600));
  EXPECT_FALSE(frame_attention_int8_runs(Element::f16, 4, 64));     // not a multiple of 128
  EXPECT_FALSE(frame_attention_int8_runs(Element::f16, 20, 1408));  // wider than 1280
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
