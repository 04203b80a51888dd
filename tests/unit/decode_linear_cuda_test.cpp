// decode_linear (kernels_decode.cu) against a CPU reference computed in double from the values
// the GPU really holds (after rounding to the element type). Shapes cover Whisper's decode
// products (k 1280 and 5120, n up to the 51866-token vocabulary), odd ones (k 200, n 1, 3, 130),
// every batch bucket and batches that take several launches; options in every combination; the
// K/V scatter at a different position per sequence, cache rows elsewhere untouched; and a capture
// into a CUDA Graph replayed at new positions; Q8_0 weights (device layout) in F16 and BF16, whose
// values the reference takes as the kernel must multiply them: d · q rounded to the element type.
//
// Tolerances, per output: F32 accumulation error, at most `accumulation` · Σ_k |h_k · W_nk| (1e-5
// for F32; 1e-4 for tensor cores, whose F32 accumulation may truncate), plus the one rounding of
// the result to the element type. With a norm, 16-bit types round the normalised rows h to the
// element type before the product (as layer_norm followed by a product does), and so does the
// reference; since the GPU's statistics are F32, it may round an h on the other side of a
// rounding boundary: each output allows for two such h (each one ulp off) as well.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/error.h"
#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "compute/cuda/kernels.h"
#include "compute/cuda/skinny_linear_sm90.h"
#include "support/cuda_elements.h"

namespace hark::compute::cuda {
namespace {

using namespace testing;  // element helpers (support/cuda_elements.h)

constexpr float kEps = 1e-5f;

// Half an ulp of the element type, relative: what rounding one result to it may cost.
double rounding(Element e) {
  return e == Element::f32 ? 6e-8 : e == Element::f16 ? 4.9e-4 : 3.9e-3;
}

// Uniform values with the given mean and standard deviation, from a splitmix64 stream: fast
// enough for the 66 million weights of a vocabulary-sized matrix.
std::vector<float> random_values(size_t n, uint64_t seed, float mean, float stddev) {
  std::vector<float> values(n);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull;
  const float half_width = stddev * std::sqrt(3.0f);
  for (float& value : values) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float unit = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    value = mean + half_width * (2.0f * unit - 1.0f);
  }
  return values;
}

// Values uploaded as element type e, and the floats the device holds.
struct DeviceValues {
  Buffer buffer;
  std::vector<float> values;
  void* data() const { return buffer.data(); }
};

DeviceValues upload_values(Element e, const std::vector<float>& values) {
  const std::vector<uint8_t> bytes = encode(e, values);
  Buffer buffer(bytes.size() + 16);
  upload(bytes.data(), bytes.size(), buffer.data());
  return {std::move(buffer), decode(e, bytes)};
}

// Waits for the device, then reads `count` values of element type e back as floats.
std::vector<float> download_values(Element e, const void* device, size_t count) {
  check(cudaDeviceSynchronize(), "synchronize");
  std::vector<uint8_t> bytes(count * element_size(e));
  download(device, bytes.size(), bytes.data());
  return decode(e, bytes);
}

// Every got[i] within allowed[i] of want[i]; reports the first few that are not.
void expect_near(const std::vector<float>& got, const std::vector<double>& want,
                 const std::vector<double>& allowed, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 10; ++i) {
    if (!(std::abs(got[i] - want[i]) <= allowed[i])) {
      ADD_FAILURE() << what << "[" << i << "] is " << got[i] << ", want " << want[i] << " ± "
                    << allowed[i];
      ++failures;
    }
  }
}

// ---- Cases and the reference ------------------------------------------------------------------

enum class Residual { none, separate, in_place };

struct Case {
  int batch = 1;
  int64_t k_in = 0, n_out = 0;
  bool norm = false, bias = false, gelu = false;
  Residual residual = Residual::none;
  int64_t scatter_width = 0;  // > 0: a K/V scatter (n_out = 3 · width)
  bool f32_out = false;       // decode_linear_f32_out: the sums stored as F32 (norm only)
};

std::string describe(Element e, const Case& c, bool q8_0) {
  std::string s = std::string(element_name(e)) + (q8_0 ? " q8_0" : "") + " batch " +
                  std::to_string(c.batch) + " k " + std::to_string(c.k_in) + " n " +
                  std::to_string(c.n_out);
  if (c.norm) s += " norm";
  if (c.bias) s += " bias";
  if (c.gelu) s += " gelu";
  if (c.residual == Residual::separate) s += " residual";
  if (c.residual == Residual::in_place) s += " residual=y";
  if (c.scatter_width > 0) s += " scatter " + std::to_string(c.scatter_width);
  if (c.f32_out) s += " f32 out";
  return s;
}

