#include "models/parakeet/cuda/forward.h"

#include <algorithm>
#include <limits>

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

// Batches of up to this many encoder rows (a clip of 80 s, eight of 10 s) run the Conformer
// blocks as a replayed graph: below it, launching them costs more than their work.
constexpr int64_t kReplayedRows = 1024;

// The feed-forward module, x += ½·fc2(silu(fc1(LN(x)))) (fc2 holds the ½).
void feed_forward(gpu::Pass& pass, int64_t rows, int64_t d, const gpu::LayerNorm& norm,
                  const gpu::Linear& fc1, const gpu::Linear& fc2, void* x, EncoderBuffers& s) {
  pass.mark("layer norms");
  pass.layer_norm(x, rows, norm, d, s.normed.data());
  pass.mark("feed-forward products");
  pass.activation_linear(s.normed.data(), rows, fc1, gpu::Activation::silu, s.hidden.data());
  pass.linear(s.hidden.data(), rows, fc2, x, x);
}

}  // namespace

void encode(gpu::Pass& pass, const Config& config, const Weights& w, const Features& features,
            std::span<const int64_t> encoder_frames, EncoderBuffers& s, Encoded& out) {
  const gpu::Element e = pass.element();
  const cudaStream_t stream = pass.stream();
  const int batch = static_cast<int>(features.frames.size());
  const int64_t mels = config.n_mels, d = config.d_model;
  const int64_t channels = config.subsampling_channels;
  const Subsampling& sub = w.subsampling;
  const int stages = static_cast<int>(sub.stages.size()) + 1;

  // Valid rows per utterance before the first stage and after each: row s of `lengths`
  // [stages + 2, batch], then (row stages + 1) where each utterance's rows start when the blocks
  // run packed; and the padded batch's sizes, time and frequency, at each stage.
  std::vector<int32_t> lengths(static_cast<size_t>(stages + 2) * batch);
  std::vector<int64_t> padded_time(stages + 1, 0), padded_freq(stages + 1, mels);
  for (int b = 0; b < batch; ++b) {
    int64_t frames = features.frames[b];
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
  // The blocks run on the valid rows alone, each utterance's back to back (packed): a batch of
  // utterances of many lengths (files, a recording's last piece) then costs no padding there,
  // where almost all the time goes. Only the subsampling's images stay padded.
  int64_t rows = 0;
  for (int b = 0; b < batch; ++b) {
    lengths[static_cast<size_t>(stages + 1) * batch + b] = static_cast<int32_t>(rows);
    rows += encoder_frames[b];
  }
  if (padded_time[0] > features.padded_frames) {
    fail("Parakeet encoder: features of ", padded_time[0], " frames in rows of ",
         features.padded_frames);
  }
  // The first convolution and the second stage's depthwise convolution run as one kernel when
  // they can: the first stage's image, the largest, then never exists in memory.
  const bool fused = stages >= 2 && gpu::conv2d_one_channel_then_depthwise_supported(
                                        sub.kernel, sub.stride, sub.padding, channels);
  // The largest image the subsampling stores (the features, then each stage's), per utterance.
  int64_t largest_image = padded_time[0] * mels;
  for (int stage = 1; stage <= stages; ++stage) {
    padded_time[stage] = conv_output(padded_time[stage - 1], sub);
    padded_freq[stage] = conv_output(padded_freq[stage - 1], sub);
    if (fused && stage == 1) continue;
    largest_image = std::max(largest_image, padded_time[stage] * padded_freq[stage] * channels);
  }
  const int64_t steps = padded_time[stages];
  const int64_t padded_rows = batch * steps;
  s.lengths.reserve(lengths.size() * sizeof(int32_t));
  gpu::upload(lengths.data(), lengths.size() * sizeof(int32_t), s.lengths.data(), stream);
  auto lengths_at = [&](int stage) { return s.lengths.as<int32_t>() + stage * batch; };
  const int32_t* frames_dev = lengths_at(stages);
  const int32_t* starts_dev = lengths_at(stages + 1);

  // ---- Subsampling: channels-last images [batch, time, frequency, C] ----
  // The relative positions of the padded length, shared by every block (docs/parakeet.md 4.2),
  // computed on the host once per call.
  compute::Tensor table;
  compute::relative_positions(steps, d, table);
  const int64_t table_rows = table.dim(0);
  const int64_t image_values = batch * padded_time[0] * mels;
  pass.mark("encoder allocations");
  s.staging.reserve(sizeof(float) * std::max<int64_t>(image_values, table.elements()));
  s.image.reserve(pass.bytes(largest_image * batch));
  s.image_spare.reserve(pass.bytes(largest_image * batch));
  // The first padded_time[0] rows of each utterance's features (rows past its own frames are
  // masked by the convolution) in one strided copy, converted to the element type. They go where
  // the first kernel reads them, and that writes to the other image buffer: unfused, s.image
  // (the first stage's output, which the loop below reads); fused, s.image_spare (the second
  // stage's depthwise output, which the loop's pointwise convolution reads).
  pass.mark("subsampling: features in");
  void* features_in = fused ? s.image.data() : s.image_spare.data();
  void* features_f32 = e == gpu::Element::f32 ? features_in : s.staging.data();
  const size_t image_row_bytes = sizeof(float) * static_cast<size_t>(padded_time[0] * mels);
  gpu::check(cudaMemcpy2DAsync(features_f32, image_row_bytes, features.values,
                               sizeof(float) * static_cast<size_t>(features.padded_frames * mels),
                               image_row_bytes, static_cast<size_t>(batch),
                               cudaMemcpyDeviceToDevice, stream),
             "copy the features");
  if (e != gpu::Element::f32) {
    gpu::convert(gpu::Element::f32, s.staging.data(), e, features_in, image_values, stream);
  }
  if (fused) {
    pass.mark("subsampling: first convolution + depthwise");
    gpu::conv2d_one_channel_then_depthwise(
        e, features_in, batch, padded_time[0], mels, lengths_at(0), lengths_at(1),
        sub.conv_weight.data(), sub.conv_bias.data(), channels,
        sub.stages[0].depthwise_weight.data(), sub.stages[0].depthwise_bias.data(), sub.kernel,
        sub.stride, sub.padding, s.image_spare.data(), stream);
  } else {
    pass.mark("subsampling: first convolution");
    gpu::conv2d_one_channel(e, features_in, batch, padded_time[0], mels, lengths_at(0),
                            sub.conv_weight.data(), sub.conv_bias.data(), channels, sub.kernel,
                            sub.stride, sub.padding, /*relu=*/true, s.image.data(), stream);
  }
  for (int stage = 2; stage <= stages; ++stage) {
    const SubsamplingStage& layer = sub.stages[stage - 2];
    // Fused, the second stage's depthwise output is in s.image_spare already.
    if (!fused || stage > 2) {
      pass.mark("subsampling: depthwise convolutions");
      gpu::depthwise_conv2d(e, s.image.data(), batch, padded_time[stage - 1],
                            padded_freq[stage - 1], channels, lengths_at(stage - 1),
                            layer.depthwise_weight.data(), layer.depthwise_bias.data(), sub.kernel,
                            sub.stride, sub.padding, s.image_spare.data(), stream);
    }
    const int64_t pixels = batch * padded_time[stage] * padded_freq[stage];
    pass.mark("subsampling: pointwise convolutions");
    pass.linear(s.image_spare.data(), pixels, layer.pointwise, s.image.data());
    gpu::relu(e, s.image.data(), pixels * channels, stream);
  }
  // Each time step [F, C] flattened as it is: the linear's columns are in that order
  // (weights.h), so no transpose to transformers' [C, F] runs here. Its valid rows are packed
  // first, so that the linear computes no padding either.
  pass.mark("subsampling: output linear");
  const int64_t image_row = padded_freq[stages] * channels;
  gpu::copy_sequence_rows(s.image.data(), nullptr, steps, s.image_spare.data(), starts_dev, 0,
                          frames_dev, batch, steps, pass.bytes(image_row), stream);
  s.x.reserve(pass.bytes(rows * d));
  void* x = s.x.data();
  pass.linear(s.image_spare.data(), rows, sub.linear, x);
  if (sub.output_scale != 1.0f) gpu::scale(e, x, rows * d, sub.output_scale, stream);

  // ---- Conformer blocks ----
  pass.mark("encoder allocations");
  upload_as(pass, table.data(), table.elements(), s.staging, s.table);
  const int64_t ffn = config.ffn_dim, heads = config.heads, head_dim = config.head_dim();
  s.normed.reserve(pass.bytes(rows * d));
  s.hidden.reserve(pass.bytes(rows * std::max(ffn, 2 * d)));
  s.qkv.reserve(pass.bytes(rows * 3 * d));
  s.context.reserve(pass.bytes(rows * d));
  s.positions.reserve(pass.bytes(table_rows * d));
  auto blocks = [&] {
    for (const Block& block : w.blocks) {
      feed_forward(pass, rows, d, block.norm_ff1, block.ff1_fc1, block.ff1_fc2, x, s);

      pass.mark("layer norms");
      pass.layer_norm(x, rows, block.norm_attention, d, s.normed.data());
      pass.mark("attention projections");
      pass.linear(s.normed.data(), rows, block.qkv, s.qkv.data());
      pass.linear(s.table.data(), table_rows, block.positions, s.positions.data());
      void* qkv = s.qkv.data();
      // The product's queries are q + v' (weights.h, Block::qkv).
      pass.rel_pos_attention(qkv, offset(qkv, d, e), offset(qkv, 2 * d, e), 3 * d,
                             s.positions.data(), d, block.content_bias.data(), frames_dev,
                             starts_dev, batch, steps, static_cast<int>(heads),
                             static_cast<int>(head_dim), w.attention_scale, s.context.data(), d);
      pass.mark("attention projections");
      pass.linear(s.context.data(), rows, block.out, x, x);

      // Conv module: pointwise1 -> GLU -> depthwise (+ folded BatchNorm) -> SiLU -> pointwise2.
      pass.mark("layer norms");
      pass.layer_norm(x, rows, block.norm_conv, d, s.normed.data());
      pass.mark("convolution products");
      pass.linear(s.normed.data(), rows, block.pointwise1, s.hidden.data());
      pass.mark("GLU, depthwise convolution");
      gpu::glu_depthwise_conv1d(e, s.hidden.data(), batch, steps, d, frames_dev, starts_dev,
                                block.depthwise_weight.data(), block.depthwise_bias.data(),
                                config.conv_kernel, /*silu=*/true, s.context.data(), stream);
      pass.mark("convolution products");
      pass.linear(s.context.data(), rows, block.pointwise2, x, x);

      feed_forward(pass, rows, d, block.norm_ff2, block.ff2_fc1, block.ff2_fc2, x, s);
      pass.mark("layer norms");
      pass.layer_norm(x, rows, block.norm_out, d, x);
    }
  };
  // Small batches replay the blocks as a graph: x, like every buffer they use, is the scratch's,
  // at the same address from one call to the next.
  if (rows <= kReplayedRows) {
    // ~20 launches per block cost more than a small batch's work in them: replayed, they cost
    // one. The key: the shapes and every buffer the launches read or write.
    std::vector<int64_t> key = pass.scratch_key();
    for (const gpu::Buffer* buffer :
         {&s.x, &s.lengths, &s.normed, &s.hidden, &s.qkv, &s.context, &s.table, &s.positions}) {
      key.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(buffer->data())));
    }
    key.insert(key.end(), {batch, steps, rows});
    pass.mark("Conformer blocks (replayed graph)");
    s.blocks.run(std::move(key), stream, blocks);
  } else {
    blocks();
  }
  pass.mark("head input");

  // ---- The output, padded again, and the head's input ----
  // Rows b · steps + t as the decoders and EncodedBatch read them; rows past an utterance's
  // frames are zeros.
  out.output = gpu::Buffer(pass.bytes(padded_rows * d), stream);
  gpu::check(cudaMemsetAsync(out.output.data(), 0, pass.bytes(padded_rows * d), stream),
             "clear the encoder output");
  gpu::copy_sequence_rows(x, starts_dev, 0, out.output.data(), nullptr, steps, frames_dev, batch,
                          steps, pass.bytes(d), stream);
  if (w.ctc_head) {
    const int64_t vocab = config.vocab_size;
    out.head_stride = w.ctc_head->out_features();
    out.head = gpu::Buffer(sizeof(float) * padded_rows * out.head_stride, stream);
    out.frame_tokens = gpu::Buffer(sizeof(int32_t) * padded_rows, stream);
    pass.linear_f32_out(out.output.data(), padded_rows, w.ctc_head->weight, out.head.as<float>());
    gpu::finish_logits(e, out.head.as<float>(), out.head_stride, bias_of(*w.ctc_head), padded_rows,
                       vocab, vocab, out.frame_tokens.as<int32_t>(), nullptr, stream);
  } else {
    out.head_stride = config.joint_hidden;
    out.head = gpu::Buffer(pass.bytes(padded_rows * out.head_stride), stream);
    pass.linear(out.output.data(), padded_rows, w.transducer->encoder_projector, out.head.data());
  }
  out.batch = batch;
  out.padded_frames = steps;
  out.frames.assign(encoder_frames.begin(), encoder_frames.end());
  pass.finish_stages();
}

