// The Hopper products with their epilogues against a double reference on the same rounded inputs.
// The one with the activation (gemm_sm90.h): a single row, a partial last tile of rows, long k
// (the ring of stages wraps around several times), more tiles than SMs (each CTA takes several,
// its two consumers in turn), every activation, with and without bias; rows past m stay
// unwritten. Its INT8 form (quantized_linear) against the product, then quantize_int8. The one of
// few rows (skinny_linear_sm90.h): both forms (16 and 32 columns of wgmma) with rows to spare,
// one depth stage and depth shares of uneven length, long depths (the ring of stages wraps),
// every activation, bias and residual (the residual as y itself, as a decoder's residual stream
// is); rows past m stay unwritten, and a second run gives the same bits. Its form with the layer
// norm before the product, against the norm and the product in double; and the same bits for
// every depth of its ring of stages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "compute/cuda/gemm_sm90.h"
#include "compute/cuda/kernels.h"
#include "compute/cuda/skinny_linear_sm90.h"
#include "support/cuda_elements.h"
#include "support/random_values.h"
#include "support/scoped_env.h"

namespace hark::compute::cuda {
namespace {

using hark::testing::uniform_values;
using testing::activate;
using testing::activation_name;
using testing::decode;
using testing::element_name;
using testing::encode;
using testing::layer_norm_reference;
using testing::rounded;

struct Case {
  int64_t m, k, n;
  Activation act;
  bool bias;
};

constexpr int64_t kGuardRows = 3;
constexpr float kSentinel = 1234.0f;

// The largest |y − want| / (0.05 + |want|) over y's first m rows, want = act(x · wᵀ + bias) (+
// residual) in double (bias, residual empty: none).
double worst_error(const std::vector<float>& y, const std::vector<float>& x,
                   const std::vector<float>& w, const std::vector<float>& bias, Activation act,
                   const std::vector<float>& residual, int64_t m, int64_t k, int64_t n) {
  double worst = 0;
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t col = 0; col < n; ++col) {
      double sum = bias.empty() ? 0.0 : bias[col];
      for (int64_t i = 0; i < k; ++i) sum += double{x[row * k + i]} * w[col * k + i];
      double want = activate(act, sum);
      if (!residual.empty()) want += residual[row * n + col];
      worst = std::max(worst, std::abs(y[row * n + col] - want) / (0.05 + std::abs(want)));
    }
  }
  return worst;
}

// The kGuardRows rows after y's first m still hold kSentinel.
void expect_guard_rows(Element e, const std::vector<float>& y, int64_t m, int64_t n) {
  const float sentinel = rounded(e, {kSentinel})[0];
  for (int64_t i = m * n; i < (m + kGuardRows) * n; ++i) {
    ASSERT_EQ(y[i], sentinel) << "row " << i / n << " past the last was written";
  }
}

TEST(ActivationLinearCuda, MatchesADoubleReferenceForEveryTileShapeAndActivation) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  if (!activation_linear_runs(Element::bf16, 128, 64, 256, nullptr, nullptr, nullptr, nullptr)) {
    GTEST_SKIP() << "not a compute capability 9.0 GPU: " << describe();
  }
  const Case cases[] = {
      {1, 64, 256, Activation::silu, true},        // one row of one tile
      {200, 192, 512, Activation::gelu, false},    // a partial second tile of rows
      {300, 1024, 768, Activation::silu, true},    // 16 steps through 4 stages
      {600, 512, 4096, Activation::silu, true},    // 160 tiles of 8 steps: consumers take turns
      {1100, 64, 4096, Activation::none, true},    // 288 tiles: CTAs take several
      {1100, 128, 4096, Activation::relu, false},  //
      {600, 1280, 1024, Activation::gelu, true},   // sums to about ±8: the fitted GELU's tails
  };
  for (const Element e : {Element::bf16, Element::f16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << element_name(e) << " " << c.m << " x " << c.k << " x " << c.n << " "
                   << activation_name(c.act) << (c.bias ? " with bias" : ""));
      const auto seed = static_cast<uint32_t>(c.m * 7 + c.k * 3 + c.n);
      const std::vector<float> x = rounded(e, uniform_values(c.m * c.k, seed));
      const std::vector<float> w = rounded(e, uniform_values(c.n * c.k, seed + 1, -0.2f, 0.2f));
      const std::vector<float> bias = rounded(e, uniform_values(c.n, seed + 2));
      const Buffer x_dev = upload_vector(encode(e, x)), w_dev = upload_vector(encode(e, w));
      const Buffer bias_dev = upload_vector(encode(e, bias));
      Buffer y_dev = upload_vector(
          encode(e, std::vector<float>(static_cast<size_t>((c.m + kGuardRows) * c.n), kSentinel)));
      activation_linear(e, x_dev.data(), c.m, c.k, w_dev.data(), c.n,
                        c.bias ? bias_dev.data() : nullptr, c.act, y_dev.data(), nullptr);
      std::vector<uint8_t> bytes(y_dev.bytes());
      download(y_dev.data(), bytes.size(), bytes.data());
      const std::vector<float> y = decode(e, bytes);
      // One rounding to 16 bits (2^-9 relative for bf16) on top of F32 accumulation; a value in
      // the wrong place is off by about its own size.
      EXPECT_LT(
          worst_error(y, x, w, c.bias ? bias : std::vector<float>{}, c.act, {}, c.m, c.k, c.n),
          8e-3);
      expect_guard_rows(e, y, c.m, c.n);
    }
  }
}

