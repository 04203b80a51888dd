// The op set against naive reference loops (computed in double).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "base/error.h"
#include "compute/cpu/simd.h"
#include "compute/ops.h"
#include "format/quant.h"

namespace hark::compute {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(n);
  for (float& v : values) v = normal(rng);
  return values;
}

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  return Tensor(shape, random_values(static_cast<size_t>(shape.elements()), seed, scale));
}

// A weight stored in `type`, with the F32 values it really holds (after rounding) for references.
struct StoredWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // what the stored weight decodes to
  Weight view;
};

StoredWeight store(DType type, const std::vector<float>& values, const Shape& shape) {
  StoredWeight stored;
  stored.bytes = quant::from_f32(type, values.data(), values.size());
  stored.values.resize(values.size());
  quant::to_f32(type, stored.bytes.data(), stored.values.data(), values.size());
  stored.view = Weight{type, shape, stored.bytes.data(), stored.bytes.size()};
  stored.view.validate("test weight");
  return stored;
}

// Runs `check` with the kernels limited to each instruction set in turn (the CPU's own support
// still applies), so that every variant is tested on a machine that has them all.
void for_each_simd(const std::function<void()>& check) {
  for (cpu::SimdLevel level :
       {cpu::SimdLevel::portable, cpu::SimdLevel::avx2, cpu::SimdLevel::avx512}) {
    SCOPED_TRACE("simd level " + std::to_string(static_cast<int>(level)));
    cpu::limit_simd(level);
    check();
  }
  cpu::limit_simd(cpu::SimdLevel::avx512);
}

double gelu_reference(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

// max |a - b| / max |b|, the parity measure used throughout the tests.
double relative_error(std::span<const float> actual, std::span<const double> expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i) {
    diff = std::max(diff, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

// y = act(x Wᵀ + b) + r, in double.
std::vector<double> linear_reference(const std::vector<float>& x, int64_t m, int64_t k,
                                     const std::vector<float>& w, int64_t n,
                                     const std::vector<float>* bias, bool gelu_on,
                                     const std::vector<float>* residual) {
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += double(x[i * k + p]) * w[j * k + p];
      if (bias) sum += (*bias)[j];
      if (gelu_on) sum = gelu_reference(sum);
      if (residual) sum += (*residual)[i * n + j];
      y[i * n + j] = sum;
    }
  }
  return y;
}

struct LinearCase {
  DType type;
  int64_t m, k, n;
};

class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, MatchesReferenceWithEveryEpilogue) {
  for_each_simd([&] {
    const LinearCase c = GetParam();
    const auto w_values = random_values(c.n * c.k, 1, 0.2f);
    const StoredWeight w = store(c.type, w_values, Shape{c.n, c.k});
    const auto bias_values = random_values(c.n, 2);
    const Weight bias = Weight::f32(bias_values.data(), Shape{c.n});
    const Tensor x = random_tensor(Shape{c.m, c.k}, 3);
    const std::vector<float> x_values(x.values().begin(), x.values().end());
    const Tensor residual = random_tensor(Shape{c.m, c.n}, 4);
    const std::vector<float> r_values(residual.values().begin(), residual.values().end());

    {  // plain
      Tensor y;
      linear(x, w.view, y);
      EXPECT_EQ(y.shape(), (Shape{c.m, c.n}));
      auto expected = linear_reference(x_values, c.m, c.k, w.values, c.n, nullptr, false, nullptr);
      EXPECT_LT(relative_error(y.values(), expected), 1e-5);
    }
    {  // bias + GELU
      Tensor y;
      linear(x, w.view, y, {.bias = &bias, .activation = Activation::gelu});
      auto expected =
          linear_reference(x_values, c.m, c.k, w.values, c.n, &bias_values, true, nullptr);
      EXPECT_LT(relative_error(y.values(), expected), 1e-5);
    }
    {  // bias + residual held in the output itself (x += f(x) in place)
      Tensor y = residual;
      linear(x, w.view, y, {.bias = &bias, .residual = &y});
      auto expected =
          linear_reference(x_values, c.m, c.k, w.values, c.n, &bias_values, false, &r_values);
      EXPECT_LT(relative_error(y.values(), expected), 1e-5);
    }
    {  // GELU then a residual in the output itself
      Tensor y = residual;
      linear(x, w.view, y, {.activation = Activation::gelu, .residual = &y});
      auto expected = linear_reference(x_values, c.m, c.k, w.values, c.n, nullptr, true, &r_values);
      EXPECT_LT(relative_error(y.values(), expected), 1e-5);
    }
    {  // separate residual tensor
      Tensor y;
      linear(x, w.view, y, {.bias = &bias, .residual = &residual});
      auto expected =
          linear_reference(x_values, c.m, c.k, w.values, c.n, &bias_values, false, &r_values);
      EXPECT_LT(relative_error(y.values(), expected), 1e-5);
    }
  });
}

