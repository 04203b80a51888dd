// The Conformer / transducer ops and layers (docs/parakeet.md sections 4 and 5) against naive
// double-precision references written here, index by index from the spec.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "base/error.h"
#include "compute/cpu/simd.h"
#include "compute/ops.h"
#include "format/quant.h"
#include "nn/conformer.h"
#include "nn/lstm.h"

namespace hark::nn {
namespace {

using Values = std::vector<double>;

// ---- test data ----

std::vector<float> random_values(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = normal(rng);
  return values;
}

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  return Tensor(shape, random_values(shape.elements(), seed, scale));
}

Values as_double(std::span<const float> values) {
  return Values(values.begin(), values.end());
}

// Owns the values behind Weight views; values(w) gives them back for the references.
struct Store {
  std::vector<std::vector<float>> arrays;
  uint32_t seed = 1000;

  Weight weight(const Shape& shape, float scale = 0.3f, float offset = 0.0f) {
    std::vector<float> values = random_values(shape.elements(), seed++, scale);
    for (float& v : values) v += offset;
    arrays.push_back(std::move(values));
    return Weight::f32(arrays.back().data(), shape);
  }
  Linear linear(int64_t out, int64_t in, bool bias = true, float scale = 0.3f) {
    Linear layer;
    layer.weight = weight(Shape{out, in}, scale);
    if (bias) layer.bias = weight(Shape{out}, 0.1f);
    return layer;
  }
  LayerNorm layer_norm(int64_t d) {
    return LayerNorm{weight(Shape{d}, 0.2f, 1.0f), weight(Shape{d}, 0.1f)};
  }
};

Values values(const Weight& w) {
  const float* data = reinterpret_cast<const float*>(w.data);
  return Values(data, data + w.shape.elements());
}

// max |a - b| / max |b|, as the other compute tests measure.
double relative_error(std::span<const float> actual, const Values& expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i) {
    diff = std::max(diff, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

void for_each_simd(const std::function<void()>& check) {
  using compute::cpu::SimdLevel;
  for (SimdLevel level : {SimdLevel::portable, SimdLevel::avx2, SimdLevel::avx512}) {
    SCOPED_TRACE("simd level " + std::to_string(static_cast<int>(level)));
    compute::cpu::limit_simd(level);
    check();
  }
  compute::cpu::limit_simd(SimdLevel::avx512);
}

// ---- naive references, in double ----

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double silu(double x) {
  return x * sigmoid(x);
}

// y [m, n] = x [m, k] · wᵀ (w [n, k]) + bias.
Values ref_linear(const Values& x, int64_t m, int64_t k, const Values& w, int64_t n,
                  const Values* bias) {
  Values y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = bias ? (*bias)[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) sum += x[i * k + p] * w[j * k + p];
      y[i * n + j] = sum;
    }
  }
  return y;
}

Values ref_linear(const Values& x, int64_t m, const Linear& layer) {
  const Values w = values(layer.weight);
  const Values b = layer.bias ? values(*layer.bias) : Values{};
  return ref_linear(x, m, layer.in_features(), w, layer.out_features(), layer.bias ? &b : nullptr);
}

Values ref_layer_norm(const Values& x, int64_t rows, int64_t n, const LayerNorm& norm) {
  const Values g = values(norm.weight), b = values(norm.bias);
  Values y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += x[r * n + j];
    mean /= n;
    for (int64_t j = 0; j < n; ++j) var += (x[r * n + j] - mean) * (x[r * n + j] - mean);
    var /= n;
    for (int64_t j = 0; j < n; ++j) {
      y[r * n + j] = (x[r * n + j] - mean) / std::sqrt(var + norm.eps) * g[j] + b[j];
    }
  }
  return y;
}

// GLU over rows of 2c values.
Values ref_glu(const Values& x, int64_t rows, int64_t c) {
  Values y(static_cast<size_t>(rows * c));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < c; ++j) y[r * c + j] = x[r * 2 * c + j] * sigmoid(x[r * 2 * c + c + j]);
  }
  return y;
}

// PyTorch Conv1d(groups = C, padding = (k - 1) / 2) over time-major x [T, C] of one sequence,
// w [C, 1, k]: y[t, c] = bias[c] + Σ_j w[c, j] · x[t + j - pad, c], zeros outside [0, T).
Values ref_depthwise_conv1d(const Values& x, int64_t steps, int64_t channels, const Values& w,
                            int64_t kernel, const Values* bias) {
  Values y(static_cast<size_t>(steps * channels));
  const int64_t pad = (kernel - 1) / 2;
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      double sum = bias ? (*bias)[c] : 0.0;
      for (int64_t j = 0; j < kernel; ++j) {
        const int64_t s = t + j - pad;
        if (s >= 0 && s < steps) sum += w[c * kernel + j] * x[s * channels + c];
      }
      y[t * channels + c] = sum;
    }
  }
  return y;
}

// PyTorch Conv2d on an image given channel-first as x[c][h][w] (flattened), w [Co, Ci/groups,
// kh, kw], groups 1 or Ci (= Co): y[o][oh][ow]. Returns channel-first.
Values ref_conv2d_nchw(const Values& x, int64_t ci, int64_t height, int64_t width, const Values& w,
                       int64_t co, int64_t kh, int64_t kw, int64_t groups, const Values* bias,
                       int stride, int padding, int64_t& out_height, int64_t& out_width) {
  out_height = (height + 2 * padding - kh) / stride + 1;
  out_width = (width + 2 * padding - kw) / stride + 1;
  const int64_t in_per_group = ci / groups, out_per_group = co / groups;
  Values y(static_cast<size_t>(co * out_height * out_width));
  for (int64_t o = 0; o < co; ++o) {
    const int64_t g = o / out_per_group;
    for (int64_t oh = 0; oh < out_height; ++oh) {
      for (int64_t ow = 0; ow < out_width; ++ow) {
        double sum = bias ? (*bias)[o] : 0.0;
        for (int64_t c = 0; c < in_per_group; ++c) {
          const int64_t input_channel = g * in_per_group + c;
          for (int64_t i = 0; i < kh; ++i) {
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t ih = oh * stride + i - padding, iw = ow * stride + j - padding;
              if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;
              sum += w[((o * in_per_group + c) * kh + i) * kw + j] *
                     x[(input_channel * height + ih) * width + iw];
            }
          }
        }
        y[(o * out_height + oh) * out_width + ow] = sum;
      }
    }
  }
  return y;
}

