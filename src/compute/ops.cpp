// The op set's front: shape checks, output sizing, and dispatch to the device's implementation.
#include "compute/ops.h"

#include <omp.h>

#include <utility>

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
