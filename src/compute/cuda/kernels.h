// The CUDA backend's own kernels, one launcher each (the matrix products go through cuBLASLt in
// gemm_cuda.cpp). Every pointer is device memory, every launch is asynchronous on `stream`, and
// nothing here synchronises with the host or allocates, so all of it can be captured into a CUDA
// Graph. Launchers trust their arguments: the layers above check shapes.
//
// Element types: activations are F32, F16 or BF16 (the type of the model's weights; Q8_0 models
// compute in F16); every kernel accumulates in F32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hark::compute::cuda {

enum class Element : uint8_t { f32, f16, bf16 };
constexpr size_t element_size(Element e) {
  return e == Element::f32 ? 4 : 2;
}

// ---- kernels_elementwise.cu -------------------------------------------------------------------

// y[r, :] = (x[r, :] − mean) / sqrt(var + eps) · gamma + beta over `cols` values; gamma and beta
// are [cols] of the same element type. y may alias x.
void layer_norm(Element e, const void* x, const void* gamma, const void* beta, float eps,
                int64_t rows, int64_t cols, void* y, cudaStream_t stream);

// x = gelu(x + bias) in place, erf GELU (PyTorch's nn.GELU default); bias [cols] or null.
void bias_gelu(Element e, void* x, const void* bias, int64_t rows, int64_t cols,
               cudaStream_t stream);

// x[b, r, :] += table[r, :] for x [batch, rows, cols] (encoder positions, shared by the batch).
void add_rows(Element e, void* x, const void* table, int64_t batch, int64_t rows, int64_t cols,
              cudaStream_t stream);

// y[i, :] = tokens[ids[i], :] + positions[position_ids[i], :] for i < n, rows of `cols`
// values. `tokens` is of element type e, or with token_scales a Q8_0 table in the device layout
// (below): tokens its quants, token_scales its scales.
void embed(Element e, const void* tokens, const void* token_scales, const void* positions,
           const int32_t* ids, const int32_t* position_ids, int64_t n, int64_t cols, void* y,
           cudaStream_t stream);

// Unfolds time-major x [batch, steps, channels] for a 1-D convolution with `kernel` taps:
// out [batch, out_steps, channels · kernel], out[b, t, c · kernel + j] = x[b, t · stride − padding
// + j, c] (zero outside), out_steps = (steps + 2 · padding − kernel) / stride + 1. The column
// order matches a PyTorch Conv1d weight [out, in, kernel] read as a matrix [out, in · kernel].
void im2col_1d(Element e, const void* x, int64_t batch, int64_t steps, int64_t channels, int kernel,
               int stride, int padding, void* out, cudaStream_t stream);

// Log-mel windows as the feature code writes them, F32 [batch, n_mels, frames], to time-major
// activations [batch, frames, n_mels] of element type e.
void mel_to_time_major(const float* mel, int64_t batch, int64_t n_mels, int64_t frames, Element e,
                       void* out, cudaStream_t stream);

// A window cut from a time-major log-mel on the device (features/mel_cuda.h's F32 [frames,
// n_mels]): `frames` rows from `first`, the rest of the window zeros.
struct MelWindowCut {
  const float* first = nullptr;
  int64_t frames = 0;
};

// out [batch, window_frames, n_mels] of element type e: out[b, t, :] = cuts[b].first[t, :] for
// t < cuts[b].frames, zeros after. cuts: `batch` entries in device memory.
void mel_windows_to_time_major(const MelWindowCut* cuts, int64_t batch, int64_t window_frames,
                               int64_t n_mels, Element e, void* out, cudaStream_t stream);

// y[i] = x[i] converted, n values.
void convert(Element from, const void* x, Element to, void* y, int64_t n, cudaStream_t stream);

// Q8_0 on the device. GGUF stores a Q8_0 row as blocks of 32 values, each an F16 scale d and then
// 32 int8 quants q (value = d · q): 34 bytes, which no vector load lines up with. On the device a
// Q8_0 matrix [rows, cols] (cols a multiple of 32) is its quants, rows × cols int8 in row order,
// followed by its scales, rows × cols / 32 F16 in row order: the same bytes, in 16-byte-aligned
// rows (q8_0_to_device_layout in pass.h rearranges GGUF's blocks so).
// The bytes from a matrix's quants to its scales (host and device: the one-launch step finds a
// CTA's scales by it).
__host__ __device__ constexpr int64_t q8_0_scales_offset(int64_t rows, int64_t cols) {
  return rows * cols;
}
// The bytes of a row's scales: one F16 scale a block of 32 values.
__host__ __device__ constexpr int64_t q8_0_scale_row_bytes(int64_t cols) {
  return cols / 32 * 2;
}

