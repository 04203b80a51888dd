// The Conformer and transducer kernels (kernels_conformer.cu) against plain CPU references
// computed in double from the values the GPU really holds (after rounding to the element type).
// Shapes are odd on purpose, batches are padded with short sequences (down to one valid step) so
// that every masking rule is exercised, and the attention covers several query and key tiles.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "compute/cuda/kernels_conformer.h"
#include "compute/cuda/pass.h"
#include "support/cuda_elements.h"

namespace hark::compute::cuda {
namespace {

using namespace testing;  // element helpers (support/cuda_elements.h)

// Half an ulp of the element type, relative: what rounding one result to it may cost.
double rounding(Element e) {
  return e == Element::f32 ? 6e-8 : e == Element::f16 ? 4.9e-4 : 3.9e-3;
}

// What one stored result may be off by: its rounding, plus F32 arithmetic in F32's case.
double tolerance(Element e) {
  return e == Element::f32 ? 1e-5 : 2 * rounding(e);
}

std::vector<float> random_values(size_t n, uint32_t seed, float mean = 0.0f, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, stddev);
  std::vector<float> values(n);
  for (float& value : values) value = normal(rng);
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
  DeviceValues device{Buffer(bytes.size() + 16), decode(e, bytes)};
  upload(bytes.data(), bytes.size(), device.data());
  return device;
}

Buffer upload_ints(const std::vector<int32_t>& values) {
  return upload_vector(values);
}

// Waits for the device, then reads `count` values of element type e back as floats.
std::vector<float> download_values(Element e, const void* device, size_t count) {
  check(cudaDeviceSynchronize(), "synchronize");
  std::vector<uint8_t> bytes(count * element_size(e));
  download(device, bytes.size(), bytes.data());
  return decode(e, bytes);
}

std::vector<int32_t> download_ints(const void* device, size_t count) {
  check(cudaDeviceSynchronize(), "synchronize");
  std::vector<int32_t> values(count);
  download(device, count * sizeof(int32_t), values.data());
  return values;
}

// Every got[i] within tol · (1 + |want[i]|) of want[i]; reports the first few that are not.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 10; ++i) {
    const double error = std::abs(got[i] - want[i]);
    if (!(error <= tol * (1.0 + std::abs(want[i])))) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
      ++failures;
    }
  }
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

int64_t conv_output(int64_t size, int kernel, int stride, int padding) {
  return (size + 2 * padding - kernel) / stride + 1;
}

// ---- Subsampling ------------------------------------------------------------------------------

// Weights drawn in PyTorch's layout [channels, taps] and rounded to the element type (the
// reference's values), and the same uploaded tap-major, as the model's loader uploads them.
struct DepthwiseWeights {
  std::vector<float> torch_layout;
  DeviceValues device;
};

DepthwiseWeights depthwise_weights(Element e, int64_t channels, int64_t taps, uint32_t seed) {
  DepthwiseWeights w;
  w.torch_layout = rounded(e, random_values(channels * taps, seed));
  w.device = upload_values(e, tap_major(w.torch_layout.data(), channels, taps));
  return w;
}

// Outputs start as NaN, so that one left unwritten shows.
DeviceValues nan_values(Element e, size_t count) {
  return upload_values(e, std::vector<float>(count, std::numeric_limits<float>::quiet_NaN()));
}

// Subsampling shapes: FastConformer's 3 × 3 on its 256 channels (taps in registers, 16-byte packs
// of channels, whole warps of them), odd channel counts (value by value), and a 5 × 5 (taps from
// memory) with packs in F32 but not in 16 bits. The images span several row tiles (the last
// partial) and, 140 columns wide, two column tiles.
struct ConvCase {
  int kernel;
  int64_t channels;
};
constexpr ConvCase kConvCases[] = {{3, 256}, {3, 16}, {3, 5}, {5, 300}, {5, 16}};

TEST(ParakeetKernelsCuda, Conv2dOneChannelMasksRowsPastEachHeight) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int batch = 4, stride = 2;
  const int64_t height = 37, width = 140;
  // A full image, one that ends inside a row tile, one of a single row, and an empty one.
  const std::vector<int32_t> heights = {37, 20, 1, 0};
  const Buffer heights_dev = upload_ints(heights);
  for (const ConvCase& c : kConvCases) {
    const int kernel = c.kernel, padding = kernel / 2;
    const int64_t channels = c.channels;
    const int64_t out_h = conv_output(height, kernel, stride, padding);
    const int64_t out_w = conv_output(width, kernel, stride, padding);
    for (Element e : kElements) {
      for (bool relu : {false, true}) {
        const DeviceValues x = upload_values(e, random_values(batch * height * width, 1));
        const DepthwiseWeights w = depthwise_weights(e, channels, kernel * kernel, 2);
        const DeviceValues bias = upload_values(e, random_values(channels, 3));
        const DeviceValues y = nan_values(e, batch * out_h * out_w * channels);
        conv2d_one_channel(e, x.data(), batch, height, width, heights_dev.as<int32_t>(),
                           w.device.data(), bias.data(), channels, kernel, stride, padding, relu,
                           y.data(), nullptr);
        std::vector<double> want;
        for (int b = 0; b < batch; ++b) {
          for (int64_t t = 0; t < out_h; ++t) {
            for (int64_t f = 0; f < out_w; ++f) {
              for (int64_t ch = 0; ch < channels; ++ch) {
                double sum = bias.values[ch];
                for (int i = 0; i < kernel; ++i) {
                  for (int j = 0; j < kernel; ++j) {
                    const int64_t row = t * stride - padding + i, col = f * stride - padding + j;
                    if (row < 0 || row >= heights[b] || col < 0 || col >= width) continue;
                    sum += double(w.torch_layout[(ch * kernel + i) * kernel + j]) *
                           x.values[(b * height + row) * width + col];
                  }
                }
                want.push_back(relu ? std::max(sum, 0.0) : sum);
              }
            }
          }
        }
        expect_close(download_values(e, y.data(), want.size()), want, tolerance(e),
                     std::string("conv2d_one_channel ") + element_name(e) + " kernel " +
                         std::to_string(kernel) + " channels " + std::to_string(channels));
      }
    }
  }
}