// [H, W, C] <-> [C, H, W].
Values channels_first(std::span<const float> x, int64_t height, int64_t width, int64_t channels) {
  Values y(x.size());
  for (int64_t h = 0; h < height; ++h)
    for (int64_t w = 0; w < width; ++w)
      for (int64_t c = 0; c < channels; ++c)
        y[(c * height + h) * width + w] = x[(h * width + w) * channels + c];
  return y;
}
Values channels_last(const Values& x, int64_t channels, int64_t height, int64_t width) {
  Values y(x.size());
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t h = 0; h < height; ++h)
      for (int64_t w = 0; w < width; ++w)
        y[(h * width + w) * channels + c] = x[(c * height + h) * width + w];
  return y;
}

// transformers' _rel_shift, step by step on a [T, 2T - 1] matrix: pad one zero column on the
// left ([T, 2T]), view as [2T, T], drop the first row, view as [T, 2T - 1], keep T columns.
Values ref_rel_shift(const Values& scores, int64_t steps) {
  const int64_t positions = 2 * steps - 1;
  Values padded;
  for (int64_t i = 0; i < steps; ++i) {
    padded.push_back(0.0);
    for (int64_t j = 0; j < positions; ++j) padded.push_back(scores[i * positions + j]);
  }
  // The [2T, T] view without its first row is the flat array from index T on.
  const Values dropped(padded.begin() + steps, padded.end());
  Values shifted(static_cast<size_t>(steps * steps));
  for (int64_t i = 0; i < steps; ++i) {
    for (int64_t j = 0; j < steps; ++j) shifted[i * steps + j] = dropped[i * positions + j];
  }
  return shifted;
}

// transformers' ParakeetEncoderAttention after the projections, for one sequence of `steps`
// rows of which the first `length` are valid: q, k, v [steps, d], p [2·steps − 1, d], biases
// [h, dh]. The position term goes through the literal rel-shift; masked keys get −inf.
Values ref_rel_attention(const Values& q, const Values& k, const Values& v, const Values& p,
                         const Values& u, const Values& bias_v, int64_t steps, int64_t length,
                         int heads, double scale) {
  const int64_t d = static_cast<int64_t>(q.size()) / steps, dh = d / heads;
  const int64_t positions = 2 * steps - 1;
  Values out(static_cast<size_t>(steps * d), 0.0);
  for (int h = 0; h < heads; ++h) {
    Values bd(static_cast<size_t>(steps * positions));
    for (int64_t i = 0; i < steps; ++i) {
      for (int64_t c = 0; c < positions; ++c) {
        double sum = 0;
        for (int64_t e = 0; e < dh; ++e) {
          sum += (q[i * d + h * dh + e] + bias_v[h * dh + e]) * p[c * d + h * dh + e];
        }
        bd[i * positions + c] = sum;
      }
    }
    const Values shifted = ref_rel_shift(bd, steps);
    for (int64_t i = 0; i < length; ++i) {
      Values score(static_cast<size_t>(length));
      double max = -INFINITY;
      for (int64_t j = 0; j < length; ++j) {
        double ac = 0;
        for (int64_t e = 0; e < dh; ++e) {
          ac += (q[i * d + h * dh + e] + u[h * dh + e]) * k[j * d + h * dh + e];
        }
        score[j] = ac * scale + shifted[i * steps + j] * scale;
        max = std::max(max, score[j]);
      }
      double total = 0;
      for (double& s : score) total += (s = std::exp(s - max));
      for (int64_t e = 0; e < dh; ++e) {
        double sum = 0;
        for (int64_t j = 0; j < length; ++j) sum += score[j] * v[j * d + h * dh + e];
        out[i * d + h * dh + e] = sum / total;
      }
    }
  }
  return out;
}

// ---- element-wise ops ----

TEST(ConformerOps, ActivationsMatchTheirDefinitions) {
  for_each_simd([&] {
    std::vector<float> grid;
    for (float v = -30.0f; v <= 30.0f; v += 0.0625f) grid.push_back(v);
    const int64_t n = static_cast<int64_t>(grid.size());
    Tensor s(Shape{n}, grid), r(Shape{n}, grid);
    compute::activate(s, Activation::silu);
    compute::activate(r, Activation::relu);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(s.values()[i], silu(grid[i]), 1e-6 * std::max(1.0f, std::abs(grid[i])))
          << "silu at " << grid[i];
      ASSERT_EQ(r.values()[i], grid[i] < 0 ? 0.0f : grid[i]);
    }
    std::vector<float> with_nan(19, 0.5f);
    with_nan[11] = NAN;
    for (Activation a : {Activation::silu, Activation::relu}) {
      Tensor x(Shape{19}, with_nan);
      compute::activate(x, a);
      EXPECT_TRUE(std::isnan(x.values()[11]));
      EXPECT_FALSE(std::isnan(x.values()[10]));
    }
  });
}

TEST(ConformerOps, LinearEpilogueWithSiluAndRelu) {
  Store store;
  const Linear layer = store.linear(21, 13);
  const Tensor x = random_tensor(Shape{11, 13}, 1);
  const Values expected_raw = ref_linear(as_double(x.values()), 11, layer);
  for (Activation a : {Activation::silu, Activation::relu}) {
    Tensor y;
    layer.forward(x, y, a);
    Values expected = expected_raw;
    for (double& e : expected) e = a == Activation::silu ? silu(e) : std::max(e, 0.0);
    EXPECT_LT(relative_error(y.values(), expected), 1e-5);
  }
}