double gelu_erf(double value) {
  return 0.5 * value * (1.0 + std::erf(value / std::sqrt(2.0)));
}

// A case's inputs on the device (and the floats they hold), its outputs and cache positions.
struct Problem {
  Element e = Element::f32;
  Case c;
  bool q8_0 = false;  // w holds Q8_0 bytes in the device layout
  DeviceValues x, w, gamma, beta, bias, residual, k_cache, v_cache;
  Buffer y;  // unused when the residual is y
  Buffer positions;
  int64_t capacity = 0, cache_batch_stride = 0;

  int64_t y_width() const { return c.scatter_width > 0 ? c.scatter_width : c.n_out; }
  void* out() const { return c.residual == Residual::in_place ? residual.data() : y.data(); }
};

// Cache row b writes: a different one per sequence.
std::vector<int32_t> spread_positions(int batch, int64_t capacity, int shift) {
  std::vector<int32_t> positions(batch);
  for (int b = 0; b < batch; ++b) positions[b] = static_cast<int32_t>((5 * b + shift) % capacity);
  return positions;
}

Problem make_problem(Element e, const Case& c, bool q8_0 = false) {
  Problem p;
  p.e = e;
  p.c = c;
  p.q8_0 = q8_0;
  const int64_t batch = c.batch, k = c.k_in, n = c.n_out;
  // Rows with an offset and a spread, as the residual stream a norm sees.
  p.x = upload_values(e, random_values(batch * k, 11, c.norm ? 0.5f : 0.0f, c.norm ? 2.0f : 1.0f));
  const std::vector<float> weights = random_values(n * k, 12, 0.0f, 0.05f);
  if (q8_0) {
    const Q8Matrix w = q8_0_matrix(weights, n, k);
    Buffer buffer(w.device_bytes.size());
    upload(w.device_bytes.data(), w.device_bytes.size(), buffer.data());
    p.w = {std::move(buffer), rounded(e, w.values)};
  } else {
    p.w = upload_values(e, weights);
  }
  p.gamma = upload_values(e, random_values(k, 13, 1.0f, 0.3f));
  p.beta = upload_values(e, random_values(k, 14, 0.0f, 0.2f));
  p.bias = upload_values(e, random_values(n, 15, 0.0f, 0.1f));
  p.residual = upload_values(e, random_values(batch * n, 16, 0.0f, 1.0f));
  p.y = Buffer(batch * p.y_width() * sizeof(float) + 16);  // room for F32 outputs
  if (c.scatter_width > 0) {
    p.capacity = 11;
    // Padding between sequences checks that the stride is the caller's, not the rows'.
    p.cache_batch_stride = p.capacity * c.scatter_width + 8;
    p.k_cache = upload_values(e, random_values(batch * p.cache_batch_stride, 17, 0.0f, 1.0f));
    p.v_cache = upload_values(e, random_values(batch * p.cache_batch_stride, 18, 0.0f, 1.0f));
    p.positions = upload_vector(spread_positions(c.batch, p.capacity, 0));
  }
  return p;
}

void run(const Problem& p, cudaStream_t stream) {
  const Case& c = p.c;
  const DecodeNorm norm{p.gamma.data(), p.beta.data(), kEps};
  const KvScatter scatter{p.k_cache.data(), p.v_cache.data(), p.cache_batch_stride,
                          p.positions.as<int32_t>(), c.scatter_width};
  if (c.f32_out) {
    decode_linear_f32_out(p.e, p.x.data(), c.batch, c.k_in, c.norm ? &norm : nullptr,
                          {p.w.data(), p.q8_0}, c.n_out, p.y.as<float>(), stream);
    return;
  }
  decode_linear(p.e, p.x.data(), c.batch, c.k_in, c.norm ? &norm : nullptr, {p.w.data(), p.q8_0},
                c.n_out, c.bias ? p.bias.data() : nullptr, c.gelu,
                c.residual != Residual::none ? p.residual.data() : nullptr, p.out(),
                c.scatter_width > 0 ? &scatter : nullptr, stream);
}

// Outputs t[b, n] before they are stored, and how far each may be off.
struct Reference {
  std::vector<double> out, allowed;
};