// A Q8_0 matrix [rows, cols] in the device layout, to element type e: each value d · q in F32,
// rounded once to e.
void dequantize_q8_0(const void* w, int64_t rows, int64_t cols, Element e, void* out,
                     cudaStream_t stream);

// ---- kernels_attention.cu ---------------------------------------------------------------------

// Multi-head scaled dot-product attention over whole sequences (encoder, decoder prompt):
// for each sequence b, head h and query i < q_len,
//   out[b, i, h·head_dim + :] = Σ_j softmax_j(scale · q_i · k_j) v_j,
// over keys j < kv_len, or with `causal` j ≤ kv_len − q_len + i. Rows are addressed with
// strides (in elements) so that q, k and v may be slices of one fused QKV projection
// [batch, steps, 3 · width]; element (b, t, c) of q lives at q[b · q_batch_stride +
// t · q_row_stride + c], likewise for k, v (kv strides) and out. kv_batch_stride 0 shares one
// key/value sequence among all b. head_dim is a multiple of 8, at most 128.
void attention(Element e, const void* q, int64_t q_row_stride, int64_t q_batch_stride,
               const void* k, const void* v, int64_t kv_row_stride, int64_t kv_batch_stride,
               void* out, int64_t out_row_stride, int64_t out_batch_stride, int batch, int heads,
               int head_dim, int64_t q_len, int64_t kv_len, float scale, bool causal,
               cudaStream_t stream);

// Transformer-XL's relative positions for padded_attention: the projected position table
// [2·steps − 1, heads · head_dim] (element type of the attention, row stride row_stride, rows
// 16-byte aligned), whose row steps − 1 − r belongs to relative position r. For query i and key j
// of any sequence, head h's score gains q_i · p_(steps − 1 − i + j) over the head's columns, with
// q_i as it is in memory (before any query bias): the "relative shift", done by the kernel
// picking, for each score, the product with the right row.
struct RelativePositions {
  const void* table = nullptr;
  int64_t row_stride = 0;
  int64_t steps = 0;  // padded_attention's steps
};

// `attention` without causality over a padded batch, on the tensor cores: sequence b has
// lengths[b] valid steps of the q_len (= kv_len) padded ones; its queries see its first
// lengths[b] keys, and its rows at or past lengths[b] are written as zeros. Packed instead, with
// `starts` (a device array; needs lengths): sequence b's rows begin at row starts[b] of q, k, v,
// and out (batch strides unused), and only its lengths[b] rows exist and are
// written; steps is the longest length. With `relative`, the position scores are added to q·k
// (both then scaled). With `query_bias` [heads, head_dim] (element type; null: none), row h is
// added to every query of head h as it is loaded, the sum rounded to the element type: the scores
// are those of q + query_bias (relative-position attention's content bias on queries that hold
// another bias, Pass::rel_pos_attention). For what padded_attention_runs accepts (16-bit
// elements, head_dim 64 or 128); its pointers must be 16-byte aligned and its strides multiples
// of 8 elements, or it fails.
bool padded_attention_runs(Element e, int head_dim);
void padded_attention(Element e, const void* q, int64_t q_row_stride, int64_t q_batch_stride,
                      const void* k, const void* v, int64_t kv_row_stride, int64_t kv_batch_stride,
                      void* out, int64_t out_row_stride, int64_t out_batch_stride,
                      const int32_t* lengths, const int32_t* starts,
                      const RelativePositions* relative, const void* query_bias, int batch,
                      int heads, int head_dim, int64_t steps, float scale, cudaStream_t stream);

