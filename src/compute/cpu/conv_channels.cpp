// Convolutions over channels-last data on the CPU: depthwise 1-D (the Conformer's convolution
// module) and 2-D (FastConformer's subsampling), and the regular 2-D convolution.
//
// A depthwise output pixel is a sum of taps, each an input pixel times that tap's weights, all
// as vectors over the channels: with the weights transposed to [taps, C] once per call, every
// load is contiguous and the accumulators stay in registers across the taps. The regular 2-D
// convolution unfolds its input (im2col) and hands the product to the linear op, as conv1d does.
#include <algorithm>
#include <cstring>
#include <vector>

#include "compute/cpu/kernels.h"
#include "compute/cpu/simd.h"

namespace hark::compute::cpu {

namespace {

// Below this many output values a convolution runs on the calling thread only.
constexpr int64_t kParallelOutputs = 16 * 1024;

// out[c] = bias[c] + Σ_t weights[t][c] · inputs[t][c] for c < n (no bias: 0).
void sum_taps_portable(const float* const* inputs, const float* const* weights, int64_t taps,
                       const float* bias, float* out, int64_t n) {
  if (bias != nullptr) {
    std::memcpy(out, bias, static_cast<size_t>(n) * sizeof(float));
  } else {
    std::fill(out, out + n, 0.0f);
  }
  for (int64_t t = 0; t < taps; ++t) {
    const float* x = inputs[t];
    const float* w = weights[t];
    for (int64_t c = 0; c < n; ++c) out[c] += w[c] * x[c];
  }
}

#if HARK_X86
// 32 channels at a time in four accumulators (FMA latency), then 8, then one by one.
HARK_AVX2 void sum_taps_avx2(const float* const* inputs, const float* const* weights, int64_t taps,
                             const float* bias, float* out, int64_t n) {
  int64_t c = 0;
  for (; c + 32 <= n; c += 32) {
    __m256 acc[4];
    for (int u = 0; u < 4; ++u) {
      acc[u] = bias != nullptr ? _mm256_loadu_ps(bias + c + 8 * u) : _mm256_setzero_ps();
    }
    for (int64_t t = 0; t < taps; ++t) {
      const float* x = inputs[t] + c;
      const float* w = weights[t] + c;
      for (int u = 0; u < 4; ++u) {
        acc[u] = _mm256_fmadd_ps(_mm256_loadu_ps(w + 8 * u), _mm256_loadu_ps(x + 8 * u), acc[u]);
      }
    }
    for (int u = 0; u < 4; ++u) _mm256_storeu_ps(out + c + 8 * u, acc[u]);
  }
  for (; c + 8 <= n; c += 8) {
    __m256 acc = bias != nullptr ? _mm256_loadu_ps(bias + c) : _mm256_setzero_ps();
    for (int64_t t = 0; t < taps; ++t) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(weights[t] + c), _mm256_loadu_ps(inputs[t] + c), acc);
    }
    _mm256_storeu_ps(out + c, acc);
  }
  for (; c < n; ++c) {
    float acc = bias != nullptr ? bias[c] : 0.0f;
    for (int64_t t = 0; t < taps; ++t) acc += weights[t][c] * inputs[t][c];
    out[c] = acc;
  }
}
#endif

void sum_taps(const float* const* inputs, const float* const* weights, int64_t taps,
              const float* bias, float* out, int64_t n) {
#if HARK_X86
  if (has_avx2()) return sum_taps_avx2(inputs, weights, taps, bias, out, n);
#endif
  sum_taps_portable(inputs, weights, taps, bias, out, n);
}

// A depthwise kernel [C, 1, taps...] (or [C, taps...]) as F32 [taps, C]: tap t's weights for
// every channel, contiguous.
void transpose_depthwise(const Weight& w, int64_t channels, std::vector<float>& out) {
  std::vector<float> scratch;
  const float* values = weight_values(w, scratch);
  const int64_t taps = w.shape.elements() / channels;
  out.resize(static_cast<size_t>(taps * channels));
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t t = 0; t < taps; ++t) out[t * channels + c] = values[c * taps + t];
  }
}

// Writes one output row: activation(conv + bias) + residual. `conv` already holds conv + bias
// and is scratch; `residual` may be `out` itself.
void finish_row(float* conv, const float* residual, float* out, int64_t n, Activation activation) {
  activate_row(activation, conv, n);
  if (residual != nullptr) {
    for (int64_t c = 0; c < n; ++c) out[c] = conv[c] + residual[c];
  } else {
    std::memcpy(out, conv, static_cast<size_t>(n) * sizeof(float));
  }
}

}  // namespace