void start_prediction(gpu::Pass& pass, const Config& config, const Weights& w, int batch,
                      int window, DecoderBuffers& s) {
  const cudaStream_t stream = pass.stream();
  const int64_t hidden = config.predictor_hidden, joint = config.joint_hidden;
  const int64_t joint_rows = int64_t{batch} * window;
  s.batch = batch;
  s.window = window;
  // Every buffer starts as zeros: rows that a step leaves alone are never garbage. Buffers only
  // grow, so that decodes of one batch size keep their addresses (and their step's graph).
  auto zeros = [&](gpu::Buffer& buffer, size_t bytes) {
    buffer.reserve(bytes);
    gpu::check(cudaMemsetAsync(buffer.data(), 0, bytes, stream), "clear");
  };
  const size_t layers = w.transducer->lstm.size();
  s.h.resize(layers);
  s.c.resize(layers);
  for (size_t l = 0; l < layers; ++l) {
    zeros(s.h[l], pass.bytes(batch * hidden));
    zeros(s.c[l], sizeof(float) * batch * hidden);
  }
  zeros(s.prediction, pass.bytes(batch * joint));
  zeros(s.ids, sizeof(int32_t) * batch);
  zeros(s.gates, pass.bytes(batch * 4 * hidden));
  zeros(s.hidden, pass.bytes(joint_rows * joint));
  zeros(s.logits, sizeof(float) * joint_rows * w.transducer->head.out_features());
  zeros(s.decisions, sizeof(int32_t) * 2 * joint_rows);
  const std::vector<int32_t> blanks(batch, config.blank_id);
  // A copy from pageable memory has read it when the call returns.
  gpu::upload(blanks.data(), blanks.size() * sizeof(int32_t), s.ids.data(), stream);
  predict(pass, config, w, s);
}

