// Host-side helpers of the CUDA kernel tests: the element types, and values converted to and from
// their bytes (what a test uploads, and what it reads back).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "compute/cuda/kernels.h"
#include "compute/cuda/pass.h"
#include "format/dtype.h"
#include "format/quant.h"

namespace hark::compute::cuda::testing {

constexpr Element kElements[] = {Element::f32, Element::f16, Element::bf16};

inline const char* element_name(Element e) {
  return e == Element::f32 ? "f32" : e == Element::f16 ? "f16" : "bf16";
}

// The activations of the products' epilogues (gemm_sm90.h) in double: GELU the erf form.
inline double activate(Activation act, double x) {
  switch (act) {
    case Activation::silu:
      return x / (1.0 + std::exp(-x));
    case Activation::gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::relu:
      return std::max(x, 0.0);
    case Activation::none:
      break;
  }
  return x;
}

inline const char* activation_name(Activation act) {
  constexpr const char* kNames[] = {"none", "gelu", "silu", "relu"};
  return kNames[static_cast<int>(act)];
}

inline DType dtype_of(Element e) {
  return e == Element::f32 ? DType::F32 : e == Element::f16 ? DType::F16 : DType::BF16;
}

inline std::vector<uint8_t> encode(Element e, const std::vector<float>& values) {
  return quant::from_f32(dtype_of(e), values.data(), values.size());
}

inline std::vector<float> decode(Element e, const std::vector<uint8_t>& bytes) {
  std::vector<float> values(bytes.size() / element_size(e));
  quant::to_f32(dtype_of(e), bytes.data(), values.data(), values.size());
  return values;
}

// The values rounded to element type e, as floats.
inline std::vector<float> rounded(Element e, const std::vector<float>& values) {
  return decode(e, encode(e, values));
}

// Rows [rows, cols] layer-normalised in double (two passes: the mean, then the variance).
inline std::vector<double> layer_norm_reference(const std::vector<float>& x,
                                                const std::vector<float>& gamma,
                                                const std::vector<float>& beta, float eps,
                                                int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * cols;
    double mean = 0, variance = 0;
    for (int64_t c = 0; c < cols; ++c) mean += row[c];
    mean /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) variance += (row[c] - mean) * (row[c] - mean);
    variance /= static_cast<double>(cols);
    const double scale = 1.0 / std::sqrt(variance + eps);
    for (int64_t c = 0; c < cols; ++c) {
      y[r * cols + c] = (row[c] - mean) * scale * gamma[c] + beta[c];
    }
  }
  return y;
}

// `values` [rows, cols] quantised to Q8_0: its bytes in the device layout (kernels.h), and the
// values the blocks stand for (d · q in F32).
struct Q8Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> device_bytes;
  std::vector<float> values;
};

// A matrix [rows, cols] from its GGUF Q8_0 blocks: the device layout, and its values d · q in F32.
inline Q8Matrix q8_0_matrix_of_blocks(const std::vector<uint8_t>& blocks, int64_t rows,
                                      int64_t cols) {
  Q8Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.values.resize(static_cast<size_t>(rows * cols));
  quant::to_f32(DType::Q8_0, blocks.data(), m.values.data(), m.values.size());
  m.device_bytes.resize(blocks.size());
  q8_0_to_device_layout(
      blocks.data(), rows, cols, reinterpret_cast<int8_t*>(m.device_bytes.data()),
      reinterpret_cast<uint16_t*>(m.device_bytes.data() + q8_0_scales_offset(rows, cols)));
  return m;
}

// The same for F32 values, quantised as a GGUF writer quantises them.
inline Q8Matrix q8_0_matrix(const std::vector<float>& values, int64_t rows, int64_t cols) {
  return q8_0_matrix_of_blocks(quant::from_f32(DType::Q8_0, values.data(), values.size()), rows,
                               cols);
}

// A Q8_0 matrix [rows, 256] of every quant at every position of a block (row n, column k: the
// byte (k + 37 n) mod 256), with one scale a row: the F16 bit patterns 1 + 48 · (n / 2), negative
// in odd rows. From F16 subnormals up; rows ≤ 1,024 keep d · 127 finite in F16 (d ≤ 500).
inline Q8Matrix q8_0_matrix_of_every_quant(int64_t rows) {
  constexpr auto kBlock = static_cast<int64_t>(quant::kQ8BlockValues);  // F16 d, then 32 int8 q
  constexpr int64_t cols = 256;
  constexpr size_t kBlockBytes = quant::kQ8BlockBytes;
  std::vector<uint8_t> blocks(static_cast<size_t>(rows * cols / kBlock) * kBlockBytes);
  for (int64_t n = 0; n < rows; ++n) {
    const uint16_t d = static_cast<uint16_t>((1 + (n / 2) * 48) | (n % 2 != 0 ? 0x8000 : 0));
    for (int64_t k = 0; k < cols; ++k) {
      uint8_t* block = blocks.data() + static_cast<size_t>((n * cols + k) / kBlock) * kBlockBytes;
      if (k % kBlock == 0) std::memcpy(block, &d, sizeof d);
      block[2 + k % kBlock] = static_cast<uint8_t>((k + 37 * n) % 256);
    }
  }
  return q8_0_matrix_of_blocks(blocks, rows, cols);
}

}  // namespace hark::compute::cuda::testing
