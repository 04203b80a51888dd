// The op set: everything models compute goes through these functions. Each op checks its shapes
// here (throwing hark::Error on a mismatch) and dispatches on the tensors' device; cpu/ holds the
// CPU implementation of every op, and a CUDA backend implements the same list beside it.
//
// Conventions: outputs are resized by the op (a reused output tensor never reallocates once it
// is big enough); an output may alias an input only where the op says so; shapes are row-major,
// and "rows" means every dimension but the last.
#pragma once

#include <cstdint>
#include <span>

#include "compute/tensor.h"

namespace hark::compute {

enum class Activation { none, gelu };

// What a linear op does to x·Wᵀ before storing it: y = activation(x·Wᵀ + bias) + residual.
struct Epilogue {
  const Weight* bias = nullptr;  // [N], any stored type
  Activation activation = Activation::none;
  const Tensor* residual = nullptr;  // y's shape; may be y itself (x += ... in place)
};

// Threads the ops called from this thread use (OpenMP; the default is every CPU the process may
// run on). The BLAS is kept single-threaded: the ops split their work across threads
// themselves, so two thread pools never compete for the same cores.
void set_threads(int n);
int threads();

// y[rows, N] = epilogue(x[rows, K] · Wᵀ) for W [N, K] in any stored type; y keeps x's leading
// dimensions. y must not alias x.
void linear(const Tensor& x, const Weight& w, Tensor& y, const Epilogue& epilogue = {});

// 1-D convolution over time-major x [T, C_in] with w [C_out, C_in, kernel] and `padding` zeros on
// each side: y [T_out, C_out], T_out = (T + 2·padding − kernel) / stride + 1, then the epilogue.
void conv1d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
            const Epilogue& epilogue = {});

// y = (x − mean) / sqrt(var + eps) · gamma + beta over the last dimension. y may alias x.
void layer_norm(const Tensor& x, const Weight& gamma, const Weight& beta, float eps, Tensor& y);

// In place, over the last dimension.
void softmax(Tensor& x);
void gelu(Tensor& x);

// y = a + b, same shapes; y may alias a or b.
void add(const Tensor& a, const Tensor& b, Tensor& y);

// y = xᵀ for a 2-D x.
void transpose(const Tensor& x, Tensor& y);

// y[i] = table row ids[i] as F32 (table [rows, D] in any stored type): y [ids.size(), D].
// Throws hark::Error on an id outside the table.
void embedding(const Weight& table, std::span<const int32_t> ids, Tensor& y);

// y[i] = x row rows[i]: y [rows.size(), D] from x viewed as [R, D].
void gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& y);

// Multi-head scaled dot-product attention.
//   q [B, Tq, H·Dh]; k, v [Bk, S, H·Dh] with Bk == B (one cache per sequence) or Bk == 1 (shared
//   by all sequences, e.g. cross-attention over one encoded window). Only the first kv_length of
//   the S rows are used. With `causal`, query i sits at position kv_length − Tq + i and sees keys
//   0..that position.
//   out [B, Tq, H·Dh] = softmax(scale · q kᵀ) v, per head.
void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_length, int heads,
               float scale, bool causal, Tensor& out);

// Keys and values that queries attend to again and again (cross-attention over an encoded
// window), prepared once by pack_kv() in the layout this CPU's attention reads fastest.
struct PackedKv {
  int heads = 0;
  int64_t length = 0;   // keys
  int64_t width = 0;    // heads · head_dim
  Tensor keys, values;  // [1, length, width], kept as given where no packed layout applies
  Tensor packed;        // the packed layout, or empty

  bool is_packed() const { return packed.elements() > 0; }  // an empty Tensor has 0
};

// k, v [1, S, width] (moved in where no packing applies) → kv.
void pack_kv(Tensor k, Tensor v, int heads, PackedKv& kv);
// out [B, Tq, width] = softmax(scale · q kᵀ) v per head over all S keys (no mask), every
// sequence attending to the same keys.
void attention(const Tensor& q, const PackedKv& kv, float scale, Tensor& out);

// K/V cache maintenance: dst[b, offset + t] = src[b, t] for src [B, T, D] into dst [B, S, D].
void write_rows(const Tensor& src, int64_t offset, Tensor& dst);
// dst[i, :length] = src[source[i], :length] for src, dst [B, S, D] (beam search reordering).
// dst must not alias src.
void gather_sequences(const Tensor& src, std::span<const int> source, int64_t length, Tensor& dst);

}  // namespace hark::compute