TEST(ParakeetKernelsCuda, DepthwiseConv2dMasksRowsPastEachHeight) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int batch = 4, stride = 2;
  const int64_t height = 37, width = 140;
  const std::vector<int32_t> heights = {37, 20, 1, 0};
  const Buffer heights_dev = upload_ints(heights);
  for (const ConvCase& c : kConvCases) {
    const int kernel = c.kernel, padding = kernel / 2;
    const int64_t channels = c.channels;
    const int64_t out_h = conv_output(height, kernel, stride, padding);
    const int64_t out_w = conv_output(width, kernel, stride, padding);
    for (Element e : kElements) {
      const DeviceValues x = upload_values(e, random_values(batch * height * width * channels, 4));
      const DepthwiseWeights w = depthwise_weights(e, channels, kernel * kernel, 5);
      const DeviceValues bias = upload_values(e, random_values(channels, 6));
      const DeviceValues y = nan_values(e, batch * out_h * out_w * channels);
      depthwise_conv2d(e, x.data(), batch, height, width, channels, heights_dev.as<int32_t>(),
                       w.device.data(), bias.data(), kernel, stride, padding, y.data(), nullptr);
      std::vector<double> want;
      for (int b = 0; b < batch; ++b) {
        for (int64_t t = 0; t < out_h; ++t) {
          for (int64_t f = 0; f < out_w; ++f) {
            for (int64_t ch = 0; ch < channels; ++ch) {
              double sum = bias.values[ch];
              for (int i = 0; i < kernel; ++i) {
                for (int j = 0; j < kernel; ++j) {
                  const int64_t row = t * stride - padding + i, col = f * stride - padding + j;
                  if (row < 0 || row >= heights[b] || col < 0 || col >= width) continue;
                  sum += double(w.torch_layout[(ch * kernel + i) * kernel + j]) *
                         x.values[((b * height + row) * width + col) * channels + ch];
                }
              }
              want.push_back(sum);
            }
          }
        }
      }
      expect_close(download_values(e, y.data(), want.size()), want, tolerance(e),
                   std::string("depthwise_conv2d ") + element_name(e) + " kernel " +
                       std::to_string(kernel) + " channels " + std::to_string(channels));
    }
  }
}

// Only FastConformer's shape (kernel 3, stride 2, padding 1) on whole 16-byte packs of channels
// is fused; the caller keeps the two kernels for the rest. Needs no GPU.
TEST(ParakeetKernelsCuda, Conv2dOneChannelThenDepthwiseSupportsFastConformersShapeOnly) {
  EXPECT_TRUE(conv2d_one_channel_then_depthwise_supported(3, 2, 1, 256));
  EXPECT_TRUE(conv2d_one_channel_then_depthwise_supported(3, 2, 1, 8));
  EXPECT_FALSE(conv2d_one_channel_then_depthwise_supported(5, 2, 2, 256));
  EXPECT_FALSE(conv2d_one_channel_then_depthwise_supported(3, 1, 1, 256));
  EXPECT_FALSE(conv2d_one_channel_then_depthwise_supported(3, 2, 0, 256));
  EXPECT_FALSE(conv2d_one_channel_then_depthwise_supported(3, 2, 1, 12));
  EXPECT_FALSE(conv2d_one_channel_then_depthwise_supported(3, 2, 1, 0));
}