// quantized_linear against the same product stored in the element type (activation_linear,
// whose accumulators are the same), then quantize_int8: equal bytes and scales. Rows of a tile
// cross blocks (1500 rows a block, tiles of 128), the last block is partial, and what lies past
// row m stays unwritten.
TEST(QuantizedLinearCuda, EqualsTheProductThenQuantizeInt8) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  if (!activation_linear_runs(Element::bf16, 128, 64, 256, nullptr, nullptr, nullptr, nullptr)) {
    GTEST_SKIP() << "not a compute capability 9.0 GPU: " << describe();
  }
  struct QuantizedCase {
    int64_t m, k, n, block_rows;
    bool bias;
  };
  const QuantizedCase cases[] = {
      {1, 64, 128, 1, true},          // one row: one group pair of one tile
      {200, 192, 256, 200, false},    // one block, a partial second tile of rows
      {3100, 128, 1024, 1500, true},  // tiles across blocks; the third block has 100 rows
      {1500, 640, 4096, 1500, true},  // 384 tiles: CTAs take several, consumers in turn
  };
  constexpr int8_t kSentinel = 99;
  for (const Element e : {Element::bf16, Element::f16}) {
    for (const QuantizedCase& c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << element_name(e) << " " << c.m << " x " << c.k << " x " << c.n << " blocks of "
                   << c.block_rows << (c.bias ? " with bias" : ""));
      const auto seed = static_cast<uint32_t>(c.m * 5 + c.k * 3 + c.n);
      // Rows of very different sizes, as a product's groups have.
      std::vector<float> x = uniform_values(c.m * c.k, seed);
      for (int64_t row = 0; row < c.m; ++row) {
        const float size = std::pow(10.0f, static_cast<float>(row % 7) - 3.0f);
        for (int64_t i = 0; i < c.k; ++i) x[row * c.k + i] *= size;
      }
      x = rounded(e, x);
      const std::vector<float> w = rounded(e, uniform_values(c.n * c.k, seed + 1, -0.2f, 0.2f));
      const std::vector<float> bias = rounded(e, uniform_values(c.n, seed + 2, -1e-3f, 1e-3f));
      const Buffer x_dev = upload_vector(encode(e, x)), w_dev = upload_vector(encode(e, w));
      const Buffer bias_dev = upload_vector(encode(e, bias));
      const void* bias_ptr = c.bias ? bias_dev.data() : nullptr;
      const int64_t blocks = (c.m + c.block_rows - 1) / c.block_rows;
      const int64_t capacity = blocks * c.block_rows * c.n, groups = capacity / kQuantizedGroup;

      Buffer y(c.m * c.n * element_size(e));
      Buffer want_q = upload_vector(std::vector<int8_t>(capacity, kSentinel));
      Buffer want_scales = upload_vector(std::vector<float>(groups, -1.0f));
      activation_linear(e, x_dev.data(), c.m, c.k, w_dev.data(), c.n, bias_ptr, Activation::none,
                        y.data(), nullptr);
      quantize_int8(e, y.data(), 0, c.m, c.n, kQuantizedGroup, c.block_rows, want_q.as<int8_t>(),
                    want_scales.as<float>(), nullptr);

      Buffer q = upload_vector(std::vector<int8_t>(capacity, kSentinel));
      Buffer scales = upload_vector(std::vector<float>(groups, -1.0f));
      ASSERT_TRUE(quantized_linear_runs(e, c.m, c.k, c.n, kQuantizedGroup, c.block_rows,
                                        x_dev.data(), w_dev.data(), bias_ptr, q.as<int8_t>(),
                                        scales.as<float>()));
      quantized_linear(e, x_dev.data(), c.m, c.k, w_dev.data(), c.n, bias_ptr, kQuantizedGroup,
                       c.block_rows, q.as<int8_t>(), scales.as<float>(), nullptr);
      check(cudaDeviceSynchronize(), "quantized_linear test");

      const auto read_bytes = [&](const Buffer& b) {
        std::vector<int8_t> out(capacity);
        download(b.data(), out.size(), out.data());
        return out;
      };
      const auto read_scales = [&](const Buffer& b) {
        std::vector<float> out(groups);
        download(b.data(), out.size() * sizeof(float), out.data());
        return out;
      };
      const std::vector<int8_t> got_q = read_bytes(q), expected_q = read_bytes(want_q);
      const std::vector<float> got_scales = read_scales(scales);
      const std::vector<float> expected_scales = read_scales(want_scales);
      // quantize_int8 leaves the places of rows past m alone too: the sentinels must match there.
      ASSERT_EQ(got_q.size(), expected_q.size());
      int64_t differing = 0, nonzero = 0;
      for (size_t i = 0; i < got_q.size(); ++i) {
        differing += got_q[i] != expected_q[i];
        nonzero += got_q[i] != 0 && got_q[i] != kSentinel;
      }
      EXPECT_EQ(differing, 0);
      EXPECT_GT(nonzero, static_cast<int64_t>(got_q.size()) / 4);  // the test has content
      EXPECT_EQ(got_scales, expected_scales);
      if (blocks * c.block_rows > c.m) {
        EXPECT_EQ(got_q.back(), kSentinel);
        EXPECT_EQ(got_scales.back(), -1.0f);
      }
    }
  }
}

