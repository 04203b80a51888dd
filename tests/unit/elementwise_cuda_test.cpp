// The CUDA elementwise kernels (kernels_elementwise.cu) against plain CPU references computed in
// double from the values the GPU really holds (after rounding to the element type). Shapes are
// chosen to hit every launch path: odd sizes that rule out vector loads, misaligned pointers and
// rows too long for registers.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "compute/cuda/kernels.h"
#include "format/dtype.h"
#include "format/quant.h"
#include "support/cuda_elements.h"

namespace hark::compute::cuda {
namespace {

using namespace testing;  // element helpers (support/cuda_elements.h)

// Half an ulp of the element type, relative: what rounding one result to it may cost.
double rounding(Element e) {
  return e == Element::f32 ? 6e-8 : e == Element::f16 ? 4.9e-4 : 3.9e-3;
}

std::vector<float> random_values(size_t n, uint32_t seed, float mean, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, stddev);
  std::vector<float> values(n);
  for (float& value : values) value = normal(rng);
  return values;
}

// Bytes on the device, `offset` bytes past the allocation's start (so that a test can hand a
// kernel a misaligned pointer).
struct DeviceBytes {
  Buffer buffer;
  size_t offset = 0;
  void* data() const { return static_cast<uint8_t*>(buffer.data()) + offset; }
};

DeviceBytes upload_bytes(const std::vector<uint8_t>& bytes, size_t offset = 0) {
  DeviceBytes device{Buffer(bytes.size() + offset + 16), offset};
  upload(bytes.data(), bytes.size(), device.data());
  return device;
}

// Values uploaded as element type e, and the floats the device holds.
struct DeviceValues {
  DeviceBytes bytes;
  std::vector<float> values;
  void* data() const { return bytes.data(); }
};

DeviceValues upload_values(Element e, const std::vector<float>& values, size_t offset = 0) {
  const std::vector<uint8_t> encoded = encode(e, values);
  return {upload_bytes(encoded, offset), decode(e, encoded)};
}

DeviceBytes output_buffer(Element e, size_t count) {
  return {Buffer(count * element_size(e) + 16), 0};
}

// Waits for the device, then reads `count` values of element type e back as floats.
std::vector<float> download_values(Element e, const void* device, size_t count) {
  check(cudaDeviceSynchronize(), "synchronize");
  std::vector<uint8_t> bytes(count * element_size(e));
  download(device, bytes.size(), bytes.data());
  return decode(e, bytes);
}

// Every got[i] within abs + rel · |want[i]| of want[i]; reports the first few that are not.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double abs,
                  double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 10; ++i) {
    const double error = std::abs(got[i] - want[i]);
    if (!(error <= abs + rel * std::abs(want[i]))) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
      ++failures;
    }
  }
}

void expect_equal(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  expect_close(got, std::vector<double>(want.begin(), want.end()), 0.0, 0.0, what);
}

// ---- layer_norm -------------------------------------------------------------------------------

TEST(ElementwiseCuda, LayerNormMatchesCpu) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const float eps = 1e-5f;
  // Rows from Whisper's and Parakeet's widths, odd ones, ones past what registers hold (3000,
  // 5000), many rows (not a whole number of a block's warps), and the longest rows a warp keeps
  // in registers (2048 16-bit values).
  const std::pair<int64_t, int64_t> shapes[] = {{1, 64},   {3, 64},   {64, 384}, {2, 1280},
                                                {1, 1280}, {4, 1000}, {7, 33},   {2, 3000},
                                                {2, 5000}, {3, 1},    {5, 2048}, {1003, 1024}};
  for (Element e : kElements) {
    for (auto [rows, cols] : shapes) {
      const std::string what =
          std::string(element_name(e)) + " " + std::to_string(rows) + "x" + std::to_string(cols);
      const DeviceValues x = upload_values(e, random_values(rows * cols, 1, 0.5f, 2.0f));
      const DeviceValues gamma = upload_values(e, random_values(cols, 2, 1.0f, 0.5f));
      const DeviceValues beta = upload_values(e, random_values(cols, 3, 0.0f, 0.2f));
      const DeviceBytes y = output_buffer(e, rows * cols);
      layer_norm(e, x.data(), gamma.data(), beta.data(), eps, rows, cols, y.data(), nullptr);
      const auto want = layer_norm_reference(x.values, gamma.values, beta.values, eps, rows, cols);
      const double tolerance = e == Element::f32 ? 2e-5 : 4 * rounding(e);
      expect_close(download_values(e, y.data(), rows * cols), want, tolerance, tolerance, what);
    }
  }
}