void precompute_input_gates(gpu::Pass& pass, Weights& w) {
  if (!w.transducer) return;
  Transducer& t = *w.transducer;
  if (t.lstm.empty()) fail("Parakeet on CUDA: a prediction network without LSTM layers");
  t.input_gates = gpu::Buffer(pass.bytes(t.tokens * t.lstm[0].input.out_features()));
  pass.linear(t.embedding.data(), t.tokens, t.lstm[0].input, t.input_gates.data());
  gpu::check(cudaStreamSynchronize(pass.stream()), "the prediction network's input gates");
  t.embedding = {};
}

void predict(gpu::Pass& pass, const Config& config, const Weights& w, DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const cudaStream_t stream = pass.stream();
  const Transducer& t = *w.transducer;
  const int64_t batch = s.batch, hidden = config.predictor_hidden;
  const auto* ids = s.ids.as<int32_t>();
  for (size_t l = 0; l < t.lstm.size(); ++l) {
    // gates = h·W_hhᵀ + b_hh + x·W_ihᵀ + b_ih, the last term looked up for the first layer (its x
    // is the token's embedding) and multiplied for the others (x: the layer below's new h).
    if (l > 0) pass.linear(s.h[l - 1].data(), batch, t.lstm[l].input, s.gates.data());
    pass.linear(s.h[l].data(), batch, t.lstm[l].hidden, s.gates.data(),
                l > 0 ? s.gates.data() : nullptr);
    gpu::lstm_cell(e, s.gates.data(), l == 0 ? t.input_gates.data() : nullptr, ids, batch, hidden,
                   s.c[l].as<float>(), s.h[l].data(), stream);
  }
  // Rows that took no token keep their h, so their projection comes out as it was.
  pass.linear(s.h.back().data(), batch, t.decoder_projector, s.prediction.data());
}

