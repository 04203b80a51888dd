#include "models/parakeet/cuda/weights.h"

#include <utility>
#include <vector>

#include "base/error.h"
#include "compute/cuda/kernels_conformer.h"
#include "format/quant.h"
#include "nn/upload_cuda.h"

namespace hark::parakeet::cuda {

namespace {

using compute::Weight;

// A stored weight's values as F32, times `factor`.
std::vector<float> scaled_values(const Weight& w, float factor) {
  std::vector<float> values(static_cast<size_t>(w.shape.elements()));
  quant::to_f32_rows(w.type, w.data, w.cols(), 0, w.rows(), values.data());
  for (float& value : values) value *= factor;
  return values;
}

// The feed-forward module's second linear with its output halved (the macaron half step).
gpu::Linear halved(gpu::Uploader& up, const nn::Linear& layer) {
  const std::vector<float> weight = scaled_values(layer.weight, 0.5f);
  const Weight weight_view = Weight::f32(weight.data(), layer.weight.shape);
  if (!layer.bias) return up.linear(weight_view, nullptr);
  const std::vector<float> bias = scaled_values(*layer.bias, 0.5f);
  const Weight bias_view = Weight::f32(bias.data(), layer.bias->shape);
  return up.linear(weight_view, &bias_view);
}

// q, k and v stacked by rows, the position bias v' added to q's bias (zeros for a projection
// without one): the product's bias epilogue then yields q + v', which the position scores read,
// and no pass over the queries adds it (Block::content_bias). The loader has checked the shapes
// (v' [h, dh], d = h · dh values).
gpu::Linear stacked_qkv(gpu::Uploader& up, const nn::RelPositionAttention& a) {
  const int64_t d = a.q_proj.out_features();
  std::vector<float> q_bias = scaled_values(a.bias_v, 1.0f);
  if (a.q_proj.bias) {
    const std::vector<float> projection_bias = scaled_values(*a.q_proj.bias, 1.0f);
    for (int64_t i = 0; i < d; ++i) q_bias[i] += projection_bias[i];
  }
  const Weight q_bias_view = Weight::f32(q_bias.data(), compute::Shape{d});
  const Weight* const matrices[] = {&a.q_proj.weight, &a.k_proj.weight, &a.v_proj.weight};
  const std::pair<const Weight*, int64_t> biases[] = {
      {&q_bias_view, d},
      {nn::bias_of(a.k_proj), a.k_proj.out_features()},
      {nn::bias_of(a.v_proj), a.v_proj.out_features()}};
  return {up.matrix(matrices), up.vector(biases)};
}

// u − v' [h, dh]: the content scores' bias on queries that hold q + v' already (stacked_qkv).
gpu::Buffer content_bias(gpu::Uploader& up, const nn::RelPositionAttention& a) {
  std::vector<float> difference = scaled_values(a.bias_u, 1.0f);
  const std::vector<float> position_bias = scaled_values(a.bias_v, 1.0f);
  for (size_t i = 0; i < difference.size(); ++i) difference[i] -= position_bias[i];
  return up.vector(Weight::f32(difference.data(), a.bias_u.shape));
}

// A head with zero rows after its own up to a multiple of 8 (zero bias values too): its F32
// logits then have rows of whole 32-byte pieces, which cuBLASLt's aligned kernels need (an odd
// row length, such as TDT's V + 1 + 5, gets a slow 8-byte-aligned kernel). The logits' readers
// take the real columns only (finish_logits).
gpu::Linear padded_head(gpu::Uploader& up, const nn::Linear& layer) {
  constexpr int64_t kMultiple = 8;
  const Weight& w = layer.weight;
  const int64_t outputs = w.rows(), padding = (kMultiple - outputs % kMultiple) % kMultiple;
  // Zero bytes are zeros in every stored type (Q8_0 blocks of scale 0 included), so the padding
  // rows stack onto the weight as they are.
  std::vector<uint8_t> zero_bytes(static_cast<size_t>(padding) * w.row_bytes(), 0);
  Weight zeros{w.type, compute::Shape{padding, w.cols()}, zero_bytes.data(), zero_bytes.size()};
  const Weight* const matrices[] = {&w, &zeros};
  gpu::Linear head{up.matrix(matrices), {}};
  if (layer.bias) {
    const std::pair<const Weight*, int64_t> biases[] = {{&*layer.bias, outputs},
                                                        {nullptr, padding}};
    head.bias = up.vector(biases);
  }
  return head;
}

// The subsampling's output linear with its input columns reordered from transformers' (channel,
// frequency) flattening, c·F + f, to (frequency, channel), f·C + c: the order in which the
// channels-last convolutions leave each time step, so no transpose runs before the product.
gpu::Linear frequency_major(gpu::Uploader& up, const nn::Linear& layer, int64_t channels) {
  const Weight& w = layer.weight;
  const int64_t outputs = w.rows(), inputs = w.cols(), bins = inputs / channels;
  if (bins * channels != inputs) {
    fail("Parakeet subsampling: a linear of ", inputs, " inputs after ", channels, " channels");
  }
  const std::vector<float> values = scaled_values(w, 1.0f);
  std::vector<float> reordered(values.size());
  for (int64_t o = 0; o < outputs; ++o) {
    const float* row = values.data() + o * inputs;
    float* target = reordered.data() + o * inputs;
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t f = 0; f < bins; ++f) target[f * channels + c] = row[c * bins + f];
    }
  }
  const Weight view = Weight::f32(reordered.data(), w.shape);
  return up.linear(view, layer.bias ? &*layer.bias : nullptr);
}