Reference reference(const Problem& p) {
  const Case& c = p.c;
  const Element e = p.e;
  const int64_t batch = c.batch, k_in = c.k_in, n_out = c.n_out;
  std::vector<double> h(p.x.values.begin(), p.x.values.end());
  std::vector<double> largest_h(batch, 0.0);
  if (c.norm) {
    h = layer_norm_reference(p.x.values, p.gamma.values, p.beta.values, kEps, batch, k_in);
    if (e != Element::f32) {
      const std::vector<float> rounded_h = rounded(e, std::vector<float>(h.begin(), h.end()));
      h.assign(rounded_h.begin(), rounded_h.end());
    }
  }
  for (int64_t i = 0; i < batch * k_in; ++i) {
    largest_h[i / k_in] = std::max(largest_h[i / k_in], std::abs(h[i]));
  }
  const double accumulation = e == Element::f32 ? 1e-5 : 1e-4;
  // GELU's slope is below 1.13.
  const double after_gelu = c.gelu ? 1.2 : 1.0;
  const bool rounded_rows = c.norm && e != Element::f32;

  Reference r;
  r.out.resize(batch * n_out);
  r.allowed.resize(batch * n_out);
  for (int64_t n = 0; n < n_out; ++n) {
    const float* w = p.w.values.data() + n * k_in;
    double largest_w = 0;
    for (int64_t k = 0; k < k_in; ++k)
      largest_w = std::max(largest_w, std::abs(static_cast<double>(w[k])));
    for (int64_t b = 0; b < batch; ++b) {
      const double* row = h.data() + b * k_in;
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < k_in; ++k) {
        const double term = row[k] * w[k];
        sum += term;
        magnitude += std::abs(term);
      }
      if (c.bias) {
        sum += p.bias.values[n];
        magnitude += std::abs(p.bias.values[n]);
      }
      double slack = accumulation * (magnitude + 1);
      // Two h one ulp (at most twice the relative half ulp) off.
      if (rounded_rows) slack += 2 * 2 * rounding(e) * largest_h[b] * largest_w;
      slack *= after_gelu;
      if (c.gelu) sum = gelu_erf(sum);
      if (c.residual != Residual::none) sum += p.residual.values[b * n_out + n];
      r.out[b * n_out + n] = sum;
      const Element stored = c.f32_out ? Element::f32 : e;
      r.allowed[b * n_out + n] = slack + 1.01 * rounding(stored) * std::abs(sum);
    }
  }
  return r;
}

// Checks y, and with a scatter the caches: rows at every position in `written` (each set written
// with the same values) hold the keys and values, every other row its original values.
void check_outputs(const Problem& p, const std::vector<std::vector<int32_t>>& written) {
  const Case& c = p.c;
  const Reference r = reference(p);
  const int64_t y_width = p.y_width();
  std::vector<double> want(c.batch * y_width), allowed(c.batch * y_width);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t j = 0; j < y_width; ++j) {
      want[b * y_width + j] = r.out[b * c.n_out + j];
      allowed[b * y_width + j] = r.allowed[b * c.n_out + j];
    }
  }
  expect_near(download_values(c.f32_out ? Element::f32 : p.e, p.out(), want.size()), want, allowed,
              "y");
  if (c.scatter_width == 0) return;

  const int64_t width = c.scatter_width, size = c.batch * p.cache_batch_stride;
  for (int which = 1; which <= 2; ++which) {
    const DeviceValues& cache = which == 1 ? p.k_cache : p.v_cache;
    std::vector<double> expected(cache.values.begin(), cache.values.begin() + size);
    std::vector<double> slack(size, 0.0);
    for (const std::vector<int32_t>& positions : written) {
      for (int64_t b = 0; b < c.batch; ++b) {
        for (int64_t j = 0; j < width; ++j) {
          const int64_t at = b * p.cache_batch_stride + positions[b] * width + j;
          expected[at] = r.out[b * c.n_out + which * width + j];
          slack[at] = r.allowed[b * c.n_out + which * width + j];
        }
      }
    }
    expect_near(download_values(p.e, cache.data(), size), expected, slack,
                which == 1 ? "k_cache" : "v_cache");
  }
}

void check_case(Element e, const Case& c, bool q8_0 = false) {
  SCOPED_TRACE(describe(e, c, q8_0));
  const Problem p = make_problem(e, c, q8_0);
  run(p, nullptr);
  check_outputs(p, {spread_positions(c.batch, p.capacity == 0 ? 1 : p.capacity, 0)});
}

// ---- Tests ------------------------------------------------------------------------------------

