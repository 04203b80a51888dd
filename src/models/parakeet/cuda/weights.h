// Parakeet's weights on the GPU, in the layout the CUDA forward pass wants: q, k and v of each
// attention stacked into one matrix (one product instead of three) with the position bias folded
// into q's bias, the feed-forward modules' half step folded into their second linear, and the conv
// module's BatchNorm folded into its depthwise kernel (the values parakeet/weights.cpp folds at
// load); the depthwise kernels (and the first subsampling convolution's, of one input channel)
// tap-major, [taps, channels], as compute/cuda/kernels_conformer.h's convolutions read them; the
// heads padded to whole rows of 8 outputs.
#pragma once

#include <optional>
#include <vector>

#include "compute/cuda/pass.h"
#include "models/parakeet/weights.h"

namespace hark::parakeet::cuda {

namespace gpu = compute::cuda;

struct SubsamplingStage {
  gpu::Buffer depthwise_weight;  // [3·3, C] tap-major
  gpu::Buffer depthwise_bias;    // [C]
  gpu::Linear pointwise;         // [C, C] + [C]
};

struct Subsampling {
  gpu::Buffer conv_weight, conv_bias;  // [3·3, C] tap-major (one input channel), [C]
  std::vector<SubsamplingStage> stages;
  // [d, F·C] + [d], F the frequency bins after every stage: its input columns in (frequency,
  // channel) order, as the channels-last images hold each time step (transformers: (channel,
  // frequency)).
  gpu::Linear linear;
  int kernel = 3, stride = 2, padding = 1;
  float output_scale = 1.0f;  // sqrt(d) with scale_input
};

struct Block {
  gpu::LayerNorm norm_ff1;
  // fc2 holds ½·W and ½·b: x + ½·FF(z) becomes one product with x as its residual. Halving is
  // exact in binary floating point, so this is the same sum.
  gpu::Linear ff1_fc1, ff1_fc2;
  gpu::LayerNorm norm_attention;
  // [3d, d] + [3d]: q, k, v stacked, the position bias v' (bias_v) added to q's bias, so that
  // the product yields q + v' (compute/cuda/pass.h, rel_pos_attention).
  gpu::Linear qkv;
  gpu::Linear positions;     // [d, d], no bias (relative_k_proj)
  gpu::Buffer content_bias;  // [h, dh]: u − v' (bias_u − bias_v), so that q + v' + it is q + u
  gpu::Linear out;           // o_proj
  gpu::LayerNorm norm_conv;
  gpu::Linear pointwise1;                        // [2d, d]
  gpu::Buffer depthwise_weight, depthwise_bias;  // [k, d] tap-major, [d], BatchNorm folded in
  gpu::Linear pointwise2;                        // [d, d]
  gpu::LayerNorm norm_ff2;
  gpu::Linear ff2_fc1, ff2_fc2;  // fc2 halved as ff1's
  gpu::LayerNorm norm_out;
};

// One LSTM layer as the two products of its gates: x·W_ihᵀ + b_ih and h·W_hhᵀ + b_hh.
struct LstmLayer {
  gpu::Linear input, hidden;
};

struct Transducer {
  gpu::Buffer embedding;  // [tokens, H], until precompute_input_gates replaces it
  int64_t tokens = 0;     // the embedding's rows (V + 1: the blank's too)
  // [tokens, 4·H]: the first LSTM layer's input gates for every token, E·W_ihᵀ + b_ih
  // (forward.h, precompute_input_gates).
  gpu::Buffer input_gates;
  std::vector<LstmLayer> lstm;
  gpu::Linear encoder_projector;  // [joint, d]
  gpu::Linear decoder_projector;  // [joint, H]
  // [V (+ D), joint] (+ bias), with zero rows after them up to a multiple of 8 (weights_cuda.cpp,
  // padded_head): out_features() is the row length of the logits, not V (+ D).
  gpu::Linear head;
};

struct Weights {
  gpu::Element element = gpu::Element::f32;
  Subsampling subsampling;
  std::vector<Block> blocks;
  std::optional<gpu::Linear> ctc_head;  // [V, d] + [V], padded with zero rows as Transducer::head
  std::optional<Transducer> transducer;
  float attention_scale = 1.0f;  // dh^-1/2
};

// The element type the weights of `host` run in (compute::cuda::activation_element of the type
// the encoder's matrices are stored in).
gpu::Element element_for(const parakeet::Weights& host);

// Copies the bound host weights to the GPU in `element`. Q8_0 matrices stay Q8_0 there when the
// element type is 16-bit (Pass::linear expands them for products of many rows), but for the
// halved fc2 matrices, which are dequantized at upload; vectors, kernels and the embedding are
// converted to `element`.
Weights upload_weights(const parakeet::Weights& host, gpu::Element element);

}  // namespace hark::parakeet::cuda
