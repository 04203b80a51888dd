// The op set's front: shape checks, output sizing, and dispatch to the device's implementation.
#include "compute/ops.h"

#include <omp.h>

#include <cmath>
#include <utility>
#include <vector>

#include "base/error.h"
#include "compute/cpu/kernels.h"

namespace hark::compute {

namespace {

void check_epilogue(const char* op, const Epilogue& epilogue, const Shape& out_shape,
                    int64_t columns) {
  if (epilogue.bias != nullptr && epilogue.bias->shape.elements() != columns) {
    fail(op, ": bias of shape ", epilogue.bias->shape.str(), " for ", columns, " outputs");
  }
  if (epilogue.residual != nullptr && epilogue.residual->shape() != out_shape) {
    fail(op, ": residual of shape ", epilogue.residual->shape().str(), " for an output of shape ",
         out_shape.str());
  }
}

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    fail(op, ": shapes ", a.shape().str(), " and ", b.shape().str(), " differ");
  }
}

}  // namespace

void set_threads(int n) {
  if (n < 1) fail("thread count must be at least 1, got ", n);
  omp_set_num_threads(n);
}

int threads() {
  return omp_get_max_threads();
}

void linear(const Tensor& x, const Weight& w, Tensor& y, const Epilogue& epilogue) {
  if (w.shape.rank() != 2) fail("linear: weight of shape ", w.shape.str(), " is not a matrix");
  if (x.shape().rank() == 0 || x.cols() != w.cols()) {
    fail("linear: input of shape ", x.shape().str(), " against weight ", w.shape.str());
  }
  if (&x == &y) fail("linear: the output must not be the input");
  const Shape out_shape = x.shape().with_back(w.rows());
  check_epilogue("linear", epilogue, out_shape, w.rows());
  y.resize(out_shape);
  cpu::linear(x, w, y, epilogue);
}

void conv1d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
            const Epilogue& epilogue) {
  if (w.shape.rank() != 3) fail("conv1d: weight of shape ", w.shape.str(), " is not [out, in, k]");
  if (x.shape().rank() != 2 || x.dim(1) != w.shape[1]) {
    fail("conv1d: input of shape ", x.shape().str(), " (time, channels) against weight ",
         w.shape.str());
  }
  if (stride < 1 || padding < 0) fail("conv1d: stride ", stride, ", padding ", padding);
  if (&x == &y) fail("conv1d: the output must not be the input");
  const int64_t kernel = w.shape[2];
  const int64_t padded = x.dim(0) + 2 * padding;
  if (padded < kernel) fail("conv1d: ", x.dim(0), " steps are shorter than the kernel");
  const Shape out_shape{(padded - kernel) / stride + 1, w.shape[0]};
  check_epilogue("conv1d", epilogue, out_shape, w.shape[0]);
  y.resize(out_shape);
  cpu::conv1d(x, w, stride, padding, y, epilogue);
}

void layer_norm(const Tensor& x, const Weight& gamma, const Weight& beta, float eps, Tensor& y) {
  if (gamma.shape.elements() != x.cols() || beta.shape.elements() != x.cols()) {
    fail("layer_norm: gamma ", gamma.shape.str(), " and beta ", beta.shape.str(),
         " for an input of shape ", x.shape().str());
  }
  if (&x != &y) y.resize(x.shape());
  cpu::layer_norm(x, gamma, beta, eps, y);
}

void softmax(Tensor& x) {
  cpu::softmax(x);
}

void gelu(Tensor& x) {
  cpu::gelu(x);
}

void add(const Tensor& a, const Tensor& b, Tensor& y) {
  check_same("add", a, b);
  if (&y != &a && &y != &b) y.resize(a.shape());
  cpu::add(a, b, y);
}

void activate(Tensor& x, Activation activation) {
  cpu::activate(x, activation);
}

void scale(Tensor& x, float factor) {
  cpu::scale(x, factor);
}

void add_scaled(const Tensor& a, const Tensor& b, float alpha, Tensor& y) {
  check_same("add_scaled", a, b);
  if (&y != &a && &y != &b) y.resize(a.shape());
  cpu::add_scaled(a, b, alpha, y);
}