TEST(DecodeLinearCuda, MatchesCpuAcrossShapes) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const Residual none = Residual::none, separate = Residual::separate, y = Residual::in_place;
  // {batch, k_in, n_out, norm, bias, gelu, residual}
  const Case cases[] = {
      {1, 1280, 1280, true, true, false, none},     // cross-attention query
      {1, 1280, 51866, true, false, false, none},   // logits
      {3, 1280, 51866, false, false, false, none},  //
      {1, 5120, 1280, false, true, false, y},       // fc2
      {1, 1280, 5120, true, true, true, none},      // fc1, batch 1
      {6, 1280, 2000, true, false, false, y},       //
      {16, 5120, 1280, false, true, false, y},      // fc2, full batch (F32: two launches)
      {16, 1280, 5120, true, true, true, none},     // fc1, full batch
      {3, 5120, 1280, true, true, true, separate},  //
      {8, 1280, 3, true, true, false, none},        //
      {3, 64, 1, false, false, false, none},        //
      {8, 64, 130, false, true, true, none},        //
      {3, 200, 130, true, true, true, separate},    // k an odd multiple of 8
      {16, 200, 3, true, false, false, separate},   //
      {1, 200, 1, false, false, false, none},       //
      {9, 1280, 257, false, true, false, none},     // just past the 8-row bucket
      {5, 1280, 1280, false, true, false, y},       // self-attention output, beam 5
      {20, 1280, 40, true, true, false, y},         // two launches (16 + 4)
      {33, 200, 17, true, true, true, separate},    // three launches
  };
  for (Element e : kElements) {
    for (const Case& c : cases) check_case(e, c);
  }
}

// Logits: the vocabulary-sized product with the final norm, its sums kept in F32.
TEST(DecodeLinearCuda, LogitsInF32) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  for (Element e : kElements) {
    for (int batch : {1, 5, 16}) {
      Case c;
      c.batch = batch;
      c.k_in = 1280;
      c.n_out = 51866;
      c.norm = true;
      c.f32_out = true;
      check_case(e, c);
    }
    Case odd;  // no norm, odd sizes
    odd.batch = 16;
    odd.k_in = 200;
    odd.n_out = 131;
    odd.f32_out = true;
    check_case(e, odd);
  }
}

TEST(DecodeLinearCuda, EveryOptionCombination) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  for (Element e : kElements) {
    for (auto [batch, k_in, n_out] : {std::tuple{3, 200, 21}, std::tuple{16, 64, 9}}) {
      for (bool norm : {false, true}) {
        for (bool bias : {false, true}) {
          for (bool gelu : {false, true}) {
            for (Residual residual : {Residual::none, Residual::separate, Residual::in_place}) {
              check_case(e, {batch, k_in, n_out, norm, bias, gelu, residual});
            }
          }
        }
      }
    }
  }
}

TEST(DecodeLinearCuda, ScattersKeysAndValues) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  // {batch, k_in, n_out, norm, bias, gelu, residual, width}
  const Case cases[] = {
      {3, 1280, 3 * 1280, true, true, false, Residual::none, 1280},  // Whisper's QKV
      {1, 1280, 3 * 1280, true, true, false, Residual::none, 1280},
      {16, 64, 3 * 64, true, true, false, Residual::none, 64},
      {1, 200, 3 * 40, false, false, true, Residual::none, 40},
      {9, 200, 3 * 3, true, false, false, Residual::none, 3},
      {20, 64, 3 * 8, false, true, false, Residual::none, 8},  // two launches
  };
  for (Element e : kElements) {
    for (const Case& c : cases) check_case(e, c);
  }
}

