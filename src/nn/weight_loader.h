// Binds a model's weights to the tensors of a GGUF file, checking every name, shape and type, so
// that a model's loader reads as a list of the tensors it expects.
#pragma once

#include <string>
#include <string_view>

#include "nn/layers.h"

namespace hark::gguf {
class File;
}

namespace hark::nn {

class WeightLoader {
 public:
  explicit WeightLoader(const gguf::File& file) : file_(file) {}

  // A view of tensor `name`, which must exist, have exactly `shape` and a weight type (F32, F16,
  // BF16, Q8_0); otherwise throws hark::Error naming the file, the tensor, and what was expected.
  Weight get(std::string_view name, const Shape& shape) const;
  bool has(std::string_view name) const;

  // `prefix`.weight [out, in] and, with `bias`, `prefix`.bias [out].
  Linear linear(const std::string& prefix, int64_t out, int64_t in, bool bias = true) const;
  // `prefix`.weight and `prefix`.bias, both [width].
  LayerNorm layer_norm(const std::string& prefix, int64_t width, float eps = 1e-5f) const;

 private:
  const gguf::File& file_;
};

}  // namespace hark::nn