// The fused kernel against conv2d_one_channel (ReLU) and depthwise_conv2d run back to back, which
// the tests above check against references: both round the intermediate image to the element
// type and sum the same products in the same order, so they should agree to the bit; the bound
// is that of one rounding. Widths: 80 and 128 mels (FastConformer's: 20 and 32 output columns,
// one column tile; for 80 the last of its three strips partial) and 257 (65 columns: two full tiles
// and one of a single column, and an odd intermediate width, whose padding column the last output
// reads). 141 rows give an odd intermediate height (71), whose last output row reads a row past it,
// and three bands of output rows, the last partial. Heights: the padded batch's rows past every
// utterance's frames hold values that must be masked; one utterance ends inside the second band,
// one at its first band's end (16 output rows), one is four frames long and one a single frame.
// 256 channels are whole groups of channels; 40 and 8 leave a partial last group.
TEST(ParakeetKernelsCuda, Conv2dOneChannelThenDepthwiseMatchesTheTwoKernels) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int kernel = 3, stride = 2, padding = 1;
  const int64_t height = 141;
  const std::vector<int32_t> heights = {139, 101, 61, 4, 1};
  const int batch = static_cast<int>(heights.size());
  std::vector<int32_t> middle_heights, out_heights;
  for (int32_t rows : heights) {
    middle_heights.push_back(static_cast<int32_t>(conv_output(rows, kernel, stride, padding)));
    out_heights.push_back(
        static_cast<int32_t>(conv_output(middle_heights.back(), kernel, stride, padding)));
  }
  const Buffer heights_dev = upload_ints(heights), middle_heights_dev = upload_ints(middle_heights);
  const int64_t middle_height = conv_output(height, kernel, stride, padding);
  const int64_t out_height = conv_output(middle_height, kernel, stride, padding);
  for (const int64_t width : {int64_t{80}, int64_t{128}, int64_t{257}}) {
    const int64_t middle_width = conv_output(width, kernel, stride, padding);
    const int64_t out_width = conv_output(middle_width, kernel, stride, padding);
    for (const int64_t channels : {int64_t{256}, int64_t{40}, int64_t{8}}) {
      for (Element e : kElements) {
        const std::string name = std::string(element_name(e)) + " width " + std::to_string(width) +
                                 " channels " + std::to_string(channels);
        const DeviceValues x = upload_values(e, random_values(batch * height * width, 21));
        const DepthwiseWeights conv_w = depthwise_weights(e, channels, kernel * kernel, 22);
        const DeviceValues conv_bias = upload_values(e, random_values(channels, 23));
        const DepthwiseWeights depthwise_w = depthwise_weights(e, channels, kernel * kernel, 24);
        const DeviceValues depthwise_bias = upload_values(e, random_values(channels, 25));
        const size_t outputs = batch * out_height * out_width * channels;
        const DeviceValues middle = nan_values(e, batch * middle_height * middle_width * channels);
        const DeviceValues two_kernels = nan_values(e, outputs), fused = nan_values(e, outputs);
        conv2d_one_channel(e, x.data(), batch, height, width, heights_dev.as<int32_t>(),
                           conv_w.device.data(), conv_bias.data(), channels, kernel, stride,
                           padding, /*relu=*/true, middle.data(), nullptr);
        depthwise_conv2d(e, middle.data(), batch, middle_height, middle_width, channels,
                         middle_heights_dev.as<int32_t>(), depthwise_w.device.data(),
                         depthwise_bias.data(), kernel, stride, padding, two_kernels.data(),
                         nullptr);
        conv2d_one_channel_then_depthwise(
            e, x.data(), batch, height, width, heights_dev.as<int32_t>(),
            middle_heights_dev.as<int32_t>(), conv_w.device.data(), conv_bias.data(), channels,
            depthwise_w.device.data(), depthwise_bias.data(), kernel, stride, padding, fused.data(),
            nullptr);
        const std::vector<float> want = download_values(e, two_kernels.data(), outputs);
        const std::vector<float> got = download_values(e, fused.data(), outputs);
        // Rows of each utterance's own outputs, and the padding rows after them (which the
        // two-kernel path computes too, from the utterance's last rows and zeros).
        std::vector<float> got_valid, got_padding;
        std::vector<double> want_valid, want_padding;
        const int64_t row_values = out_width * channels;
        for (int b = 0; b < batch; ++b) {
          for (int64_t t = 0; t < out_height; ++t) {
            const bool valid = t < out_heights[b];
            const int64_t first = (b * out_height + t) * row_values;
            for (int64_t i = first; i < first + row_values; ++i) {
              (valid ? got_valid : got_padding).push_back(got[i]);
              (valid ? want_valid : want_padding).push_back(want[i]);
            }
          }
        }
        ASSERT_FALSE(want_padding.empty());
        expect_close(got_valid, want_valid, tolerance(e),
                     "conv2d_one_channel_then_depthwise " + name);
        expect_close(got_padding, want_padding, tolerance(e),
                     "conv2d_one_channel_then_depthwise padding rows " + name);
      }
    }
  }
}

// ---- Elementwise ------------------------------------------------------------------------------

TEST(ParakeetKernelsCuda, ReluSiluScale) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  // Odd sizes (value by value) and whole 16-byte packs (the packed kernels).
  for (const int64_t n : {int64_t{1001}, int64_t{1024}}) {
    for (Element e : kElements) {
      const std::string name = std::string(element_name(e)) + " n " + std::to_string(n);
      const std::vector<float> values = random_values(n, 8, 0.0f, 3.0f);
      DeviceValues x = upload_values(e, values);
      relu(e, x.data(), n, nullptr);
      std::vector<double> want;
      for (float v : x.values) want.push_back(std::max(double(v), 0.0));
      expect_close(download_values(e, x.data(), n), want, tolerance(e), "relu " + name);

      x = upload_values(e, values);
      silu(e, x.data(), n, nullptr);
      want.clear();
      for (float v : x.values) want.push_back(v * sigmoid(v));
      expect_close(download_values(e, x.data(), n), want, tolerance(e), "silu " + name);

      x = upload_values(e, values);
      scale(e, x.data(), n, 0.375f, nullptr);
      want.clear();
      for (float v : x.values) want.push_back(v * 0.375);
      expect_close(download_values(e, x.data(), n), want, tolerance(e), "scale " + name);
    }
  }
}

// Where each sequence's rows start when a batch of these lengths is packed.
std::vector<int32_t> packed_starts(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> starts;
  int32_t rows = 0;
  for (int32_t length : lengths) {
    starts.push_back(rows);
    rows += length;
  }
  return starts;
}

// ---- The conv module's GLU and depthwise 1-D convolution -------------------------------------

