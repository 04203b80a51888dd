// The CUDA kernels of Conformer encoders and transducer heads (FastConformer as in NVIDIA's
// Parakeet, docs/parakeet.md sections 4-5), beside the shared ones in kernels.h and under the same
// rules: every pointer is device memory, every launch is asynchronous on `stream`, nothing
// synchronises with the host or allocates, activations are of element type e (F32, F16, BF16)
// and every kernel computes in F32. Launchers trust their arguments: the model checks shapes.
//
// Batches are padded: sequence b of a [batch, steps, ...] tensor has lengths[b] valid steps (a
// device array). Where a kernel says so, steps at or past the length read as zeros, so that a
// padded batch computes for its valid steps exactly what each sequence alone would.
//
// Kernels that take `starts` (a device array, or null) also run on packed batches: with starts,
// sequence b's rows begin at row starts[b] of its tensors and only its lengths[b] valid rows
// exist there, back to back with the next sequence's; nothing is read or written past them.
// `steps` is then the longest length (it sizes the grid). Null starts: padded, row b·steps.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {

// ---- Depthwise weights -------------------------------------------------------------------------

// The depthwise and one-input-channel convolutions below take their weights tap-major, [taps,
// channels], so that a thread loads the taps of its pack of neighbouring channels as whole
// packs. PyTorch stores them per channel, [channels, taps] (taps = kernel for Conv1d, kernel ·
// kernel for Conv2d); this is that transpose, on the host, done once when weights load.
std::vector<float> tap_major(const float* weights, int64_t channels, int64_t taps);

// ---- Convolutional subsampling ----------------------------------------------------------------

// A square-kernel 2-D convolution of one-channel images x [batch, height, width] (time ×
// frequency) to `channels` channels-last outputs y [batch, out_height, out_width, channels]:
//   y[b, t, f, c] = act(bias[c] + Σ_{i,j} w[i·kernel + j, c] · x[b, t·stride − padding + i,
//                                                               f·stride − padding + j])
// with out_height = (height + 2·padding − kernel) / stride + 1 (out_width likewise), zeros
// outside the image and at rows ≥ heights[b]; act is ReLU when `relu`, else none. w [kernel ·
// kernel, channels] (tap_major of PyTorch's [C, 1, k, k]), bias [channels].
void conv2d_one_channel(Element e, const void* x, int batch, int64_t height, int64_t width,
                        const int32_t* heights, const void* w, const void* bias, int64_t channels,
                        int kernel, int stride, int padding, bool relu, void* y,
                        cudaStream_t stream);

// Depthwise 2-D convolution of channels-last images x [batch, height, width, channels]:
//   y[b, t, f, c] = bias[c] + Σ_{i,j} w[i·kernel + j, c] · x[b, t·stride − padding + i,
//                                                            f·stride − padding + j, c]
// (output sizes as conv2d_one_channel), zeros outside the image and at rows ≥ heights[b].
// w [kernel · kernel, channels] (tap_major of PyTorch's [C, 1, k, k]), bias [channels].
void depthwise_conv2d(Element e, const void* x, int batch, int64_t height, int64_t width,
                      int64_t channels, const int32_t* heights, const void* w, const void* bias,
                      int kernel, int stride, int padding, void* y, cudaStream_t stream);

// conv2d_one_channel (relu true) followed by depthwise_conv2d on its output, in one pass that
// keeps the intermediate image on the chip: from x [batch, height, width] (one channel) and the
// valid rows of x (heights) and of the intermediate image (middle_heights), it computes
//   s[b, t, f, c] = round_e(ReLU(conv_bias[c] + Σ_{i,j} conv_w[i·kernel + j, c] · x[b, t·stride −
//                   padding + i, f·stride − padding + j]))
// (x zero outside the image and at rows ≥ heights[b]; s zero outside its middle_height ×
// middle_width and at rows ≥ middle_heights[b]), rounded to element type e as
// conv2d_one_channel stores it, then
//   y[b, t, f, c] = depthwise_bias[c] + Σ_{i,j} depthwise_w[i·kernel + j, c] · s[b, t·stride −
//                   padding + i, f·stride − padding + j, c]
// written channels-last, y [batch, out_height, out_width, channels] (sizes as conv2d_one_channel,
// applied twice). The results are those of the two kernels run back to back, bit for bit (up to
// the sign of zeros). Weights tap-major as theirs; biases may be null. Only for what
// conv2d_one_channel_then_depthwise_supported accepts (FastConformer's subsampling: kernel 3,
// stride 2, padding 1, channels a multiple of 8); weights, biases and y 16-byte aligned.
bool conv2d_one_channel_then_depthwise_supported(int kernel, int stride, int padding,
                                                 int64_t channels);
