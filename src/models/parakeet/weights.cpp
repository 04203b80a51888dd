#include "models/parakeet/weights.h"

#include <cmath>
#include <string>

#include "format/gguf.h"
#include "models/parakeet/layout.h"
#include "nn/weight_loader.h"

namespace hark::parakeet {

namespace {

using compute::Activation;
using compute::Shape;

nn::ConvSubsampling subsampling(const nn::WeightLoader& load, const Config& config) {
  const int64_t channels = config.subsampling_channels;
  const std::string first = "encoder.subsampling.layers.0";
  nn::ConvSubsampling s;
  s.conv_weight = load.get(first + ".weight", Shape{channels, 1, 3, 3});
  s.conv_bias = load.get(first + ".bias", Shape{channels});
  for (int stage = 1; stage < config.subsampling_stages(); ++stage) {
    const std::string depthwise = subsampling_depthwise(stage);
    s.stages.push_back({load.get(depthwise + ".weight", Shape{channels, 1, 3, 3}),
                        load.get(depthwise + ".bias", Shape{channels}),
                        load.linear(subsampling_pointwise(stage), channels, channels)});
  }
  s.linear = load.linear("encoder.subsampling.linear", config.d_model,
                         channels * config.subsampled_mels());
  s.stride = 2;
  s.padding = 1;
  // transformers multiplies by sqrt(d) in float32.
  s.output_scale = config.scale_input ? std::sqrt(static_cast<float>(config.d_model)) : 1.0f;
  return s;
}

nn::FeedForward feed_forward(const nn::WeightLoader& load, const std::string& prefix,
                             const Config& config) {
  const bool bias = config.attention_bias;
  return nn::FeedForward{load.linear(prefix + ".linear1", config.ffn_dim, config.d_model, bias),
                         load.linear(prefix + ".linear2", config.d_model, config.ffn_dim, bias),
                         Activation::silu};
}

nn::RelPositionAttention attention(const nn::WeightLoader& load, const std::string& prefix,
                                   const Config& config) {
  const int64_t d = config.d_model;
  const bool bias = config.attention_bias;
  nn::RelPositionAttention a;
  a.q_proj = load.linear(prefix + ".q_proj", d, d, bias);
  a.k_proj = load.linear(prefix + ".k_proj", d, d, bias);
  a.v_proj = load.linear(prefix + ".v_proj", d, d, bias);
  a.out_proj = load.linear(prefix + ".o_proj", d, d, bias);
  a.pos_proj = load.linear(prefix + ".relative_k_proj", d, d, /*bias=*/false);
  a.bias_u = load.get(prefix + ".bias_u", Shape{config.heads, config.head_dim()});
  a.bias_v = load.get(prefix + ".bias_v", Shape{config.heads, config.head_dim()});
  a.heads = config.heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim()));
  return a;
}

// The conv module, its BatchNorm folded into the depthwise convolution; `folded` keeps the
// folded values the module's views point into.
nn::ConformerConvolution convolution(const nn::WeightLoader& load, const std::string& prefix,
                                     const Config& config, compute::FoldedConv& folded) {
  const int64_t d = config.d_model;
  const bool bias = config.conv_bias;
  const std::string depthwise = prefix + ".depthwise_conv";
  const std::string norm = prefix + ".norm";
  const compute::Weight kernel = load.get(depthwise + ".weight", Shape{d, 1, config.conv_kernel});
  std::optional<compute::Weight> kernel_bias;
  if (bias) kernel_bias = load.get(depthwise + ".bias", Shape{d});
  folded = compute::fold_batch_norm(
      kernel, kernel_bias ? &*kernel_bias : nullptr, load.get(norm + ".weight", Shape{d}),
      load.get(norm + ".bias", Shape{d}), load.get(norm + ".running_mean", Shape{d}),
      load.get(norm + ".running_var", Shape{d}), config.batch_norm_eps);

  nn::ConformerConvolution conv;
  conv.pointwise1 = load.linear(prefix + ".pointwise_conv1", 2 * d, d, bias);
  conv.depthwise_weight = folded.weight;
  conv.depthwise_bias = folded.bias;
  conv.activation = Activation::silu;
  conv.pointwise2 = load.linear(prefix + ".pointwise_conv2", d, d, bias);
  return conv;
}

EncoderWeights encoder(const nn::WeightLoader& load, const Config& config) {
  const int64_t d = config.d_model;
  const float eps = config.layer_norm_eps;
  EncoderWeights e;
  e.subsampling = subsampling(load, config);
  e.folded_convolutions.resize(config.layers);
  for (int layer = 0; layer < config.layers; ++layer) {
    const std::string p = "encoder.layers." + std::to_string(layer) + ".";
    nn::ConformerBlock block;
    block.norm_ff1 = load.layer_norm(p + "norm_feed_forward1", d, eps);
    block.ff1 = feed_forward(load, p + "feed_forward1", config);
    block.norm_attention = load.layer_norm(p + "norm_self_att", d, eps);
    block.attention = attention(load, p + "self_attn", config);
    block.norm_conv = load.layer_norm(p + "norm_conv", d, eps);
    block.conv = convolution(load, p + "conv", config, e.folded_convolutions[layer]);
    block.norm_ff2 = load.layer_norm(p + "norm_feed_forward2", d, eps);
    block.ff2 = feed_forward(load, p + "feed_forward2", config);
    block.norm_out = load.layer_norm(p + "norm_out", d, eps);
    block.ff_scale = 0.5f;
    e.blocks.push_back(std::move(block));
  }
  return e;
}

TransducerWeights transducer(const nn::WeightLoader& load, const Config& config) {
  const int64_t hidden = config.predictor_hidden;
  const int64_t joint = config.joint_hidden;
  TransducerWeights t;
  t.prediction.embedding = load.get("decoder.embedding.weight", Shape{config.vocab_size, hidden});
  for (int layer = 0; layer < config.predictor_layers; ++layer) {
    const std::string l = std::to_string(layer);
    t.prediction.layers.push_back(
        {load.get("decoder.lstm.weight_ih_l" + l, Shape{4 * hidden, hidden}),
         load.get("decoder.lstm.weight_hh_l" + l, Shape{4 * hidden, hidden}),
         load.get("decoder.lstm.bias_ih_l" + l, Shape{4 * hidden}),
         load.get("decoder.lstm.bias_hh_l" + l, Shape{4 * hidden})});
  }
  t.joint.encoder_projector = load.linear("encoder_projector", joint, config.d_model);
  t.joint.decoder_projector = load.linear("decoder.decoder_projector", joint, hidden);
  t.joint.head = load.linear("joint.head", config.head_outputs(), joint);
  t.joint.activation = Activation::relu;
  return t;
}

}  // namespace

Weights bind_weights(const gguf::File& file, const Config& config) {
  const nn::WeightLoader load(file);
  Weights w;
  w.encoder = encoder(load, config);
  if (config.head == Head::ctc) {
    w.ctc_head = load.linear("ctc_head", config.vocab_size, config.d_model);
  } else {
    w.transducer = transducer(load, config);
  }
  return w;
}

}  // namespace hark::parakeet
