// One LSTM step on the CPU: the two gate products through the linear op (the second adds onto
// the first as its residual), then the cell update, which is a few thousand values.
#include <cmath>

#include "compute/cpu/kernels.h"

namespace hark::compute::cpu {

namespace {

inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace

void lstm_step(const Tensor& x, const Weight& w_ih, const Weight& w_hh, const Weight* b_ih,
               const Weight* b_hh, Tensor& h, Tensor& c, Tensor& gates) {
  cpu::linear(x, w_ih, gates, {.bias = b_ih});
  cpu::linear(h, w_hh, gates, {.bias = b_hh, .residual = &gates});
  const int64_t sequences = h.rows(), hidden = h.cols();
  for (int64_t b = 0; b < sequences; ++b) {
    // PyTorch's gate order: input, forget, cell candidate, output.
    const float* input_gate = gates.row(b);
    const float* forget_gate = input_gate + hidden;
    const float* candidate = input_gate + 2 * hidden;
    const float* output_gate = input_gate + 3 * hidden;
    float* hb = h.row(b);
    float* cb = c.row(b);
    for (int64_t j = 0; j < hidden; ++j) {
      const float cell =
          sigmoid(forget_gate[j]) * cb[j] + sigmoid(input_gate[j]) * std::tanh(candidate[j]);
      cb[j] = cell;
      hb[j] = sigmoid(output_gate[j]) * std::tanh(cell);
    }
  }
}

}  // namespace hark::compute::cpu