// A depthwise (or one-input-channel) convolution's kernel, PyTorch's [C, 1, k(, k)], tap-major
// [k(·k), C] as kernels_conformer.h's convolutions read it: a thread then loads the taps of its
// neighbouring channels as whole packs.
gpu::Buffer upload_tap_major(gpu::Uploader& up, const Weight& w) {
  const int64_t channels = w.shape[0], taps = w.shape.elements() / channels;
  const std::vector<float> values = scaled_values(w, 1.0f);
  const std::vector<float> reordered = gpu::tap_major(values.data(), channels, taps);
  return up.vector(Weight::f32(reordered.data(), compute::Shape{taps, channels}));
}

Subsampling subsampling(gpu::Uploader& up, const nn::ConvSubsampling& host) {
  Subsampling s;
  s.conv_weight = upload_tap_major(up, host.conv_weight);
  s.conv_bias = up.vector(host.conv_bias);
  for (const nn::ConvSubsampling::Stage& stage : host.stages) {
    s.stages.push_back({upload_tap_major(up, stage.depthwise_weight),
                        up.vector(stage.depthwise_bias), nn::upload(up, stage.pointwise)});
  }
  s.linear = frequency_major(up, host.linear, host.conv_weight.shape[0]);
  s.kernel = static_cast<int>(host.conv_weight.shape[2]);
  s.stride = host.stride;
  s.padding = host.padding;
  s.output_scale = host.output_scale;
  return s;
}

Block block(gpu::Uploader& up, const nn::ConformerBlock& host) {
  Block b;
  b.norm_ff1 = nn::upload(up, host.norm_ff1);
  b.ff1_fc1 = nn::upload(up, host.ff1.fc1);
  b.ff1_fc2 = halved(up, host.ff1.fc2);
  b.norm_attention = nn::upload(up, host.norm_attention);
  b.qkv = stacked_qkv(up, host.attention);
  b.positions = nn::upload(up, host.attention.pos_proj);
  b.content_bias = content_bias(up, host.attention);
  b.out = nn::upload(up, host.attention.out_proj);
  b.norm_conv = nn::upload(up, host.norm_conv);
  b.pointwise1 = nn::upload(up, host.conv.pointwise1);
  b.depthwise_weight = upload_tap_major(up, host.conv.depthwise_weight);
  b.depthwise_bias = up.vector(host.conv.depthwise_bias);
  b.pointwise2 = nn::upload(up, host.conv.pointwise2);
  b.norm_ff2 = nn::upload(up, host.norm_ff2);
  b.ff2_fc1 = nn::upload(up, host.ff2.fc1);
  b.ff2_fc2 = halved(up, host.ff2.fc2);
  b.norm_out = nn::upload(up, host.norm_out);
  return b;
}

Transducer transducer(gpu::Uploader& up, const TransducerWeights& host) {
  Transducer t;
  t.embedding = up.table(host.prediction.embedding, 0);
  t.tokens = host.prediction.embedding.shape[0];
  for (const nn::LstmLayer& layer : host.prediction.layers) {
    t.lstm.push_back({up.linear(layer.weight_ih, layer.bias_ih ? &*layer.bias_ih : nullptr),
                      up.linear(layer.weight_hh, layer.bias_hh ? &*layer.bias_hh : nullptr)});
  }
  t.encoder_projector = nn::upload(up, host.joint.encoder_projector);
  t.decoder_projector = nn::upload(up, host.joint.decoder_projector);
  t.head = padded_head(up, host.joint.head);
  return t;
}

}  // namespace

gpu::Element element_for(const parakeet::Weights& host) {
  const EncoderWeights& encoder = host.encoder;
  return gpu::activation_element(encoder.blocks.empty() ? encoder.subsampling.linear.weight.type
                                                        : encoder.blocks[0].ff1.fc1.weight.type);
}

Weights upload_weights(const parakeet::Weights& host, gpu::Element element) {
  gpu::Uploader up(element);
  Weights w;
  w.element = element;
  w.subsampling = subsampling(up, host.encoder.subsampling);
  for (const nn::ConformerBlock& host_block : host.encoder.blocks) {
    w.blocks.push_back(block(up, host_block));
  }
  if (host.ctc_head) w.ctc_head = padded_head(up, *host.ctc_head);
  if (host.transducer) w.transducer = transducer(up, *host.transducer);
  w.attention_scale = host.encoder.blocks.empty() ? 1.0f : host.encoder.blocks[0].attention.scale;
  up.finish();
  return w;
}

}  // namespace hark::parakeet::cuda