TEST(ElementwiseCuda, LayerNormInPlace) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int64_t rows = 3, cols = 1280;
  for (Element e : kElements) {
    const DeviceValues x = upload_values(e, random_values(rows * cols, 4, -1.0f, 3.0f));
    const DeviceValues gamma = upload_values(e, random_values(cols, 5, 1.0f, 0.5f));
    const DeviceValues beta = upload_values(e, random_values(cols, 6, 0.0f, 0.2f));
    layer_norm(e, x.data(), gamma.data(), beta.data(), 1e-5f, rows, cols, x.data(), nullptr);
    const auto want = layer_norm_reference(x.values, gamma.values, beta.values, 1e-5f, rows, cols);
    const double tolerance = e == Element::f32 ? 2e-5 : 4 * rounding(e);
    expect_close(download_values(e, x.data(), rows * cols), want, tolerance, tolerance,
                 element_name(e));
  }
}

// ---- bias_gelu, add_rows, embed ---------------------------------------------------------------

TEST(ElementwiseCuda, BiasGeluMatchesCpu) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const std::pair<int64_t, int64_t> shapes[] = {{3, 40}, {2, 1280}, {5, 37}, {1, 8}, {300, 24}};
  for (Element e : kElements) {
    for (auto [rows, cols] : shapes) {
      for (bool with_bias : {true, false}) {
        const std::string what = std::string(element_name(e)) + " " + std::to_string(rows) + "x" +
                                 std::to_string(cols) + (with_bias ? " bias" : "");
        const DeviceValues x = upload_values(e, random_values(rows * cols, 7, 0.0f, 2.0f));
        const DeviceValues bias = upload_values(e, random_values(cols, 8, 0.0f, 0.5f));
        bias_gelu(e, x.data(), with_bias ? bias.data() : nullptr, rows, cols, nullptr);
        std::vector<double> want(rows * cols);
        for (int64_t i = 0; i < rows * cols; ++i) {
          const double v = x.values[i] + (with_bias ? bias.values[i % cols] : 0.0f);
          want[i] = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
        }
        const double tolerance = e == Element::f32 ? 1e-5 : 2 * rounding(e);
        expect_close(download_values(e, x.data(), rows * cols), want, 1e-6, tolerance, what);
      }
    }
  }
}

TEST(ElementwiseCuda, AddRowsMatchesCpu) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  struct Shape {
    int64_t batch, rows, cols;
  };
  for (Element e : kElements) {
    for (Shape s : {Shape{3, 5, 24}, Shape{2, 4, 13}, Shape{2, 7, 384}, Shape{1, 1, 1}}) {
      const std::string what = std::string(element_name(e)) + " cols " + std::to_string(s.cols);
      const int64_t count = s.batch * s.rows * s.cols;
      const DeviceValues x = upload_values(e, random_values(count, 9, 0.0f, 1.0f));
      const DeviceValues table = upload_values(e, random_values(s.rows * s.cols, 10, 0.0f, 1.0f));
      add_rows(e, x.data(), table.data(), s.batch, s.rows, s.cols, nullptr);
      std::vector<double> want(count);
      for (int64_t i = 0; i < count; ++i) {
        want[i] = static_cast<double>(x.values[i]) + table.values[i % (s.rows * s.cols)];
      }
      const double tolerance = e == Element::f32 ? 1e-6 : rounding(e);
      expect_close(download_values(e, x.data(), count), want, 1e-7, tolerance, what);
    }
  }
}