void depthwise_conv1d(const Tensor& x, const Weight& w, std::span<const int64_t> lengths, Tensor& y,
                      const Epilogue& epilogue) {
  const bool batched = x.shape().rank() == 3;
  const int64_t sequences = batched ? x.dim(0) : 1;
  const int64_t steps = batched ? x.dim(1) : x.dim(0);
  const int64_t channels = x.cols();
  thread_local std::vector<float> transposed, bias_scratch;
  transpose_depthwise(w, channels, transposed);
  const int64_t kernel = w.shape.elements() / channels;
  const int64_t padding = (kernel - 1) / 2;
  const float* bias = epilogue.bias ? weight_values(*epilogue.bias, bias_scratch) : nullptr;
  const float* residual = epilogue.residual ? epilogue.residual->data() : nullptr;
  const float* wt = transposed.data();
  const float* in = x.data();
  float* out = y.data();
  const int64_t rows = sequences * steps;
#pragma omp parallel for schedule(static) if (rows * channels > kParallelOutputs)
  for (int64_t row = 0; row < rows; ++row) {
    thread_local std::vector<const float*> inputs, weights;
    thread_local std::vector<float> conv;
    inputs.resize(static_cast<size_t>(kernel));
    weights.resize(static_cast<size_t>(kernel));
    conv.resize(static_cast<size_t>(channels));
    const int64_t b = row / steps, t = row % steps;
    const int64_t valid = lengths.empty() ? steps : lengths[b];
    int64_t taps = 0;
    for (int64_t j = 0; j < kernel; ++j) {
      const int64_t source = t + j - padding;
      if (source < 0 || source >= valid) continue;
      inputs[taps] = in + (b * steps + source) * channels;
      weights[taps] = wt + j * channels;
      ++taps;
    }
    sum_taps(inputs.data(), weights.data(), taps, bias, conv.data(), channels);
    finish_row(conv.data(), residual ? residual + row * channels : nullptr, out + row * channels,
               channels, epilogue.activation);
  }
}

void depthwise_conv2d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
                      const Epilogue& epilogue) {
  const int64_t height = x.dim(0), width = x.dim(1), channels = x.dim(2);
  const int64_t kh = w.shape[2], kw = w.shape[3];
  const int64_t out_height = y.dim(0), out_width = y.dim(1);
  thread_local std::vector<float> transposed, bias_scratch;
  transpose_depthwise(w, channels, transposed);
  const float* bias = epilogue.bias ? weight_values(*epilogue.bias, bias_scratch) : nullptr;
  const float* residual = epilogue.residual ? epilogue.residual->data() : nullptr;
  const float* wt = transposed.data();
  const float* in = x.data();
  float* out = y.data();
  const int64_t pixels = out_height * out_width;
#pragma omp parallel for schedule(static) if (pixels * channels > kParallelOutputs)
  for (int64_t pixel = 0; pixel < pixels; ++pixel) {
    thread_local std::vector<const float*> inputs, weights;
    thread_local std::vector<float> conv;
    inputs.resize(static_cast<size_t>(kh * kw));
    weights.resize(static_cast<size_t>(kh * kw));
    conv.resize(static_cast<size_t>(channels));
    const int64_t oh = pixel / out_width, ow = pixel % out_width;
    int64_t taps = 0;
    for (int64_t i = 0; i < kh; ++i) {
      const int64_t ih = oh * stride + i - padding;
      if (ih < 0 || ih >= height) continue;
      for (int64_t j = 0; j < kw; ++j) {
        const int64_t iw = ow * stride + j - padding;
        if (iw < 0 || iw >= width) continue;
        inputs[taps] = in + (ih * width + iw) * channels;
        weights[taps] = wt + (i * kw + j) * channels;
        ++taps;
      }
    }
    sum_taps(inputs.data(), weights.data(), taps, bias, conv.data(), channels);
    finish_row(conv.data(), residual ? residual + pixel * channels : nullptr,
               out + pixel * channels, channels, epilogue.activation);
  }
}

void conv2d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
            const Epilogue& epilogue) {
  const int64_t height = x.dim(0), width = x.dim(1);
  const int64_t channels = x.shape().rank() == 3 ? x.dim(2) : 1;
  const int64_t kh = w.shape[2], kw = w.shape[3];
  const int64_t out_height = y.dim(0), out_width = y.dim(1);
  // Column ci·kh·kw + i·kw + j of an unfolded row is input channel ci at tap (i, j): the order
  // of a row of the kernel [C_out, C_in, kh, kw], so the kernel is the linear op's [C_out, K].
  const int64_t unfolded = channels * kh * kw;
  const int64_t pixels = out_height * out_width;
  thread_local Tensor columns;
  columns.resize(Shape{pixels, unfolded});  // every value is written below
  const float* in = x.data();
  float* col = columns.data();
#pragma omp parallel for schedule(static) if (pixels * unfolded > kParallelOutputs)
  for (int64_t pixel = 0; pixel < pixels; ++pixel) {
    const int64_t oh = pixel / out_width, ow = pixel % out_width;
    float* dst = col + pixel * unfolded;
    for (int64_t i = 0; i < kh; ++i) {
      const int64_t ih = oh * stride + i - padding;
      for (int64_t j = 0; j < kw; ++j) {
        const int64_t iw = ow * stride + j - padding;
        const bool inside = ih >= 0 && ih < height && iw >= 0 && iw < width;
        for (int64_t c = 0; c < channels; ++c) {
          dst[(c * kh + i) * kw + j] = inside ? in[(ih * width + iw) * channels + c] : 0.0f;
        }
      }
    }
  }
  Weight flat = w;
  flat.shape = Shape{w.shape[0], unfolded};
  cpu::linear(columns, flat, y, epilogue);
}

}  // namespace hark::compute::cpu