TEST(ParakeetKernelsCuda, GluDepthwiseConv1dTreatsStepsPastTheLengthAsZeros) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  // 150 steps: three tiles of steps, the last partial. A full sequence, one that ends inside the
  // second tile, one shorter than the kernel, one of a single step, and an empty one.
  const int64_t steps = 150;
  const std::vector<int32_t> lengths = {150, 70, 5, 1, 0};
  const int batch = static_cast<int>(lengths.size());
  const Buffer lengths_dev = upload_ints(lengths);
  // Kernel 9 (FastConformer's: taps in registers), 3, 5 and 131 (taps from memory; 131 reaches
  // across most of the sequence, and its packed slices would not fit in shared memory, so it goes
  // value by value). 13 channels go value by value; 136 are whole packs over several slices of
  // channels, the last partial (a slice is 16 packs of 4).
  for (const int kernel : {9, 3, 5, 131}) {
    for (const int64_t channels : {int64_t{13}, int64_t{136}}) {
      for (Element e : kElements) {
        for (bool with_silu : {false, true}) {
          const DeviceValues x =
              upload_values(e, random_values(batch * steps * 2 * channels, 10, 0.0f, 2.0f));
          const DepthwiseWeights w = depthwise_weights(e, channels, kernel, 11);
          const DeviceValues bias = upload_values(e, random_values(channels, 12));
          const DeviceValues y = nan_values(e, batch * steps * channels);
          glu_depthwise_conv1d(e, x.data(), batch, steps, channels, lengths_dev.as<int32_t>(),
                               nullptr, w.device.data(), bias.data(), kernel, with_silu, y.data(),
                               nullptr);
          std::vector<double> want;
          for (int b = 0; b < batch; ++b) {
            for (int64_t t = 0; t < steps; ++t) {
              for (int64_t c = 0; c < channels; ++c) {
                double sum = bias.values[c];
                for (int j = 0; j < kernel; ++j) {
                  const int64_t source = t + j - (kernel - 1) / 2;
                  if (source < 0 || source >= lengths[b]) continue;
                  const float* row = x.values.data() + (b * steps + source) * 2 * channels;
                  const double gated = row[c] * sigmoid(row[channels + c]);
                  sum += double(w.torch_layout[c * kernel + j]) * gated;
                }
                want.push_back(with_silu ? sum * sigmoid(sum) : sum);
              }
            }
          }
          // The GLU's values stay F32 on the device, as in the reference: what remains is F32
          // arithmetic and the result's rounding.
          expect_close(download_values(e, y.data(), want.size()), want, tolerance(e),
                       std::string("glu_depthwise_conv1d ") + element_name(e) + " kernel " +
                           std::to_string(kernel) + " channels " + std::to_string(channels) +
                           (with_silu ? " silu" : ""));
        }
      }
    }
  }
}

// Packed, the conv module computes for each sequence's valid steps what the padded batch does,
// from rows back to back, and writes nothing past them.
TEST(ParakeetKernelsCuda, GluDepthwiseConv1dPackedEqualsPadded) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int64_t steps = 150, channels = 136, guard = 2;
  const std::vector<int32_t> lengths = {70, 150, 5, 1, 0, 33};
  const int batch = static_cast<int>(lengths.size());
  const std::vector<int32_t> starts = packed_starts(lengths);
  const int64_t rows = starts.back() + lengths.back();
  const Buffer lengths_dev = upload_ints(lengths), starts_dev = upload_ints(starts);
  for (const int kernel : {9, 5}) {
    for (Element e : kElements) {
      const DeviceValues padded_x =
          upload_values(e, random_values(batch * steps * 2 * channels, 20, 0.0f, 2.0f));
      std::vector<float> packed_values;
      for (int b = 0; b < batch; ++b) {
        const auto first = padded_x.values.begin() + b * steps * 2 * channels;
        packed_values.insert(packed_values.end(), first, first + lengths[b] * 2 * channels);
      }
      const DeviceValues packed_x = upload_values(e, packed_values);
      const DepthwiseWeights w = depthwise_weights(e, channels, kernel, 21);
      const DeviceValues bias = upload_values(e, random_values(channels, 22));
      const DeviceValues padded_y = nan_values(e, batch * steps * channels);
      const DeviceValues packed_y = nan_values(e, (rows + guard) * channels);
      glu_depthwise_conv1d(e, padded_x.data(), batch, steps, channels, lengths_dev.as<int32_t>(),
                           nullptr, w.device.data(), bias.data(), kernel, true, padded_y.data(),
                           nullptr);
      glu_depthwise_conv1d(e, packed_x.data(), batch, steps, channels, lengths_dev.as<int32_t>(),
                           starts_dev.as<int32_t>(), w.device.data(), bias.data(), kernel, true,
                           packed_y.data(), nullptr);
      const std::vector<float> padded =
          download_values(e, padded_y.data(), batch * steps * channels);
      const std::vector<float> packed =
          download_values(e, packed_y.data(), (rows + guard) * channels);
      const std::string what = std::string("packed glu_depthwise_conv1d ") + element_name(e) +
                               " kernel " + std::to_string(kernel);
      for (int b = 0; b < batch; ++b) {
        for (int64_t i = 0; i < lengths[b] * channels; ++i) {
          // The same values through the same arithmetic: equal.
          ASSERT_EQ(packed[starts[b] * channels + i], padded[b * steps * channels + i])
              << what << ", sequence " << b;
        }
      }
      for (int64_t i = rows * channels; i < (rows + guard) * channels; ++i) {
        ASSERT_TRUE(std::isnan(packed[i])) << what << ": a row past the batch was written";
      }
    }
  }
}

