// Shared layers: linear, layer norm, feed-forward, the K/V cache, multi-head attention.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/error.h"
#include "nn/layers.h"

namespace hark::nn {
namespace {

// Owns the values behind Weight views.
struct Store {
  std::vector<std::vector<float>> arrays;
  uint32_t seed = 1;

  Weight weight(const Shape& shape, float scale = 0.3f, float offset = 0.0f) {
    std::mt19937 rng(seed++);
    std::uniform_real_distribution<float> uniform(-scale, scale);
    arrays.emplace_back(static_cast<size_t>(shape.elements()));
    for (float& v : arrays.back()) v = offset + uniform(rng);
    return Weight::f32(arrays.back().data(), shape);
  }
  Linear linear(int64_t out, int64_t in, bool bias = true) {
    Linear layer;
    layer.weight = weight(Shape{out, in});
    if (bias) layer.bias = weight(Shape{out}, 0.1f);
    return layer;
  }
};

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> values(static_cast<size_t>(shape.elements()));
  for (float& v : values) v = normal(rng);
  return Tensor(shape, values);
}

const float* values_of(const Weight& w) {
  return reinterpret_cast<const float*>(w.data);
}

double max_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double diff = 0;
  for (int64_t i = 0; i < std::min(a.elements(), b.elements()); ++i) {
    diff = std::max(diff, std::abs(double(a.values()[i]) - b.values()[i]));
  }
  return diff;
}

TEST(Linear, AppliesWeightBiasActivationAndResidual) {
  Store store;
  const Linear layer = store.linear(3, 4);
  const Tensor x = random_tensor(Shape{2, 4}, 1);
  Tensor residual = random_tensor(Shape{2, 3}, 2);
  Tensor y;
  layer.forward(x, y, Activation::gelu, &residual);
  EXPECT_EQ(layer.in_features(), 4);
  EXPECT_EQ(layer.out_features(), 3);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      double sum = values_of(*layer.bias)[j];
      for (int k = 0; k < 4; ++k)
        sum += double(x.values()[i * 4 + k]) * values_of(layer.weight)[j * 4 + k];
      const double expected =
          0.5 * sum * (1 + std::erf(sum / std::sqrt(2.0))) + residual.values()[i * 3 + j];
      EXPECT_NEAR(y.values()[i * 3 + j], expected, 1e-5);
    }
  }
  const Linear no_bias = store.linear(3, 4, false);
  no_bias.forward(x, y);
  EXPECT_NEAR(
      y.values()[0],
      [&] {
        double sum = 0;
        for (int k = 0; k < 4; ++k) sum += double(x.values()[k]) * values_of(no_bias.weight)[k];
        return sum;
      }(),
      1e-5);
}

TEST(LayerNorm, NormalizesEachRow) {
  Store store;
  const LayerNorm norm{store.weight(Shape{8}, 0.0f, 1.0f), store.weight(Shape{8}, 0.0f, 0.0f)};
  Tensor x = random_tensor(Shape{3, 8}, 3);
  norm.forward(x, x);
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < 8; ++j) mean += x.values()[r * 8 + j];
    mean /= 8;
    for (int j = 0; j < 8; ++j) var += std::pow(x.values()[r * 8 + j] - mean, 2);
    EXPECT_NEAR(mean, 0.0, 1e-5);
    EXPECT_NEAR(var / 8, 1.0, 1e-3);  // eps 1e-5 shrinks it a little
  }
}

TEST(FeedForward, IsFc2OfGeluOfFc1PlusResidual) {
  Store store;
  const FeedForward ffn{store.linear(16, 8), store.linear(8, 16)};
  const Tensor x = random_tensor(Shape{5, 8}, 4);
  Tensor residual = random_tensor(Shape{5, 8}, 5);
  Tensor expected_hidden, expected;
  ffn.fc1.forward(x, expected_hidden, Activation::gelu);
  ffn.fc2.forward(expected_hidden, expected, Activation::none, &residual);
  Tensor hidden;
  ffn.forward(x, hidden, residual, &residual);  // in place on the residual
  EXPECT_LT(max_difference(residual, expected), 1e-6);
}