TEST(ConformerOps, GluScaleAddScaled) {
  for_each_simd([&] {
    const int64_t rows = 5, half = 37;
    const Tensor x = random_tensor(Shape{rows, 2 * half}, 2, 3.0f);
    Tensor y;
    compute::glu(x, y);
    ASSERT_EQ(y.shape(), (Shape{rows, half}));
    EXPECT_LT(relative_error(y.values(), ref_glu(as_double(x.values()), rows, half)), 1e-6);
  });
  Tensor a = random_tensor(Shape{3, 7}, 3), b = random_tensor(Shape{3, 7}, 4);
  const Tensor a0 = a;
  compute::add_scaled(a, b, 0.5f, a);
  for (int i = 0; i < 21; ++i)
    EXPECT_FLOAT_EQ(a.values()[i], a0.values()[i] + 0.5f * b.values()[i]);
  compute::scale(a, 2.0f);
  for (int i = 0; i < 21; ++i) {
    EXPECT_FLOAT_EQ(a.values()[i], 2.0f * (a0.values()[i] + 0.5f * b.values()[i]));
  }
  Tensor odd = random_tensor(Shape{3, 7}, 5), out;
  EXPECT_THROW(compute::glu(odd, out), Error);
  EXPECT_THROW(compute::add_scaled(odd, random_tensor(Shape{7, 3}, 6), 1.0f, out), Error);
}

TEST(ConformerOps, SwapLastAxesAndScatterRows) {
  const Tensor x = random_tensor(Shape{3, 37, 41}, 7);
  Tensor y;
  compute::swap_last_axes(x, y);
  ASSERT_EQ(y.shape(), (Shape{3, 41, 37}));
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t i = 0; i < 37; ++i)
      for (int64_t j = 0; j < 41; ++j)
        ASSERT_EQ(y.values()[(a * 41 + j) * 37 + i], x.values()[(a * 37 + i) * 41 + j]);

  const Tensor rows = random_tensor(Shape{2, 5}, 8);
  Tensor target = random_tensor(Shape{4, 5}, 9);
  const Tensor before = target;
  const std::vector<int64_t> where{3, 1};
  compute::scatter_rows(rows, where, target);
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_EQ(target.values()[3 * 5 + j], rows.values()[j]);
    EXPECT_EQ(target.values()[1 * 5 + j], rows.values()[5 + j]);
    EXPECT_EQ(target.values()[0 * 5 + j], before.values()[j]);
    EXPECT_EQ(target.values()[2 * 5 + j], before.values()[2 * 5 + j]);
  }
  const std::vector<int64_t> twice{2, 2}, outside{0, 4};
  EXPECT_THROW(compute::scatter_rows(rows, twice, target), Error);
  EXPECT_THROW(compute::scatter_rows(rows, outside, target), Error);
}

// ---- convolutions ----

TEST(ConformerOps, Conv2dMatchesPyTorchLayout) {
  Store store;
  for (int64_t ci : {1, 3}) {
    SCOPED_TRACE("input channels " + std::to_string(ci));
    // 64 x 44 (32 x 22 outputs) is large enough for the unfolding to run on several threads.
    const int64_t height = 64, width = 44, co = 5;
    const Tensor x = random_tensor(ci == 1 ? Shape{height, width} : Shape{height, width, ci}, 10);
    const Weight w = store.weight(Shape{co, ci, 3, 3});
    const Weight b = store.weight(Shape{co}, 0.2f);
    Tensor y;
    compute::conv2d(x, w, 2, 1, y, {.bias = &b, .activation = Activation::relu});
    int64_t oh = 0, ow = 0;
    const Values bias = values(b);
    Values expected = ref_conv2d_nchw(channels_first(x.values(), height, width, ci), ci, height,
                                      width, values(w), co, 3, 3, 1, &bias, 2, 1, oh, ow);
    for (double& e : expected) e = std::max(e, 0.0);
    ASSERT_EQ(y.shape(), (Shape{oh, ow, co}));
    EXPECT_EQ(oh, 32);
    EXPECT_EQ(ow, 22);
    EXPECT_LT(relative_error(y.values(), channels_last(expected, co, oh, ow)), 1e-5);
  }
}

TEST(ConformerOps, DepthwiseConv2d) {
  for_each_simd([&] {
    Store store;
    // 45 channels: a 32-wide block, an 8-wide one and a scalar tail; odd sizes, and enough
    // pixels for several threads.
    const int64_t height = 61, width = 39, channels = 45;
    const Tensor x = random_tensor(Shape{height, width, channels}, 11);
    const Weight w = store.weight(Shape{channels, 1, 3, 3});
    const Weight b = store.weight(Shape{channels}, 0.2f);
    const Tensor residual = random_tensor(Shape{31, 20, channels}, 12);
    Tensor y;
    compute::depthwise_conv2d(x, w, 2, 1, y,
                              {.bias = &b, .activation = Activation::relu, .residual = &residual});
    int64_t oh = 0, ow = 0;
    const Values bias = values(b);
    Values expected =
        ref_conv2d_nchw(channels_first(x.values(), height, width, channels), channels, height,
                        width, values(w), channels, 3, 3, channels, &bias, 2, 1, oh, ow);
    for (double& e : expected) e = std::max(e, 0.0);
    expected = channels_last(expected, channels, oh, ow);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += residual.values()[i];
    ASSERT_EQ(y.shape(), (Shape{31, 20, channels}));
    EXPECT_LT(relative_error(y.values(), expected), 1e-5);
  });
}