// Packing a padded batch and unpacking it again gives its valid rows back; the other rows of each
// target keep what they held.
TEST(ParakeetKernelsCuda, CopySequenceRowsPacksAndUnpacks) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int64_t steps = 37;
  const std::vector<int32_t> lengths = {37, 0, 20, 1, 17};
  const int batch = static_cast<int>(lengths.size());
  const std::vector<int32_t> starts = packed_starts(lengths);
  const int64_t rows = starts.back() + lengths.back();
  const Buffer lengths_dev = upload_ints(lengths), starts_dev = upload_ints(starts);
  // 48-byte rows go in 16-byte units, 6-byte rows byte by byte.
  for (const int64_t row_bytes : {int64_t{48}, int64_t{6}}) {
    std::vector<uint8_t> padded(batch * steps * row_bytes);
    for (size_t i = 0; i < padded.size(); ++i) padded[i] = static_cast<uint8_t>(i * 7 + 1);
    const Buffer padded_dev = upload_vector(padded);
    const Buffer packed_dev = upload_vector(std::vector<uint8_t>((rows + 1) * row_bytes, 0xAB));
    copy_sequence_rows(padded_dev.data(), nullptr, steps, packed_dev.data(),
                       starts_dev.as<int32_t>(), 0, lengths_dev.as<int32_t>(), batch, steps,
                       row_bytes, nullptr);
    const Buffer unpacked_dev = upload_vector(std::vector<uint8_t>(padded.size(), 0xCD));
    copy_sequence_rows(packed_dev.data(), starts_dev.as<int32_t>(), 0, unpacked_dev.data(), nullptr,
                       steps, lengths_dev.as<int32_t>(), batch, steps, row_bytes, nullptr);
    std::vector<uint8_t> packed((rows + 1) * row_bytes), unpacked(padded.size());
    download(packed_dev.data(), packed.size(), packed.data());
    download(unpacked_dev.data(), unpacked.size(), unpacked.data());
    for (int b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < steps; ++t) {
        for (int64_t byte = 0; byte < row_bytes; ++byte) {
          const size_t at = (b * steps + t) * row_bytes + byte;
          if (t < lengths[b]) {
            ASSERT_EQ(packed[(starts[b] + t) * row_bytes + byte], padded[at]) << b << ", " << t;
            ASSERT_EQ(unpacked[at], padded[at]) << b << ", " << t;
          } else {
            ASSERT_EQ(unpacked[at], 0xCD) << "padding row " << t << " of " << b << " was written";
          }
        }
      }
    }
    for (int64_t byte = 0; byte < row_bytes; ++byte) {
      ASSERT_EQ(packed[rows * row_bytes + byte], 0xAB) << "a row past the packed batch was written";
    }
  }
}

// ---- Relative-position attention --------------------------------------------------------------

struct AttentionCase {
  int64_t steps;
  int heads, head_dim;
  std::vector<int32_t> lengths;
};

// docs/parakeet.md 4.3 in double: q, k, v interleaved in rows of 3·width (a fused projection),
// p [2·steps − 1, width] with row steps − 1 − r for position r.
std::vector<double> rel_attention_reference(const AttentionCase& c, const std::vector<float>& qkv,
                                            const std::vector<float>& p,
                                            const std::vector<float>& bias_u,
                                            const std::vector<float>& bias_v, float scale) {
  const int64_t width = int64_t{c.heads} * c.head_dim, batch = c.lengths.size();
  std::vector<double> out(batch * c.steps * width, 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = c.lengths[b];
    for (int h = 0; h < c.heads; ++h) {
      for (int64_t i = 0; i < length; ++i) {
        const float* q = qkv.data() + (b * c.steps + i) * 3 * width + h * c.head_dim;
        std::vector<double> scores(length);
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < length; ++j) {
          const float* k = qkv.data() + (b * c.steps + j) * 3 * width + width + h * c.head_dim;
          const float* position = p.data() + (c.steps - 1 - i + j) * width + h * c.head_dim;
          double content = 0, relative = 0;
          for (int d = 0; d < c.head_dim; ++d) {
            content += (double(q[d]) + bias_u[h * c.head_dim + d]) * k[d];
            relative += (double(q[d]) + bias_v[h * c.head_dim + d]) * position[d];
          }
          scores[j] = scale * (content + relative);
          top = std::max(top, scores[j]);
        }
        double sum = 0;
        for (double& score : scores) sum += (score = std::exp(score - top));
        for (int64_t j = 0; j < length; ++j) {
          const float* v = qkv.data() + (b * c.steps + j) * 3 * width + 2 * width + h * c.head_dim;
          for (int d = 0; d < c.head_dim; ++d) {
            out[(b * c.steps + i) * width + h * c.head_dim + d] += scores[j] / sum * v[d];
          }
        }
      }
    }
  }
  return out;
}

// How a check runs the attention:
//   kernel: rel_pos_attention's kernel itself (every element type, F32 arithmetic) with both
//   biases; kernel_content_bias: the same without bias_v (null), as Pass calls it;
//   pass: Pass::rel_pos_attention in F16/BF16 with head sizes of 64 and 128 (the tensor-core
//   path: the flash kernel computing the position scores from q and the table as it goes, and
//   adding the content bias to the queries). Pass takes queries that hold the position bias and
//   the content bias u − v' (pass.h):
//   the check gives it random q and u and compares with the reference for q, u and v' = 0;
//   flash_query_bias: padded_attention itself with a query bias (u) and no position scores
//   (compared with the reference for a position table of zeros and v' = 0).
enum class Route { kernel, kernel_content_bias, pass, flash_query_bias };