// Row counts on both sides of the direct-dot / panel+sgemm switch, widths that are not multiples
// of the SIMD width (Q8_0 needs whole 32-value blocks).
INSTANTIATE_TEST_SUITE_P(
    AllTypes, LinearTest,
    ::testing::Values(LinearCase{DType::F32, 1, 70, 45}, LinearCase{DType::F32, 5, 64, 130},
                      LinearCase{DType::F32, 37, 70, 300}, LinearCase{DType::F16, 1, 70, 45},
                      LinearCase{DType::F16, 8, 64, 33}, LinearCase{DType::F16, 9, 70, 700},
                      LinearCase{DType::F16, 130, 512, 96}, LinearCase{DType::BF16, 1, 70, 45},
                      LinearCase{DType::BF16, 3, 70, 45}, LinearCase{DType::BF16, 40, 96, 200},
                      LinearCase{DType::Q8_0, 1, 96, 45}, LinearCase{DType::Q8_0, 2, 64, 77},
                      LinearCase{DType::Q8_0, 7, 256, 64}, LinearCase{DType::Q8_0, 64, 96, 300}),
    [](const auto& info) {
      const LinearCase& c = info.param;
      return std::string(dtype_name(c.type)) + "_m" + std::to_string(c.m) + "_k" +
             std::to_string(c.k) + "_n" + std::to_string(c.n);
    });

TEST(Linear, Q8WeightsStayCloseToTheF32Product) {
  const int64_t m = 3, k = 256, n = 64;
  const auto w_values = random_values(n * k, 5, 0.1f);
  const StoredWeight q8 = store(DType::Q8_0, w_values, Shape{n, k});
  const Tensor x = random_tensor(Shape{m, k}, 6);
  Tensor y;
  linear(x, q8.view, y);
  const std::vector<float> x_values(x.values().begin(), x.values().end());
  auto exact = linear_reference(x_values, m, k, w_values, n, nullptr, false, nullptr);
  // Q8_0 rounds each weight to within 1/254 of its block's largest magnitude.
  EXPECT_LT(relative_error(y.values(), exact), 2e-2);
  EXPECT_GT(relative_error(y.values(), exact), 0.0);  // it is really quantized
}

TEST(Linear, KeepsLeadingDimensions) {
  const auto w_values = random_values(6 * 4, 7);
  const Weight w = Weight::f32(w_values.data(), Shape{6, 4});
  Tensor x = random_tensor(Shape{2, 3, 4}, 8);
  Tensor y;
  linear(x, w, y);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 6}));
}

TEST(Linear, RejectsMismatchedShapes) {
  const auto w_values = random_values(6 * 4, 7);
  const Weight w = Weight::f32(w_values.data(), Shape{6, 4});
  Tensor x = random_tensor(Shape{3, 5}, 8);
  Tensor y;
  EXPECT_THROW(linear(x, w, y), Error);
  Tensor good = random_tensor(Shape{3, 4}, 9);
  const auto bias_values = random_values(5, 1);
  const Weight bad_bias = Weight::f32(bias_values.data(), Shape{5});
  EXPECT_THROW(linear(good, w, y, {.bias = &bad_bias}), Error);
  EXPECT_THROW(linear(good, w, good), Error);
}

