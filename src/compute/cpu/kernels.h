// The CPU implementation of the op set (see compute/ops.h for what each op computes). These are
// called by ops.cpp after it has checked shapes and resized outputs, so they trust their inputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/ops.h"

namespace hark::compute::cpu {

// Single-threaded row-major C[M, N] = alpha · A[M, K] · op(B) + beta · C, where op(B) is Bᵀ for a
// B stored [N, K] (b_transposed) and B itself for a B stored [K, N]. OpenBLAS in sgemm_blas.cpp,
// a blocked loop in sgemm_noblas.cpp.
void sgemm(bool b_transposed, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// Makes the BLAS single-threaded (once): the ops parallelise with OpenMP themselves.
void configure_blas();

// Rows [first, first + count) of a weight as F32 values, count · cols floats into `out`.
void weight_rows_to_f32(const Weight& w, int64_t first, int64_t count, float* out);

void linear(const Tensor& x, const Weight& w, Tensor& y, const Epilogue& epilogue);
void conv1d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
            const Epilogue& epilogue);
void layer_norm(const Tensor& x, const Weight& gamma, const Weight& beta, float eps, Tensor& y);
void softmax(Tensor& x);
void gelu(Tensor& x);
void add(const Tensor& a, const Tensor& b, Tensor& y);
void activate(Tensor& x, Activation activation);
void scale(Tensor& x, float factor);
void add_scaled(const Tensor& a, const Tensor& b, float alpha, Tensor& y);
void glu(const Tensor& x, Tensor& y);
void scatter_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& y);
void swap_last_axes(const Tensor& x, Tensor& y);
void conv2d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
            const Epilogue& epilogue);
void depthwise_conv2d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
                      const Epilogue& epilogue);
void depthwise_conv1d(const Tensor& x, const Weight& w, std::span<const int64_t> lengths, Tensor& y,
                      const Epilogue& epilogue);
void relative_positions(int64_t steps, int64_t width, Tensor& y);
void rel_pos_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& p,
                       const Weight& pos_bias_u, const Weight& pos_bias_v, int heads, float scale,
                       std::span<const int64_t> lengths, Tensor& out);
void lstm_step(const Tensor& x, const Weight& w_ih, const Weight& w_hh, const Weight* b_ih,
               const Weight* b_hh, Tensor& h, Tensor& c, Tensor& gates);
void transpose(const Tensor& x, Tensor& y);
void embedding(const Weight& table, std::span<const int32_t> ids, Tensor& y);
void gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& y);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_length, int heads,
               float scale, bool causal, Tensor& out);
void pack_kv(Tensor k, Tensor v, int heads, PackedKv& kv);
void attention(const Tensor& q, const PackedKv& kv, float scale, Tensor& out);
void write_rows(const Tensor& src, int64_t offset, Tensor& dst);
void gather_sequences(const Tensor& src, std::span<const int> source, int64_t length, Tensor& dst);

// Block attention with AVX-512 register tiles (attention_avx512.cpp), for head_dim a multiple
// of 16 on CPUs with AVX-512F. First the keys and values of one head (rows `stride` apart) are
// packed into `packed`, packed_head_floats() floats; then `rows` queries (rows `stride` apart,
// like out) attend to them: query r to the first first_visible + r keys when causal, to the
// first first_visible otherwise. `scratch` is reused between calls.
inline int64_t packed_head_floats(int64_t head_dim, int64_t keys) {
  return ((keys + 31) / 32 * 32 + keys) * head_dim;
}
void pack_head_avx512(const float* k, const float* v, int64_t stride, int64_t head_dim,
                      int64_t keys, float* packed);
void attend_block_avx512(const float* q, const float* packed, float* out, int64_t stride,
                         int64_t head_dim, int64_t keys, int64_t rows, int64_t first_visible,
                         bool causal, float scale, std::vector<float>& scratch);

// Row kernels shared by several ops (n values each).
void softmax_row(float* x, int64_t n);
// x = exp(x - max(x)) in place; returns the sum (softmax without the final division).
float exp_shifted_row(float* x, int64_t n);
void gelu_row(float* x, int64_t n);
void silu_row(float* x, int64_t n);
void relu_row(float* x, int64_t n);
// The epilogue's activation on n values (activation.cpp); none leaves them as they are.
void activate_row(Activation activation, float* x, int64_t n);
// A weight's values as F32: the stored values themselves when F32, else expanded into
// `scratch` (which then holds them).
const float* weight_values(const Weight& w, std::vector<float>& scratch);

}  // namespace hark::compute::cpu
