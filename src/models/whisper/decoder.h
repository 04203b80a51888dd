// Whisper's text decoder: token + position embeddings, pre-LN blocks (causal self-attention over
// a K/V cache, cross-attention over the encoded window, feed-forward), a final layer norm, and
// logits against the token embedding (tied output projection).
#pragma once

#include <span>
#include <vector>

#include "models/whisper/weights.h"

namespace hark::whisper {

// Cross-attention keys and values of every decoder layer for one window: computed (and packed
// for the CPU's attention) once in encode() and shared by every sequence decoded on that window.
struct CrossKv {
  std::vector<compute::PackedKv> layers;
};

void project_cross_kv(const DecoderWeights& weights, const compute::Tensor& frames, CrossKv& cross);

// What n parallel sequences carry from step to step: the self-attention cache of every layer,
// plus the buffers a step writes to, reused so that a decode step does not allocate.
struct DecoderState {
  DecoderState(const Config& config, int n_sequences);

  int n_sequences = 0;
  int length = 0;  // positions in every cache
  std::vector<nn::KvCache> caches;
  compute::Tensor x, h, hidden, position_rows, selected;
  nn::AttentionScratch scratch;
  std::vector<int32_t> ids, position_ids;
  std::vector<int64_t> rows;
};

// Appends `steps` tokens to each sequence (tokens sequence-major: [n_sequences x steps]) and
// writes logits [n_sequences x positions.size(), vocab] for the appended positions `positions`
// (0 = the first appended). Throws hark::Error on a token outside the vocabulary, a position
// outside the step, or more tokens than max_target_positions; the state is unchanged then.
void run_decoder(const Config& config, const DecoderWeights& weights, const CrossKv& cross,
                 DecoderState& state, std::span<const int32_t> tokens, int steps,
                 std::span<const int> positions, compute::Tensor& logits);

}  // namespace hark::whisper