TEST(ConformerOps, DepthwiseConv1dSamePaddingAndLengths) {
  for_each_simd([&] {
    Store store;
    const int64_t steps = 13, channels = 45, kernel = 9;
    const Weight w = store.weight(Shape{channels, 1, kernel});
    const Weight b = store.weight(Shape{channels}, 0.2f);
    const Values wv = values(w), bv = values(b);
    // One sequence, with a silu epilogue.
    {
      const Tensor x = random_tensor(Shape{steps, channels}, 13);
      Tensor y;
      compute::depthwise_conv1d(x, w, {}, y, {.bias = &b, .activation = Activation::silu});
      Values expected =
          ref_depthwise_conv1d(as_double(x.values()), steps, channels, wv, kernel, &bv);
      for (double& e : expected) e = silu(e);
      EXPECT_LT(relative_error(y.values(), expected), 1e-5);
    }
    // Shorter than the kernel.
    {
      const Tensor x = random_tensor(Shape{3, channels}, 14);
      Tensor y;
      compute::depthwise_conv1d(x, w, {}, y, {.bias = &b});
      EXPECT_LT(relative_error(y.values(), ref_depthwise_conv1d(as_double(x.values()), 3, channels,
                                                                wv, kernel, &bv)),
                1e-5);
    }
    // A padded batch: each sequence's valid steps as if it were alone (padding full of junk),
    // long enough for several threads.
    {
      const int64_t steps = 190;
      const std::vector<int64_t> lengths{steps, 77};
      const Tensor x = random_tensor(Shape{2, steps, channels}, 15, 10.0f);
      Tensor y;
      compute::depthwise_conv1d(x, w, lengths, y, {.bias = &b});
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t length = lengths[s];
        const std::span<const float> xs =
            x.values().subspan(s * steps * channels, length * channels);
        const Values expected =
            ref_depthwise_conv1d(as_double(xs), length, channels, wv, kernel, &bv);
        EXPECT_LT(
            relative_error(y.values().subspan(s * steps * channels, length * channels), expected),
            1e-5)
            << "sequence " << s;
      }
    }
  });
  Store store;
  const Tensor x = random_tensor(Shape{5, 4}, 16);
  Tensor y;
  EXPECT_THROW(compute::depthwise_conv1d(x, store.weight(Shape{4, 1, 4}), {}, y), Error);
  EXPECT_THROW(compute::depthwise_conv1d(x, store.weight(Shape{3, 1, 3}), {}, y), Error);
  const std::vector<int64_t> too_long{6};
  EXPECT_THROW(compute::depthwise_conv1d(x, store.weight(Shape{4, 1, 3}), too_long, y), Error);
}

TEST(ConformerOps, BatchNormFoldsIntoTheDepthwiseConv) {
  Store store;
  const int64_t steps = 17, channels = 19, kernel = 9;
  const float eps = 1e-5f;
  const Weight w = store.weight(Shape{channels, 1, kernel});
  const Weight b = store.weight(Shape{channels}, 0.2f);
  const Weight gamma = store.weight(Shape{channels}, 0.3f, 1.0f);
  const Weight beta = store.weight(Shape{channels}, 0.3f);
  const Weight mean = store.weight(Shape{channels}, 0.5f);
  const Weight var = store.weight(Shape{channels}, 0.2f, 0.8f);  // positive
  const Tensor x = random_tensor(Shape{steps, channels}, 17);
  // Unfolded: conv + bias, then BatchNorm1d in eval mode.
  const Values bv = values(b), g = values(gamma), be = values(beta), mu = values(mean),
               s2 = values(var);
  Values expected =
      ref_depthwise_conv1d(as_double(x.values()), steps, channels, values(w), kernel, &bv);
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      double& e = expected[t * channels + c];
      e = (e - mu[c]) / std::sqrt(s2[c] + eps) * g[c] + be[c];
    }
  }
  compute::FoldedConv folded = compute::fold_batch_norm(w, &b, gamma, beta, mean, var, eps);
  // Moving keeps the views valid.
  const compute::FoldedConv moved = std::move(folded);
  EXPECT_EQ(moved.weight.shape, w.shape);
  Tensor y;
  compute::depthwise_conv1d(x, moved.weight, {}, y, {.bias = &moved.bias});
  EXPECT_LT(relative_error(y.values(), expected), 1e-5);
  // Without a conv bias (Parakeet v2/v3), and from F16 weights.
  const std::vector<uint8_t> w16 = quant::from_f32(
      DType::F16, reinterpret_cast<const float*>(w.data), static_cast<size_t>(channels * kernel));
  const Weight w_f16{DType::F16, w.shape, w16.data(), w16.size()};
  std::vector<float> w16_values(static_cast<size_t>(channels * kernel));
  quant::to_f32(DType::F16, w16.data(), w16_values.data(), w16_values.size());
  const compute::FoldedConv no_bias =
      compute::fold_batch_norm(w_f16, nullptr, gamma, beta, mean, var, eps);
  Values expected_no_bias = ref_depthwise_conv1d(as_double(x.values()), steps, channels,
                                                 as_double(w16_values), kernel, nullptr);
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      double& e = expected_no_bias[t * channels + c];
      e = (e - mu[c]) / std::sqrt(s2[c] + eps) * g[c] + be[c];
    }
  }
  compute::depthwise_conv1d(x, no_bias.weight, {}, y, {.bias = &no_bias.bias});
  EXPECT_LT(relative_error(y.values(), expected_no_bias), 1e-5);
  EXPECT_THROW(
      compute::fold_batch_norm(w, &b, store.weight(Shape{channels + 1}), beta, mean, var, eps),
      Error);
}

// ---- relative positions and attention ----