void conv2d_one_channel_then_depthwise(Element e, const void* x, int batch, int64_t height,
                                       int64_t width, const int32_t* heights,
                                       const int32_t* middle_heights, const void* conv_w,
                                       const void* conv_bias, int64_t channels,
                                       const void* depthwise_w, const void* depthwise_bias,
                                       int kernel, int stride, int padding, void* y,
                                       cudaStream_t stream);

// ---- Elementwise ------------------------------------------------------------------------------

// In place over n values: max(x, 0); x · σ(x); x · factor.
void relu(Element e, void* x, int64_t n, cudaStream_t stream);
void silu(Element e, void* x, int64_t n, cudaStream_t stream);
void scale(Element e, void* x, int64_t n, float factor, cudaStream_t stream);

// ---- Conformer convolution and attention ------------------------------------------------------

// The Conformer conv module's gated linear unit and depthwise 1-D convolution over time ('same'
// padding) in one pass over the pointwise convolution's output x [batch, steps, 2·channels]:
//   g[b, t, c] = x[b, t, c] · σ(x[b, t, channels + c])   (the GLU)
//   y[b, t, c] = act(bias[c] + Σ_j w[j, c] · g[b, t + j − (kernel − 1) / 2, c])
// where steps outside [0, lengths[b]) read as g = 0; act is SiLU when `silu`, else none. w
// [kernel, channels] (tap_major of PyTorch's [C, 1, k]) with kernel odd, bias [channels]. y
// [batch, steps, channels] is written for every step (packed: for the valid ones). y must not
// alias x.
void glu_depthwise_conv1d(Element e, const void* x, int batch, int64_t steps, int64_t channels,
                          const int32_t* lengths, const int32_t* starts, const void* w,
                          const void* bias, int kernel, bool silu, void* y, cudaStream_t stream);

// Multi-head self-attention with Transformer-XL relative positions (compute::rel_pos_attention,
// docs/parakeet.md 4.3). Row t of sequence b of q, k and v is at q + (b·steps + t)·row_stride
// (likewise k, v: slices of one fused projection), head h at columns h·head_dim ...; p [2·steps
// − 1, heads·head_dim] (row stride p_row_stride) is the projected position table, row
// steps − 1 − r for position r. With u, v' the rows h of bias_u, bias_v [heads, head_dim] (either
// null: zeros), for query i < lengths[b] and keys j < lengths[b]:
//   score[i, j] = scale · ((q_i + u)·k_j + (q_i + v')·p[steps − 1 − i + j])
//   out_i = Σ_j softmax_j(score[i, :])_j · v_j
// at out + (b·steps + i)·out_row_stride + h·head_dim; queries at or past lengths[b] get zeros
// (packed, with starts: row starts[b] + i, and there are no such queries). head_dim ≤ 128. out
// must not alias an input.
void rel_pos_attention(Element e, const void* q, const void* k, const void* v, int64_t row_stride,
                       const void* p, int64_t p_row_stride, const void* bias_u, const void* bias_v,
                       const int32_t* lengths, const int32_t* starts, int batch, int64_t steps,
                       int heads, int head_dim, float scale, void* out, int64_t out_row_stride,
                       cudaStream_t stream);

// Copies the valid rows of each sequence between two layouts of a batch: row t < lengths[b] of
// sequence b, row_bytes bytes, goes from row (x_starts ? x_starts[b] : b·x_steps) + t of x to row
// (y_starts ? y_starts[b] : b·y_steps) + t of y. With packed starts on one side, it packs a
// padded batch or unpacks a packed one; rows of y that no sequence fills keep what they held.
// max_length ≥ every length sizes the grid. x and y must not overlap.
void copy_sequence_rows(const void* x, const int32_t* x_starts, int64_t x_steps, void* y,
                        const int32_t* y_starts, int64_t y_steps, const int32_t* lengths, int batch,
                        int64_t max_length, int64_t row_bytes, cudaStream_t stream);

// ---- Heads ------------------------------------------------------------------------------------

// Finishes F32 logits [rows, cols] in place and picks from them: logits[r, :] += bias (element
// type e, [cols]; null: none), then first[r] = argmax over columns [0, split) and, when `second`
// is not null, second[r] = argmax over [split, cols) counted from split (TDT's durations). Ties
// go to the lowest index, as torch.argmax. Row r starts at logits + r · row_stride (≥ cols: a
// head padded to aligned rows); the columns from cols to row_stride are neither read nor written.
void finish_logits(Element e, float* logits, int64_t row_stride, const void* bias, int64_t rows,
                   int64_t cols, int64_t split, int32_t* first, int32_t* second,
                   cudaStream_t stream);