// One query per sequence (a decode step): q [batch, heads · head_dim] (row stride q_stride),
// keys/values of sequence b at k/v + b · kv_batch_stride, one row per position kv_row_stride
// apart; sequence b attends to its first lengths[b] positions (a device array, so that a captured
// graph serves every step). out [batch, heads · head_dim] (row stride out_stride).
// Launched as a programmatic dependent of the kernel before it: its blocks may start while that
// one finishes, and wait for it before they read anything.
//
// With `query` (AttentionQuery, below), the kernel computes q itself from x (q and q_stride are
// not read).
struct AttentionQuery;
void decode_attention(Element e, const void* q, int64_t q_stride, const void* k, const void* v,
                      int64_t kv_row_stride, int64_t kv_batch_stride, const int32_t* lengths,
                      void* out, int64_t out_stride, int batch, int heads, int head_dim,
                      float scale, cudaStream_t stream, const AttentionQuery* query = nullptr);

// A decode step's cross-attention query, computed by decode_attention (or decode_attention_int8)
// instead of a launch of its own: for query row b, q_b = h_b · Wᵀ + bias over the head's rows of
// W, with h_b = layer_norm(x_b) (gamma, beta, eps; F32 statistics) rounded to the element type
// as decode_linear stages it, and q_b rounded to it as decode_linear stores it; only the order
// of the sums differs from decode_linear. Each CTA of a (row, head) cluster computes
// head_dim / splits of the head's rows and reads the others' through distributed shared memory:
// the step saves a launch a layer and q's round trip through memory. x [batch, d], W
// [heads · head_dim, d], gamma, beta [d], bias [heads · head_dim] (null: none), of the element
// type, or W a Q8_0 matrix in the device layout (above; d a multiple of 32), each value d · q
// rounded to the element type as dequantize_q8_0 rounds it; x, W, gamma and beta 16-byte
// aligned. Takes the shapes attention_query_fuses accepts (throws hark::Error otherwise).
struct AttentionQuery {
  const void* x = nullptr;
  int64_t d = 0;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  float eps = 1e-5f;
  const void* w = nullptr;
  const void* bias = nullptr;
  bool q8_0 = false;  // w is a Q8_0 matrix in the device layout
};
// 16-bit elements, head_dim up to 64, d a multiple of 8 up to 1280 (with Q8_0 weights, of 32),
// one query row a sequence, and few enough (row, head) pairs that each one's keys are split among
// at least 4 CTAs (so that a CTA computes at most a quarter of a head's rows): with Whisper
// large's 20 heads, up to 6 rows.
bool attention_query_fuses(Element e, int batch, int heads, int head_dim, int64_t d, bool q8_0);
// Whether such a launch (batch rows of `heads` heads) has all of its CTAs on the GPU at once.
// The fused query holds its rows of W in registers (3 CTAs an SM), and past one wave the CTAs
// of the second wait for the first's to finish before they start their query's chain: on an
// H100, large-v3's step with native K/V took 0.19-0.25 ms longer with the fused query at 3, 5
// and 6 sequences (480, 400, 480 CTAs) and 0.01-0.09 ms less at 1, 2 and 4 (160-320;
// bench/RESULTS.md, thirty-second session).
bool attention_query_in_one_wave(Element e, int batch, int heads, int head_dim);

// Keys and values stored as INT8 (Whisper's cross-attention K/V): each group of `group`
// consecutive values (one head of one row) keeps an F32 scale = max |x| / 127 over the group and
// q = x · (127 / max |x|) rounded half to even (all zeros for a group of zeros); value =
// scale · q. Half the memory of F16, and half of what a decode step reads. (Times the inverse
// rather than divided by the scale: one division a group instead of one a value, which in a
// product's epilogue was most of the work.)
//
// Where INT8 values and their scales lie: value i of group g of row t of block b at
// values + b · batch + g · group_stride + t · row + i, its scale at
// scales + b · scale_batch + g · scale_group_stride + t · scale_row.
struct Int8Strides {
  int64_t row = 0, group_stride = 0, batch = 0;
  int64_t scale_row = 0, scale_group_stride = 0, scale_batch = 0;
};

// The layout quantize_int8 writes for a matrix [blocks · block_rows, cols] in groups of `group`:
// each block group-major, so that one group (a head) of a block's rows is one run of
// block_rows · group values and one of block_rows scales. A decode step's cross-attention reads
// a (window, head) pair as two such runs instead of 64-byte pieces 2 · layers · d apart, which
// the HBM serves at a fraction of its rate.
inline Int8Strides group_major_strides(int64_t cols, int group, int64_t block_rows) {
  const int64_t groups = cols / group;
  return {group, block_rows * group, block_rows * cols, 1, block_rows, groups * block_rows};
}