TEST(ElementwiseCuda, EmbedMatchesCpu) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int64_t vocab = 11, contexts = 9, n = 6;
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7, 1};
  const std::vector<int32_t> position_ids = {0, 1, 2, 8, 4, 5};
  const Buffer device_ids = upload_vector<int32_t>(ids);
  const Buffer device_position_ids = upload_vector<int32_t>(position_ids);
  for (Element e : kElements) {
    for (bool q8_0 : {false, true}) {
      for (int64_t cols : {13, 40, 64, 96}) {
        if (q8_0 && cols % 32 != 0) continue;
        const std::string what =
            std::string(element_name(e)) + (q8_0 ? " q8_0" : "") + " cols " + std::to_string(cols);
        const std::vector<float> token_values = random_values(vocab * cols, 11, 0.0f, 1.0f);
        DeviceBytes tokens;
        std::vector<float> token_table;
        if (q8_0) {
          const Q8Matrix table = q8_0_matrix(token_values, vocab, cols);
          token_table = table.values;
          tokens = upload_bytes(table.device_bytes);
        } else {
          DeviceValues uploaded = upload_values(e, token_values);
          token_table = uploaded.values;
          tokens = std::move(uploaded.bytes);
        }
        const DeviceValues positions =
            upload_values(e, random_values(contexts * cols, 12, 0.0f, 0.3f));
        const DeviceBytes y = output_buffer(e, n * cols);
        const void* scales =
            q8_0 ? static_cast<const uint8_t*>(tokens.data()) + q8_0_scales_offset(vocab, cols)
                 : nullptr;
        embed(e, tokens.data(), scales, positions.data(), device_ids.as<int32_t>(),
              device_position_ids.as<int32_t>(), n, cols, y.data(), nullptr);
        std::vector<double> want(n * cols);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t c = 0; c < cols; ++c) {
            want[i * cols + c] = static_cast<double>(token_table[ids[i] * cols + c]) +
                                 positions.values[position_ids[i] * cols + c];
          }
        }
        const double tolerance = e == Element::f32 ? 1e-6 : rounding(e);
        expect_close(download_values(e, y.data(), n * cols), want, 1e-7, tolerance, what);
      }
    }
  }
}

// ---- im2col_1d, mel_to_time_major, convert, dequantize_q8_0, advance_lengths ------------------

TEST(ElementwiseCuda, Im2col1dMatchesCpu) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  struct Shape {
    int64_t batch, steps, channels;
    int kernel, stride, padding;
  };
  // Whisper's two convolutions (kernel 3, padding 1, stride 1 then 2), odd sizes, and no padding.
  const Shape shapes[] = {{2, 7, 5, 3, 2, 1},
                          {1, 10, 16, 3, 1, 1},
                          {3, 9, 80, 3, 1, 1},
                          {2, 12, 7, 3, 2, 1},
                          {1, 6, 4, 2, 1, 0}};
  for (Element e : kElements) {
    for (const Shape& s : shapes) {
      const int64_t out_steps = (s.steps + 2 * s.padding - s.kernel) / s.stride + 1;
      const int64_t width = s.channels * s.kernel;
      const DeviceValues x =
          upload_values(e, random_values(s.batch * s.steps * s.channels, 13, 0.0f, 1.0f));
      const DeviceBytes out = output_buffer(e, s.batch * out_steps * width);
      im2col_1d(e, x.data(), s.batch, s.steps, s.channels, s.kernel, s.stride, s.padding,
                out.data(), nullptr);
      std::vector<float> want(s.batch * out_steps * width);
      for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t t = 0; t < out_steps; ++t) {
          for (int64_t c = 0; c < s.channels; ++c) {
            for (int64_t j = 0; j < s.kernel; ++j) {
              const int64_t step = t * s.stride - s.padding + j;
              want[(b * out_steps + t) * width + c * s.kernel + j] =
                  step >= 0 && step < s.steps ? x.values[(b * s.steps + step) * s.channels + c]
                                              : 0.0f;
            }
          }
        }
      }
      expect_equal(download_values(e, out.data(), want.size()), want,
                   std::string(element_name(e)) + " steps " + std::to_string(s.steps) + " stride " +
                       std::to_string(s.stride));
    }
  }
}

