#include "models/whisper/decoder.h"

#include "base/error.h"

namespace hark::whisper {

using compute::Shape;
using compute::Tensor;

void project_cross_kv(const DecoderWeights& weights, const Tensor& frames, CrossKv& cross) {
  cross.layers.resize(weights.layers.size());
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    weights.layers[l].cross_attention.project_memory(frames, cross.layers[l]);
  }
}

DecoderState::DecoderState(const Config& config, int sequences) : n_sequences(sequences) {
  for (int l = 0; l < config.decoder_layers; ++l) {
    caches.emplace_back(sequences, config.max_target_positions, config.d_model);
  }
}

void run_decoder(const Config& config, const DecoderWeights& weights, const CrossKv& cross,
                 DecoderState& state, std::span<const int32_t> tokens, int steps,
                 std::span<const int> positions, Tensor& logits) {
  const int64_t n = state.n_sequences, d = config.d_model;
  // Everything is checked before any cache is touched.
  if (steps < 1 || static_cast<int64_t>(tokens.size()) != n * steps) {
    fail("whisper decoder: ", tokens.size(), " tokens for ", n, " sequences of ", steps, " steps");
  }
  if (state.length + steps > config.max_target_positions) {
    fail("whisper decoder: ", state.length, " + ", steps,
         " tokens exceed the context of max_target_positions = ", config.max_target_positions);
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= config.vocab_size) {
      fail("whisper decoder: token ", id, " is outside the vocabulary of ", config.vocab_size);
    }
  }
  for (int p : positions) {
    if (p < 0 || p >= steps) fail("whisper decoder: logits asked for position ", p, " of ", steps);
  }

  state.position_ids.clear();
  for (int64_t s = 0; s < n; ++s) {
    for (int t = 0; t < steps; ++t) state.position_ids.push_back(state.length + t);
  }
  Tensor& x = state.x;
  compute::embedding(weights.embed_tokens, tokens, x);
  compute::embedding(weights.positions, state.position_ids, state.position_rows);
  compute::add(x, state.position_rows, x);
  x.reshape(Shape{n, steps, d});

  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const DecoderLayer& layer = weights.layers[l];
    layer.self_attention_norm.forward(x, state.h);
    layer.self_attention.cached_self_attention(state.h, state.caches[l], /*causal=*/true,
                                               state.scratch, x, &x);
    layer.cross_attention_norm.forward(x, state.h);
    layer.cross_attention.cross_attention(state.h, cross.layers[l], state.scratch, x, &x);
    layer.ffn_norm.forward(x, state.h);
    layer.ffn.forward(state.h, state.hidden, x, &x);
  }
  state.length += steps;

  // Only the rows whose logits are wanted go through the final norm and the (large) output
  // projection.
  state.rows.clear();
  for (int64_t s = 0; s < n; ++s) {
    for (int p : positions) state.rows.push_back(s * steps + p);
  }
  compute::gather_rows(x, state.rows, state.selected);
  weights.final_norm.forward(state.selected, state.selected);
  compute::linear(state.selected, weights.embed_tokens, logits);
}

}  // namespace hark::whisper
