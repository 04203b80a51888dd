#include "models/whisper/cuda/weights.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "compute/cuda/decoder_step_sm90.h"
#include "nn/upload_cuda.h"

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

gpu::Linear stacked_qkv(gpu::Uploader& up, const nn::MultiHeadAttention& a) {
  const nn::Linear* const parts[] = {&a.q_proj, &a.k_proj, &a.v_proj};
  return nn::upload_stacked(up, parts);
}

// The decoder layers' device pointers for gpu::decoder_step, and whether their matrices are
// Q8_0; empty where some are Q8_0 and some are not.
gpu::Buffer step_layers(const std::vector<DecoderLayer>& layers, bool& q8_0) {
  auto norm = [](const gpu::LayerNorm& n, const void*& gamma, const void*& beta, float& eps) {
    gamma = n.gamma.data();
    beta = n.beta.data();
    eps = n.eps;
  };
  auto linear = [](const gpu::Linear& l, const void*& weight, const void*& bias) {
    weight = l.weight.data.data();
    bias = l.bias.bytes() > 0 ? l.bias.data() : nullptr;
  };
  q8_0 = !layers.empty() && layers[0].qkv.weight.q8_0;
  std::vector<gpu::StepLayer> steps;
  for (const DecoderLayer& layer : layers) {
    for (const gpu::Linear* l :
         {&layer.qkv, &layer.self_out, &layer.cross_q, &layer.cross_out, &layer.fc1, &layer.fc2}) {
      if (l->weight.q8_0 != q8_0) return {};
    }
    gpu::StepLayer s;
    norm(layer.self_norm, s.self_gamma, s.self_beta, s.self_eps);
    linear(layer.qkv, s.qkv, s.qkv_bias);
    linear(layer.self_out, s.self_out, s.self_out_bias);
    norm(layer.cross_norm, s.cross_gamma, s.cross_beta, s.cross_eps);
    linear(layer.cross_q, s.cross_q, s.cross_q_bias);
    linear(layer.cross_out, s.cross_out, s.cross_out_bias);
    norm(layer.ffn_norm, s.ffn_gamma, s.ffn_beta, s.ffn_eps);
    linear(layer.fc1, s.fc1, s.fc1_bias);
    linear(layer.fc2, s.fc2, s.fc2_bias);
    steps.push_back(s);
  }
  return steps.empty() ? gpu::Buffer() : gpu::upload_vector(steps);
}

}  // namespace

gpu::Element element_for(DType type) {
  return gpu::activation_element(type);
}

Weights upload_weights(const Config& config, const whisper::Weights& host, gpu::Element element) {
  gpu::Uploader up(element);
  Weights w;
  w.element = element;
  const EncoderWeights& enc = host.encoder;
  w.conv1 = up.linear(as_matrix(enc.conv1), &enc.conv1_bias);
  w.conv2 = up.linear(as_matrix(enc.conv2), &enc.conv2_bias);
  w.encoder_positions = up.table(enc.positions, 0);
  for (const whisper::EncoderLayer& layer : enc.layers) {
    w.encoder_layers.push_back(
        {nn::upload(up, layer.attention_norm), stacked_qkv(up, layer.attention),
         nn::upload(up, layer.attention.out_proj), nn::upload(up, layer.ffn_norm),
         nn::upload(up, layer.ffn.fc1), nn::upload(up, layer.ffn.fc2)});
  }
  w.encoder_norm = nn::upload(up, enc.final_norm);

  const DecoderWeights& dec = host.decoder;
  w.tokens = up.matrix(dec.embed_tokens);
  w.decoder_positions = up.table(dec.positions, config.max_target_positions);
  std::vector<const nn::Linear*> cross_parts;  // every layer's K, then V
  const int64_t d = config.d_model;
  for (const whisper::DecoderLayer& layer : dec.layers) {
    w.decoder_layers.push_back(
        {nn::upload(up, layer.self_attention_norm), stacked_qkv(up, layer.self_attention),
         nn::upload(up, layer.self_attention.out_proj), nn::upload(up, layer.cross_attention_norm),
         nn::upload(up, layer.cross_attention.q_proj),
         nn::upload(up, layer.cross_attention.out_proj), nn::upload(up, layer.ffn_norm),
         nn::upload(up, layer.ffn.fc1), nn::upload(up, layer.ffn.fc2)});
    cross_parts.push_back(&layer.cross_attention.k_proj);
    cross_parts.push_back(&layer.cross_attention.v_proj);
  }
  w.decoder_norm = nn::upload(up, dec.final_norm);
  w.cross_kv = nn::upload_stacked(up, cross_parts);
  w.step_layers = step_layers(w.decoder_layers, w.step_q8_0);
  w.encoder_scale = 1.0f / std::sqrt(static_cast<float>(d / config.encoder_heads));
  w.decoder_scale = 1.0f / std::sqrt(static_cast<float>(d / config.decoder_heads));
  up.finish();
  return w;
}

}  // namespace hark::whisper::cuda
