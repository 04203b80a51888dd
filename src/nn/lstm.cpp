#include "nn/lstm.h"

#include "base/error.h"

namespace hark::nn {

void LstmLayer::step(const Tensor& x, Tensor& h, Tensor& c, Tensor& gates) const {
  compute::lstm_step(x, weight_ih, weight_hh, bias_ih ? &*bias_ih : nullptr,
                     bias_hh ? &*bias_hh : nullptr, h, c, gates);
}

LstmState PredictionNetwork::zero_state(int64_t sequences) const {
  LstmState state;
  for (const LstmLayer& layer : layers) {
    state.h.emplace_back(Shape{sequences, layer.hidden_size()});
    state.c.emplace_back(Shape{sequences, layer.hidden_size()});
  }
  return state;
}

const Tensor& PredictionNetwork::step(std::span<const int32_t> tokens, LstmState& state,
                                      PredictionScratch& scratch) const {
  if (layers.empty()) fail("prediction network without LSTM layers");
  if (state.h.size() != layers.size() || state.c.size() != layers.size()) {
    fail("LSTM state of ", state.h.size(), " layers for a network of ", layers.size());
  }
  compute::embedding(embedding, tokens, scratch.embedded);
  const Tensor* input = &scratch.embedded;
  for (size_t l = 0; l < layers.size(); ++l) {
    layers[l].step(*input, state.h[l], state.c[l], scratch.gates);
    input = &state.h[l];
  }
  return state.h.back();
}

void JointNetwork::project_encoder(const Tensor& encoded, Tensor& projected) const {
  encoder_projector.forward(encoded, projected);
}

void JointNetwork::project_prediction(const Tensor& prediction, Tensor& projected) const {
  decoder_projector.forward(prediction, projected);
}

void JointNetwork::forward(const Tensor& encoder_rows, const Tensor& prediction_rows,
                           Tensor& hidden, Tensor& logits) const {
  compute::add(encoder_rows, prediction_rows, hidden);
  compute::activate(hidden, activation);
  head.forward(hidden, logits);
}

}  // namespace hark::nn
