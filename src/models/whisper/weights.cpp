#include "models/whisper/weights.h"

#include <cmath>
#include <string>

#include "format/gguf.h"
#include "nn/weight_loader.h"

namespace hark::whisper {

namespace {

using compute::Shape;

// q, k, v, out projections [d, d]; k_proj has no bias in Whisper. Queries are scaled by
// head_dim^-1/2 as transformers' WhisperAttention does.
nn::MultiHeadAttention attention(const nn::WeightLoader& load, const std::string& prefix, int d,
                                 int heads) {
  nn::MultiHeadAttention a;
  a.q_proj = load.linear(prefix + ".q_proj", d, d);
  a.k_proj = load.linear(prefix + ".k_proj", d, d, /*bias=*/false);
  a.v_proj = load.linear(prefix + ".v_proj", d, d);
  a.out_proj = load.linear(prefix + ".out_proj", d, d);
  a.heads = heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(d / heads));
  return a;
}

nn::FeedForward feed_forward(const nn::WeightLoader& load, const std::string& prefix, int d,
                             int ffn) {
  return nn::FeedForward{load.linear(prefix + ".fc1", ffn, d), load.linear(prefix + ".fc2", d, ffn),
                         compute::Activation::gelu};
}

}  // namespace

Weights bind_weights(const gguf::File& file, const Config& config) {
  const nn::WeightLoader load(file);
  const int d = config.d_model;
  Weights w;

  EncoderWeights& enc = w.encoder;
  enc.conv1 = load.get("encoder.conv1.weight", Shape{d, config.n_mels, 3});
  enc.conv1_bias = load.get("encoder.conv1.bias", Shape{d});
  enc.conv2 = load.get("encoder.conv2.weight", Shape{d, d, 3});
  enc.conv2_bias = load.get("encoder.conv2.bias", Shape{d});
  enc.positions = load.get("encoder.embed_positions.weight", Shape{config.max_source_positions, d});
  for (int l = 0; l < config.encoder_layers; ++l) {
    const std::string p = "encoder.layers." + std::to_string(l);
    enc.layers.push_back({load.layer_norm(p + ".self_attn_layer_norm", d),
                          attention(load, p + ".self_attn", d, config.encoder_heads),
                          load.layer_norm(p + ".final_layer_norm", d),
                          feed_forward(load, p, d, config.encoder_ffn)});
  }
  enc.final_norm = load.layer_norm("encoder.layer_norm", d);

  DecoderWeights& dec = w.decoder;
  dec.embed_tokens = load.get("decoder.embed_tokens.weight", Shape{config.vocab_size, d});
  dec.positions = load.get("decoder.embed_positions.weight", Shape{config.max_target_positions, d});
  for (int l = 0; l < config.decoder_layers; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l);
    dec.layers.push_back({load.layer_norm(p + ".self_attn_layer_norm", d),
                          attention(load, p + ".self_attn", d, config.decoder_heads),
                          load.layer_norm(p + ".encoder_attn_layer_norm", d),
                          attention(load, p + ".encoder_attn", d, config.decoder_heads),
                          load.layer_norm(p + ".final_layer_norm", d),
                          feed_forward(load, p, d, config.decoder_ffn)});
  }
  dec.final_norm = load.layer_norm("decoder.layer_norm", d);
  return w;
}

}  // namespace hark::whisper
