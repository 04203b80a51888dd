// Conformer encoder layers (FastConformer as in NVIDIA's Parakeet, docs/parakeet.md section 4):
// the convolutional subsampling stack, relative-position self-attention, the convolution module
// and the block that puts them together with two half-step feed-forwards. Like nn/layers.h they
// hold weight views only; every call takes the buffers it writes to.
//
// Notation: d model width, h heads, dh = d / h, f feed-forward width, k depthwise kernel, C
// subsampling channels, M mel bins, B sequences, T encoder frames.
#pragma once

#include <span>
#include <vector>

#include "nn/layers.h"

namespace hark::nn {

// A kernel-1 convolution's weight [out, in, 1] or [out, in, 1, 1] as the [out, in] matrix it
// is (pointwise convolutions over time-major or channels-last data are linear layers). Throws
// hark::Error for any other shape.
Weight pointwise_matrix(const Weight& conv_weight);

// Buffers of one ConvSubsampling::forward call.
struct SubsamplingScratch {
  Tensor a, b;
};

// NeMo's "dw_striding" subsampling (transformers' ParakeetEncoderSubsamplingConv2D): the
// features [L, M] as a one-channel image (time x frequency), a strided conv to C channels and
// ReLU, then per further stage a strided depthwise conv and a pointwise conv with ReLU; each
// stage maps n -> (n + 2·padding - 3) / stride + 1 on both axes (3 x 3 kernels). The output
// flattens each time step channel-major (index c·F + f) into `linear`, scaled by output_scale
// (sqrt(d) where the config sets scale_input, else 1).
struct ConvSubsampling {
  struct Stage {
    Weight depthwise_weight;  // [C, 1, 3, 3]
    Weight depthwise_bias;    // [C]
    Linear pointwise;         // [C, C] (pointwise_matrix of the [C, C, 1, 1] conv) + [C]
  };
  Weight conv_weight;  // [C, 1, 3, 3]
  Weight conv_bias;    // [C]
  std::vector<Stage> stages;
  Linear linear;  // [d, C·F] + [d], F the frequency bins after every stage
  int stride = 2;
  int padding = 1;
  float output_scale = 1.0f;

  // Encoder frames for `frames` feature frames (transformers' _get_subsampling_output_length).
  int64_t output_length(int64_t frames) const;
  // features [L, M] -> out [T, d], T = output_length(L).
  void forward(const Tensor& features, SubsamplingScratch& scratch, Tensor& out) const;
};

// Buffers of one RelPositionAttention::forward call.
struct RelPositionScratch {
  Tensor q, k, v, positions, context;
};

// Transformer-XL multi-head self-attention (transformers' ParakeetEncoderAttention, NeMo's
// RelPositionMultiHeadAttention): compute::rel_pos_attention between the projections.
struct RelPositionAttention {
  Linear q_proj, k_proj, v_proj, out_proj;  // [d, d] (+ [d])
  Linear pos_proj;                          // [d, d], no bias (relative_k_proj, linear_pos)
  Weight bias_u, bias_v;                    // [h, dh] (pos_bias_u, pos_bias_v)
  int heads = 1;
  float scale = 1.0f;  // dh^-1/2

  // out = residual + attention(x) for x [B, T, d] (or [T, d]); `positions` is the shared table
  // compute::relative_positions(T, d), projected here; keys at or past lengths[b] are masked
  // (empty lengths: all valid), and rows of such queries are not meaningful. residual may be
  // out.
  void forward(const Tensor& x, const Tensor& positions, std::span<const int64_t> lengths,
               RelPositionScratch& scratch, Tensor& out, const Tensor* residual = nullptr) const;
};

// Buffers of one ConformerConvolution::forward call.
struct ConvolutionScratch {
  Tensor wide, gated, convolved;
};

// The Conformer convolution module over time, channels d:
//   pointwise1 -> GLU -> depthwise (k, 'same' padding) -> BatchNorm -> activation -> pointwise2,
// the BatchNorm folded into the depthwise weight and bias at load time
// (compute::fold_batch_norm).
struct ConformerConvolution {
  Linear pointwise1;        // [2d, d] (+ [2d])
  Weight depthwise_weight;  // [d, 1, k], BatchNorm folded in
  Weight depthwise_bias;    // [d], BatchNorm folded in
  Activation activation = Activation::silu;
  Linear pointwise2;  // [d, d] (+ [d])

  // out = residual + module(x) for x [B, T, d] (or [T, d]); steps at or past lengths[b] enter
  // the depthwise convolution as zeros (empty lengths: all valid). residual may be out.
  void forward(const Tensor& x, std::span<const int64_t> lengths, ConvolutionScratch& scratch,
               Tensor& out, const Tensor* residual = nullptr) const;
};

// Buffers of one ConformerBlock::forward call; one set serves every block of an encoder.
struct ConformerScratch {
  Tensor normed, hidden, branch;
  RelPositionScratch attention;
  ConvolutionScratch convolution;
};

// One Conformer block (transformers' ParakeetEncoderBlock), in place on x [B, T, d] (or [T, d]):
//   x = x + ½·FF1(LN(x));  x = x + MHSA(LN(x));  x = x + CONV(LN(x));  x = x + ½·FF2(LN(x));
//   x = LN_out(x)
// with FF(z) = linear2(act(linear1(z))). Rows at or past lengths[b] are padding: they do not
// reach the valid rows, and their own values are not meaningful.
struct ConformerBlock {
  LayerNorm norm_ff1;
  FeedForward ff1;  // fc1 [f, d], fc2 [d, f]; activation silu for Parakeet
  LayerNorm norm_attention;
  RelPositionAttention attention;
  LayerNorm norm_conv;
  ConformerConvolution conv;
  LayerNorm norm_ff2;
  FeedForward ff2;
  LayerNorm norm_out;
  float ff_scale = 0.5f;  // the macaron half step

  // `positions`: compute::relative_positions(T, d), shared by all blocks.
  void forward(Tensor& x, const Tensor& positions, std::span<const int64_t> lengths,
               ConformerScratch& scratch) const;
};

}  // namespace hark::nn
