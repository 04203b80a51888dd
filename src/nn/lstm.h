// The transducer heads (RNN-T / TDT, docs/parakeet.md section 5): an LSTM prediction network
// over the emitted tokens and the joint network that combines it with the encoder. Weight views
// only; the LSTM state and all buffers belong to the caller, so one model serves any number of
// decodes, each stepping B sequences in lockstep.
//
// Notation: V vocabulary (blank included), D TDT durations, H prediction width, d encoder width,
// L LSTM layers, B sequences, T encoder frames.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "nn/layers.h"

namespace hark::nn {

// One layer of PyTorch's nn.LSTM (gate rows i, f, g, o).
struct LstmLayer {
  Weight weight_ih;                        // [4H, in]
  Weight weight_hh;                        // [4H, H]
  std::optional<Weight> bias_ih, bias_hh;  // [4H]

  int64_t hidden_size() const { return weight_hh.cols(); }
  // Advances h, c [B, H] one step with input x [B, in]; `gates` is scratch.
  void step(const Tensor& x, Tensor& h, Tensor& c, Tensor& gates) const;
};

// The state of an L-layer LSTM for B sequences: h[l], c[l] [B, H].
struct LstmState {
  std::vector<Tensor> h, c;
};

// Buffers of one PredictionNetwork::step call.
struct PredictionScratch {
  Tensor embedded, gates;
};

// Embedding lookup followed by L LSTM layers, one token per sequence per step. (The projection
// of its output into the joint space is JointNetwork::project_prediction.)
struct PredictionNetwork {
  Weight embedding;  // [V, H]; the blank's row is looked up like any other
  std::vector<LstmLayer> layers;

  int64_t hidden_size() const { return layers.empty() ? 0 : layers.back().hidden_size(); }
  // The zero state for B sequences.
  LstmState zero_state(int64_t sequences) const;
  // Feeds tokens[b] to sequence b, advancing every layer of `state` (B = tokens.size()), and
  // returns the last layer's new h [B, H] (a reference into `state`).
  const Tensor& step(std::span<const int32_t> tokens, LstmState& state,
                     PredictionScratch& scratch) const;
};

// logits = head(act(encoder_projector(enc) + decoder_projector(prediction))).
// The two projections are computed apart because they change at different times: the encoder's
// once per utterance for all frames, the prediction's once per emitted token.
struct JointNetwork {
  Linear encoder_projector;  // [H, d] (+ [H])
  Linear decoder_projector;  // [H, H] (+ [H])
  Linear head;               // [V + D, H] (TDT) or [V, H] (RNN-T) (+ bias)
  Activation activation = Activation::relu;

  // encoded [T, d] (or [B, T, d]) -> projected [T, H].
  void project_encoder(const Tensor& encoded, Tensor& projected) const;
  // prediction [B, H] (PredictionNetwork::step's output) -> projected [B, H].
  void project_prediction(const Tensor& prediction, Tensor& projected) const;
  // encoder_rows [B, H]: each sequence's projected current frame (compute::gather_rows of
  // project_encoder's output); prediction_rows [B, H] from project_prediction. logits [B, V(+D)];
  // `hidden` is scratch.
  void forward(const Tensor& encoder_rows, const Tensor& prediction_rows, Tensor& hidden,
               Tensor& logits) const;
};

}  // namespace hark::nn