TEST(RelPositions, SinusoidsOfPositionsFromPastToFuture) {
  const int64_t steps = 23, width = 16;
  Tensor table;
  compute::relative_positions(steps, width, table);
  ASSERT_EQ(table.shape(), (Shape{2 * steps - 1, width}));
  for (int64_t k = 0; k < 2 * steps - 1; ++k) {
    const double r = double(steps - 1 - k);
    for (int64_t m = 0; m < width / 2; ++m) {
      const double w = 1.0 / std::pow(10000.0, double(2 * m) / double(width));
      EXPECT_NEAR(table.values()[k * width + 2 * m], std::sin(r * w), 2e-6) << k << " " << m;
      EXPECT_NEAR(table.values()[k * width + 2 * m + 1], std::cos(r * w), 2e-6) << k << " " << m;
    }
  }
  // Position 0 sits in the middle row: sin 0 = 0, cos 0 = 1.
  EXPECT_EQ(table.values()[(steps - 1) * width], 0.0f);
  EXPECT_EQ(table.values()[(steps - 1) * width + 1], 1.0f);
  EXPECT_THROW(compute::relative_positions(4, 7, table), Error);
}

TEST(RelPosAttention, RelShiftPicksPositionQueryMinusKey) {
  for (int64_t steps : {1, 2, 5, 8}) {
    const int64_t positions = 2 * steps - 1;
    // Entry [i, c] encodes (i, c) so that the shift's choice can be read back.
    Values scores(static_cast<size_t>(steps * positions));
    for (int64_t i = 0; i < steps; ++i)
      for (int64_t c = 0; c < positions; ++c) scores[i * positions + c] = double(i * 1000 + c);
    const Values shifted = ref_rel_shift(scores, steps);
    for (int64_t i = 0; i < steps; ++i) {
      for (int64_t j = 0; j < steps; ++j) {
        // Column T − 1 − i + j of row i, the table row of position i − j.
        ASSERT_EQ(shifted[i * steps + j], double(i * 1000 + (steps - 1 - i + j)))
            << "T " << steps << " i " << i << " j " << j;
      }
    }
  }
}

struct AttentionInputs {
  Tensor q, k, v, p;
  Weight u, bias_v;
};

AttentionInputs attention_inputs(Store& store, int64_t sequences, int64_t steps, int64_t width,
                                 int heads, uint32_t seed) {
  AttentionInputs in;
  const Shape shape = sequences == 0 ? Shape{steps, width} : Shape{sequences, steps, width};
  in.q = random_tensor(shape, seed);
  in.k = random_tensor(shape, seed + 1);
  in.v = random_tensor(shape, seed + 2);
  in.p = random_tensor(Shape{2 * steps - 1, width}, seed + 3);
  in.u = store.weight(Shape{heads, width / heads}, 0.5f);
  in.bias_v = store.weight(Shape{heads, width / heads}, 0.5f);
  return in;
}

TEST(RelPosAttention, MatchesTransformersWithTheLiteralShift) {
  struct Case {
    int64_t steps, width;
    int heads;
  };
  // Odd lengths, and more queries than one block (64) of the CPU kernel.
  for (const Case c : {Case{1, 8, 2}, Case{13, 24, 3}, Case{70, 16, 2}, Case{129, 32, 4}}) {
    SCOPED_TRACE("T " + std::to_string(c.steps));
    Store store;
    const AttentionInputs in = attention_inputs(store, 0, c.steps, c.width, c.heads, 20);
    const float scale = 1.0f / std::sqrt(float(c.width / c.heads));
    Tensor out;
    compute::rel_pos_attention(in.q, in.k, in.v, in.p, in.u, in.bias_v, c.heads, scale, {}, out);
    ASSERT_EQ(out.shape(), in.q.shape());
    const Values expected =
        ref_rel_attention(as_double(in.q.values()), as_double(in.k.values()),
                          as_double(in.v.values()), as_double(in.p.values()), values(in.u),
                          values(in.bias_v), c.steps, c.steps, c.heads, scale);
    EXPECT_LT(relative_error(out.values(), expected), 1e-5);
  }
}

TEST(RelPosAttention, PaddedBatchMatchesEachSequenceAlone) {
  Store store;
  const int64_t steps = 71, width = 24;
  const int heads = 3;
  const std::vector<int64_t> lengths{71, 40, 1};
  const AttentionInputs in = attention_inputs(store, 3, steps, width, heads, 30);
  const float scale = 1.0f / std::sqrt(8.0f);
  Tensor out;
  compute::rel_pos_attention(in.q, in.k, in.v, in.p, in.u, in.bias_v, heads, scale, lengths, out);
  for (int64_t s = 0; s < 3; ++s) {
    SCOPED_TRACE("sequence " + std::to_string(s));
    const int64_t length = lengths[s];
    // Alone, the sequence has the table rows of positions length − 1 .. −(length − 1): the
    // middle 2·length − 1 rows of the padded batch's table.
    const auto rows = [&](const Tensor& t) {
      return as_double(t.values().subspan(s * steps * width, length * width));
    };
    const Values p_alone =
        as_double(in.p.values().subspan((steps - length) * width, (2 * length - 1) * width));
    const Values expected =
        ref_rel_attention(rows(in.q), rows(in.k), rows(in.v), p_alone, values(in.u),
                          values(in.bias_v), length, length, heads, scale);
    EXPECT_LT(relative_error(out.values().subspan(s * steps * width, length * width), expected),
              1e-5);
    for (int64_t i = length * width; i < steps * width; ++i) {
      ASSERT_EQ(out.values()[s * steps * width + i], 0.0f) << "padded query values";
    }
  }
}