void glu(const Tensor& x, Tensor& y) {
  if (x.shape().rank() == 0 || x.cols() % 2 != 0) {
    fail("glu: input of shape ", x.shape().str(), " has no even last dimension");
  }
  if (&x == &y) fail("glu: the output must not be the input");
  y.resize(x.shape().with_back(x.cols() / 2));
  cpu::glu(x, y);
}

void transpose(const Tensor& x, Tensor& y) {
  if (x.shape().rank() != 2) fail("transpose: input of shape ", x.shape().str(), " is not 2-D");
  if (&x == &y) fail("transpose: the output must not be the input");
  y.resize(Shape{x.dim(1), x.dim(0)});
  cpu::transpose(x, y);
}

void embedding(const Weight& table, std::span<const int32_t> ids, Tensor& y) {
  if (table.shape.rank() != 2) fail("embedding: table of shape ", table.shape.str());
  for (int32_t id : ids) {
    if (id < 0 || id >= table.rows()) {
      fail("embedding: id ", id, " is outside the table of ", table.rows(), " rows");
    }
  }
  y.resize(Shape{static_cast<int64_t>(ids.size()), table.cols()});
  cpu::embedding(table, ids, y);
}

void gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& y) {
  for (int64_t row : rows) {
    if (row < 0 || row >= x.rows()) fail("gather_rows: row ", row, " of ", x.rows());
  }
  if (&x == &y) fail("gather_rows: the output must not be the input");
  y.resize(Shape{static_cast<int64_t>(rows.size()), x.cols()});
  cpu::gather_rows(x, rows, y);
}

void scatter_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& y) {
  if (static_cast<int64_t>(rows.size()) != x.rows() || x.cols() != y.cols()) {
    fail("scatter_rows: ", rows.size(), " rows of ", x.shape().str(), " into ", y.shape().str());
  }
  std::vector<bool> taken(static_cast<size_t>(y.rows()), false);
  for (int64_t row : rows) {
    if (row < 0 || row >= y.rows()) fail("scatter_rows: row ", row, " of ", y.rows());
    if (taken[row]) fail("scatter_rows: row ", row, " twice");
    taken[row] = true;
  }
  if (&x == &y) fail("scatter_rows: the output must not be the input");
  cpu::scatter_rows(x, rows, y);
}

void swap_last_axes(const Tensor& x, Tensor& y) {
  const int rank = x.shape().rank();
  if (rank != 2 && rank != 3) fail("swap_last_axes: input of shape ", x.shape().str());
  if (&x == &y) fail("swap_last_axes: the output must not be the input");
  y.resize(rank == 2 ? Shape{x.dim(1), x.dim(0)} : Shape{x.dim(0), x.dim(2), x.dim(1)});
  cpu::swap_last_axes(x, y);
}

namespace {

// Output size of a strided convolution along one axis; throws when the input is too short.
int64_t conv_output_size(const char* op, int64_t size, int64_t kernel, int stride, int padding) {
  if (stride < 1 || padding < 0) fail(op, ": stride ", stride, ", padding ", padding);
  const int64_t padded = size + 2 * int64_t{padding};
  if (size < 1 || padded < kernel) {
    fail(op, ": ", size, " input steps for a kernel of ", kernel, " with padding ", padding);
  }
  return (padded - kernel) / stride + 1;
}

}  // namespace

void conv2d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
            const Epilogue& epilogue) {
  const int rank = x.shape().rank();
  const int64_t channels = rank == 3 ? x.dim(2) : 1;
  if (w.shape.rank() != 4 || (rank != 2 && rank != 3) || w.shape[1] != channels) {
    fail("conv2d: input of shape ", x.shape().str(), " (height, width[, channels]) against weight ",
         w.shape.str(), " [out, in, kh, kw]");
  }
  if (&x == &y) fail("conv2d: the output must not be the input");
  const Shape out_shape{conv_output_size("conv2d", x.dim(0), w.shape[2], stride, padding),
                        conv_output_size("conv2d", x.dim(1), w.shape[3], stride, padding),
                        w.shape[0]};
  check_epilogue("conv2d", epilogue, out_shape, w.shape[0]);
  y.resize(out_shape);
  cpu::conv2d(x, w, stride, padding, y, epilogue);
}