// q and scales of x, rows [first_row, first_row + rows) of a matrix [blocks · block_rows, cols]
// (element type e, dense; x points at row first_row), in group_major_strides(cols, group,
// block_rows) from q and scales (row 0's); cols a multiple of group.
void quantize_int8(Element e, const void* x, int64_t first_row, int64_t rows, int64_t cols,
                   int group, int64_t block_rows, int8_t* q, float* scales, cudaStream_t stream);

// The inverse, for `batch` blocks of `rows` rows of `cols` values (cols a multiple of group):
// out[b, r, c] = the value of group c / group, index c % group, row r, block b of q and scales
// as `strides` place them; out dense [batch, rows, cols] of element type e.
void dequantize_int8(const int8_t* q, const float* scales, const Int8Strides& strides, int batch,
                     int64_t rows, int64_t cols, int group, Element e, void* out,
                     cudaStream_t stream);

// INT8 keys and values for decode_attention_int8: position t of head h of sequence b at row t,
// group h, block b of k (v) and k_scales (v_scales) in `strides`.
struct Int8Kv {
  const int8_t* k = nullptr;
  const int8_t* v = nullptr;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  Int8Strides strides;
};

// decode_attention over INT8 keys and values (one scale per position and head): the same
// queries, lengths, output and launch shape, the values dequantised in registers, F32 math.
// With queries_per_sequence P > 1, `batch` counts query rows, a multiple of P, and rows
// b · P … b · P + P − 1 attend over sequence b's keys and values, lengths[b] of them (a prompt's
// tokens over their window's cross-attention K/V).
// With `query`, the kernel computes q as decode_attention does (P must be 1).
void decode_attention_int8(Element e, const void* q, int64_t q_stride, const Int8Kv& kv,
                           const int32_t* lengths, void* out, int64_t out_stride, int batch,
                           int heads, int head_dim, float scale, cudaStream_t stream,
                           int queries_per_sequence = 1, const AttentionQuery* query = nullptr);

// K/V cache append: for b < batch and t < steps, cache row positions[b] + t of sequence b
// (k_cache/v_cache + b · cache_batch_stride + (positions[b] + t) · width) = row t of new_k/new_v
// (new_k + b · new_batch_stride + t · new_row_stride). width values per row.
void append_kv(Element e, const void* new_k, const void* new_v, int64_t new_row_stride,
               int64_t new_batch_stride, int batch, int64_t steps, int64_t width, void* k_cache,
               void* v_cache, int64_t cache_batch_stride, const int32_t* positions,
               cudaStream_t stream);

// ---- kernels_cross_attention.cu: cross-attention over the frames themselves ----------------
//
// With keys W_k,h x_t and values W_v,h x_t + b_v,h of frames x_t, head h's attention of a query
// q_h is softmax_t(q̃_h · x_t) then W_v,h (Σ_t p_t x_t) + b_v,h, where q̃_h = scale · W_k,hᵀ q_h:
// the projections fold into the query and the output, and a decode step reads each frame once
// (width values) for every head, where a K/V cache costs 2 · width values a frame and layer.

// Whether the three kernels below take these shapes: F16/BF16, at most 24 heads of a multiple of
// 16 values up to 128, a width that is a multiple of 16 up to 1280.
bool frame_attention_runs(Element e, int heads, int64_t width);

// out [rows, heads, width] = scale · per head h, q[r, h·head_dim .. +head_dim] · W_k rows
// [h·head_dim, +head_dim) (w_k [heads · head_dim, width], rows w_row_stride apart).
void absorb_query(Element e, const void* q, int64_t q_stride, int64_t rows, int heads, int head_dim,
                  const void* w_k, int64_t w_row_stride, int64_t width, float scale, void* out,
                  cudaStream_t stream);

