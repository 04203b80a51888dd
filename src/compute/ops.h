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
#include <vector>

#include "compute/tensor.h"

namespace hark::compute {

// gelu: the exact (erf) form; silu: x·σ(x); relu: max(x, 0). NaN stays NaN in all of them.
enum class Activation { none, gelu, silu, relu };

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

// 2-D convolutions over channels-last images x [H, W, C_in] (a 2-D x [H, W] is one channel),
// the same stride and `padding` zeros on both axes: y [H_out, W_out, C_out] with
// H_out = (H + 2·padding − kh) / stride + 1 (W likewise), then the epilogue (bias [C_out]).
// Channels last make a 1x1 convolution a linear op over x viewed as [H·W, C_in], and give the
// per-pixel loops contiguous channel vectors. y must not alias x.
//   conv2d:            w [C_out, C_in, kh, kw] (PyTorch's layout, groups = 1).
//   depthwise_conv2d:  w [C, 1, kh, kw], groups = C: channel c of y sees channel c of x only.
void conv2d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
            const Epilogue& epilogue = {});
void depthwise_conv2d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
                      const Epilogue& epilogue = {});

// Depthwise 1-D convolution over time with 'same' padding: x [B, T, C] (or [T, C], B = 1),
// w [C, 1, k] (or [C, k]) with k odd, (k − 1) / 2 zeros on each side:
//   y[b, t, c] = Σ_j w[c, j] · x[b, t + j − (k − 1) / 2, c], then the epilogue (bias [C]).
// Steps at or past lengths[b] read as zeros (a padded batch convolves as each sequence would
// alone); empty `lengths` means every step is valid. y [B, T, C] is computed for every step.
// y must not alias x.
void depthwise_conv1d(const Tensor& x, const Weight& w, std::span<const int64_t> lengths, Tensor& y,
                      const Epilogue& epilogue = {});

// y = (x − mean) / sqrt(var + eps) · gamma + beta over the last dimension. y may alias x.
void layer_norm(const Tensor& x, const Weight& gamma, const Weight& beta, float eps, Tensor& y);

// In place, over the last dimension.
void softmax(Tensor& x);
void gelu(Tensor& x);

// y = a + b, same shapes; y may alias a or b.
void add(const Tensor& a, const Tensor& b, Tensor& y);

// In place, element-wise.
void activate(Tensor& x, Activation activation);
void scale(Tensor& x, float factor);
// y = a + alpha·b, same shapes; y may alias a or b (the Conformer's half-step residuals).
void add_scaled(const Tensor& a, const Tensor& b, float alpha, Tensor& y);
// Gated linear unit over the last dimension: y[..., c] = x[..., c] · σ(x[..., C + c]) for
// x [..., 2C]: y [..., C]. y must not alias x.
void glu(const Tensor& x, Tensor& y);

// y = xᵀ for a 2-D x.
void transpose(const Tensor& x, Tensor& y);

// y[i] = table row ids[i] as F32 (table [rows, D] in any stored type): y [ids.size(), D].
// Throws hark::Error on an id outside the table.
void embedding(const Weight& table, std::span<const int32_t> ids, Tensor& y);

// y[i] = x row rows[i]: y [rows.size(), D] from x viewed as [R, D].
void gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& y);
// y row rows[i] = x row i for x [rows.size(), D] and y viewed as [R, D] (kept as it is, other
// rows untouched): the inverse of gather_rows. Rows must be distinct.
void scatter_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& y);

// y[a, j, i] = x[a, i, j] for x [A, I, J]: y [A, J, I] (a 2-D x is one matrix, A = 1).
void swap_last_axes(const Tensor& x, Tensor& y);

// Multi-head scaled dot-product attention.
//   q [B, Tq, H·Dh]; k, v [Bk, S, H·Dh] with Bk == B (one cache per sequence) or Bk == 1 (shared
//   by all sequences, e.g. cross-attention over one encoded window). Only the first kv_length of
//   the S rows are used. With `causal`, query i sits at position kv_length − Tq + i and sees keys
//   0..that position.
//   out [B, Tq, H·Dh] = softmax(scale · q kᵀ) v, per head.
void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_length, int heads,
               float scale, bool causal, Tensor& out);

// The sinusoidal table of relative positions of a Transformer-XL encoder over `steps` frames:
// y [2·steps − 1, width] (width even), row k for position r = steps − 1 − k (steps − 1 down to
// −(steps − 1)): y[k, 2m] = sin(r·w_m), y[k, 2m + 1] = cos(r·w_m), w_m = 1 / 10000^(2m / width),
// all in F32 as transformers' ParakeetEncoderRelPositionalEncoding computes them.
void relative_positions(int64_t steps, int64_t width, Tensor& y);

// Multi-head self-attention with Transformer-XL relative positions (docs/parakeet.md 4.3):
//   q, k, v [B, T, H·Dh] (or [T, H·Dh], B = 1); p [2T − 1, H·Dh] the projected position table,
//   row T − 1 − r for position r (relative_positions() projected by linear_pos);
//   pos_bias_u, pos_bias_v [H, Dh] in any stored type.
// Per sequence b, head (u, v' its rows of pos_bias_u, pos_bias_v), query i and key
// j < lengths[b] (empty lengths: every key valid):
//   score[i, j] = scale · (q_i + u)·k_j + scale · (q_i + v')·p[T − 1 − i + j]
//   out_i = Σ_j softmax_j(score[i, :])_j · v_j
// p[T − 1 − i + j] is position i − j: what transformers' _rel_shift of the [T, 2T − 1] product
// with the whole table picks. Queries at or past lengths[b] get zeros. out [B, T, H·Dh] (q's
// shape) must not alias an input.
void rel_pos_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& p,
                       const Weight& pos_bias_u, const Weight& pos_bias_v, int heads, float scale,
                       std::span<const int64_t> lengths, Tensor& out);

// One step of an LSTM layer for B sequences, PyTorch's nn.LSTM cell (gate rows i, f, g, o):
//   gates = x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh                        [B, 4H]
//   c = σ(f) ⊙ c + σ(i) ⊙ tanh(g),  h = σ(o) ⊙ tanh(c)              (h, c updated in place)
// x [B, in], w_ih [4H, in], w_hh [4H, H], biases [4H] or null, h and c [B, H]; `gates` is
// scratch. x may be h of the layer below, not this layer's h or c.
void lstm_step(const Tensor& x, const Weight& w_ih, const Weight& w_hh, const Weight* b_ih,
               const Weight* b_hh, Tensor& h, Tensor& c, Tensor& gates);

// A convolution followed by an inference BatchNorm over its output channels, folded into one
// convolution at load time: with s = gamma / sqrt(var + eps) per output channel,
//   weight' = weight · s (each output channel's rows),  bias' = (bias − mean) · s + beta.
// Computed in double, stored F32. The views point into the vectors: moving a FoldedConv keeps
// them valid, copying would not, so it cannot be copied.
struct FoldedConv {
  std::vector<float> weight_values, bias_values;
  Weight weight, bias;  // weight keeps the convolution's shape; bias [C_out]

  FoldedConv() = default;
  FoldedConv(FoldedConv&&) = default;
  FoldedConv& operator=(FoldedConv&&) = default;
  FoldedConv(const FoldedConv&) = delete;
  FoldedConv& operator=(const FoldedConv&) = delete;
};
FoldedConv fold_batch_norm(const Weight& conv_weight, const Weight* conv_bias, const Weight& gamma,
                           const Weight& beta, const Weight& mean, const Weight& var, float eps);

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
