#include "models/whisper/encoder.h"

#include <numeric>
#include <vector>

#include "base/error.h"

namespace hark::whisper {

using compute::Activation;
using compute::Shape;
using compute::Tensor;

void run_encoder(const Config& config, const EncoderWeights& weights, std::span<const float> mel,
                 Tensor& frames) {
  const int64_t n_mels = config.n_mels, n_frames = config.window_frames();
  if (static_cast<int64_t>(mel.size()) != n_mels * n_frames) {
    fail("whisper encoder: expected a log-mel window of ", n_mels, " x ", n_frames, " = ",
         n_mels * n_frames, " values, got ", mel.size());
  }
  // The convolutions run time-major ([time, channels]), which is also the layout of the blocks.
  Tensor time_major;
  compute::transpose(Tensor(Shape{n_mels, n_frames}, mel), time_major);
  Tensor conv1_out;
  compute::conv1d(time_major, weights.conv1, 1, 1, conv1_out,
                  {.bias = &weights.conv1_bias, .activation = Activation::gelu});
  Tensor& x = frames;
  compute::conv1d(conv1_out, weights.conv2, 2, 1, x,
                  {.bias = &weights.conv2_bias, .activation = Activation::gelu});
  const int64_t steps = x.dim(0), d = x.dim(1);

  std::vector<int32_t> positions(static_cast<size_t>(steps));
  std::iota(positions.begin(), positions.end(), 0);
  Tensor position_rows;
  compute::embedding(weights.positions, positions, position_rows);
  compute::add(x, position_rows, x);
  x.reshape(Shape{1, steps, d});

  Tensor h, hidden;
  nn::AttentionScratch scratch;
  for (const EncoderLayer& layer : weights.layers) {
    layer.attention_norm.forward(x, h);
    layer.attention.self_attention(h, scratch, x, &x);
    layer.ffn_norm.forward(x, h);
    layer.ffn.forward(h, hidden, x, &x);
  }
  weights.final_norm.forward(x, x);
}

}  // namespace hark::whisper
