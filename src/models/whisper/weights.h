// Whisper's weights, bound to the tensors of a GGUF file by their documented names
// (docs/formats.md) with every shape checked against the Config.
#pragma once

#include <vector>

#include "models/whisper/model.h"
#include "nn/layers.h"

namespace hark::whisper {

struct EncoderLayer {
  nn::LayerNorm attention_norm;  // self_attn_layer_norm
  nn::MultiHeadAttention attention;
  nn::LayerNorm ffn_norm;  // final_layer_norm
  nn::FeedForward ffn;
};

struct EncoderWeights {
  compute::Weight conv1, conv1_bias;  // [d, n_mels, 3], [d]
  compute::Weight conv2, conv2_bias;  // [d, d, 3], [d] (stride 2)
  compute::Weight positions;          // [max_source_positions, d]
  std::vector<EncoderLayer> layers;
  nn::LayerNorm final_norm;
};

struct DecoderLayer {
  nn::LayerNorm self_attention_norm;
  nn::MultiHeadAttention self_attention;
  nn::LayerNorm cross_attention_norm;  // encoder_attn_layer_norm
  nn::MultiHeadAttention cross_attention;
  nn::LayerNorm ffn_norm;
  nn::FeedForward ffn;
};

struct DecoderWeights {
  compute::Weight embed_tokens;  // [vocab, d]; also the output projection (tied)
  compute::Weight positions;     // [max_target_positions, d]
  std::vector<DecoderLayer> layers;
  nn::LayerNorm final_norm;
};

struct Weights {
  EncoderWeights encoder;
  DecoderWeights decoder;
};

// Throws hark::Error naming the tensor, the expected and the actual shape on any mismatch.
Weights bind_weights(const gguf::File& file, const Config& config);

}  // namespace hark::whisper