TEST(ActivationLinearCuda, RefusesWhatItCannotRun) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  Buffer any(4096);
  void* p = any.data();
  EXPECT_FALSE(activation_linear_runs(Element::f32, 128, 64, 256, p, p, nullptr, p));
  EXPECT_FALSE(activation_linear_runs(Element::bf16, 128, 64, 200, p, p, nullptr, p));
  EXPECT_FALSE(activation_linear_runs(Element::bf16, 128, 100, 256, p, p, nullptr, p));
  EXPECT_FALSE(activation_linear_runs(Element::bf16, 0, 64, 256, p, p, nullptr, p));
  const auto* odd = static_cast<const uint8_t*>(p) + 2;
  EXPECT_FALSE(activation_linear_runs(Element::bf16, 128, 64, 256, odd, p, nullptr, p));
  EXPECT_THROW(
      activation_linear(Element::f32, p, 128, 64, p, 256, nullptr, Activation::silu, p, nullptr),
      std::exception);
  auto* q = static_cast<int8_t*>(p);
  auto* scales = static_cast<float*>(p);
  EXPECT_FALSE(
      quantized_linear_runs(Element::f32, 128, 64, 256, 64, 1500, p, p, nullptr, q, scales));
  EXPECT_FALSE(
      quantized_linear_runs(Element::bf16, 128, 64, 256, 32, 1500, p, p, nullptr, q, scales));
  EXPECT_FALSE(quantized_linear_runs(Element::bf16, 128, 64, 256, 64, 0, p, p, nullptr, q, scales));
  EXPECT_FALSE(
      quantized_linear_runs(Element::bf16, 128, 64, 256, 64, 1500, p, p, nullptr, q + 8, scales));
  EXPECT_THROW(
      quantized_linear(Element::bf16, p, 128, 64, p, 256, nullptr, 32, 1500, q, scales, nullptr),
      std::exception);
}

struct SkinnyCase {
  int64_t m, k, n;
  Activation act;
  bool bias, residual;
};

// x [m, k] times w [n, k] (16-bit) into y, and nothing else yet.
SkinnyProduct skinny_product(const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                             void* y) {
  SkinnyProduct product;
  product.x = x;
  product.m = m;
  product.k = k;
  product.w = {w, false};
  product.n = n;
  product.y = y;
  return product;
}

// Runs the product, then reads y's buffer back.
std::vector<uint8_t> run_skinny(Element e, const SkinnyProduct& product, const Buffer& y) {
  skinny_linear(e, product, nullptr);
  std::vector<uint8_t> bytes(y.bytes());
  download(y.data(), bytes.size(), bytes.data());
  return bytes;
}