namespace {

// Where Search::values keeps each array.
enum SearchPart { kFrames, kFrame, kSteps, kSymbols, kDecoding };

int32_t* search_part(const Search& search, SearchPart part) {
  return search.values.as<int32_t>() + static_cast<int64_t>(part) * search.batch;
}

}  // namespace

gpu::TransducerState Search::state() const {
  gpu::TransducerState state;
  state.frames = search_part(*this, kFrames);
  state.frame = search_part(*this, kFrame);
  state.steps = search_part(*this, kSteps);
  state.symbols = search_part(*this, kSymbols);
  state.decoding = search_part(*this, kDecoding);
  state.count = state.decoding + 1;
  state.emissions = emissions.as<int32_t>();
  state.capacity = capacity;
  return state;
}

void start_search(gpu::Pass& pass, const Config& config, const Encoded& encoded,
                  const EmissionPattern* pattern, Search& search) {
  const int batch = encoded.batch;
  if (batch < 1 || encoded.frames.size() != static_cast<size_t>(batch)) {
    fail("Parakeet decode: ", encoded.frames.size(), " frame counts for ", batch, " utterances");
  }
  search.batch = batch;
  gpu::TransducerRules& rules = search.rules;
  rules.tdt = config.head == Head::tdt;
  rules.blank = config.blank_id;
  rules.vocab_size = config.vocab_size;
  rules.max_symbols_per_step = config.max_symbols_per_step;
  rules.pattern_frames_per_token = pattern != nullptr ? pattern->frames_per_token : 0;
  rules.pattern_duration = pattern != nullptr ? pattern->duration : 1;

  // TransducerSearch's bound on steps, max_symbols_per_step · T, bounds what one utterance can
  // emit (one token per decision at most).
  const int64_t most_frames = *std::max_element(encoded.frames.begin(), encoded.frames.end());
  const int64_t capacity = std::max<int64_t>(1, int64_t{config.max_symbols_per_step} * most_frames);
  if (capacity > std::numeric_limits<int32_t>::max() / 3) {
    fail("Parakeet decode: ", most_frames, " frames at ", config.max_symbols_per_step,
         " symbols per step are too many to count");
  }
  search.capacity = static_cast<int32_t>(capacity);

  // The frames, zeros for the frame pointers, steps and symbols, the utterances that decode (those
  // with frames, as TransducerSearch::next_step says before any decision; every step rewrites
  // it), and zero emissions.
  std::vector<int32_t> values(static_cast<size_t>(4 * batch + 1 + batch), 0);
  int32_t& decoding = values[static_cast<size_t>(kDecoding) * batch];
  for (int b = 0; b < batch; ++b) {
    values[b] = static_cast<int32_t>(encoded.frames[b]);
    if (encoded.frames[b] > 0) ++decoding;
  }
  search.values.reserve(values.size() * sizeof(int32_t));
  // A copy from pageable memory has read it when the call returns.
  gpu::upload(values.data(), values.size() * sizeof(int32_t), search.values.data(), pass.stream());
  search.emissions.reserve(static_cast<size_t>(capacity) * batch * 3 * sizeof(int32_t));
}