// Packed (starts): the valid rows of q, k, v alone, back to back, and the output likewise, with
// guard rows after it that must stay unwritten; compared row for row with the padded reference.
void check_rel_attention(const AttentionCase& c, Route route = Route::kernel, bool packed = false) {
  const int64_t width = int64_t{c.heads} * c.head_dim;
  const int batch = static_cast<int>(c.lengths.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const Buffer lengths = upload_ints(c.lengths);
  const std::vector<int32_t> starts = packed_starts(c.lengths);
  const int64_t packed_rows = starts.back() + c.lengths.back();
  const Buffer starts_dev = upload_ints(starts);
  const int32_t* starts_arg = packed ? starts_dev.as<int32_t>() : nullptr;
  const int64_t rows = packed ? packed_rows : batch * c.steps;
  constexpr int64_t kGuardRows = 3;
  // Padded row (b, i) of a valid step -> its row in the tensors the kernels get.
  auto row_of = [&](int64_t b, int64_t i) { return packed ? starts[b] + i : b * c.steps + i; };
  const bool on_kernel = route == Route::kernel || route == Route::kernel_content_bias;
  const std::vector<Element> elements =
      on_kernel ? std::vector<Element>(std::begin(kElements), std::end(kElements))
                : std::vector<Element>{Element::f16, Element::bf16};
  for (Element e : elements) {
    const std::string what = std::string("rel_pos_attention ") + element_name(e) + " steps " +
                             std::to_string(c.steps) + " head_dim " + std::to_string(c.head_dim) +
                             " route " + std::to_string(static_cast<int>(route));
    const uint32_t seed = on_kernel ? 13 : 17;
    const DeviceValues padded_qkv =
        upload_values(e, random_values(batch * c.steps * 3 * width, seed));
    std::vector<float> packed_values;
    for (int b = 0; b < batch; ++b) {
      const auto first = padded_qkv.values.begin() + b * c.steps * 3 * width;
      packed_values.insert(packed_values.end(), first, first + c.lengths[b] * 3 * width);
    }
    // The values are already those of the element type: packed, the device holds the same.
    const DeviceValues packed_qkv =
        upload_values(e, packed ? packed_values : std::vector<float>{0});
    const DeviceValues& qkv = packed ? packed_qkv : padded_qkv;
    const int64_t table_values = (2 * c.steps - 1) * width;
    const DeviceValues p =
        upload_values(e, route == Route::flash_query_bias ? std::vector<float>(table_values, 0.0f)
                                                          : random_values(table_values, seed + 1));
    const DeviceValues u = upload_values(e, random_values(width, seed + 2, 0.0f, 0.3f));
    // v' only where the route takes it; the reference's zeros elsewhere.
    const DeviceValues v =
        upload_values(e, route == Route::kernel ? random_values(width, seed + 3, 0.0f, 0.3f)
                                                : std::vector<float>(width, 0.0f));
    // Filled with NaN, so that a row left unwritten (padding rows must be zeros) shows.
    const DeviceValues out = upload_values(
        e,
        std::vector<float>((rows + kGuardRows) * width, std::numeric_limits<float>::quiet_NaN()));
    const auto* base = static_cast<uint8_t*>(qkv.data());
    const size_t column = element_size(e);
    // Outputs are weighted means of values of about 1: an absolute bound, from the rounding of
    // the F32 scores (exp amplifies an error in a score by the score's size) and of the output;
    // on the tensor cores, q + u, the position scores and the softmax weights are each rounded to
    // the element type before a product as well.
    double tol = e == Element::f32 ? 2e-5 : 4 * rounding(e);
    const void* k = base + width * column;
    const void* values = base + 2 * width * column;
    if (on_kernel) {
      rel_pos_attention(e, base, k, values, 3 * width, p.data(), width, u.data(),
                        route == Route::kernel ? v.data() : nullptr, lengths.as<int32_t>(),
                        starts_arg, batch, c.steps, c.heads, c.head_dim, scale, out.data(), width,
                        nullptr);
    } else if (route == Route::flash_query_bias) {
      padded_attention(e, base, 3 * width, c.steps * 3 * width, k, values, 3 * width,
                       c.steps * 3 * width, out.data(), width, c.steps * width,
                       lengths.as<int32_t>(), starts_arg, nullptr, u.data(), batch, c.heads,
                       c.head_dim, c.steps, scale, nullptr);
      tol = 8 * rounding(e);
    } else {
      ASSERT_TRUE(padded_attention_runs(e, c.head_dim));
      Pass pass(e, nullptr);
      pass.rel_pos_attention(base, k, values, 3 * width, p.data(), width, u.data(),
                             lengths.as<int32_t>(), starts_arg, batch, c.steps, c.heads, c.head_dim,
                             scale, out.data(), width);
      tol = 8 * rounding(e);
    }
    const std::vector<double> want =
        rel_attention_reference(c, padded_qkv.values, p.values, u.values, v.values, scale);
    const std::vector<float> got = download_values(e, out.data(), (rows + kGuardRows) * width);
    // In the reference's padded order: packed, the padding rows (zeros there) have no row here.
    std::vector<float> got_padded(want.size(), 0.0f);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t valid = packed ? c.lengths[b] : c.steps;
      for (int64_t i = 0; i < valid; ++i) {
        std::copy_n(got.begin() + row_of(b, i) * width, width,
                    got_padded.begin() + (b * c.steps + i) * width);
      }
    }
    expect_close(got_padded, want, tol, what + (packed ? " packed" : ""));
    for (int64_t i = rows * width; i < (rows + kGuardRows) * width; ++i) {
      ASSERT_TRUE(std::isnan(got[i])) << what << ": a row past the batch was written";
    }
  }
}