bool on_hopper() {
  return skinny_linear_runs(Element::f16, skinny_product(nullptr, 1, 64, nullptr, 64, nullptr));
}

TEST(SkinnyLinearCuda, MatchesADoubleReferenceForEveryRowFormAndEpilogue) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  if (!on_hopper()) GTEST_SKIP() << "not a compute capability 9.0 GPU: " << describe();
  const SkinnyCase cases[] = {
      {1, 64, 64, Activation::none, true, false},       // one row, one stage, one CTA
      {9, 1280, 1280, Activation::none, true, true},    // a decode step's output layer: 8 shares
      {16, 1280, 3840, Activation::none, true, false},  // its fused Q, K, V
      {12, 5120, 1280, Activation::none, true, true},   // fc2: 10 stages a share through 8
      {20, 5120, 1280, Activation::none, false, true},  // the 32-column form, the same
      {32, 1280, 5120, Activation::gelu, true, false},  // fc1
      {17, 576, 192, Activation::silu, false, true},    // shares of 4 and 5 stages
      {8, 320, 128, Activation::relu, true, false},     // shares of 2 and 3 stages
      {24, 128, 64, Activation::none, false, false},    // too shallow to split
  };

  for (const Element e : {Element::f16, Element::bf16}) {
    for (const SkinnyCase& c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << element_name(e) << " " << c.m << " x " << c.k << " x " << c.n << " "
                   << activation_name(c.act) << (c.bias ? " with bias" : "")
                   << (c.residual ? " with residual" : ""));
      const auto seed = static_cast<uint32_t>(c.m * 11 + c.k * 3 + c.n);
      const std::vector<float> x = rounded(e, uniform_values(c.m * c.k, seed));
      const std::vector<float> w = rounded(e, uniform_values(c.n * c.k, seed + 1, -0.1f, 0.1f));
      const std::vector<float> bias = rounded(e, uniform_values(c.n, seed + 2));
      // y starts as the residual (or sentinels), with sentinel rows after it.
      std::vector<float> start(static_cast<size_t>((c.m + kGuardRows) * c.n), kSentinel);
      const std::vector<float> residual = rounded(e, uniform_values(c.m * c.n, seed + 3));
      if (c.residual) std::copy(residual.begin(), residual.end(), start.begin());
      const Buffer x_dev = upload_vector(encode(e, x)), w_dev = upload_vector(encode(e, w));
      const Buffer bias_dev = upload_vector(encode(e, bias));
      const std::vector<uint8_t> start_bytes = encode(e, start);
      Buffer y_dev = upload_vector(start_bytes);
      SkinnyProduct product =
          skinny_product(x_dev.data(), c.m, c.k, w_dev.data(), c.n, y_dev.data());
      product.bias = c.bias ? bias_dev.data() : nullptr;
      product.act = c.act;
      product.residual = c.residual ? y_dev.data() : nullptr;
      const std::vector<uint8_t> first = run_skinny(e, product, y_dev);
      const std::vector<float> y = decode(e, first);
      EXPECT_LT(worst_error(y, x, w, c.bias ? bias : std::vector<float>{}, c.act,
                            c.residual ? residual : std::vector<float>{}, c.m, c.k, c.n),
                8e-3);
      expect_guard_rows(e, y, c.m, c.n);
      // The depth shares add up in a fixed order: the same inputs give the same bits.
      upload(start_bytes.data(), start_bytes.size(), y_dev.data(), nullptr);
      EXPECT_EQ(run_skinny(e, product, y_dev), first);
    }
  }
}

// With the layer norm in the kernel: against the norm in double, rounded to the element type
// (as the kernel rounds it, and layer_norm its output), then the product in double. The rows'
// means lie far from 0 against their spread (up to ±4.5 against 0.58), and the shares whose
// statistics the cluster merges are of equal and unequal depth, 1 to 8 of them.
struct SkinnyNormCase {
  int64_t m, k, n;
  Activation act;
};

