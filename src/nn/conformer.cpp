#include "nn/conformer.h"

#include "base/error.h"

namespace hark::nn {

Weight pointwise_matrix(const Weight& conv_weight) {
  const Shape& shape = conv_weight.shape;
  bool kernel_one = shape.rank() == 3 || shape.rank() == 4;
  for (int axis = 2; axis < shape.rank(); ++axis) kernel_one = kernel_one && shape[axis] == 1;
  if (!kernel_one) fail("pointwise convolution weight of shape ", shape.str(), " has a kernel");
  Weight matrix = conv_weight;
  matrix.shape = Shape{shape[0], shape[1]};
  return matrix;
}

int64_t ConvSubsampling::output_length(int64_t frames) const {
  const int64_t kernel = conv_weight.shape[2];
  for (size_t stage = 0; stage <= stages.size(); ++stage) {
    frames = (frames + 2 * padding - kernel) / stride + 1;
  }
  return frames;
}

void ConvSubsampling::forward(const Tensor& features, SubsamplingScratch& scratch,
                              Tensor& out) const {
  using compute::Epilogue;
  // Channels-last images [time, frequency, C] throughout: the pointwise convs are linear layers
  // over their pixels.
  compute::conv2d(features, conv_weight, stride, padding, scratch.a,
                  Epilogue{.bias = &conv_bias, .activation = Activation::relu});
  for (const Stage& stage : stages) {
    compute::depthwise_conv2d(scratch.a, stage.depthwise_weight, stride, padding, scratch.b,
                              Epilogue{.bias = &stage.depthwise_bias});
    stage.pointwise.forward(scratch.b, scratch.a, Activation::relu);
  }
  // [T, F, C] -> [T, C, F] -> [T, C·F]: each time step flattened channel-major.
  compute::swap_last_axes(scratch.a, scratch.b);
  scratch.b.reshape(Shape{scratch.b.dim(0), scratch.b.dim(1) * scratch.b.dim(2)});
  linear.forward(scratch.b, out);
  if (output_scale != 1.0f) compute::scale(out, output_scale);
}

void RelPositionAttention::forward(const Tensor& x, const Tensor& positions,
                                   std::span<const int64_t> lengths, RelPositionScratch& scratch,
                                   Tensor& out, const Tensor* residual) const {
  q_proj.forward(x, scratch.q);
  k_proj.forward(x, scratch.k);
  v_proj.forward(x, scratch.v);
  pos_proj.forward(positions, scratch.positions);
  compute::rel_pos_attention(scratch.q, scratch.k, scratch.v, scratch.positions, bias_u, bias_v,
                             heads, scale, lengths, scratch.context);
  out_proj.forward(scratch.context, out, Activation::none, residual);
}

void ConformerConvolution::forward(const Tensor& x, std::span<const int64_t> lengths,
                                   ConvolutionScratch& scratch, Tensor& out,
                                   const Tensor* residual) const {
  pointwise1.forward(x, scratch.wide);
  compute::glu(scratch.wide, scratch.gated);
  compute::depthwise_conv1d(scratch.gated, depthwise_weight, lengths, scratch.convolved,
                            {.bias = &depthwise_bias, .activation = activation});
  pointwise2.forward(scratch.convolved, out, Activation::none, residual);
}

void ConformerBlock::forward(Tensor& x, const Tensor& positions, std::span<const int64_t> lengths,
                             ConformerScratch& scratch) const {
  norm_ff1.forward(x, scratch.normed);
  ff1.forward(scratch.normed, scratch.hidden, scratch.branch);
  compute::add_scaled(x, scratch.branch, ff_scale, x);

  norm_attention.forward(x, scratch.normed);
  attention.forward(scratch.normed, positions, lengths, scratch.attention, x, &x);

  norm_conv.forward(x, scratch.normed);
  conv.forward(scratch.normed, lengths, scratch.convolution, x, &x);

  norm_ff2.forward(x, scratch.normed);
  ff2.forward(scratch.normed, scratch.hidden, scratch.branch);
  compute::add_scaled(x, scratch.branch, ff_scale, x);

  norm_out.forward(x, x);
}

}  // namespace hark::nn
