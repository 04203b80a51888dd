#include "models/parakeet/cuda/forward.h"

#include <algorithm>

#include "base/error.h"
#include "compute/cuda/kernels_conformer.h"
#include "compute/ops.h"

namespace hark::parakeet::cuda {

namespace {

void* offset(void* base, int64_t elements, gpu::Element e) {
  return static_cast<uint8_t*>(base) + elements * static_cast<int64_t>(gpu::element_size(e));
}

const void* bias_of(const gpu::Linear& layer) {
  return layer.bias.bytes() > 0 ? layer.bias.data() : nullptr;
}

int64_t conv_output(int64_t size, const Subsampling& s) {
  return (size + 2 * s.padding - s.kernel) / s.stride + 1;
}

// `count` F32 host values to the pass's element type in `out` (reserved here), through
// `staging`, F32 on the device and already large enough: reserving it here could free it while
// an earlier conversion still reads it.
void upload_as(gpu::Pass& pass, const float* values, int64_t count, gpu::Buffer& staging,
               gpu::Buffer& out) {
  gpu::upload(values, sizeof(float) * count, staging.data(), pass.stream());
  out.reserve(pass.bytes(count));
  gpu::convert(gpu::Element::f32, staging.data(), pass.element(), out.data(), count, pass.stream());
}

// The feed-forward module, x += ½·fc2(silu(fc1(LN(x)))) (fc2 holds the ½).
void feed_forward(gpu::Pass& pass, int64_t rows, int64_t d, int64_t ffn, const gpu::LayerNorm& norm,
                  const gpu::Linear& fc1, const gpu::Linear& fc2, void* x, EncoderBuffers& s) {
  pass.layer_norm(x, rows, norm, d, s.normed.data());
  pass.linear(s.normed.data(), rows, fc1, s.hidden.data());
  gpu::silu(pass.element(), s.hidden.data(), rows * ffn, pass.stream());
  pass.linear(s.hidden.data(), rows, fc2, x, x);
}

}  // namespace

void encode(gpu::Pass& pass, const Config& config, const Weights& w,
            std::span<const std::vector<float>> features, std::span<const int64_t> encoder_frames,
            EncoderBuffers& s, Encoded& out) {
  const gpu::Element e = pass.element();
  const cudaStream_t stream = pass.stream();
  const int batch = static_cast<int>(features.size());
  const int64_t mels = config.n_mels, d = config.d_model;
  const int64_t channels = config.subsampling_channels;
  const Subsampling& sub = w.subsampling;
  const int stages = static_cast<int>(sub.stages.size()) + 1;

  // Valid rows per utterance before the first stage and after each: row s of `lengths`
  // [stages + 1, batch]; and the padded batch's sizes, time and frequency, at each.
  std::vector<int32_t> lengths(static_cast<size_t>(stages + 1) * batch);
  std::vector<int64_t> padded_time(stages + 1, 0), padded_freq(stages + 1, mels);
  for (int b = 0; b < batch; ++b) {
    int64_t frames = static_cast<int64_t>(features[b].size()) / mels;
    padded_time[0] = std::max(padded_time[0], frames);
    lengths[b] = static_cast<int32_t>(frames);
    for (int stage = 1; stage <= stages; ++stage) {
      frames = conv_output(frames, sub);
      lengths[static_cast<size_t>(stage) * batch + b] = static_cast<int32_t>(frames);
    }
    if (frames != encoder_frames[b]) {
      fail("Parakeet encoder: ", frames, " frames after subsampling, expected ", encoder_frames[b]);
    }
  }
  int64_t largest_image = padded_time[0] * mels;
  for (int stage = 1; stage <= stages; ++stage) {
    padded_time[stage] = conv_output(padded_time[stage - 1], sub);
    padded_freq[stage] = conv_output(padded_freq[stage - 1], sub);
    largest_image = std::max(largest_image, padded_time[stage] * padded_freq[stage] * channels);
  }
  const int64_t steps = padded_time[stages];
  const int64_t rows = batch * steps;
  s.lengths.reserve(lengths.size() * sizeof(int32_t));
  gpu::upload(lengths.data(), lengths.size() * sizeof(int32_t), s.lengths.data(), stream);
  auto lengths_at = [&](int stage) { return s.lengths.as<int32_t>() + stage * batch; };
  const int32_t* frames_dev = lengths_at(stages);

  // ---- Subsampling: channels-last images [batch, time, frequency, C] ----
  std::vector<float> padded(static_cast<size_t>(batch * padded_time[0] * mels), 0.0f);
  for (int b = 0; b < batch; ++b) {
    std::copy(features[b].begin(), features[b].end(),
              padded.begin() + static_cast<int64_t>(b) * padded_time[0] * mels);
  }
  // The relative positions of the padded length, shared by every block (docs/parakeet.md 4.2),
  // computed on the host once per call.
  compute::Tensor table;
  compute::relative_positions(steps, d, table);
  const int64_t table_rows = table.dim(0);
  s.staging.reserve(sizeof(float) * std::max<int64_t>(padded.size(), table.elements()));
  s.image.reserve(pass.bytes(largest_image * batch));
  s.image_spare.reserve(pass.bytes(largest_image * batch));
  upload_as(pass, padded.data(), static_cast<int64_t>(padded.size()), s.staging, s.image_spare);
  gpu::conv2d_one_channel(e, s.image_spare.data(), batch, padded_time[0], mels, lengths_at(0),
                          sub.conv_weight.data(), sub.conv_bias.data(), channels, sub.kernel,
                          sub.stride, sub.padding, /*relu=*/true, s.image.data(), stream);
  for (int stage = 2; stage <= stages; ++stage) {
    const SubsamplingStage& layer = sub.stages[stage - 2];
    gpu::depthwise_conv2d(e, s.image.data(), batch, padded_time[stage - 1], padded_freq[stage - 1],
                          channels, lengths_at(stage - 1), layer.depthwise_weight.data(),
                          layer.depthwise_bias.data(), sub.kernel, sub.stride, sub.padding,
                          s.image_spare.data(), stream);
    const int64_t pixels = batch * padded_time[stage] * padded_freq[stage];
    pass.linear(s.image_spare.data(), pixels, layer.pointwise, s.image.data());
    gpu::relu(e, s.image.data(), pixels * channels, stream);
  }
  // [rows, F, C] -> [rows, C, F]: each time step flattened channel-major, as transformers does.
  gpu::swap_last_axes(e, s.image.data(), rows, padded_freq[stages], channels, s.image_spare.data(),
                      stream);
  out.output = gpu::Buffer(pass.bytes(rows * d));
  void* x = out.output.data();
  pass.linear(s.image_spare.data(), rows, sub.linear, x);
  if (sub.output_scale != 1.0f) gpu::scale(e, x, rows * d, sub.output_scale, stream);

  // ---- Conformer blocks ----
  upload_as(pass, table.data(), table.elements(), s.staging, s.table);
  const int64_t ffn = config.ffn_dim, heads = config.heads, head_dim = config.head_dim();
  s.normed.reserve(pass.bytes(rows * d));
  s.hidden.reserve(pass.bytes(rows * std::max(ffn, 2 * d)));
  s.qkv.reserve(pass.bytes(rows * 3 * d));
  s.context.reserve(pass.bytes(rows * d));
  s.positions.reserve(pass.bytes(table_rows * d));
  for (const Block& block : w.blocks) {
    feed_forward(pass, rows, d, ffn, block.norm_ff1, block.ff1_fc1, block.ff1_fc2, x, s);

    pass.layer_norm(x, rows, block.norm_attention, d, s.normed.data());
    pass.linear(s.normed.data(), rows, block.qkv, s.qkv.data());
    pass.linear(s.table.data(), table_rows, block.positions, s.positions.data());
    void* qkv = s.qkv.data();
    gpu::rel_pos_attention(
        e, qkv, offset(qkv, d, e), offset(qkv, 2 * d, e), 3 * d, s.positions.data(), d,
        block.bias_u.data(), block.bias_v.data(), frames_dev, batch, steps, static_cast<int>(heads),
        static_cast<int>(head_dim), w.attention_scale, s.context.data(), d, stream);
    pass.linear(s.context.data(), rows, block.out, x, x);

    // Conv module: pointwise1 -> GLU -> depthwise (+ folded BatchNorm) -> SiLU -> pointwise2.
    pass.layer_norm(x, rows, block.norm_conv, d, s.normed.data());
    pass.linear(s.normed.data(), rows, block.pointwise1, s.hidden.data());
    gpu::glu(e, s.hidden.data(), rows, d, s.normed.data(), stream);
    gpu::depthwise_conv1d(e, s.normed.data(), batch, steps, d, frames_dev,
                          block.depthwise_weight.data(), block.depthwise_bias.data(),
                          config.conv_kernel, /*silu=*/true, s.context.data(), stream);
    pass.linear(s.context.data(), rows, block.pointwise2, x, x);

    feed_forward(pass, rows, d, ffn, block.norm_ff2, block.ff2_fc1, block.ff2_fc2, x, s);
    pass.layer_norm(x, rows, block.norm_out, d, x);
  }

  // ---- The head's input ----
  if (w.ctc_head) {
    const int64_t vocab = config.vocab_size;
    out.head = gpu::Buffer(sizeof(float) * rows * vocab);
    out.frame_tokens = gpu::Buffer(sizeof(int32_t) * rows);
    pass.linear_f32_out(x, rows, w.ctc_head->weight, out.head.as<float>());
    gpu::finish_logits(e, out.head.as<float>(), bias_of(*w.ctc_head), rows, vocab, vocab,
                       out.frame_tokens.as<int32_t>(), nullptr, stream);
  } else {
    out.head = gpu::Buffer(pass.bytes(rows * config.joint_hidden));
    pass.linear(x, rows, w.transducer->encoder_projector, out.head.data());
  }
  out.batch = batch;
  out.padded_frames = steps;
  out.frames.assign(encoder_frames.begin(), encoder_frames.end());
}

void start_prediction(gpu::Pass& pass, const Config& config, const Weights& w, int batch,
                      DecoderBuffers& s) {
  const cudaStream_t stream = pass.stream();
  const int64_t hidden = config.predictor_hidden, joint = config.joint_hidden;
  s.batch = batch;
  s.h.clear();
  s.c.clear();
  // Every buffer starts as zeros: rows that a step leaves alone are never garbage.
  auto zeros = [&](size_t bytes) {
    gpu::Buffer buffer(bytes);
    gpu::check(cudaMemsetAsync(buffer.data(), 0, bytes, stream), "clear");
    return buffer;
  };
  for (size_t l = 0; l < w.transducer->lstm.size(); ++l) {
    s.h.push_back(zeros(pass.bytes(batch * hidden)));
    s.c.push_back(zeros(sizeof(float) * batch * hidden));
  }
  s.prediction = zeros(pass.bytes(batch * joint));
  s.ids = zeros(sizeof(int32_t) * batch);
  s.embedded = zeros(pass.bytes(batch * hidden));
  s.gates = zeros(pass.bytes(batch * 4 * hidden));
  s.projected = zeros(pass.bytes(batch * joint));
  s.rows = zeros(sizeof(int32_t) * 2 * batch);
  s.hidden = zeros(pass.bytes(batch * joint));
  s.logits = zeros(sizeof(float) * batch * config.head_outputs());
  s.decisions = zeros(sizeof(int32_t) * 2 * batch);
  predict(pass, config, w, std::vector<int32_t>(batch, config.blank_id), s);
}

void predict(gpu::Pass& pass, const Config& config, const Weights& w, std::span<const int32_t> ids,
             DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const cudaStream_t stream = pass.stream();
  const Transducer& t = *w.transducer;
  const int64_t batch = s.batch, hidden = config.predictor_hidden;
  if (static_cast<int64_t>(ids.size()) != batch) {
    fail("Parakeet prediction: ", ids.size(), " tokens for ", batch, " utterances");
  }
  const auto* ids_dev = s.ids.as<int32_t>();
  gpu::upload(ids.data(), ids.size_bytes(), s.ids.data(), stream);
  gpu::embedding(e, t.embedding.data(), ids_dev, batch, hidden, s.embedded.data(), stream);
  const void* input = s.embedded.data();
  for (size_t l = 0; l < t.lstm.size(); ++l) {
    pass.linear(input, batch, t.lstm[l].input, s.gates.data());
    pass.linear(s.h[l].data(), batch, t.lstm[l].hidden, s.gates.data(), s.gates.data());
    gpu::lstm_cell(e, s.gates.data(), ids_dev, batch, hidden, s.c[l].as<float>(), s.h[l].data(),
                   stream);
    input = s.h[l].data();
  }
  pass.linear(input, batch, t.decoder_projector, s.projected.data());
  gpu::copy_rows_where(e, s.projected.data(), ids_dev, batch, config.joint_hidden,
                       s.prediction.data(), stream);
}

std::vector<int32_t> joint(gpu::Pass& pass, const Config& config, const Weights& w,
                           const Encoded& encoded, std::span<const int32_t> rows,
                           DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const cudaStream_t stream = pass.stream();
  const Transducer& t = *w.transducer;
  const int64_t n = static_cast<int64_t>(rows.size()) / 2;
  if (n < 1 || n > s.batch) fail("Parakeet joint: ", n, " steps for ", s.batch, " utterances");
  const int64_t outputs = config.head_outputs(), vocab = config.vocab_size;
  gpu::upload(rows.data(), rows.size_bytes(), s.rows.data(), stream);
  gpu::joint_hidden(e, encoded.head.data(), s.prediction.data(), s.rows.as<int32_t>(), n,
                    config.joint_hidden, s.hidden.data(), stream);
  pass.linear_f32_out(s.hidden.data(), n, t.head.weight, s.logits.as<float>());
  int32_t* decisions = s.decisions.as<int32_t>();
  gpu::finish_logits(e, s.logits.as<float>(), bias_of(t.head), n, outputs, vocab, decisions,
                     config.head == Head::tdt ? decisions + n : nullptr, stream);
  std::vector<int32_t> host(static_cast<size_t>(2 * n), 0);
  gpu::download(decisions, host.size() * sizeof(int32_t), host.data(), stream);
  gpu::check(cudaStreamSynchronize(stream), "joint network");
  return host;
}

}  // namespace hark::parakeet::cuda
