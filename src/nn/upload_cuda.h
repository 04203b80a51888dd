// nn layers' weights uploaded for the CUDA backend (compute/cuda/pass.h), for the models' GPU
// weight loaders. CUDA builds only: include it from *_cuda.cpp files.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "compute/cuda/pass.h"
#include "nn/layers.h"

namespace hark::nn {

inline const compute::Weight* bias_of(const Linear& layer) {
  return layer.bias ? &*layer.bias : nullptr;
}

inline compute::cuda::Linear upload(compute::cuda::Uploader& up, const Linear& layer) {
  return up.linear(layer.weight, bias_of(layer));
}

inline compute::cuda::LayerNorm upload(compute::cuda::Uploader& up, const LayerNorm& norm) {
  return up.layer_norm(norm.weight, norm.bias, norm.eps);
}

// Linear layers over the same input stacked by rows into one (Q, K and V: one product instead of
// three; Whisper's cross-attention K and V of every layer), with their biases (zeros where a
// layer has none; no bias when none has one).
inline compute::cuda::Linear upload_stacked(compute::cuda::Uploader& up,
                                            std::span<const Linear* const> layers) {
  std::vector<const compute::Weight*> matrices;
  std::vector<std::pair<const compute::Weight*, int64_t>> biases;
  bool any_bias = false;
  for (const Linear* layer : layers) {
    matrices.push_back(&layer->weight);
    biases.emplace_back(bias_of(*layer), layer->out_features());
    any_bias = any_bias || layer->bias.has_value();
  }
  compute::cuda::Linear stacked{up.matrix(matrices), {}};
  if (any_bias) stacked.bias = up.vector(biases);
  return stacked;
}

}  // namespace hark::nn