void depthwise_conv2d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
                      const Epilogue& epilogue) {
  if (w.shape.rank() != 4 || x.shape().rank() != 3 || w.shape[0] != x.dim(2) || w.shape[1] != 1) {
    fail("depthwise_conv2d: input of shape ", x.shape().str(),
         " (height, width, channels) against weight ", w.shape.str(), " [channels, 1, kh, kw]");
  }
  if (&x == &y) fail("depthwise_conv2d: the output must not be the input");
  const Shape out_shape{conv_output_size("depthwise_conv2d", x.dim(0), w.shape[2], stride, padding),
                        conv_output_size("depthwise_conv2d", x.dim(1), w.shape[3], stride, padding),
                        x.dim(2)};
  check_epilogue("depthwise_conv2d", epilogue, out_shape, x.dim(2));
  y.resize(out_shape);
  cpu::depthwise_conv2d(x, w, stride, padding, y, epilogue);
}

void depthwise_conv1d(const Tensor& x, const Weight& w, std::span<const int64_t> lengths, Tensor& y,
                      const Epilogue& epilogue) {
  const int rank = x.shape().rank();
  const bool kernel_shape = (w.shape.rank() == 3 && w.shape[1] == 1) || w.shape.rank() == 2;
  if ((rank != 2 && rank != 3) || !kernel_shape || w.shape[0] != x.cols()) {
    fail("depthwise_conv1d: input of shape ", x.shape().str(),
         " ([batch,] time, channels) against weight ", w.shape.str(), " [channels, 1, k]");
  }
  const int64_t kernel = w.shape.back();
  if (kernel % 2 == 0) fail("depthwise_conv1d: 'same' padding needs an odd kernel, got ", kernel);
  const int64_t sequences = rank == 3 ? x.dim(0) : 1;
  const int64_t steps = rank == 3 ? x.dim(1) : x.dim(0);
  if (!lengths.empty()) {
    if (static_cast<int64_t>(lengths.size()) != sequences) {
      fail("depthwise_conv1d: ", lengths.size(), " lengths for ", sequences, " sequences");
    }
    for (int64_t length : lengths) {
      if (length < 0 || length > steps) fail("depthwise_conv1d: length ", length, " of ", steps);
    }
  }
  if (&x == &y) fail("depthwise_conv1d: the output must not be the input");
  check_epilogue("depthwise_conv1d", epilogue, x.shape(), x.cols());
  y.resize(x.shape());
  cpu::depthwise_conv1d(x, w, lengths, y, epilogue);
}

void relative_positions(int64_t steps, int64_t width, Tensor& y) {
  if (steps < 1 || width < 2 || width % 2 != 0) {
    fail("relative_positions: ", steps, " steps of width ", width, " (must be even)");
  }
  y.resize(Shape{2 * steps - 1, width});
  cpu::relative_positions(steps, width, y);
}

void rel_pos_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& p,
                       const Weight& pos_bias_u, const Weight& pos_bias_v, int heads, float scale,
                       std::span<const int64_t> lengths, Tensor& out) {
  const int rank = q.shape().rank();
  if ((rank != 2 && rank != 3) || k.shape() != q.shape() || v.shape() != q.shape()) {
    fail("rel_pos_attention: q ", q.shape().str(), ", k ", k.shape().str(), ", v ", v.shape().str(),
         " must be alike, [batch,] steps, width");
  }
  const int64_t width = q.cols();
  if (heads < 1 || width % heads != 0) {
    fail("rel_pos_attention: width ", width, " in ", heads, " heads");
  }
  const int64_t sequences = rank == 3 ? q.dim(0) : 1;
  const int64_t steps = rank == 3 ? q.dim(1) : q.dim(0);
  if (steps < 1) fail("rel_pos_attention: no steps");
  if (p.shape() != Shape{2 * steps - 1, width}) {
    fail("rel_pos_attention: position table of shape ", p.shape().str(), " for ", steps,
         " steps of width ", width);
  }
  if (pos_bias_u.shape.elements() != width || pos_bias_v.shape.elements() != width) {
    fail("rel_pos_attention: position biases of shapes ", pos_bias_u.shape.str(), " and ",
         pos_bias_v.shape.str(), " for ", heads, " heads of ", width / heads);
  }
  if (!lengths.empty()) {
    if (static_cast<int64_t>(lengths.size()) != sequences) {
      fail("rel_pos_attention: ", lengths.size(), " lengths for ", sequences, " sequences");
    }
    for (int64_t length : lengths) {
      if (length < 1 || length > steps) fail("rel_pos_attention: length ", length, " of ", steps);
    }
  }
  if (&out == &q || &out == &k || &out == &v || &out == &p) {
    fail("rel_pos_attention: the output must not be an input");
  }
  out.resize(q.shape());
  cpu::rel_pos_attention(q, k, v, p, pos_bias_u, pos_bias_v, heads, scale, lengths, out);
}