// The same layers through skinny_linear (skinny_linear_sm90.h), which the fused step takes
// instead from 8 sequences (10 with Q8_0 weights): the norm, bias, GELU, residual (separate and
// in place) and the K/V scatter, up to its 32 rows, on a compute capability 9.0 GPU (16-bit
// elements, depths and widths multiples of 64), with 16-bit and Q8_0 weights.
// Its GELU is the products' fitted form, within 2.6e-5 of the erf form: inside the
// accumulation's slack.
TEST(DecodeLinearCuda, SkinnyLinearTakesTheStepsLayers) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  SkinnyProduct probe;
  probe.m = 1;
  probe.k = probe.n = 64;
  if (!skinny_linear_runs(Element::f16, probe)) {
    GTEST_SKIP() << "not a compute capability 9.0 GPU: " << hark::compute::cuda::describe();
  }
  const Residual none = Residual::none, separate = Residual::separate, y = Residual::in_place;
  // {batch, k_in, n_out, norm, bias, gelu, residual, width}
  const Case cases[] = {
      {1, 1280, 3 * 1280, true, true, false, none, 1280},  // Q, K and V with the scatter
      {8, 1280, 1280, true, true, false, none},            // cross-attention query
      {5, 1280, 5120, true, true, true, none},             // fc1
      {8, 5120, 1280, false, true, false, y},              // fc2
      {3, 1280, 1280, false, true, false, separate},       //
      {16, 64, 3 * 64, true, true, false, none, 64},       //
      {20, 256, 3 * 128, true, false, false, none, 128},   // the 32-column form
      {32, 1280, 5120, true, true, true, none},            //
  };
  for (const Element e : {Element::f16, Element::bf16}) {
    for (const bool q8_0 : {false, true}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(describe(e, c, q8_0));
        const Problem p = make_problem(e, c, q8_0);
        const DecodeNorm norm{p.gamma.data(), p.beta.data(), kEps};
        const KvScatter scatter{p.k_cache.data(), p.v_cache.data(), p.cache_batch_stride,
                                p.positions.as<int32_t>(), c.scatter_width};
        SkinnyProduct product;
        product.x = p.x.data();
        product.m = c.batch;
        product.k = c.k_in;
        product.w = {p.w.data(), q8_0};
        product.n = c.n_out;
        product.bias = c.bias ? p.bias.data() : nullptr;
        product.act = c.gelu ? Activation::gelu : Activation::none;
        product.residual = c.residual != Residual::none ? p.residual.data() : nullptr;
        product.y = p.out();
        product.norm = c.norm ? &norm : nullptr;
        product.scatter = c.scatter_width > 0 ? &scatter : nullptr;
        skinny_linear(e, product, nullptr);
        check_outputs(p, {spread_positions(c.batch, p.capacity == 0 ? 1 : p.capacity, 0)});
      }
    }
  }
}

// Q8_0 weights: Whisper's decode products, the logits, the K/V scatter and odd sizes, for both
// 16-bit types (every k a whole number of blocks; 96 and 160 are not whole chunks of 64).
TEST(DecodeLinearCuda, Q8_0Weights) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const Residual none = Residual::none, separate = Residual::separate, y = Residual::in_place;
  // {batch, k_in, n_out, norm, bias, gelu, residual, width, f32 out}
  const Case cases[] = {
      {1, 1280, 3 * 1280, true, true, false, none, 1280},   // QKV with the scatter
      {1, 1280, 1280, false, true, false, y},               // self-attention output
      {1, 1280, 1280, true, true, false, none},             // cross-attention query
      {1, 1280, 5120, true, true, true, none},              // fc1
      {1, 5120, 1280, false, true, false, y},               // fc2
      {1, 1280, 51866, true, false, false, none, 0, true},  // logits
      {5, 1280, 5120, true, true, true, separate},          //
      {8, 5120, 1280, false, true, false, y},               //
      {16, 1280, 51866, true, false, false, none, 0, true},
      {16, 5120, 1280, false, true, false, y},    //
      {12, 96, 130, true, true, true, separate},  //
      {3, 160, 3 * 40, true, false, false, none, 40},
      {20, 32, 7, false, true, false, y},  // two launches
      {1, 32, 1, false, false, false, none},
  };
  for (Element e : {Element::f16, Element::bf16}) {
    for (const Case& c : cases) check_case(e, c, /*q8_0=*/true);
  }
}