TEST(RelPosAttention, RejectsBadShapes) {
  Store store;
  const AttentionInputs in = attention_inputs(store, 0, 5, 8, 2, 40);
  Tensor out;
  const Tensor short_table = random_tensor(Shape{8, 8}, 41);
  EXPECT_THROW(
      compute::rel_pos_attention(in.q, in.k, in.v, short_table, in.u, in.bias_v, 2, 1.0f, {}, out),
      Error);
  EXPECT_THROW(
      compute::rel_pos_attention(in.q, in.k, in.v, in.p, in.u, in.bias_v, 3, 1.0f, {}, out), Error);
  const std::vector<int64_t> two{5, 5}, zero{0};
  EXPECT_THROW(
      compute::rel_pos_attention(in.q, in.k, in.v, in.p, in.u, in.bias_v, 2, 1.0f, two, out),
      Error);
  EXPECT_THROW(
      compute::rel_pos_attention(in.q, in.k, in.v, in.p, in.u, in.bias_v, 2, 1.0f, zero, out),
      Error);
}

// ---- the Conformer block ----

struct BlockFixture {
  Store store;
  ConformerBlock block;
  compute::FoldedConv folded;
  // The unfolded BatchNorm, for the reference.
  Weight depthwise_weight, depthwise_bias, gamma, beta, mean, var;
  int64_t d = 24, f = 40, kernel = 9;
  int heads = 3;

  BlockFixture() {
    block.norm_ff1 = store.layer_norm(d);
    block.ff1 = FeedForward{store.linear(f, d), store.linear(d, f), Activation::silu};
    block.norm_attention = store.layer_norm(d);
    RelPositionAttention& a = block.attention;
    a.q_proj = store.linear(d, d);
    a.k_proj = store.linear(d, d);
    a.v_proj = store.linear(d, d);
    a.out_proj = store.linear(d, d);
    a.pos_proj = store.linear(d, d, false);
    a.bias_u = store.weight(Shape{heads, d / heads}, 0.3f);
    a.bias_v = store.weight(Shape{heads, d / heads}, 0.3f);
    a.heads = heads;
    a.scale = 1.0f / std::sqrt(float(d / heads));
    block.norm_conv = store.layer_norm(d);
    // The checkpoint's kernel-1 conv [2d, d, 1], seen as a matrix.
    Linear pointwise1;
    pointwise1.weight = pointwise_matrix(store.weight(Shape{2 * d, d, 1}));
    pointwise1.bias = store.weight(Shape{2 * d}, 0.1f);
    block.conv.pointwise1 = pointwise1;
    depthwise_weight = store.weight(Shape{d, 1, kernel});
    depthwise_bias = store.weight(Shape{d}, 0.1f);
    gamma = store.weight(Shape{d}, 0.2f, 1.0f);
    beta = store.weight(Shape{d}, 0.2f);
    mean = store.weight(Shape{d}, 0.3f);
    var = store.weight(Shape{d}, 0.2f, 0.9f);
    folded =
        compute::fold_batch_norm(depthwise_weight, &depthwise_bias, gamma, beta, mean, var, 1e-5f);
    block.conv.depthwise_weight = folded.weight;
    block.conv.depthwise_bias = folded.bias;
    block.conv.pointwise2 = store.linear(d, d);
    block.norm_ff2 = store.layer_norm(d);
    block.ff2 = FeedForward{store.linear(f, d), store.linear(d, f), Activation::silu};
    block.norm_out = store.layer_norm(d);
  }

  // The block on one sequence x [T, d], composed from the naive references.
  Values reference(const Values& x_in, int64_t steps) const {
    Values x = x_in;
    const auto feed_forward = [&](const LayerNorm& norm, const FeedForward& ff) {
      Values hidden = ref_linear(ref_layer_norm(x, steps, d, norm), steps, ff.fc1);
      for (double& h : hidden) h = silu(h);
      const Values out = ref_linear(hidden, steps, ff.fc2);
      for (size_t i = 0; i < x.size(); ++i) x[i] += 0.5 * out[i];
    };
    feed_forward(block.norm_ff1, block.ff1);

    const RelPositionAttention& a = block.attention;
    const Values z = ref_layer_norm(x, steps, d, block.norm_attention);
    Tensor table;
    compute::relative_positions(steps, d, table);  // tested against sin/cos above
    const Values p = ref_linear(as_double(table.values()), 2 * steps - 1, a.pos_proj);
    const Values context =
        ref_rel_attention(ref_linear(z, steps, a.q_proj), ref_linear(z, steps, a.k_proj),
                          ref_linear(z, steps, a.v_proj), p, values(a.bias_u), values(a.bias_v),
                          steps, steps, heads, a.scale);
    const Values attended = ref_linear(context, steps, a.out_proj);
    for (size_t i = 0; i < x.size(); ++i) x[i] += attended[i];

    const Values c = ref_layer_norm(x, steps, d, block.norm_conv);
    const Values gated = ref_glu(ref_linear(c, steps, block.conv.pointwise1), steps, d);
    const Values db = values(depthwise_bias);
    Values conv = ref_depthwise_conv1d(gated, steps, d, values(depthwise_weight), kernel, &db);
    const Values g = values(gamma), be = values(beta), mu = values(mean), s2 = values(var);
    for (int64_t t = 0; t < steps; ++t) {
      for (int64_t ch = 0; ch < d; ++ch) {
        double& e = conv[t * d + ch];
        e = silu((e - mu[ch]) / std::sqrt(s2[ch] + 1e-5) * g[ch] + be[ch]);
      }
    }
    const Values convolved = ref_linear(conv, steps, block.conv.pointwise2);
    for (size_t i = 0; i < x.size(); ++i) x[i] += convolved[i];

    feed_forward(block.norm_ff2, block.ff2);
    return ref_layer_norm(x, steps, d, block.norm_out);
  }
};

TEST(ConformerBlock, MatchesTheComposedReference) {
  BlockFixture fixture;
  for (int64_t steps : {1, 13, 67}) {
    SCOPED_TRACE("T " + std::to_string(steps));
    Tensor x = random_tensor(Shape{steps, fixture.d}, 50);
    const Values expected = fixture.reference(as_double(x.values()), steps);
    Tensor positions;
    compute::relative_positions(steps, fixture.d, positions);
    ConformerScratch scratch;
    fixture.block.forward(x, positions, {}, scratch);
    ASSERT_EQ(x.shape(), (Shape{steps, fixture.d}));
    EXPECT_LT(relative_error(x.values(), expected), 1e-5);
  }
}