TEST(SkinnyLinearCuda, AppliesTheLayerNormFirst) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  if (!on_hopper()) GTEST_SKIP() << "not a compute capability 9.0 GPU: " << describe();
  const SkinnyNormCase cases[] = {
      {1, 1280, 3840, Activation::none},   // large-v3's Q, K and V at batch 1: 4 shares
      {16, 1280, 1280, Activation::none},  // its cross-attention query: 8 shares
      {32, 1280, 5120, Activation::gelu},  // fc1: 2 shares of 640, 40 KB of x each
      {20, 576, 192, Activation::gelu},    // shares of 4 and 5 steps
      {9, 384, 1152, Activation::none},    // tiny's width
      {3, 64, 64, Activation::none},       // one step, one CTA
  };
  constexpr float kEps = 1e-5f;
  for (const Element e : {Element::f16, Element::bf16}) {
    for (const SkinnyNormCase& c : cases) {
      SCOPED_TRACE(::testing::Message() << element_name(e) << " " << c.m << " x " << c.k << " x "
                                        << c.n << " " << activation_name(c.act));
      const auto seed = static_cast<uint32_t>(c.m * 13 + c.k * 5 + c.n);
      std::vector<float> x = uniform_values(c.m * c.k, seed);
      for (int64_t i = 0; i < c.m * c.k; ++i)
        x[i] += 3.0f * (static_cast<float>(i / c.k % 4) - 1.5f);
      x = rounded(e, x);
      const std::vector<float> gamma = rounded(e, uniform_values(c.k, seed + 1, 0.5f, 1.5f));
      const std::vector<float> beta = rounded(e, uniform_values(c.k, seed + 2, -0.5f, 0.5f));
      const std::vector<float> w = rounded(e, uniform_values(c.n * c.k, seed + 3, -0.1f, 0.1f));
      const std::vector<float> bias = rounded(e, uniform_values(c.n, seed + 4));
      const std::vector<double> normed = layer_norm_reference(x, gamma, beta, kEps, c.m, c.k);
      const std::vector<float> h = rounded(e, std::vector<float>(normed.begin(), normed.end()));

      const Buffer x_dev = upload_vector(encode(e, x)), w_dev = upload_vector(encode(e, w));
      const Buffer gamma_dev = upload_vector(encode(e, gamma));
      const Buffer beta_dev = upload_vector(encode(e, beta));
      const Buffer bias_dev = upload_vector(encode(e, bias));
      const std::vector<uint8_t> start =
          encode(e, std::vector<float>(static_cast<size_t>((c.m + kGuardRows) * c.n), kSentinel));
      Buffer y_dev = upload_vector(start);
      const DecodeNorm norm{gamma_dev.data(), beta_dev.data(), kEps};
      SkinnyProduct product =
          skinny_product(x_dev.data(), c.m, c.k, w_dev.data(), c.n, y_dev.data());
      product.bias = bias_dev.data();
      product.act = c.act;
      product.norm = &norm;
      ASSERT_TRUE(skinny_linear_runs(e, product));
      const std::vector<uint8_t> first = run_skinny(e, product, y_dev);
      const std::vector<float> y = decode(e, first);
      // The kernel's statistics are sums in float, in another order than the double reference's,
      // so an element of h can round the other way: one unit in the last place, up to 2^-7
      // relative in bf16 (2^-10 in f16), in any of k terms of a sum. Hence bf16's looser bound
      // (the 1e-2 of 16-bit parity; measured up to 8.2e-3, in bf16's 32 x 1280 x 5120).
      EXPECT_LT(worst_error(y, h, w, bias, c.act, {}, c.m, c.k, c.n),
                e == Element::bf16 ? 1e-2 : 8e-3);
      expect_guard_rows(e, y, c.m, c.n);
      upload(start.data(), start.size(), y_dev.data(), nullptr);
      EXPECT_EQ(run_skinny(e, product, y_dev), first);
    }
  }
}

