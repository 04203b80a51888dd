#include "models/whisper/layout.h"

#include "base/error.h"
#include "format/hf_checkpoint.h"

namespace hark::whisper {

std::vector<TensorSpec> tensor_layout(const Config& config) {
  const int64_t d = config.d_model;
  std::vector<TensorSpec> layout;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool matrix) {
    layout.push_back({std::move(name), std::move(shape), matrix});
  };
  auto attention = [&](const std::string& prefix) {
    for (const std::string projection : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(prefix + "." + projection + ".weight", {d, d}, true);
      // Whisper's key projections have no bias.
      if (projection != "k_proj") add(prefix + "." + projection + ".bias", {d}, false);
    }
  };
  auto norm = [&](const std::string& prefix) {
    add(prefix + ".weight", {d}, false);
    add(prefix + ".bias", {d}, false);
  };
  auto feed_forward = [&](const std::string& prefix, int64_t ffn) {
    add(prefix + ".fc1.weight", {ffn, d}, true);
    add(prefix + ".fc1.bias", {ffn}, false);
    add(prefix + ".fc2.weight", {d, ffn}, true);
    add(prefix + ".fc2.bias", {d}, false);
  };

  add("encoder.conv1.weight", {d, config.n_mels, 3}, true);
  add("encoder.conv1.bias", {d}, false);
  add("encoder.conv2.weight", {d, d, 3}, true);
  add("encoder.conv2.bias", {d}, false);
  add("encoder.embed_positions.weight", {config.max_source_positions, d}, false);
  for (int layer = 0; layer < config.encoder_layers; ++layer) {
    const std::string prefix = "encoder.layers." + std::to_string(layer);
    attention(prefix + ".self_attn");
    norm(prefix + ".self_attn_layer_norm");
    feed_forward(prefix, config.encoder_ffn);
    norm(prefix + ".final_layer_norm");
  }
  norm("encoder.layer_norm");

  add("decoder.embed_tokens.weight", {config.vocab_size, d}, true);
  add("decoder.embed_positions.weight", {config.max_target_positions, d}, false);
  for (int layer = 0; layer < config.decoder_layers; ++layer) {
    const std::string prefix = "decoder.layers." + std::to_string(layer);
    attention(prefix + ".self_attn");
    norm(prefix + ".self_attn_layer_norm");
    attention(prefix + ".encoder_attn");
    norm(prefix + ".encoder_attn_layer_norm");
    feed_forward(prefix, config.decoder_ffn);
    norm(prefix + ".final_layer_norm");
  }
  norm("decoder.layer_norm");
  return layout;
}

DType stored_type(const TensorSpec& tensor, DType requested) {
  return hf::stored_type(tensor.matrix, tensor.shape.empty() ? 1 : tensor.shape.back(), requested);
}

}  // namespace hark::whisper