void lstm_step(const Tensor& x, const Weight& w_ih, const Weight& w_hh, const Weight* b_ih,
               const Weight* b_hh, Tensor& h, Tensor& c, Tensor& gates) {
  if (h.shape().rank() != 2 || c.shape() != h.shape()) {
    fail("lstm_step: state h ", h.shape().str(), " and c ", c.shape().str(),
         " must both be [batch, hidden]");
  }
  const int64_t sequences = h.dim(0), hidden = h.dim(1);
  if (x.shape().rank() != 2 || x.dim(0) != sequences) {
    fail("lstm_step: input of shape ", x.shape().str(), " for ", sequences, " sequences");
  }
  if (w_ih.shape != Shape{4 * hidden, x.dim(1)} || w_hh.shape != Shape{4 * hidden, hidden}) {
    fail("lstm_step: weights ", w_ih.shape.str(), " and ", w_hh.shape.str(), " for input width ",
         x.dim(1), " and hidden size ", hidden);
  }
  for (const Weight* bias : {b_ih, b_hh}) {
    if (bias != nullptr && bias->shape.elements() != 4 * hidden) {
      fail("lstm_step: bias of shape ", bias->shape.str(), " for hidden size ", hidden);
    }
  }
  if (&x == &h || &x == &c || &h == &c || &gates == &x || &gates == &h || &gates == &c) {
    fail("lstm_step: the input, state and gates must be distinct tensors");
  }
  gates.resize(Shape{sequences, 4 * hidden});
  cpu::lstm_step(x, w_ih, w_hh, b_ih, b_hh, h, c, gates);
}