// Each Q8_0 weight reaches the tensor cores as d · q rounded once to the element type, exactly as
// dequantize_q8_0 rounds it: the rows of x are the 256 unit vectors, so each output is one weight
// times 1 (a sum that is exact), for every quant at every position of a block, and scales from F16
// subnormals up to 500, both signs (q8_0_matrix_of_every_quant).
TEST(DecodeLinearCuda, Q8_0ValuesAreRoundedOnce) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  constexpr int64_t k_in = 256, n_out = 1024;
  const Q8Matrix w = q8_0_matrix_of_every_quant(n_out);
  Buffer weights(w.device_bytes.size());
  upload(w.device_bytes.data(), w.device_bytes.size(), weights.data());
  std::vector<float> identity(static_cast<size_t>(k_in * k_in), 0.0f);
  for (int64_t b = 0; b < k_in; ++b) identity[static_cast<size_t>(b * k_in + b)] = 1.0f;

  for (Element e : {Element::f16, Element::bf16}) {
    SCOPED_TRACE(element_name(e));
    const DeviceValues x = upload_values(e, identity);
    Buffer y(static_cast<size_t>(k_in * n_out) * element_size(e));
    decode_linear(e, x.data(), static_cast<int>(k_in), k_in, nullptr, {weights.data(), true}, n_out,
                  nullptr, false, nullptr, y.data(), nullptr, nullptr);
    // y [k_in, n_out] is W [n_out, k_in] transposed, each value exactly.
    const std::vector<float> rows_of_w = rounded(e, w.values);
    std::vector<double> want(static_cast<size_t>(k_in * n_out));
    for (int64_t b = 0; b < k_in; ++b) {
      for (int64_t n = 0; n < n_out; ++n) {
        want[static_cast<size_t>(b * n_out + n)] = rows_of_w[static_cast<size_t>(n * k_in + b)];
      }
    }
    expect_near(download_values(e, y.data(), want.size()), want,
                std::vector<double>(want.size(), 0.0), "y");
  }
}

// Positions are read on the device: a captured launch replayed after they change writes the new
// rows (and leaves the first ones as they were).
TEST(DecodeLinearCuda, ReplaysFromAGraphAtNewPositions) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  for (Element e : kElements) {
    SCOPED_TRACE(element_name(e));
    const Case c{4, 1280, 3 * 1280, true, true, false, Residual::none, 1280};
    const Problem p = make_problem(e, c);
    Stream stream;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "begin capture");
    run(p, stream.get());
    check(cudaStreamEndCapture(stream.get(), &graph), "end capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");

    check(cudaGraphLaunch(exec, stream.get()), "launch");
    stream.synchronize();
    const std::vector<int32_t> first = spread_positions(c.batch, p.capacity, 0);
    check_outputs(p, {first});

    const std::vector<int32_t> second = spread_positions(c.batch, p.capacity, 3);
    upload(second.data(), second.size() * sizeof(int32_t), p.positions.data());
    check(cudaGraphLaunch(exec, stream.get()), "launch");
    stream.synchronize();
    check_outputs(p, {first, second});

    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

TEST(DecodeLinearCuda, RejectsWhatItDoesNotSupport) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const Element e = Element::f16;
  const Problem p = make_problem(e, {2, 64, 3 * 8, true, true, false, Residual::none, 8});
  const auto* x = static_cast<const uint8_t*>(p.x.data());
  const DecodeNorm norm{p.gamma.data(), p.beta.data(), kEps};
  const DecodeNorm shifted_norm{static_cast<const uint8_t*>(p.gamma.data()) + 2, p.beta.data(),
                                kEps};
  const KvScatter scatter{p.k_cache.data(), p.v_cache.data(), p.cache_batch_stride,
                          p.positions.as<int32_t>(), 8};
  auto call = [&](const void* x_at, int64_t k_in, const DecodeNorm* n, int64_t n_out,
                  const void* residual, const KvScatter* s) {
    decode_linear(e, x_at, 2, k_in, n, {p.w.data()}, n_out, nullptr, false, residual, p.y.data(), s,
                  nullptr);
  };
  EXPECT_THROW(call(x, 60, &norm, 24, nullptr, &scatter), Error);      // k not a multiple of 8
  EXPECT_THROW(call(x + 2, 64, &norm, 24, nullptr, &scatter), Error);  // x misaligned
  EXPECT_THROW(call(x, 64, &shifted_norm, 24, nullptr, &scatter), Error);
  EXPECT_THROW(call(x, 64, &norm, 23, nullptr, &scatter), Error);  // n_out ≠ 3 · width
  EXPECT_THROW(call(x, 64, &norm, 24, p.residual.data(), &scatter), Error);
  // Q8_0 weights need whole blocks of 32 and a 16-bit element type.
  EXPECT_THROW(decode_linear(e, x, 2, 40, nullptr, {p.w.data(), true}, 8, nullptr, false, nullptr,
                             p.y.data(), nullptr, nullptr),
               Error);
  EXPECT_THROW(decode_linear(Element::f32, x, 2, 64, nullptr, {p.w.data(), true}, 8, nullptr, false,
                             nullptr, p.y.data(), nullptr, nullptr),
               Error);
  check(cudaDeviceSynchronize(), "synchronize");  // nothing was launched
}

}  // namespace
}  // namespace hark::compute::cuda