TEST(ConformerBlock, PaddedBatchMatchesEachSequenceAlone) {
  BlockFixture fixture;
  const int64_t steps = 21, d = fixture.d;
  const std::vector<int64_t> lengths{21, 12};
  Tensor x = random_tensor(Shape{2, steps, d}, 60);
  const Tensor x0 = x;
  Tensor positions;
  compute::relative_positions(steps, d, positions);
  ConformerScratch scratch;
  fixture.block.forward(x, positions, lengths, scratch);
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t length = lengths[s];
    const Values expected =
        fixture.reference(as_double(x0.values().subspan(s * steps * d, length * d)), length);
    EXPECT_LT(relative_error(x.values().subspan(s * steps * d, length * d), expected), 1e-5)
        << "sequence " << s;
  }
}

// ---- subsampling ----

TEST(ConvSubsampling, MatchesTheTransformersStack) {
  Store store;
  const int64_t frames = 37, mels = 20, channels = 8, d = 16;
  ConvSubsampling sub;
  sub.conv_weight = store.weight(Shape{channels, 1, 3, 3});
  sub.conv_bias = store.weight(Shape{channels}, 0.1f);
  for (int s = 0; s < 2; ++s) {
    ConvSubsampling::Stage stage;
    stage.depthwise_weight = store.weight(Shape{channels, 1, 3, 3});
    stage.depthwise_bias = store.weight(Shape{channels}, 0.1f);
    stage.pointwise.weight = pointwise_matrix(store.weight(Shape{channels, channels, 1, 1}));
    stage.pointwise.bias = store.weight(Shape{channels}, 0.1f);
    sub.stages.push_back(stage);
  }
  const int64_t bins = 3;  // 20 -> 10 -> 5 -> 3
  sub.linear = store.linear(d, channels * bins);
  sub.output_scale = std::sqrt(float(d));
  EXPECT_EQ(sub.output_length(frames), 5);  // 37 -> 19 -> 10 -> 5 = ceil(37 / 8)
  EXPECT_EQ(sub.output_length(1), 1);
  EXPECT_EQ(sub.output_length(8), 1);
  EXPECT_EQ(sub.output_length(9), 2);

  const Tensor features = random_tensor(Shape{frames, mels}, 70);
  SubsamplingScratch scratch;
  Tensor out;
  sub.forward(features, scratch, out);

  // Reference: PyTorch's channel-first stack, then transpose(1, 2).reshape(T, C·F).
  int64_t height = 0, width = 0;
  const Values b0 = values(sub.conv_bias);
  Values image =
      ref_conv2d_nchw(as_double(features.values()), 1, frames, mels, values(sub.conv_weight),
                      channels, 3, 3, 1, &b0, 2, 1, height, width);
  for (double& v : image) v = std::max(v, 0.0);
  for (const ConvSubsampling::Stage& stage : sub.stages) {
    const Values db = values(stage.depthwise_bias), pb = values(*stage.pointwise.bias);
    int64_t h2 = 0, w2 = 0;
    image = ref_conv2d_nchw(image, channels, height, width, values(stage.depthwise_weight),
                            channels, 3, 3, channels, &db, 2, 1, h2, w2);
    height = h2;
    width = w2;
    image = ref_conv2d_nchw(image, channels, height, width, values(stage.pointwise.weight),
                            channels, 1, 1, 1, &pb, 1, 0, h2, w2);
    for (double& v : image) v = std::max(v, 0.0);
  }
  ASSERT_EQ(height, 5);
  ASSERT_EQ(width, bins);
  Values flat(static_cast<size_t>(height * channels * width));
  for (int64_t t = 0; t < height; ++t)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t f = 0; f < width; ++f)
        flat[(t * channels + c) * width + f] = image[(c * height + t) * width + f];
  Values expected = ref_linear(flat, height, sub.linear);
  for (double& e : expected) e *= std::sqrt(double(d));
  ASSERT_EQ(out.shape(), (Shape{5, d}));
  EXPECT_LT(relative_error(out.values(), expected), 1e-5);
}

TEST(ConvSubsampling, PointwiseMatrixNeedsKernelOne) {
  Store store;
  EXPECT_EQ(pointwise_matrix(store.weight(Shape{6, 4, 1})).shape, (Shape{6, 4}));
  EXPECT_THROW(pointwise_matrix(store.weight(Shape{6, 4, 3})), Error);
  EXPECT_THROW(pointwise_matrix(store.weight(Shape{6, 4})), Error);
}

// ---- transducer heads ----

// PyTorch's LSTM cell for one sequence, in double.
void ref_lstm_cell(const Values& x, const Values& w_ih, const Values& w_hh, const Values& b_ih,
                   const Values& b_hh, Values& h, Values& c) {
  const int64_t hidden = static_cast<int64_t>(h.size());
  const int64_t in = static_cast<int64_t>(x.size());
  Values gates(static_cast<size_t>(4 * hidden));
  for (int64_t r = 0; r < 4 * hidden; ++r) {
    double sum = b_ih[r] + b_hh[r];
    for (int64_t j = 0; j < in; ++j) sum += w_ih[r * in + j] * x[j];
    for (int64_t j = 0; j < hidden; ++j) sum += w_hh[r * hidden + j] * h[j];
    gates[r] = sum;
  }
  for (int64_t j = 0; j < hidden; ++j) {
    const double i = sigmoid(gates[j]), f = sigmoid(gates[hidden + j]);
    const double g = std::tanh(gates[2 * hidden + j]), o = sigmoid(gates[3 * hidden + j]);
    c[j] = f * c[j] + i * g;
    h[j] = o * std::tanh(c[j]);
  }
}