void check_tensor_core_rel_attention(const AttentionCase& c) {
  check_rel_attention(c, Route::pass);
  check_rel_attention(c, Route::pass, /*packed=*/true);
  check_rel_attention(c, Route::flash_query_bias);
  check_rel_attention(c, Route::flash_query_bias, /*packed=*/true);
}

TEST(ParakeetKernelsCuda, RelPosAttentionOddHeadSizeSeveralTiles) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  // 37 steps: two query tiles and two key tiles, the second of each nearly empty; a sequence
  // that ends inside the first tile and one of a single step.
  check_rel_attention({37, 3, 20, {37, 33, 1}});
  check_rel_attention({37, 3, 20, {37, 33, 1}}, Route::kernel, /*packed=*/true);
  check_rel_attention({37, 3, 20, {37, 33, 1}}, Route::kernel_content_bias, /*packed=*/true);
}

TEST(ParakeetKernelsCuda, RelPosAttentionHeadDim128) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  check_rel_attention({70, 2, 128, {70, 64, 31}});
  check_rel_attention({70, 2, 128, {31, 70, 64}}, Route::kernel, /*packed=*/true);
  check_rel_attention({70, 2, 128, {70, 64, 31}}, Route::kernel_content_bias);
}

TEST(ParakeetKernelsCuda, RelPosAttentionTinyHeads) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  check_rel_attention({5, 4, 1, {5, 2}});
}

TEST(ParakeetKernelsCuda, RelPosAttentionOnTensorCoresHeadDim64) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  // 70 steps: one query tile, two key tiles; a sequence ending in the second key tile, one
  // inside the first.
  check_tensor_core_rel_attention({70, 3, 64, {70, 64, 31}});
}

TEST(ParakeetKernelsCuda, RelPosAttentionOnTensorCoresHeadDim128) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  // 150 steps: two query tiles (the second all padding for two sequences), three key tiles;
  // a sequence of one step.
  check_tensor_core_rel_attention({150, 2, 128, {150, 129, 1}});
  // 330 steps: three query tiles, six key tiles, so that the ring of position rows wraps around
  // twice; lengths ending inside a tile, on a tile's edge, and in the last query tile.
  check_rel_attention({330, 2, 128, {330, 257, 128, 1, 190}}, Route::pass);
  check_rel_attention({330, 2, 128, {330, 257, 128, 1, 190}}, Route::pass, /*packed=*/true);
}

// ---- Heads ------------------------------------------------------------------------------------

TEST(ParakeetKernelsCuda, FinishLogitsAddsTheBiasAndPicksTheFirstMaximum) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int64_t rows = 5, cols = 300, split = 295;
  // Dense rows, and rows padded as the models' heads are (to a multiple of 8, and more): the
  // padding's values would win every argmax and must stay as they are.
  for (const int64_t stride : {cols, int64_t{304}, int64_t{311}}) {
    std::vector<float> logits(rows * stride, 1e30f);
    const std::vector<float> values = random_values(rows * cols, 17);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(values.begin() + r * cols, cols, logits.begin() + r * stride);
    }
    // Row 1: a tie in the tokens (lowest index wins) and one in the durations; row 2: the token
    // maximum in the last token column, the duration maximum in the first duration column.
    logits[1 * stride + 40] = logits[1 * stride + 7] = 100.0f;
    logits[1 * stride + 298] = logits[1 * stride + 296] = 100.0f;
    logits[2 * stride + split - 1] = 100.0f;
    logits[2 * stride + split] = 100.0f;
    for (Element e : kElements) {
      for (bool with_bias : {false, true}) {
        // As long as the rows (a padded head's bias), the padding's values large as well.
        std::vector<float> bias_values(stride, 1e30f);
        const std::vector<float> real_bias =
            with_bias ? random_values(cols, 18, 0.0f, 0.1f) : std::vector<float>(cols, 0.0f);
        std::copy(real_bias.begin(), real_bias.end(), bias_values.begin());
        const DeviceValues bias = upload_values(e, bias_values);
        const DeviceValues device_logits = upload_values(Element::f32, logits);
        const Buffer first(sizeof(int32_t) * rows), second(sizeof(int32_t) * rows);
        finish_logits(e, static_cast<float*>(device_logits.data()), stride,
                      with_bias ? bias.data() : nullptr, rows, cols, split, first.as<int32_t>(),
                      second.as<int32_t>(), nullptr);
        std::vector<double> want_logits(logits.begin(), logits.end());
        std::vector<int32_t> want_first, want_second;
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<float> row(cols);
          for (int64_t c = 0; c < cols; ++c) {
            row[c] = logits[r * stride + c] + (with_bias ? bias.values[c] : 0.0f);
            want_logits[r * stride + c] = row[c];
          }
          want_first.push_back(static_cast<int32_t>(
              std::max_element(row.begin(), row.begin() + split) - row.begin()));
          want_second.push_back(static_cast<int32_t>(
              std::max_element(row.begin() + split, row.end()) - (row.begin() + split)));
        }
        const std::string what =
            std::string("finish_logits ") + element_name(e) + " stride " + std::to_string(stride);
        expect_close(download_values(Element::f32, device_logits.data(), want_logits.size()),
                     want_logits, 0.0, what);
        EXPECT_EQ(download_ints(first.data(), rows), want_first) << what;
        EXPECT_EQ(download_ints(second.data(), rows), want_second) << what;
        if (!with_bias) {
          EXPECT_EQ(want_first[1], 7);
          EXPECT_EQ(want_second[1], 1);
          EXPECT_EQ(want_first[2], split - 1);
          EXPECT_EQ(want_second[2], 0);
        }
      }
    }
  }
}