// The ring's depth (HARK_CUDA_SKINNY_STAGES) changes when the copies happen, not what is added
// in which order: 2 to 8 stages give the same bits, with and without the norm, through shares of
// 10 steps (the ring wraps up to 5 times).
TEST(SkinnyLinearCuda, GivesTheSameBitsForEveryRingDepth) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  if (!on_hopper()) GTEST_SKIP() << "not a compute capability 9.0 GPU: " << describe();
  const Element e = Element::f16;
  for (const bool with_norm : {false, true}) {
    SCOPED_TRACE(with_norm ? "fc1 with its norm" : "fc2 with its residual");
    const int64_t m = with_norm ? 24 : 12, k = with_norm ? 1280 : 5120, n = with_norm ? 5120 : 1280;
    const Buffer x_dev = upload_vector(encode(e, uniform_values(m * k, 3)));
    const Buffer w_dev = upload_vector(encode(e, uniform_values(n * k, 4, -0.1f, 0.1f)));
    const Buffer gamma_dev = upload_vector(encode(e, uniform_values(k, 5, 0.5f, 1.5f)));
    const Buffer beta_dev = upload_vector(encode(e, uniform_values(k, 6)));
    const std::vector<uint8_t> start = encode(e, uniform_values(m * n, 7));
    Buffer y_dev = upload_vector(start);
    const DecodeNorm norm{gamma_dev.data(), beta_dev.data(), 1e-5f};
    SkinnyProduct product = skinny_product(x_dev.data(), m, k, w_dev.data(), n, y_dev.data());
    product.act = with_norm ? Activation::gelu : Activation::none;
    product.residual = with_norm ? nullptr : y_dev.data();
    product.norm = with_norm ? &norm : nullptr;
    const auto run = [&](const char* stages) {
      const hark::testing::ScopedEnv ring("HARK_CUDA_SKINNY_STAGES", stages);
      upload(start.data(), start.size(), y_dev.data(), nullptr);
      return run_skinny(e, product, y_dev);
    };
    const std::vector<uint8_t> deepest = run("8");
    for (const char* stages : {"2", "3", "5"}) {
      EXPECT_EQ(run(stages), deepest) << stages << " stages";
    }
  }
}

TEST(SkinnyLinearCuda, RefusesWhatItCannotRun) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  if (!on_hopper()) GTEST_SKIP() << "not a compute capability 9.0 GPU: " << describe();
  Buffer any(4096);
  void* p = any.data();
  const auto shape = [&](int64_t m, int64_t k, int64_t n) {
    return skinny_product(p, m, k, p, n, p);
  };
  SkinnyProduct every = shape(32, 64, 64);
  every.bias = every.residual = p;
  EXPECT_TRUE(skinny_linear_runs(Element::f16, every));
  EXPECT_FALSE(skinny_linear_runs(Element::f32, shape(16, 64, 64)));
  EXPECT_FALSE(skinny_linear_runs(Element::f16, shape(33, 64, 64)));
  EXPECT_FALSE(skinny_linear_runs(Element::f16, shape(0, 64, 64)));
  EXPECT_FALSE(skinny_linear_runs(Element::f16, shape(16, 96, 64)));
  EXPECT_FALSE(skinny_linear_runs(Element::f16, shape(16, 64, 96)));
  const auto* odd = static_cast<const uint8_t*>(p) + 2;
  SkinnyProduct odd_bias = shape(16, 64, 64), odd_residual = shape(16, 64, 64);
  odd_bias.bias = odd;
  odd_residual.residual = odd;
  EXPECT_FALSE(skinny_linear_runs(Element::f16, odd_bias));
  EXPECT_FALSE(skinny_linear_runs(Element::f16, odd_residual));
  EXPECT_THROW(skinny_linear(Element::f16, shape(33, 64, 64), nullptr), std::exception);
  // The norm: γ and β aligned too, and a CTA's share of x within its shared memory (one column
  // tile of depth 32,768: 8 shares of 4,096, 128 KB of x each at 16 rows).
  const DecodeNorm norm{p, p, 1e-5f}, odd_norm{p, odd, 1e-5f};
  SkinnyProduct normed = shape(16, 1280, 1280), odd_normed = normed, deep = shape(16, 32768, 64);
  normed.norm = deep.norm = &norm;
  odd_normed.norm = &odd_norm;
  EXPECT_TRUE(skinny_linear_runs(Element::f16, normed));
  EXPECT_FALSE(skinny_linear_runs(Element::f16, odd_normed));
  EXPECT_FALSE(skinny_linear_runs(Element::f16, deep));
  // The scatter: n three parts of its width, and no residual.
  const KvScatter scatter{p, p, 64 * 8, static_cast<const int32_t*>(p), 64};
  SkinnyProduct scattered = shape(4, 64, 192), uneven = shape(4, 64, 128);
  scattered.scatter = uneven.scatter = &scatter;
  EXPECT_TRUE(skinny_linear_runs(Element::f16, scattered));
  EXPECT_FALSE(skinny_linear_runs(Element::f16, uneven));
  scattered.residual = p;
  EXPECT_FALSE(skinny_linear_runs(Element::f16, scattered));
  {
    const hark::testing::ScopedEnv ring("HARK_CUDA_SKINNY_STAGES", "9");
    EXPECT_THROW(skinny_linear(Element::f16, shape(16, 64, 64), nullptr), std::exception);
  }
}

}  // namespace
}  // namespace hark::compute::cuda