TEST(ElementwiseCuda, MelToTimeMajorMatchesCpu) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  struct Shape {
    int64_t batch, n_mels, frames;
  };
  for (Element e : kElements) {
    for (Shape s : {Shape{2, 80, 101}, Shape{1, 128, 64}, Shape{3, 5, 7}}) {
      const std::vector<float> mel = random_values(s.batch * s.n_mels * s.frames, 14, -0.5f, 1.0f);
      const DeviceBytes device_mel = upload_bytes(encode(Element::f32, mel));
      const DeviceBytes out = output_buffer(e, mel.size());
      mel_to_time_major(static_cast<const float*>(device_mel.data()), s.batch, s.n_mels, s.frames,
                        e, out.data(), nullptr);
      std::vector<float> want(mel.size());
      for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t m = 0; m < s.n_mels; ++m) {
          for (int64_t f = 0; f < s.frames; ++f) {
            want[(b * s.frames + f) * s.n_mels + m] = mel[(b * s.n_mels + m) * s.frames + f];
          }
        }
      }
      expect_equal(download_values(e, out.data(), want.size()), rounded(e, want),
                   std::string(element_name(e)) + " frames " + std::to_string(s.frames));
    }
  }
}

TEST(ElementwiseCuda, ConvertMatchesCpu) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  for (Element from : kElements) {
    for (Element to : kElements) {
      for (int64_t n : {1003, 1024, 1}) {
        const std::string what =
            std::string(element_name(from)) + " to " + element_name(to) + " n " + std::to_string(n);
        const DeviceValues x = upload_values(from, random_values(n, 15, 0.0f, 3.0f));
        const DeviceBytes y = output_buffer(to, n);
        convert(from, x.data(), to, y.data(), n, nullptr);
        expect_equal(download_values(to, y.data(), n), rounded(to, x.values), what);
      }
    }
  }
}

TEST(ElementwiseCuda, DequantizeQ8_0MatchesCpu) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  // Random weights, and every quant at every position of a block with scales from F16
  // subnormals up.
  for (const Q8Matrix& w : {q8_0_matrix(random_values(5 * 96, 16, 0.0f, 0.7f), 5, 96),
                            q8_0_matrix_of_every_quant(1024)}) {
    const int64_t rows = w.rows, cols = w.cols;
    const DeviceBytes device_w = upload_bytes(w.device_bytes);
    for (Element e : kElements) {
      const DeviceBytes out = output_buffer(e, rows * cols);
      dequantize_q8_0(device_w.data(), rows, cols, e, out.data(), nullptr);
      expect_equal(download_values(e, out.data(), rows * cols), rounded(e, w.values),
                   std::string(element_name(e)) + " " + std::to_string(rows) + " rows");
    }
  }
}

// ---- Without a GPU ----------------------------------------------------------------------------

TEST(ElementwiseCuda, DescribeSaysSomething) {
  EXPECT_FALSE(describe().empty());
}

// The device layout of Q8_0 (a host rearrangement): every quant at its value's place in row
// order, every scale at its block's, whatever the row length in blocks; a partial block refused.
TEST(ElementwiseCuda, Q8_0DeviceLayoutKeepsEveryValueInPlace) {
  for (int64_t cols : {32, 96, 1280}) {
    const int64_t rows = 3;
    const std::vector<float> values = random_values(rows * cols, 21, 0.0f, 2.0f);
    const Q8Matrix m = q8_0_matrix(values, rows, cols);
    const auto* quants = reinterpret_cast<const int8_t*>(m.device_bytes.data());
    const auto* scales =
        reinterpret_cast<const uint16_t*>(m.device_bytes.data() + q8_0_scales_offset(rows, cols));
    ASSERT_EQ(m.device_bytes.size(), static_cast<size_t>(rows * cols / 32 * 34));
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float value = quant::f16_to_f32(scales[i / 32]) * static_cast<float>(quants[i]);
      ASSERT_EQ(value, m.values[i]) << "cols " << cols << " value " << i;
    }
  }
  const std::vector<uint8_t> blocks(34 * 2);
  std::vector<int8_t> quants(64);
  std::vector<uint16_t> scales(2);
  EXPECT_THROW(q8_0_to_device_layout(blocks.data(), 2, 40, quants.data(), scales.data()), Error);
}

}  // namespace
}  // namespace hark::compute::cuda