TEST(Tensor, ShapesAndStorage) {
  Tensor empty;
  EXPECT_EQ(empty.elements(), 0);
  EXPECT_TRUE(empty.values().empty());
  Tensor t(Shape{2, 3});
  EXPECT_EQ(t.rows(), 2);
  EXPECT_EQ(t.cols(), 3);
  for (float v : t.values()) EXPECT_EQ(v, 0.0f);
  t.reshape(Shape{3, 2});
  EXPECT_EQ(t.shape().str(), "[3, 2]");
  EXPECT_THROW(t.reshape(Shape{4, 2}), Error);
  const float* before = t.data();
  t.resize(Shape{1, 2});  // shrinking keeps the buffer
  EXPECT_EQ(t.data(), before);
  EXPECT_EQ(t.elements(), 2);
  EXPECT_THROW(Tensor(Shape{2}, std::vector<float>{1, 2, 3}), Error);
  EXPECT_THROW((Shape{1, 2, 3, 4, 5}), Error);
}

TEST(Weight, ValidateNamesTheWeight) {
  std::vector<uint8_t> bytes(34 * 2);
  Weight w{DType::Q8_0, Shape{2, 32}, bytes.data(), bytes.size()};
  EXPECT_NO_THROW(w.validate("w"));
  w.nbytes = 60;
  try {
    w.validate("encoder.fc1.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.fc1.weight"), std::string::npos) << e.what();
  }
  Weight odd{DType::Q8_0, Shape{1, 48}, bytes.data(), 34};
  EXPECT_THROW(odd.validate("odd"), Error);
}

void check_conv1d(DType type, int stride) {
  for_each_simd([&] {
    const int64_t steps = 23, c_in = 5, c_out = 7, kernel = 3, padding = 1;
    const auto w_values = random_values(c_out * c_in * kernel, 11, 0.3f);
    const StoredWeight w = store(type, w_values, Shape{c_out, c_in, kernel});
    const auto bias_values = random_values(c_out, 12);
    const Weight bias = Weight::f32(bias_values.data(), Shape{c_out});
    const Tensor x = random_tensor(Shape{steps, c_in}, 13);
    Tensor y;
    conv1d(x, w.view, stride, padding, y, {.bias = &bias, .activation = Activation::gelu});
    const int64_t out_steps = (steps + 2 * padding - kernel) / stride + 1;
    ASSERT_EQ(y.shape(), (Shape{out_steps, c_out}));
    std::vector<double> expected(out_steps * c_out);
    for (int64_t t = 0; t < out_steps; ++t) {
      for (int64_t o = 0; o < c_out; ++o) {
        double sum = bias_values[o];
        for (int64_t c = 0; c < c_in; ++c) {
          for (int64_t k = 0; k < kernel; ++k) {
            int64_t src = t * stride + k - padding;
            if (src < 0 || src >= steps) continue;
            sum += double(w.values[(o * c_in + c) * kernel + k]) * x.values()[src * c_in + c];
          }
        }
        expected[t * c_out + o] = gelu_reference(sum);
      }
    }
    EXPECT_LT(relative_error(y.values(), expected), 1e-5);
  });
}

TEST(Conv1d, Stride1) {
  check_conv1d(DType::F32, 1);
}
TEST(Conv1d, Stride2) {
  check_conv1d(DType::F32, 2);
}
TEST(Conv1d, Stride2F16) {
  check_conv1d(DType::F16, 2);
}

