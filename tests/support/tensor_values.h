// A stored tensor's values as floats, whatever its type: for comparing checkpoints, converted
// GGUF files and references.
#pragma once

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

}  // namespace hark::testing
