// Whisper's weights on the GPU, in the layout the CUDA forward pass wants: Q, K and V of each
// self-attention stacked into one matrix (one product instead of three), and the cross-attention
// K and V of every decoder layer stacked into one matrix, so that one product per window computes
// all the keys and values the decoder will read for it.
#pragma once

#include <vector>

#include "compute/cuda/pass.h"
#include "models/whisper/weights.h"

namespace hark::whisper::cuda {

namespace gpu = compute::cuda;

struct EncoderLayer {
  gpu::LayerNorm attention_norm;
  gpu::Linear qkv, out;  // [3d, d] (k has no bias: zeros), [d, d]
  gpu::LayerNorm ffn_norm;
  gpu::Linear fc1, fc2;
};

struct DecoderLayer {
  gpu::LayerNorm self_norm;
  gpu::Linear qkv, self_out;
  gpu::LayerNorm cross_norm;
  gpu::Linear cross_q, cross_out;
  gpu::LayerNorm ffn_norm;
  gpu::Linear fc1, fc2;
};

struct Weights {
  gpu::Element element = gpu::Element::f16;
  gpu::Linear conv1, conv2;       // as matrices [d, n_mels · 3] and [d, d · 3]
  gpu::Buffer encoder_positions;  // [frames, d]
  std::vector<EncoderLayer> encoder_layers;
  gpu::LayerNorm encoder_norm;
  gpu::Matrix tokens;             // [vocab, d]: token embeddings and the output projection
  gpu::Buffer decoder_positions;  // [2 · max_target_positions, d], the second half zeros
  std::vector<DecoderLayer> decoder_layers;
  gpu::LayerNorm decoder_norm;
  gpu::Linear cross_kv;  // [layers · 2d, d]: layer l's K rows at 2d·l, V rows after
  // The decoder layers' weights as the one-launch step reads them: gpu::StepLayer [layers]
  // (compute/cuda/decoder_step_sm90.h), its matrices all 16-bit or all Q8_0 (step_q8_0); empty
  // where some are Q8_0 and some not, which it does not take.
  gpu::Buffer step_layers;
  bool step_q8_0 = false;
  float encoder_scale = 1, decoder_scale = 1;  // head_dim^-1/2
};

// The activation type for weights stored as `type`: F32 and BF16 stay, F16 and Q8_0 run in F16.
gpu::Element element_for(DType type);

Weights upload_weights(const Config& config, const whisper::Weights& host, gpu::Element element);

}  // namespace hark::whisper::cuda