TEST(LayerNorm, MatchesReference) {
  for_each_simd([&] {
    const int64_t rows = 5, n = 37;
    // An offset mean makes a one-pass variance lose digits; the op must not.
    Tensor x = random_tensor(Shape{rows, n}, 21);
    for (float& v : x.values()) v += 100.0f;
    const auto g = random_values(n, 22), b = random_values(n, 23);
    const StoredWeight gamma16 = store(DType::F16, g, Shape{n});
    Tensor y;
    layer_norm(x, gamma16.view, Weight::f32(b.data(), Shape{n}), 1e-5f, y);
    std::vector<double> expected(rows * n);
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < n; ++j) mean += x.values()[r * n + j];
      mean /= n;
      for (int64_t j = 0; j < n; ++j) var += std::pow(x.values()[r * n + j] - mean, 2);
      var /= n;
      for (int64_t j = 0; j < n; ++j) {
        expected[r * n + j] =
            (x.values()[r * n + j] - mean) / std::sqrt(var + 1e-5) * gamma16.values[j] + b[j];
      }
    }
    EXPECT_LT(relative_error(y.values(), expected), 1e-4);
    // In place gives the same.
    layer_norm(x, gamma16.view, Weight::f32(b.data(), Shape{n}), 1e-5f, x);
    EXPECT_LT(relative_error(x.values(), expected), 1e-4);
  });
}

TEST(Softmax, MatchesReference) {
  for_each_simd([&] {
    Tensor x = random_tensor(Shape{3, 19}, 31, 5.0f);
    x.values()[5] = -1e30f;  // effectively masked
    std::vector<double> expected(x.elements());
    for (int64_t r = 0; r < 3; ++r) {
      double max = -1e300, sum = 0;
      for (int64_t j = 0; j < 19; ++j) max = std::max<double>(max, x.values()[r * 19 + j]);
      for (int64_t j = 0; j < 19; ++j) sum += std::exp(x.values()[r * 19 + j] - max);
      for (int64_t j = 0; j < 19; ++j)
        expected[r * 19 + j] = std::exp(x.values()[r * 19 + j] - max) / sum;
    }
    softmax(x);
    EXPECT_LT(relative_error(x.values(), expected), 1e-6);
    EXPECT_EQ(x.values()[5], 0.0f);
  });
}

TEST(Gelu, MatchesErfFormOverTheWholeRange) {
  for_each_simd([&] {
    std::vector<float> values;
    for (float v = -12.0f; v <= 12.0f; v += 0.01f) values.push_back(v);
    Tensor x(Shape{static_cast<int64_t>(values.size())}, values);
    gelu(x);
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_NEAR(x.values()[i], gelu_reference(values[i]),
                  1e-6 * std::max(1.0f, std::abs(values[i])))
          << "at " << values[i];
    }
  });
}

TEST(Elementwise, NanPropagates) {
  for_each_simd([&] {
    std::vector<float> values(21, 0.5f);
    values[17] = NAN;
    Tensor g(Shape{21}, values);
    gelu(g);
    EXPECT_TRUE(std::isnan(g.values()[17]));
    EXPECT_FALSE(std::isnan(g.values()[16]));
    Tensor s(Shape{1, 21}, values);
    softmax(s);
    for (float v : s.values()) EXPECT_TRUE(std::isnan(v));
  });
}

TEST(Elementwise, AddTransposeEmbeddingGather) {
  Tensor a = random_tensor(Shape{3, 4}, 41), b = random_tensor(Shape{3, 4}, 42);
  Tensor sum;
  add(a, b, sum);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(sum.values()[i], a.values()[i] + b.values()[i]);
  Tensor t;
  transpose(a, t);
  ASSERT_EQ(t.shape(), (Shape{4, 3}));
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(t.values()[c * 3 + r], a.values()[r * 4 + c]);

  const auto table_values = random_values(10 * 32, 43);
  const StoredWeight table = store(DType::Q8_0, table_values, Shape{10, 32});
  Tensor rows;
  std::vector<int32_t> ids = {3, 0, 9, 3};
  embedding(table.view, ids, rows);
  ASSERT_EQ(rows.shape(), (Shape{4, 32}));
  for (size_t i = 0; i < ids.size(); ++i)
    for (int j = 0; j < 32; ++j)
      EXPECT_EQ(rows.values()[i * 32 + j], table.values[ids[i] * 32 + j]);
  std::vector<int32_t> bad = {10};
  EXPECT_THROW(embedding(table.view, bad, rows), Error);

  Tensor picked;
  std::vector<int64_t> which = {2, 0};
  gather_rows(a, which, picked);
  ASSERT_EQ(picked.shape(), (Shape{2, 4}));
  EXPECT_EQ(picked.values()[0], a.values()[8]);
  EXPECT_EQ(picked.values()[4], a.values()[0]);
}

