// Matrix products without a BLAS: a plain blocked loop, for builds with HARK_BLAS=OFF (the CUDA
// machine has no OpenBLAS). Correct and cache-friendly, not tuned.
#include <algorithm>

#include "compute/cpu/kernels.h"

namespace hark::compute::cpu {

void configure_blas() {}

void sgemm(bool b_transposed, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  for (int64_t i = 0; i < m; ++i) {
    float* c_row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(c_row, c_row + n, 0.0f);
    } else if (beta != 1.0f) {
      for (int64_t j = 0; j < n; ++j) c_row[j] *= beta;
    }
  }
  constexpr int64_t block = 64;
  if (b_transposed) {
    // C[i, j] += alpha · dot(A row i, B row j): both rows are contiguous. Eight independent
    // partial sums let the compiler vectorise the dot product without reassociating floats.
    for (int64_t j0 = 0; j0 < n; j0 += block) {
      const int64_t j1 = std::min(n, j0 + block);
      for (int64_t i = 0; i < m; ++i) {
        const float* a_row = a + i * lda;
        for (int64_t j = j0; j < j1; ++j) {
          const float* b_row = b + j * ldb;
          float partial[8] = {};
          int64_t p = 0;
          for (; p + 8 <= k; p += 8) {
            for (int l = 0; l < 8; ++l) partial[l] += a_row[p + l] * b_row[p + l];
          }
          float sum = 0.0f;
          for (float value : partial) sum += value;
          for (; p < k; ++p) sum += a_row[p] * b_row[p];
          c[i * ldc + j] += alpha * sum;
        }
      }
    }
    return;
  }
  // C row i += alpha · A[i, p] · B row p: the inner loop runs along contiguous rows of B and C.
  for (int64_t p0 = 0; p0 < k; p0 += block) {
    int64_t p1 = std::min(k, p0 + block);
    for (int64_t i = 0; i < m; ++i) {
      float* c_row = c + i * ldc;
      for (int64_t p = p0; p < p1; ++p) {
        float scale = alpha * a[i * lda + p];
        const float* b_row = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) c_row[j] += scale * b_row[j];
      }
    }
  }
}

}  // namespace hark::compute::cpu