TEST(Lstm, StepMatchesThePyTorchEquations) {
  Store store;
  const int64_t sequences = 3, in = 5, hidden = 7;
  const Weight w_ih = store.weight(Shape{4 * hidden, in}, 0.5f);
  const Weight w_hh = store.weight(Shape{4 * hidden, hidden}, 0.5f);
  const Weight b_ih = store.weight(Shape{4 * hidden}, 0.3f);
  const Weight b_hh = store.weight(Shape{4 * hidden}, 0.3f);
  Tensor h = random_tensor(Shape{sequences, hidden}, 80, 0.5f);
  Tensor c = random_tensor(Shape{sequences, hidden}, 81, 0.5f);
  std::vector<Values> ref_h, ref_c;
  for (int64_t b = 0; b < sequences; ++b) {
    ref_h.push_back(as_double(h.values().subspan(b * hidden, hidden)));
    ref_c.push_back(as_double(c.values().subspan(b * hidden, hidden)));
  }
  Tensor gates;
  for (int step = 0; step < 4; ++step) {
    const Tensor x = random_tensor(Shape{sequences, in}, 82 + step);
    compute::lstm_step(x, w_ih, w_hh, &b_ih, &b_hh, h, c, gates);
    Values expected_h, expected_c;
    for (int64_t b = 0; b < sequences; ++b) {
      ref_lstm_cell(as_double(x.values().subspan(b * in, in)), values(w_ih), values(w_hh),
                    values(b_ih), values(b_hh), ref_h[b], ref_c[b]);
      expected_h.insert(expected_h.end(), ref_h[b].begin(), ref_h[b].end());
      expected_c.insert(expected_c.end(), ref_c[b].begin(), ref_c[b].end());
    }
    EXPECT_LT(relative_error(h.values(), expected_h), 1e-5) << "step " << step;
    EXPECT_LT(relative_error(c.values(), expected_c), 1e-5) << "step " << step;
  }
  const Tensor wrong = random_tensor(Shape{sequences, in + 1}, 90);
  EXPECT_THROW(compute::lstm_step(wrong, w_ih, w_hh, &b_ih, &b_hh, h, c, gates), Error);
  EXPECT_THROW(compute::lstm_step(h, w_ih, w_hh, &b_ih, &b_hh, h, c, gates), Error);
}

TEST(Lstm, PredictionAndJointNetworks) {
  Store store;
  const int64_t vocab = 11, hidden = 6, d = 10, outputs = vocab + 5, frames = 4;
  PredictionNetwork prediction;
  prediction.embedding = store.weight(Shape{vocab, hidden}, 1.0f);
  for (int l = 0; l < 2; ++l) {
    prediction.layers.push_back(LstmLayer{store.weight(Shape{4 * hidden, hidden}, 0.5f),
                                          store.weight(Shape{4 * hidden, hidden}, 0.5f),
                                          store.weight(Shape{4 * hidden}, 0.3f),
                                          store.weight(Shape{4 * hidden}, 0.3f)});
  }
  JointNetwork joint{store.linear(hidden, d), store.linear(hidden, hidden),
                     store.linear(outputs, hidden), Activation::relu};

  const std::vector<std::vector<int32_t>> steps{{10, 10}, {3, 7}, {0, 10}};
  LstmState state = prediction.zero_state(2);
  PredictionScratch scratch;
  std::vector<std::vector<Values>> ref_h(2, std::vector<Values>(2, Values(hidden, 0.0)));
  std::vector<std::vector<Values>> ref_c = ref_h;
  const Values table = values(prediction.embedding);
  const Tensor encoded = random_tensor(Shape{frames, d}, 95);
  Tensor projected, g, rows, hidden_scratch, logits;
  joint.project_encoder(encoded, projected);
  const Values ref_projected =
      ref_linear(as_double(encoded.values()), frames, joint.encoder_projector);
  EXPECT_LT(relative_error(projected.values(), ref_projected), 1e-5);
  for (const std::vector<int32_t>& tokens : steps) {
    const Tensor& out = prediction.step(tokens, state, scratch);
    Values expected_out;
    for (int64_t b = 0; b < 2; ++b) {
      Values x(table.begin() + tokens[b] * hidden, table.begin() + (tokens[b] + 1) * hidden);
      for (int l = 0; l < 2; ++l) {
        const LstmLayer& layer = prediction.layers[l];
        ref_lstm_cell(x, values(layer.weight_ih), values(layer.weight_hh), values(*layer.bias_ih),
                      values(*layer.bias_hh), ref_h[b][l], ref_c[b][l]);
        x = ref_h[b][l];
      }
      expected_out.insert(expected_out.end(), x.begin(), x.end());
    }
    ASSERT_EQ(out.shape(), (Shape{2, hidden}));
    EXPECT_LT(relative_error(out.values(), expected_out), 1e-5);

    // Sequence 0 at frame 1, sequence 1 at frame 3.
    joint.project_prediction(out, g);
    const std::vector<int64_t> frame_of{1, 3};
    compute::gather_rows(projected, frame_of, rows);
    joint.forward(rows, g, hidden_scratch, logits);
    const Values ref_g = ref_linear(expected_out, 2, joint.decoder_projector);
    Values joined(static_cast<size_t>(2 * hidden));
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t j = 0; j < hidden; ++j) {
        joined[b * hidden + j] =
            std::max(0.0, ref_projected[frame_of[b] * hidden + j] + ref_g[b * hidden + j]);
      }
    }
    ASSERT_EQ(logits.shape(), (Shape{2, outputs}));
    EXPECT_LT(relative_error(logits.values(), ref_linear(joined, 2, joint.head)), 1e-5);
  }
}

}  // namespace
}  // namespace hark::nn
