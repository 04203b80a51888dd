// A stored tensor's values as floats, whatever its type, and comparisons of whole files: for
// checking checkpoints, converted GGUF files and references.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/quant.h"
#include "format/safetensors.h"

namespace hark::testing {

inline std::vector<float> values_of(const safetensors::TensorView& view) {
  std::vector<float> values(static_cast<size_t>(view.elements()));
  quant::to_f32(safetensors::to_dtype(view.type), view.data, values.data(), values.size());
  return values;
}

inline std::vector<float> values_of(const gguf::TensorInfo& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.elements()));
  quant::to_f32(tensor.type, tensor.data, values.data(), values.size());
  return values;
}

// The values of tensor `name` of a checkpoint or reference file (hark::Error if missing).
template <class File>
std::vector<float> values_of(const File& file, const std::string& name) {
  return values_of(file.tensor(name));
}

// The same tensors, byte for byte (under gtest).
inline void expect_same_tensors(const gguf::File& expected, const gguf::File& actual) {
  ASSERT_EQ(expected.tensors().size(), actual.tensors().size());
  for (const gguf::TensorInfo& tensor : expected.tensors()) {
    const gguf::TensorInfo& other = actual.tensor(tensor.name);
    ASSERT_EQ(tensor.nbytes, other.nbytes) << tensor.name;
    EXPECT_EQ(std::memcmp(tensor.data, other.data, tensor.nbytes), 0) << tensor.name;
  }
}

}  // namespace hark::testing
