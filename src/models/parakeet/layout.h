// The tensors of a Parakeet GGUF: names, row-major shapes and stored types for a Config
// (docs/formats.md). The converter, the random-weight models of `hark bench` and the tests all
// write files from this one list, and the loader reads the same names.
//
// Names are exactly those of transformers' save_pretrained (docs/parakeet.md §2), so that a GGUF
// tensor and its checkpoint tensor are found under one name. Shapes are too, except that the
// convolutions with a 1-wide kernel (the pointwise convolutions and the CTC head), which are
// linear layers, drop their trailing 1s and are stored as [out, in] matrices (same bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/dtype.h"
#include "models/parakeet/config.h"

namespace hark::parakeet {

struct TensorSpec {
  std::string name;                       // in the GGUF and in the checkpoint
  std::vector<int64_t> shape;             // in the GGUF
  std::vector<int64_t> checkpoint_shape;  // in the checkpoint: `shape`, or it with trailing 1s
  bool matrix = false;  // linear weights and embeddings: stored in the requested type
};

std::vector<TensorSpec> tensor_layout(const Config& config);

// The subsampling stack's layers are numbered as in transformers' nn.Sequential, ReLUs included:
// the first convolution is layers.0, strided stage s >= 1 has its depthwise convolution at
// layers.(3s - 1) and its pointwise one at layers.(3s).
std::string subsampling_depthwise(int stage);  // "encoder.subsampling.layers.2" for stage 1
std::string subsampling_pointwise(int stage);  // "encoder.subsampling.layers.3" for stage 1

// Matrices take `requested`; everything else stays F32: vectors, norms, BatchNorm statistics,
// and the small 3x3 and depthwise convolution kernels (the loader folds BatchNorm into the
// latter, best done from exact values). Q8_0 blocks run along rows, so a matrix whose rows are
// not a multiple of 32 values falls back to F16.
DType stored_type(const TensorSpec& tensor, DType requested);

}  // namespace hark::parakeet
