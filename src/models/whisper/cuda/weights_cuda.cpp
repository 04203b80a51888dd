#include "models/whisper/cuda/weights.h"

#include <cmath>
#include <utility>

namespace hark::whisper::cuda {

namespace {

using compute::Shape;
using compute::Weight;

// A Conv1d weight [out, in, kernel] read as the matrix [out, in · kernel] that multiplies the
// unfolded input (im2col_1d's column order).
Weight as_matrix(const Weight& conv) {
  Weight matrix = conv;
  matrix.shape = Shape{conv.shape[0], conv.shape[1] * conv.shape[2]};
  return matrix;
}

const Weight* bias_of(const nn::Linear& layer) {
  return layer.bias ? &*layer.bias : nullptr;
}

gpu::Linear linear(const gpu::Uploader& up, const nn::Linear& layer) {
  return up.linear(layer.weight, bias_of(layer));
}

gpu::LayerNorm norm(const gpu::Uploader& up, const nn::LayerNorm& n) {
  return up.layer_norm(n.weight, n.bias, n.eps);
}

// Q, K and V stacked by rows, with their biases (zeros where a projection has none).
gpu::Linear stacked_qkv(const gpu::Uploader& up, const nn::MultiHeadAttention& a) {
  const Weight* matrices[] = {&a.q_proj.weight, &a.k_proj.weight, &a.v_proj.weight};
  const int64_t d = a.width();
  const std::pair<const Weight*, int64_t> biases[] = {
      {bias_of(a.q_proj), d}, {bias_of(a.k_proj), d}, {bias_of(a.v_proj), d}};
  return gpu::Linear{up.matrix(matrices), up.vector(biases)};
}

}  // namespace

gpu::Element element_for(DType type) {
  switch (type) {
    case DType::F32:
      return gpu::Element::f32;
    case DType::BF16:
      return gpu::Element::bf16;
    default:
      return gpu::Element::f16;
  }
}

Weights upload_weights(const Config& config, const whisper::Weights& host, gpu::Element element) {
  const gpu::Uploader up(element);
  Weights w;
  w.element = element;
  const EncoderWeights& enc = host.encoder;
  w.conv1 = up.linear(as_matrix(enc.conv1), &enc.conv1_bias);
  w.conv2 = up.linear(as_matrix(enc.conv2), &enc.conv2_bias);
  w.encoder_positions = up.table(enc.positions, 0);
  for (const whisper::EncoderLayer& layer : enc.layers) {
    w.encoder_layers.push_back({norm(up, layer.attention_norm), stacked_qkv(up, layer.attention),
                                linear(up, layer.attention.out_proj), norm(up, layer.ffn_norm),
                                linear(up, layer.ffn.fc1), linear(up, layer.ffn.fc2)});
  }
  w.encoder_norm = norm(up, enc.final_norm);

  const DecoderWeights& dec = host.decoder;
  w.tokens = up.matrix(dec.embed_tokens);
  w.decoder_positions = up.table(dec.positions, config.max_target_positions);
  std::vector<const Weight*> cross_matrices;
  std::vector<std::pair<const Weight*, int64_t>> cross_biases;
  const int64_t d = config.d_model;
  for (const whisper::DecoderLayer& layer : dec.layers) {
    w.decoder_layers.push_back(
        {norm(up, layer.self_attention_norm), stacked_qkv(up, layer.self_attention),
         linear(up, layer.self_attention.out_proj), norm(up, layer.cross_attention_norm),
         linear(up, layer.cross_attention.q_proj), linear(up, layer.cross_attention.out_proj),
         norm(up, layer.ffn_norm), linear(up, layer.ffn.fc1), linear(up, layer.ffn.fc2)});
    const nn::MultiHeadAttention& cross = layer.cross_attention;
    cross_matrices.push_back(&cross.k_proj.weight);
    cross_matrices.push_back(&cross.v_proj.weight);
    cross_biases.emplace_back(bias_of(cross.k_proj), d);
    cross_biases.emplace_back(bias_of(cross.v_proj), d);
  }
  w.decoder_norm = norm(up, dec.final_norm);
  w.cross_kv = gpu::Linear{up.matrix(cross_matrices), up.vector(cross_biases)};
  w.encoder_scale = 1.0f / std::sqrt(static_cast<float>(d / config.encoder_heads));
  w.decoder_scale = 1.0f / std::sqrt(static_cast<float>(d / config.decoder_heads));
  return w;
}

}  // namespace hark::whisper::cuda