// PyTorch's LSTM cell for the rows whose ids[b] ≥ 0 (the others keep h and c): with gates
// [batch, 4·hidden] = x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh in the order i, f, g, o,
//   c = σ(f) ⊙ c + σ(i) ⊙ tanh(g),  h = σ(o) ⊙ tanh(c).
// With `input_gates` (null: none), row ids[b] of that table [tokens, 4·hidden] is added to row b
// of `gates` first: a first layer whose input is a token's embedding E[id] looks x·W_ihᵀ + b_ih
// up in E·W_ihᵀ + b_ih, computed once, instead of multiplying it every step.
// c [batch, hidden] is F32 (the state that accumulates across steps keeps full precision); h
// [batch, hidden], gates and input_gates are of element type e.
void lstm_cell(Element e, const void* gates, const void* input_gates, const int32_t* ids,
               int64_t batch, int64_t hidden, float* c, void* h, cudaStream_t stream);

// ---- Greedy transducer search (kernels_transducer.cu) -----------------------------------------
//
// RNN-T and TDT greedy decoding (docs/parakeet.md 5.2, 5.3) of a batch of utterances with the
// decisions taken on the device, so that a decode runs without waiting for the host. A step looks
// `window` frames ahead: the joint network evaluates each utterance's prediction against the
// encoder frames [frame, frame + window), and the search walks them in order as long as they are
// blanks, which leave the prediction as it is (so the later frames' logits are the ones the
// one-frame-at-a-time search would compute). The walk ends at a token (the prediction network
// must take it), at the end of the window, or when the utterance is done.

// The rules of models/parakeet/greedy.h (TransducerSearch::next_step and decide), and the
// benchmarks' emission pattern (EmissionPattern, models/parakeet/model.h) when
// pattern_frames_per_token > 0.
struct TransducerRules {
  bool tdt = false;                      // else RNN-T
  int32_t blank = 0;                     // the blank's id
  int32_t vocab_size = 0;                // V (the pattern's tokens)
  int32_t max_symbols_per_step = 1;      // RNN-T: tokens per frame; both: steps ≤ this · frames
  int32_t pattern_frames_per_token = 0;  // > 0: the pattern's decisions replace the argmax's
  int32_t pattern_duration = 1;          // TDT: the duration index of the pattern's tokens
};

// Per-utterance search state, device arrays of `batch` entries (emissions: [capacity, batch, 3]).
// All zeros (besides frames) is the start of a decode.
struct TransducerState {
  const int32_t* frames = nullptr;  // valid encoder frames T of each utterance
  int32_t* frame = nullptr;         // the frame pointer
  int32_t* steps = nullptr;         // decisions taken (the bound: max_symbols_per_step · T)
  int32_t* symbols = nullptr;       // RNN-T: tokens emitted on the current frame
  int32_t* count = nullptr;         // emissions so far
  // Emission j of utterance b at (j · batch + b) · 3: token, frame, duration (as
  // models/parakeet/model.h's Emission), slot-major so that the first n slots of every utterance
  // are one contiguous prefix.
  int32_t* emissions = nullptr;
  int32_t capacity = 0;         // slots per utterance: at least max_symbols_per_step · max T
  int32_t* decoding = nullptr;  // one value: the utterances not yet done after the last step
};

// The joint network's hidden layer for a step, batch · window rows of `cols` values: for
// utterance b and w < window,
//   y[b · window + w, :] = ReLU(encoder[b · padded_frames + min(frame[b] + w, frames[b] − 1), :]
//                               + prediction[b, :])
// with encoder [batch · padded_frames, cols] (the encoder's projection) and prediction
// [batch, cols] (each utterance's projected prediction). The frame is clamped: a window may reach
// past the last frame, where the search never reads (an utterance without frames, which never
// decodes, reads its first row). y must not alias an input.
void joint_hidden(Element e, const void* encoder, int64_t padded_frames, const void* prediction,
                  TransducerState state, int batch, int window, int64_t cols, void* y,
                  cudaStream_t stream);

// Takes each utterance's decisions for one step: tokens[b · window + w] is the argmax of the
// token logits of joint_hidden's row b · window + w, durations likewise of the duration logits
// (TDT; ignored for RNN-T). From frame[b], while the utterance is not done (frame < T and steps <
// max_symbols_per_step · T) and the frame lies in the window, applies one decision as
// TransducerSearch::decide does (counting it in steps), appending what it emits; it stops after a
// token. ids[b] = that token, or −1 when none (a done utterance: −1 and nothing changes), for the
// prediction network (lstm_cell leaves rows with ids < 0 alone).
// Writes decoding[0]. One thread per utterance.
void transducer_decide(const TransducerRules& rules, TransducerState state, int batch, int window,
                       const int32_t* tokens, const int32_t* durations, int32_t* ids,
                       cudaStream_t stream);

}  // namespace hark::compute::cuda