TEST(KvCache, AppendsAndReordersSequences) {
  KvCache cache(3, 5, 2);
  EXPECT_EQ(cache.n_sequences(), 3);
  EXPECT_EQ(cache.capacity(), 5);
  EXPECT_EQ(cache.width(), 2);
  EXPECT_EQ(cache.length(), 0);
  // Key value = 100·sequence + 10·position + channel; values are the negatives.
  auto step = [](int first, int steps, float sign) {
    Tensor t(Shape{3, steps, 2});
    for (int s = 0; s < 3; ++s)
      for (int p = 0; p < steps; ++p)
        for (int c = 0; c < 2; ++c)
          t.values()[(s * steps + p) * 2 + c] = sign * (100 * s + 10 * (first + p) + c);
    return t;
  };
  cache.append(step(0, 2, 1), step(0, 2, -1));
  cache.append(step(2, 1, 1), step(2, 1, -1));
  EXPECT_EQ(cache.length(), 3);
  auto key = [&](int s, int p, int c) { return cache.keys().values()[(s * 5 + p) * 2 + c]; };
  auto value = [&](int s, int p, int c) { return cache.values().values()[(s * 5 + p) * 2 + c]; };
  EXPECT_EQ(key(2, 2, 1), 221);
  EXPECT_EQ(value(1, 0, 0), -100);

  cache.reorder(std::vector<int>{2, 0, 0});
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(key(0, p, 0), 200 + 10 * p);
    EXPECT_EQ(key(1, p, 1), 10 * p + 1);
    EXPECT_EQ(value(2, p, 0), -(10 * p));
  }
  cache.reorder(std::vector<int>{0, 1, 2});  // identity: nothing moves
  EXPECT_EQ(key(0, 1, 0), 210);
  // Appending after a reorder continues every sequence.
  cache.append(step(3, 1, 1), step(3, 1, -1));
  EXPECT_EQ(key(0, 3, 0), 30);
  EXPECT_EQ(key(0, 2, 0), 220);

  EXPECT_THROW(cache.reorder(std::vector<int>{0, 1}), Error);
  EXPECT_THROW(cache.reorder(std::vector<int>{0, 1, 3}), Error);
  EXPECT_THROW(cache.reorder(std::vector<int>{0, -1, 1}), Error);
  EXPECT_THROW(cache.append(step(4, 2, 1), step(4, 2, -1)), Error);  // 4 + 2 > 5
  EXPECT_THROW(cache.append(Tensor(Shape{2, 1, 2}), Tensor(Shape{2, 1, 2})), Error);
  EXPECT_EQ(cache.length(), 4);
  cache.clear();
  EXPECT_EQ(cache.length(), 0);
}

MultiHeadAttention make_attention(Store& store, int64_t width, int heads) {
  MultiHeadAttention a;
  a.q_proj = store.linear(width, width);
  a.k_proj = store.linear(width, width, false);
  a.v_proj = store.linear(width, width);
  a.out_proj = store.linear(width, width);
  a.heads = heads;
  a.scale = 1.0f / std::sqrt(float(width / heads));
  return a;
}

TEST(MultiHeadAttention, CachedStepsEqualOneCausalPass) {
  Store store;
  const MultiHeadAttention attention = make_attention(store, 16, 2);
  const Tensor x = random_tensor(Shape{2, 6, 16}, 6);
  AttentionScratch scratch;

  KvCache whole(2, 8, 16);
  Tensor all;
  attention.cached_self_attention(x, whole, true, scratch, all);
  EXPECT_EQ(whole.length(), 6);

  KvCache stepwise(2, 8, 16);
  for (int t = 0; t < 6; ++t) {
    Tensor step(Shape{2, 1, 16});
    for (int s = 0; s < 2; ++s)
      for (int c = 0; c < 16; ++c) step.values()[s * 16 + c] = x.values()[(s * 6 + t) * 16 + c];
    Tensor out;
    attention.cached_self_attention(step, stepwise, true, scratch, out);
    for (int s = 0; s < 2; ++s)
      for (int c = 0; c < 16; ++c)
        EXPECT_NEAR(out.values()[s * 16 + c], all.values()[(s * 6 + t) * 16 + c], 1e-5);
  }

  // The first position sees only itself, so causal and bidirectional differ after it.
  Tensor bidirectional;
  attention.self_attention(x, scratch, bidirectional);
  for (int c = 0; c < 16; ++c) EXPECT_NE(bidirectional.values()[c], all.values()[c]);
  EXPECT_NEAR(bidirectional.values()[(6 - 1) * 16], all.values()[(6 - 1) * 16], 1e-5);
}

TEST(MultiHeadAttention, CrossAttentionOverSharedMemory) {
  Store store;
  const MultiHeadAttention attention = make_attention(store, 16, 4);
  const Tensor memory = random_tensor(Shape{1, 9, 16}, 7);
  const Tensor x = random_tensor(Shape{3, 2, 16}, 8);
  compute::PackedKv memory_kv;
  attention.project_memory(memory, memory_kv);
  EXPECT_EQ(memory_kv.length, 9);
  EXPECT_EQ(memory_kv.width, 16);
  AttentionScratch scratch;
  Tensor shared;
  Tensor residual = random_tensor(Shape{3, 2, 16}, 9);
  attention.cross_attention(x, memory_kv, scratch, shared, &residual);

  // The same as attending each sequence separately, with the memory per sequence.
  for (int s = 0; s < 3; ++s) {
    Tensor one(Shape{1, 2, 16}), one_residual(Shape{1, 2, 16}), out;
    for (int i = 0; i < 32; ++i) {
      one.values()[i] = x.values()[s * 32 + i];
      one_residual.values()[i] = residual.values()[s * 32 + i];
    }
    attention.cross_attention(one, memory_kv, scratch, out, &one_residual);
    for (int i = 0; i < 32; ++i) EXPECT_NEAR(out.values()[i], shared.values()[s * 32 + i], 1e-5);
  }
}

}  // namespace
}  // namespace hark::nn