// out [rows, heads, width]: row r's heads attend over the frame_count frames [frame_count, width]
// at frames + (r / rows_per_window) · window_stride (0: one window for all rows), each head's
// query row queries[r, h] (scores unscaled: absorb_query scales), keys and values the frames.
void frame_attention(Element e, const void* queries, int64_t rows, int heads, int64_t width,
                     const void* frames, int frame_count, int64_t window_stride,
                     int64_t rows_per_window, void* out, cudaStream_t stream);

// Frames in INT8 for frame_attention_int8 (frame_attention_sm90.h), scaled per channel and per
// frame, so that a channel of large values (a Transformer's outlier dimensions) does not take the
// range of the others: x[t, c] ≈ (codes[t, c] − 128) · channel_scales[c] · frame_scales[t] / 127,
// with channel_scales[c] = max_t |x[t, c]| and frame_scales[t] = max_c |x[t, c]| /
// channel_scales[c] (both 1 where that max is 0). The codes are offset by 128 (unsigned), which the
// tensor-core kernel turns into 16-bit values with a byte permute. Each window: codes [frames,
// width], frame_scales [frames], channel_scales [width]; with `windowed`, window w of a batch at
// codes + w · frames · width, frame_scales + w · frames and channel_scales + w · width, and
// without it one window for every row.
struct Int8Frames {
  const uint8_t* codes = nullptr;
  const float* frame_scales = nullptr;
  const float* channel_scales = nullptr;
  bool windowed = true;
};

// Quantises `windows` windows of frames [windows, frame_count, width] (F16/BF16; width a multiple
// of 8) into codes [windows, frame_count, width], frame_scales [windows, frame_count] and
// channel_scales [windows, width], as Int8Frames describes.
void quantize_frames(Element e, const void* frames, int windows, int frame_count, int64_t width,
                     uint8_t* codes, float* frame_scales, float* channel_scales,
                     cudaStream_t stream);

// context[r, h·head_dim + j] = W_v[h·head_dim + j] · o[r, h] + bias[h·head_dim + j] (bias may be
// null); o [rows, heads, width], w_v [heads · head_dim, width] (rows w_row_stride apart),
// context rows context_stride apart.
void absorb_values(Element e, const void* o, int64_t rows, int heads, int head_dim, const void* w_v,
                   int64_t w_row_stride, const void* bias, int64_t width, void* context,
                   int64_t context_stride, cudaStream_t stream);

// ---- kernels_search.cu ------------------------------------------------------------------------

// Whisper's logit rules (models/whisper/logit_rules.h, the same rules in the same order) and
// greedy choice, on the device, for `batch` independent sequences, one block each.
struct GreedyRules {
  int32_t vocab_size = 0;
  int32_t eot = -1, no_timestamps = -1, timestamp_begin = -1;
  int32_t max_initial_timestamp_index = -1;  // < 0: no limit
  bool timestamps = false;
  const int32_t* suppress = nullptr;  // device, ids inside the vocabulary, sorted, no repeats
  int32_t n_suppress = 0;
  const int32_t* begin_suppress = nullptr;  // device, likewise
  int32_t n_begin_suppress = 0;
  // false: <|endoftext|> is sampled like any other token and does not end a window, so that
  // each runs to its limit (benchmarks of fixed lengths).
  bool eot_ends = true;
};

// Per-sequence search state, device arrays of `batch` entries (history: [batch, capacity]).
struct GreedyState {
  int32_t* history = nullptr;  // tokens sampled so far in the window, <|endoftext|> included
  int32_t capacity = 0;        // history row length
  int32_t* count = nullptr;    // tokens in history
  uint8_t* done = nullptr;     // 1 once <|endoftext|> was sampled or the limit reached
  double* sum_logprob = nullptr;
  const int32_t* limits = nullptr;  // tokens each sequence may sample (≤ capacity); null: capacity
};

// For each sequence b that is not done and has count[b] < limits[b] (or capacity): applies the
// rules to logits[b, :] (F32 [batch, vocab_size], modified in place) given history[b, :count[b]],
// picks the argmax (the lowest id among equal maxima), adds its log-probability under the ruled
// scores (score − logsumexp) to sum_logprob[b], appends it to history, sets done[b] when it is
// <|endoftext|> (unless rules.eot_ends is false) or the limit's last token, and writes it to
// next_tokens[b]. A done sequence gets next_tokens[b] = eot and nothing else changes.
void greedy_step(const GreedyRules& rules, float* logits, int batch, GreedyState state,
                 int32_t* next_tokens, cudaStream_t stream);