// out[b, i] for query i at position kv_length - tq + i, in double.
std::vector<double> attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                        int64_t kv_length, int heads, float scale, bool causal) {
  const int64_t batch = q.dim(0), tq = q.dim(1), width = q.dim(2), dh = width / heads;
  const int64_t capacity = k.dim(1);
  std::vector<double> out(batch * tq * width, 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t kb = k.dim(0) == 1 ? 0 : b;
    for (int h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t visible = causal ? kv_length - tq + i + 1 : kv_length;
        std::vector<double> s(visible);
        double max = -1e300;
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < dh; ++d) {
            dot += double(q.values()[(b * tq + i) * width + h * dh + d]) *
                   k.values()[(kb * capacity + j) * width + h * dh + d];
          }
          s[j] = dot * scale;
          max = std::max(max, s[j]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - max));
        for (int64_t d = 0; d < dh; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < visible; ++j)
            acc += s[j] / sum * v.values()[(kb * capacity + j) * width + h * dh + d];
          out[(b * tq + i) * width + h * dh + d] = acc;
        }
      }
    }
  }
  return out;
}

struct AttentionCase {
  int64_t batch, kv_batch, tq, capacity, kv_length;
  bool causal;
  int heads = 3;
  int64_t head_dim = 20;
};

class AttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionTest, MatchesReference) {
  for_each_simd([&] {
    const AttentionCase c = GetParam();
    const int heads = c.heads;
    const int64_t width = heads * c.head_dim;
    const Tensor q = random_tensor(Shape{c.batch, c.tq, width}, 51);
    const Tensor k = random_tensor(Shape{c.kv_batch, c.capacity, width}, 52);
    const Tensor v = random_tensor(Shape{c.kv_batch, c.capacity, width}, 53);
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    Tensor out;
    attention(q, k, v, c.kv_length, heads, scale, c.causal, out);
    ASSERT_EQ(out.shape(), q.shape());
    auto expected = attention_reference(q, k, v, c.kv_length, heads, scale, c.causal);
    EXPECT_LT(relative_error(out.values(), expected), 1e-5);
  });
}

// Decode steps (1 query, direct path), prefill (gemm path, several query blocks), cross-attention
// over K/V shared by every sequence, and caches longer than the valid length.
INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionTest,
    ::testing::Values(
        AttentionCase{1, 1, 1, 10, 7, true}, AttentionCase{3, 3, 1, 10, 7, true},
        AttentionCase{2, 2, 5, 12, 9, true}, AttentionCase{2, 2, 70, 90, 80, true},
        AttentionCase{1, 1, 150, 150, 150, false}, AttentionCase{4, 1, 1, 33, 33, false},
        AttentionCase{2, 1, 20, 33, 30, false},
        // head sizes the SIMD paths take (and a 72 = 64 + 8)
        AttentionCase{3, 3, 1, 40, 37, true, 2, 64}, AttentionCase{2, 1, 1, 41, 41, false, 2, 64},
        AttentionCase{1, 1, 1, 9, 9, false, 1, 72}, AttentionCase{2, 2, 1, 10, 6, true, 2, 128},
        AttentionCase{1, 1, 300, 300, 300, false, 2, 64},
        // AVX-512 tiles: causal across tiles and blocks, a 64 + 16 head, the
        // smallest head, several sequences over one shared window
        AttentionCase{2, 2, 70, 90, 80, true, 2, 64}, AttentionCase{1, 1, 13, 40, 40, false, 1, 80},
        AttentionCase{1, 1, 9, 50, 45, true, 2, 16},
        AttentionCase{3, 1, 7, 100, 97, false, 2, 64}));

