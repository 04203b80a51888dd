// Parakeet's weights, bound to the tensors of a GGUF file by their names (layout.h, the names
// transformers' save_pretrained gives them) with every shape checked against the Config. The
// conv module's BatchNorm is folded into its depthwise convolution here, once, at load time.
#pragma once

#include <optional>
#include <vector>

#include "compute/ops.h"
#include "models/parakeet/config.h"
#include "nn/conformer.h"
#include "nn/layers.h"
#include "nn/lstm.h"

namespace hark::gguf {
class File;
}

namespace hark::parakeet {

struct EncoderWeights {
  nn::ConvSubsampling subsampling;
  std::vector<nn::ConformerBlock> blocks;
  // The folded depthwise kernels and biases the blocks' conv modules point into (moving the
  // vector keeps those views valid).
  std::vector<compute::FoldedConv> folded_convolutions;
};

// RNN-T and TDT: the LSTM prediction network over the emitted tokens and the joint network.
struct TransducerWeights {
  nn::PredictionNetwork prediction;
  nn::JointNetwork joint;
};

struct Weights {
  EncoderWeights encoder;
  std::optional<nn::Linear> ctc_head;           // CTC: [V, d] + [V]
  std::optional<TransducerWeights> transducer;  // RNN-T and TDT
};

// Throws hark::Error naming the tensor, the expected and the actual shape on any mismatch. The
// views point into `file`, which must outlive the weights.
Weights bind_weights(const gguf::File& file, const Config& config);

}  // namespace hark::parakeet