// The lengths a batched decode step reads, after its search took a token. A sequence that is not
// done (greedy_step) advances positions[b] and lengths[b] (the self-attention's keys) by `by`; a
// done one stays where it ended, so that the tokens it is still fed (the step runs the whole
// batch) stay inside the decoder's position table. live_lengths[b] and live_cross_lengths[b] are
// lengths[b] and cross_lengths[b], or, with skip_finished, 0 for a done sequence: its attentions
// then read no keys (decode_attention writes zeros), so that a finished window costs the step
// little more than its rows of the products.
void advance_search(int32_t* positions, int32_t* lengths, int by, const uint8_t* done,
                    bool skip_finished, const int32_t* cross_lengths, int batch,
                    int32_t* live_lengths, int32_t* live_cross_lengths, cudaStream_t stream);

// out[r] = softmax(logits[r, :vocab])[token] for r < rows (F32 rows row_stride apart), the
// log-sum-exp summed in double as the CPU search does (Whisper's no-speech probability).
void token_probability(const float* logits, int64_t row_stride, int rows, int vocab, int token,
                       float* out, cudaStream_t stream);

// ---- kernels_decode.cu ------------------------------------------------------------------------

// A decode step's linear layer in one launch, its neighbours fused. For b < batch, n < n_out:
//   h[b, :] = norm ? layer_norm(x[b, :]) : x[b, :]   (norm's gamma, beta, eps; F32 statistics)
//   t = Σ_k h[b, k] · W[n, k] + (bias ? bias[n] : 0)
//   t = gelu ? gelu_erf(t) : t
//   t += residual ? residual[b, n] : 0               (residual [batch, n_out], may alias y)
// stored to y[b, n] (row stride n_out). With a K/V scatter (n_out = 3 · width, no residual) only
// columns [0, width) go to y (row stride width); columns [width, 2 · width) go to
// k_cache + b · cache_batch_stride + positions[b] · width + (n − width), columns
// [2 · width, 3 · width) to v_cache likewise. W is [n_out, k_in]: of element type e, or for a
// 16-bit e a Q8_0 matrix in the device layout (above), each value rounded to e as
// dequantize_q8_0 rounds it; x, bias, residual, y, the norm's vectors and the caches are of
// element type e. 16-bit types multiply on tensor cores with h rounded to e (what layer_norm would
// have stored); F32 multiplies in F32 (no TF32). Meant for batch ≤ 16, which reads W once; larger
// batches take a launch per 16 rows (F32 rows too long for 16 of them in shared memory, past
// about 3500 values, a launch per 8). Requires k_in a multiple of 8 (of 32 for Q8_0) and x, W,
// gamma, beta 16-byte aligned (throws hark::Error otherwise); x must not overlap y or the
// caches. Null norm, bias, residual, scatter: absent.
struct DecodeWeights {
  const void* data = nullptr;
  bool q8_0 = false;  // data is a Q8_0 matrix in the device layout
};
struct DecodeNorm {
  const void* gamma = nullptr;
  const void* beta = nullptr;
  float eps = 1e-5f;
};
struct KvScatter {
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t cache_batch_stride = 0;      // elements from one sequence's cache to the next
  const int32_t* positions = nullptr;  // device, [batch]: the cache row each sequence writes
  int64_t width = 0;
};
void decode_linear(Element e, const void* x, int batch, int64_t k_in, const DecodeNorm* norm,
                   DecodeWeights w, int64_t n_out, const void* bias, bool gelu,
                   const void* residual, void* y, const KvScatter* scatter, cudaStream_t stream);

// decode_linear without bias, GELU, residual or scatter, its sums stored as F32: y[b, n] (row
// stride n_out) = Σ_k h[b, k] · W[n, k], h the (optionally normalised) x. For a step's logits,
// which read the largest matrix of the step and should not lose precision on the way out.
void decode_linear_f32_out(Element e, const void* x, int batch, int64_t k_in,
                           const DecodeNorm* norm, DecodeWeights w, int64_t n_out, float* y,
                           cudaStream_t stream);

}  // namespace hark::compute::cuda
