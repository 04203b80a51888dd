// The tensors of a Whisper GGUF: names and row-major shapes for a Config (docs/formats.md), and
// which of them take the requested weight type. The converter, the random-weight models of
// `hark bench` and the tests all write files from this one list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/dtype.h"
#include "models/whisper/model.h"

namespace hark::whisper {

struct TensorSpec {
  std::string name;  // hark's name = Hugging Face's without the leading "model."
  std::vector<int64_t> shape;
  bool matrix = false;  // projections, convolutions, embeddings: stored in the requested type
};

std::vector<TensorSpec> tensor_layout(const Config& config);

// Matrices take `requested`; vectors and position tables stay F32 (small, and precision there
// matters more than size). Q8_0 blocks run along rows, so a matrix whose rows are not a multiple
// of 32 values falls back to F16.
DType stored_type(const TensorSpec& tensor, DType requested);

}  // namespace hark::whisper
