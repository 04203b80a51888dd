#include "models/parakeet/layout.h"

#include "base/error.h"
#include "format/hf_checkpoint.h"

namespace hark::parakeet {

std::string subsampling_depthwise(int stage) {
  return "encoder.subsampling.layers." + std::to_string(3 * stage - 1);
}

std::string subsampling_pointwise(int stage) {
  return "encoder.subsampling.layers." + std::to_string(3 * stage);
}

std::vector<TensorSpec> tensor_layout(const Config& config) {
  validate(config, "Parakeet layout");
  const int64_t d = config.d_model;
  const int64_t f = config.ffn_dim;
  const int64_t c = config.subsampling_channels;
  std::vector<TensorSpec> layout;
  // A tensor stored with the checkpoint's own shape.
  auto add = [&](std::string name, std::vector<int64_t> shape, bool matrix) {
    layout.push_back({std::move(name), shape, shape, matrix});
  };
  // A convolution with a 1-wide kernel: the checkpoint's [out, in, 1(, 1)] stored as [out, in].
  auto pointwise = [&](std::string name, int64_t out, int64_t in, int kernel_dims) {
    std::vector<int64_t> checkpoint_shape = {out, in};
    checkpoint_shape.insert(checkpoint_shape.end(), kernel_dims, 1);
    layout.push_back({std::move(name), {out, in}, std::move(checkpoint_shape), true});
  };
  auto bias = [&](const std::string& prefix, int64_t width, bool present) {
    if (present) add(prefix + ".bias", {width}, false);
  };
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in, bool with_bias) {
    add(prefix + ".weight", {out, in}, true);
    bias(prefix, out, with_bias);
  };
  auto norm = [&](const std::string& prefix, int64_t width) {
    add(prefix + ".weight", {width}, false);
    add(prefix + ".bias", {width}, false);
  };

  // Subsampling: its convolutions always have biases, whatever attention_bias says.
  add("encoder.subsampling.layers.0.weight", {c, 1, 3, 3}, false);
  add("encoder.subsampling.layers.0.bias", {c}, false);
  for (int stage = 1; stage < config.subsampling_stages(); ++stage) {
    add(subsampling_depthwise(stage) + ".weight", {c, 1, 3, 3}, false);
    add(subsampling_depthwise(stage) + ".bias", {c}, false);
    pointwise(subsampling_pointwise(stage) + ".weight", c, c, 2);
    add(subsampling_pointwise(stage) + ".bias", {c}, false);
  }
  linear("encoder.subsampling.linear", d, c * config.subsampled_mels(), true);

  const bool b = config.attention_bias;
  const bool cb = config.conv_bias;
  for (int layer = 0; layer < config.layers; ++layer) {
    const std::string p = "encoder.layers." + std::to_string(layer) + ".";
    // In the block's order (docs/parakeet.md §4.3): FF1, attention, conv module, FF2, norm.
    norm(p + "norm_feed_forward1", d);
    linear(p + "feed_forward1.linear1", f, d, b);
    linear(p + "feed_forward1.linear2", d, f, b);

    norm(p + "norm_self_att", d);
    for (const char* projection : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      linear(p + "self_attn." + projection, d, d, b);
    }
    linear(p + "self_attn.relative_k_proj", d, d, false);
    add(p + "self_attn.bias_u", {config.heads, config.head_dim()}, false);
    add(p + "self_attn.bias_v", {config.heads, config.head_dim()}, false);

    norm(p + "norm_conv", d);
    pointwise(p + "conv.pointwise_conv1.weight", 2 * d, d, 1);
    bias(p + "conv.pointwise_conv1", 2 * d, cb);
    add(p + "conv.depthwise_conv.weight", {d, 1, config.conv_kernel}, false);
    bias(p + "conv.depthwise_conv", d, cb);
    for (const char* statistic : {"weight", "bias", "running_mean", "running_var"}) {
      add(p + "conv.norm." + statistic, {d}, false);
    }
    pointwise(p + "conv.pointwise_conv2.weight", d, d, 1);
    bias(p + "conv.pointwise_conv2", d, cb);

    norm(p + "norm_feed_forward2", d);
    linear(p + "feed_forward2.linear1", f, d, b);
    linear(p + "feed_forward2.linear2", d, f, b);
    norm(p + "norm_out", d);
  }

  const int64_t vocab = config.vocab_size;
  if (config.head == Head::ctc) {
    pointwise("ctc_head.weight", vocab, d, 1);
    add("ctc_head.bias", {vocab}, false);
    return layout;
  }
  const int64_t h = config.predictor_hidden;
  const int64_t joint = config.joint_hidden;
  linear("encoder_projector", joint, d, true);
  add("decoder.embedding.weight", {vocab, h}, true);
  for (int layer = 0; layer < config.predictor_layers; ++layer) {
    const std::string l = std::to_string(layer);
    add("decoder.lstm.weight_ih_l" + l, {4 * h, h}, true);
    add("decoder.lstm.weight_hh_l" + l, {4 * h, h}, true);
    add("decoder.lstm.bias_ih_l" + l, {4 * h}, false);
    add("decoder.lstm.bias_hh_l" + l, {4 * h}, false);
  }
  linear("decoder.decoder_projector", joint, h, true);
  linear("joint.head", config.head_outputs(), joint, true);
  return layout;
}

DType stored_type(const TensorSpec& tensor, DType requested) {
  return hf::stored_type(tensor.matrix, tensor.shape.empty() ? 1 : tensor.shape.back(), requested);
}

}  // namespace hark::parakeet
