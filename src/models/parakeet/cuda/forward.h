// Parakeet's forward pass on the GPU, written against compute/cuda's Pass: the encoder over a
// padded batch of utterances with its head's input, and the steps of greedy transducer decoding
// (the prediction network for the utterances that emitted, the joint network and its argmax for
// those still decoding), which model_cuda.cpp drives with the rules of greedy.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/parakeet/cuda/weights.h"

namespace hark::parakeet::cuda {

// Scratch of the encoder.
struct EncoderBuffers {
  gpu::Buffer staging;  // F32 values from the host: the features, then the position table
  gpu::Buffer lengths, image, image_spare, normed, hidden, qkv, context, table, positions;
};

// A batch's encoder output: rows b · padded_frames + t, those at t ≥ frames[b] not meaningful.
struct Encoded {
  int batch = 0;
  int64_t padded_frames = 0;
  std::vector<int64_t> frames;  // valid encoder frames per utterance
  gpu::Buffer output;           // [rows, d], the element type: the last block's output
  // CTC: F32 logits [rows, V] (bias included) and frame_tokens, their argmax per row (int32);
  // transducers: the joint network's encoder projection [rows, joint_hidden], the element type.
  gpu::Buffer head, frame_tokens;
};

// features[b]: utterance b's features [L_b, n_mels] (Model::features; computed on the host for
// now and uploaded); encoder_frames[b] its encoder frames, checked against the subsampling.
void encode(gpu::Pass& pass, const Config& config, const Weights& w,
            std::span<const std::vector<float>> features, std::span<const int64_t> encoder_frames,
            EncoderBuffers& scratch, Encoded& out);

// The prediction network's state for `batch` utterances and the buffers of the decoding steps.
struct DecoderBuffers {
  int batch = 0;
  std::vector<gpu::Buffer> h, c;  // per LSTM layer [batch, H]: h of the element type, c F32
  gpu::Buffer prediction;         // [batch, joint_hidden]: each utterance's projected prediction
  gpu::Buffer ids, embedded, gates, projected;
  gpu::Buffer rows, hidden, logits, decisions;
};

// Zero LSTM state for `batch` utterances, fed the blank (the start of every decode,
// docs/parakeet.md §5.2).
void start_prediction(gpu::Pass& pass, const Config& config, const Weights& w, int batch,
                      DecoderBuffers& s);

// Feeds ids[b] to utterance b's prediction network where ids[b] ≥ 0 (one LSTM step, then its
// projection into the joint space); the others keep their state and prediction.
void predict(gpu::Pass& pass, const Config& config, const Weights& w, std::span<const int32_t> ids,
             DecoderBuffers& s);

// The joint network for n = rows.size() / 2 steps: step i combines row rows[i] of the encoder
// projection with utterance rows[n + i]'s prediction. Waits for the GPU and returns per step the
// argmax of the token logits at [i] and (TDT) of the duration logits at [n + i].
std::vector<int32_t> joint(gpu::Pass& pass, const Config& config, const Weights& w,
                           const Encoded& encoded, std::span<const int32_t> rows,
                           DecoderBuffers& s);

}  // namespace hark::parakeet::cuda
