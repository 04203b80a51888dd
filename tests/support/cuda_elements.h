// Host-side helpers of the CUDA kernel tests: the element types, and values converted to and from
// their bytes (what a test uploads, and what it reads back).
#pragma once

#include <cstdint>
#include <vector>

#include "compute/cuda/kernels.h"
#include "format/dtype.h"
#include "format/quant.h"

namespace hark::compute::cuda::testing {

constexpr Element kElements[] = {Element::f32, Element::f16, Element::bf16};

inline const char* element_name(Element e) {
  return e == Element::f32 ? "f32" : e == Element::f16 ? "f16" : "bf16";
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

}  // namespace hark::compute::cuda::testing