TEST(ParakeetKernelsCuda, FinishLogitsWithoutDurations) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int64_t rows = 3, cols = 1000;
  const std::vector<float> logits = random_values(rows * cols, 19);
  const DeviceValues device_logits = upload_values(Element::f32, logits);
  const Buffer first(sizeof(int32_t) * rows);
  finish_logits(Element::f32, static_cast<float*>(device_logits.data()), cols, nullptr, rows, cols,
                cols, first.as<int32_t>(), nullptr, nullptr);
  std::vector<int32_t> want;
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = logits.begin() + r * cols;
    want.push_back(static_cast<int32_t>(std::max_element(row, row + cols) - row));
  }
  EXPECT_EQ(download_ints(first.data(), rows), want);
}

TEST(ParakeetKernelsCuda, LstmCellAddsTheTokensInputGatesAndLeavesRowsWithoutAnIdAlone) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int64_t tokens = 10, hidden = 13, batch = 4;
  const std::vector<int32_t> ids = {3, -1, 9, 0};
  const Buffer ids_dev = upload_ints(ids);
  for (Element e : kElements) {
    for (bool with_table : {false, true}) {
      const std::string name = std::string(element_name(e)) + (with_table ? " table" : "");
      // c in F32, h, the gates and the table of input gates in e.
      const DeviceValues gates =
          upload_values(e, random_values(batch * 4 * hidden, 22, 0.0f, 2.0f));
      const DeviceValues table =
          upload_values(e, random_values(tokens * 4 * hidden, 20, 0.0f, 2.0f));
      const DeviceValues c = upload_values(Element::f32, random_values(batch * hidden, 23));
      const DeviceValues h = upload_values(e, random_values(batch * hidden, 24));
      lstm_cell(e, gates.data(), with_table ? table.data() : nullptr, ids_dev.as<int32_t>(), batch,
                hidden, static_cast<float*>(c.data()), h.data(), nullptr);
      std::vector<double> want_c, want_h;
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t j = 0; j < hidden; ++j) {
          if (ids[b] < 0) {
            want_c.push_back(c.values[b * hidden + j]);
            want_h.push_back(h.values[b * hidden + j]);
            continue;
          }
          auto gate = [&](int64_t column) {
            double value = gates.values[b * 4 * hidden + column];
            if (with_table) value += table.values[ids[b] * 4 * hidden + column];
            return value;
          };
          const double cell = sigmoid(gate(hidden + j)) * c.values[b * hidden + j] +
                              sigmoid(gate(j)) * std::tanh(gate(2 * hidden + j));
          want_c.push_back(cell);
          want_h.push_back(sigmoid(gate(3 * hidden + j)) * std::tanh(cell));
        }
      }
      expect_close(download_values(Element::f32, c.data(), want_c.size()), want_c, 1e-5,
                   "lstm_cell c " + name);
      expect_close(download_values(e, h.data(), want_h.size()), want_h, tolerance(e),
                   "lstm_cell h " + name);
    }
  }
}

TEST(ParakeetKernelsCuda, JointHiddenReadsEachUtterancesWindowOfFramesAndRectifies) {
  if (!hark::compute::cuda::available())
    GTEST_SKIP() << "no GPU: " << hark::compute::cuda::describe();
  const int batch = 5, window = 4;
  const int64_t padded_frames = 9;
  // A window inside the frames; one reaching past the last frame (clamped); an utterance without
  // frames (its first row); a done one whose frame pointer went past the end (a TDT duration);
  // an utterance of one frame.
  const std::vector<int32_t> frames = {9, 3, 0, 6, 1}, frame = {2, 1, 0, 8, 0};
  const Buffer frames_dev = upload_ints(frames), frame_dev = upload_ints(frame);
  TransducerState state;
  state.frames = frames_dev.as<int32_t>();
  state.frame = frame_dev.as<int32_t>();
  // Whole packs of every element type, and value by value.
  for (const int64_t cols : {int64_t{40}, int64_t{11}}) {
    for (Element e : kElements) {
      const DeviceValues encoder =
          upload_values(e, random_values(batch * padded_frames * cols, 27));
      const DeviceValues prediction = upload_values(e, random_values(batch * cols, 28));
      const DeviceValues y = nan_values(e, batch * window * cols);
      joint_hidden(e, encoder.data(), padded_frames, prediction.data(), state, batch, window, cols,
                   y.data(), nullptr);
      std::vector<double> want;
      for (int b = 0; b < batch; ++b) {
        for (int w = 0; w < window; ++w) {
          const int64_t at = std::min(frame[b] + w, std::max(frames[b] - 1, 0));
          for (int64_t c = 0; c < cols; ++c) {
            const double sum = double(encoder.values[(b * padded_frames + at) * cols + c]) +
                               prediction.values[b * cols + c];
            want.push_back(std::max(sum, 0.0));
          }
        }
      }
      expect_close(
          download_values(e, y.data(), want.size()), want, tolerance(e),
          std::string("joint_hidden ") + element_name(e) + " cols " + std::to_string(cols));
    }
  }
}

}  // namespace
}  // namespace hark::compute::cuda