FoldedConv fold_batch_norm(const Weight& conv_weight, const Weight* conv_bias, const Weight& gamma,
                           const Weight& beta, const Weight& mean, const Weight& var, float eps) {
  const int64_t channels = conv_weight.shape.rank() >= 1 ? conv_weight.shape[0] : 0;
  if (channels < 1) fail("fold_batch_norm: weight of shape ", conv_weight.shape.str());
  for (const Weight* w : {&gamma, &beta, &mean, &var, conv_bias}) {
    if (w != nullptr && w->shape.elements() != channels) {
      fail("fold_batch_norm: a vector of shape ", w->shape.str(), " for ", channels,
           " output channels");
    }
  }
  std::vector<float> weight_scratch, bias_scratch, gamma_scratch, beta_scratch, mean_scratch,
      var_scratch;
  const float* w = cpu::weight_values(conv_weight, weight_scratch);
  const float* b = conv_bias ? cpu::weight_values(*conv_bias, bias_scratch) : nullptr;
  const float* g = cpu::weight_values(gamma, gamma_scratch);
  const float* be = cpu::weight_values(beta, beta_scratch);
  const float* mu = cpu::weight_values(mean, mean_scratch);
  const float* sigma2 = cpu::weight_values(var, var_scratch);
  FoldedConv folded;
  const int64_t per_channel = conv_weight.shape.elements() / channels;
  folded.weight_values.resize(static_cast<size_t>(channels * per_channel));
  folded.bias_values.resize(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const double s = double(g[c]) / std::sqrt(double(sigma2[c]) + double(eps));
    for (int64_t i = 0; i < per_channel; ++i) {
      folded.weight_values[c * per_channel + i] =
          static_cast<float>(double(w[c * per_channel + i]) * s);
    }
    const double bias = b ? double(b[c]) : 0.0;
    folded.bias_values[c] = static_cast<float>((bias - double(mu[c])) * s + double(be[c]));
  }
  folded.weight = Weight::f32(folded.weight_values.data(), conv_weight.shape);
  folded.bias = Weight::f32(folded.bias_values.data(), Shape{channels});
  return folded;
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_length, int heads,
               float scale, bool causal, Tensor& out) {
  if (q.shape().rank() != 3 || k.shape().rank() != 3 || k.shape() != v.shape()) {
    fail("attention: q ", q.shape().str(), ", k ", k.shape().str(), ", v ", v.shape().str(),
         " must be [batch, steps, width] with k and v alike");
  }
  const int64_t width = q.dim(2);
  if (heads < 1 || width % heads != 0) fail("attention: width ", width, " in ", heads, " heads");
  if (k.dim(2) != width) fail("attention: q width ", width, ", k width ", k.dim(2));
  if (k.dim(0) != 1 && k.dim(0) != q.dim(0)) {
    fail("attention: ", k.dim(0), " K/V sequences for ", q.dim(0), " query sequences");
  }
  if (kv_length < 1 || kv_length > k.dim(1)) {
    fail("attention: kv_length ", kv_length, " with room for ", k.dim(1));
  }
  if (causal && kv_length < q.dim(1)) {
    fail("attention: causal with ", q.dim(1), " queries but only ", kv_length, " keys");
  }
  if (&out == &q) fail("attention: the output must not be the query");
  out.resize(q.shape());
  cpu::attention(q, k, v, kv_length, heads, scale, causal, out);
}

void pack_kv(Tensor k, Tensor v, int heads, PackedKv& kv) {
  if (k.shape().rank() != 3 || k.dim(0) != 1 || k.shape() != v.shape() || k.dim(1) < 1) {
    fail("pack_kv: keys ", k.shape().str(), " and values ", v.shape().str(),
         " must both be [1, steps, width]");
  }
  if (heads < 1 || k.dim(2) % heads != 0) {
    fail("pack_kv: width ", k.dim(2), " in ", heads, " heads");
  }
  cpu::pack_kv(std::move(k), std::move(v), heads, kv);
}

void attention(const Tensor& q, const PackedKv& kv, float scale, Tensor& out) {
  if (q.shape().rank() != 3 || q.dim(2) != kv.width || kv.heads < 1) {
    fail("attention: q ", q.shape().str(), " against packed keys and values of width ", kv.width);
  }
  if (&out == &q) fail("attention: the output must not be the query");
  out.resize(q.shape());
  cpu::attention(q, kv, scale, out);
}

void write_rows(const Tensor& src, int64_t offset, Tensor& dst) {
  if (src.shape().rank() != 3 || dst.shape().rank() != 3 || src.dim(0) != dst.dim(0) ||
      src.dim(2) != dst.dim(2) || offset < 0 || offset + src.dim(1) > dst.dim(1)) {
    fail("write_rows: ", src.shape().str(), " at row ", offset, " into ", dst.shape().str());
  }
  cpu::write_rows(src, offset, dst);
}

void gather_sequences(const Tensor& src, std::span<const int> source, int64_t length, Tensor& dst) {
  if (src.shape().rank() != 3 || dst.shape() != src.shape() ||
      static_cast<int64_t>(source.size()) != src.dim(0)) {
    fail("gather_sequences: ", source.size(), " sources from ", src.shape().str(), " into ",
         dst.shape().str());
  }
  if (length < 0 || length > src.dim(1)) fail("gather_sequences: length ", length);
  for (int s : source) {
    if (s < 0 || s >= src.dim(0)) fail("gather_sequences: source ", s, " of ", src.dim(0));
  }
  if (&src == &dst) fail("gather_sequences: the output must not be the input");
  cpu::gather_sequences(src, source, length, dst);
}

}  // namespace hark::compute
