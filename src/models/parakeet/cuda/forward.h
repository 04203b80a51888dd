// Parakeet's forward pass on the GPU, written against compute/cuda's Pass: the encoder over a
// padded batch of utterances with its head's input, and the steps of greedy transducer decoding
// (the joint network over a window of frames, the search's decisions, the prediction network for
// the utterances that emitted), all on the device, which model_cuda.cpp replays until every
// utterance is done.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/cuda/graph.h"
#include "compute/cuda/kernels_conformer.h"
#include "models/parakeet/cuda/weights.h"
#include "models/parakeet/model.h"

namespace hark::parakeet::cuda {

// Scratch of the encoder, and the graph of its Conformer blocks for small batches.
struct EncoderBuffers {
  gpu::Buffer staging;  // F32 values: the features (16-bit element types), the position table
  gpu::Buffer lengths, image, image_spare, normed, hidden, qkv, context, table, positions;
  gpu::Buffer x;  // the blocks' activations, packed (forward_cuda.cpp)
  gpu::ReplayedGraph blocks;

  size_t bytes() const {
    size_t total = 0;
    for (const gpu::Buffer* buffer : {&staging, &lengths, &image, &image_spare, &normed, &hidden,
                                      &qkv, &context, &table, &positions, &x}) {
      total += buffer->bytes();
    }
    return total;
  }
};

// A batch's encoder output: rows b · padded_frames + t, those at t ≥ frames[b] zeros (head rows
// there not meaningful).
// Its buffers are stream-ordered on the encoder's stream (Buffer(bytes, stream)).
struct Encoded {
  int batch = 0;
  int64_t padded_frames = 0;
  std::vector<int64_t> frames;  // valid encoder frames per utterance
  gpu::Buffer output;           // [rows, d], the element type: the last block's output
  // CTC: F32 logits (bias included) in rows of head_stride values, the first V of which are
  // the logits (the head is padded, weights.h), and frame_tokens, their argmax per row (int32);
  // transducers: the joint network's encoder projection [rows, joint_hidden], the element type
  // (head_stride = joint_hidden).
  gpu::Buffer head, frame_tokens;
  int64_t head_stride = 0;
};

// A batch's features on the device (the front end's output, features/mel_cuda.h): F32
// [batch, padded_frames, n_mels], time-major; utterance b's first frames[b] rows are its
// features L_b (Model::features), the rows after them are not read.
struct Features {
  const float* values = nullptr;
  int64_t padded_frames = 0;  // rows per utterance, at least every frames[b]
  std::span<const int64_t> frames;
};

// The encoder over the batch `features` holds; encoder_frames[b] is utterance b's encoder frames,
// checked against the subsampling.
void encode(gpu::Pass& pass, const Config& config, const Weights& w, const Features& features,
            std::span<const int64_t> encoder_frames, EncoderBuffers& scratch, Encoded& out);

// Once after the weights are uploaded, for a transducer: the first LSTM layer's input gates of
// every token (Transducer::input_gates), so that a decoding step looks them up instead of
// embedding its tokens and multiplying them; the embedding goes.
void precompute_input_gates(gpu::Pass& pass, Weights& w);

// The prediction network's state for `batch` utterances and the buffers of the decoding steps,
// whose joint network evaluates `window` frames per utterance.
struct DecoderBuffers {
  int batch = 0, window = 1;
  std::vector<gpu::Buffer> h, c;  // per LSTM layer [batch, H]: h of the element type, c F32
  gpu::Buffer prediction;         // [batch, joint_hidden]: each utterance's projected prediction
  gpu::Buffer ids;                // [batch] int32: the tokens the prediction network takes next
  gpu::Buffer gates;
  // The joint network over batch · window rows: its hidden layer, F32 logits (rows of the padded
  // head's outputs, weights.h), and argmax (tokens, then TDT durations).
  gpu::Buffer hidden, logits, decisions;
};

// Zero LSTM state for `batch` utterances, fed the blank (the start of every decode,
// docs/parakeet.md §5.2). The buffers are reused from an earlier decode where large enough.
void start_prediction(gpu::Pass& pass, const Config& config, const Weights& w, int batch,
                      int window, DecoderBuffers& s);

// Feeds s.ids[b] (on the device) to utterance b's prediction network where s.ids[b] ≥ 0 (one LSTM
// step, then its projection into the joint space); the others keep their state, and their
// prediction, projected again from it, comes out as it was.
void predict(gpu::Pass& pass, const Config& config, const Weights& w, DecoderBuffers& s);

// The greedy search's state on the device (compute/cuda/kernels_conformer.h, "Greedy transducer
// search"): one int32 allocation [frames | frame | steps | symbols | decoding | count], so that
// the number still decoding and the emission counts come back in one copy, and the emissions.
struct Search {
  int batch = 0;
  gpu::TransducerRules rules;
  gpu::Buffer values, emissions;
  int32_t capacity = 0;  // emission slots per utterance
  gpu::TransducerState state() const;
};

// The search at the start of a decode of `encoded` (RNN-T or TDT, docs/parakeet.md §5.2, §5.3),
// with the pattern's decisions in place of the argmax's when `pattern` is not null; `search`'s
// buffers are reused where large enough.
void start_search(gpu::Pass& pass, const Config& config, const Encoded& encoded,
                  const EmissionPattern* pattern, Search& search);

// One step of every utterance's search, with no host copy or wait (capturable into a CUDA
// Graph): the joint network over each utterance's window of frames, the decisions
// (transducer_decide), and the prediction network for those that emitted. An utterance that is
// done stays as it is.
void search_step(gpu::Pass& pass, const Config& config, const Weights& w, const Encoded& encoded,
                 Search& search, DecoderBuffers& s);

// Waits for the GPU; returns how many utterances still decode (after the last step, or at the
// start) and fills count[b] with the emissions of each so far.
int32_t still_decoding(gpu::Pass& pass, const Search& search, std::vector<int32_t>& count);

// The emissions of every utterance (count as still_decoding returned it); waits for the GPU.
std::vector<std::vector<Emission>> take_emissions(gpu::Pass& pass, const Search& search,
                                                  std::span<const int32_t> count);

}  // namespace hark::parakeet::cuda