// Cross-attention over packed keys and values equals the plain op over the same keys.
TEST(Attention, PackedKeysAndValues) {
  for (int64_t head_dim : {16, 20, 64}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    const int heads = 2;
    const int64_t width = heads * head_dim, keys = 45;
    const Tensor k = random_tensor(Shape{1, keys, width}, 71);
    const Tensor v = random_tensor(Shape{1, keys, width}, 72);
    const float scale = 1.0f / std::sqrt(float(head_dim));
    for (int64_t queries : {1, 3, 9}) {
      const Tensor q = random_tensor(Shape{2, queries, width}, 73);
      const auto expected = attention_reference(q, k, v, keys, heads, scale, false);
      for_each_simd([&] {
        PackedKv kv;
        pack_kv(k, v, heads, kv);
        EXPECT_EQ(kv.length, keys);
        Tensor out;
        attention(q, kv, scale, out);
        EXPECT_LT(relative_error(out.values(), expected), 1e-5);
        // Packed with AVX-512, read without it.
        cpu::limit_simd(cpu::SimdLevel::portable);
        attention(q, kv, scale, out);
        EXPECT_LT(relative_error(out.values(), expected), 1e-5);
      });
    }
  }
  PackedKv kv;
  EXPECT_THROW(pack_kv(Tensor(Shape{2, 3, 4}), Tensor(Shape{2, 3, 4}), 2, kv), Error);
  EXPECT_THROW(pack_kv(Tensor(Shape{1, 3, 4}), Tensor(Shape{1, 3, 4}), 3, kv), Error);
  pack_kv(Tensor(Shape{1, 3, 4}), Tensor(Shape{1, 3, 4}), 2, kv);
  Tensor out;
  EXPECT_THROW(attention(Tensor(Shape{1, 1, 6}), kv, 1.0f, out), Error);
}

TEST(Attention, RejectsBadShapes) {
  Tensor q(Shape{2, 3, 8}), k(Shape{2, 5, 8}), v(Shape{2, 5, 8}), out;
  EXPECT_THROW(attention(q, k, v, 6, 2, 1.0f, false, out), Error);  // kv_length > capacity
  EXPECT_THROW(attention(q, k, v, 2, 2, 1.0f, true, out), Error);   // fewer keys than queries
  EXPECT_THROW(attention(q, k, v, 5, 3, 1.0f, false, out), Error);  // 8 not divisible by 3
  Tensor k3(Shape{3, 5, 8});
  EXPECT_THROW(attention(q, k3, k3, 5, 2, 1.0f, false, out), Error);
}

TEST(Cache, WriteRowsAndGatherSequences) {
  Tensor cache(Shape{3, 6, 4});
  Tensor step = random_tensor(Shape{3, 2, 4}, 61);
  write_rows(step, 1, cache);
  EXPECT_EQ(cache.values()[(0 * 6 + 1) * 4], step.values()[0]);
  EXPECT_EQ(cache.values()[(2 * 6 + 2) * 4 + 3], step.values()[(2 * 2 + 1) * 4 + 3]);
  EXPECT_THROW(write_rows(step, 5, cache), Error);

  Tensor gathered(Shape{3, 6, 4});
  std::vector<int> source = {2, 2, 0};
  gather_sequences(cache, source, 3, gathered);
  for (int i = 0; i < 3; ++i)
    for (int t = 0; t < 3; ++t)
      for (int d = 0; d < 4; ++d)
        EXPECT_EQ(gathered.values()[(i * 6 + t) * 4 + d],
                  cache.values()[(source[i] * 6 + t) * 4 + d]);
  std::vector<int> bad = {0, 1, 3};
  EXPECT_THROW(gather_sequences(cache, bad, 3, gathered), Error);
}

TEST(Threads, CanBeSetAndRead) {
  const int before = threads();
  set_threads(1);
  EXPECT_EQ(threads(), 1);
  set_threads(before);
  EXPECT_EQ(threads(), before);
  EXPECT_THROW(set_threads(0), Error);
}

}  // namespace
}  // namespace hark::compute