void search_step(gpu::Pass& pass, const Config& config, const Weights& w, const Encoded& encoded,
                 Search& search, DecoderBuffers& s) {
  const gpu::Element e = pass.element();
  const cudaStream_t stream = pass.stream();
  const Transducer& t = *w.transducer;
  const gpu::TransducerState state = search.state();
  const int64_t n = int64_t{s.batch} * s.window;
  gpu::joint_hidden(e, encoded.head.data(), encoded.padded_frames, s.prediction.data(), state,
                    s.batch, s.window, config.joint_hidden, s.hidden.data(), stream);
  pass.linear_f32_out(s.hidden.data(), n, t.head.weight, s.logits.as<float>());
  int32_t* decisions = s.decisions.as<int32_t>();
  int32_t* durations = search.rules.tdt ? decisions + n : nullptr;
  gpu::finish_logits(e, s.logits.as<float>(), t.head.out_features(), bias_of(t.head), n,
                     config.head_outputs(), config.vocab_size, decisions, durations, stream);
  gpu::transducer_decide(search.rules, state, s.batch, s.window, decisions, durations,
                         s.ids.as<int32_t>(), stream);
  predict(pass, config, w, s);
}

int32_t still_decoding(gpu::Pass& pass, const Search& search, std::vector<int32_t>& count) {
  // decoding, then the counts: one copy.
  std::vector<int32_t> values(static_cast<size_t>(1 + search.batch));
  gpu::download(search_part(search, kDecoding), values.size() * sizeof(int32_t), values.data(),
                pass.stream());
  gpu::check(cudaStreamSynchronize(pass.stream()), "greedy search");
  count.assign(values.begin() + 1, values.end());
  return values[0];
}

std::vector<std::vector<Emission>> take_emissions(gpu::Pass& pass, const Search& search,
                                                  std::span<const int32_t> count) {
  const int batch = search.batch;
  const int32_t most = count.empty() ? 0 : *std::max_element(count.begin(), count.end());
  if (most > search.capacity) {
    fail("Parakeet decode: ", most, " emissions in ", search.capacity, " slots");
  }
  // Slot-major: the first `most` slots of every utterance are one prefix.
  std::vector<int32_t> slots(static_cast<size_t>(most) * batch * 3);
  gpu::download(search.emissions.data(), slots.size() * sizeof(int32_t), slots.data(),
                pass.stream());
  gpu::check(cudaStreamSynchronize(pass.stream()), "emissions");
  std::vector<std::vector<Emission>> emissions(batch);
  for (int b = 0; b < batch; ++b) {
    for (int32_t j = 0; j < count[b]; ++j) {
      const int32_t* slot = slots.data() + (static_cast<int64_t>(j) * batch + b) * 3;
      emissions[b].push_back({slot[0], slot[1], slot[2]});
    }
  }
  return emissions;
}

}  // namespace hark::parakeet::cuda
