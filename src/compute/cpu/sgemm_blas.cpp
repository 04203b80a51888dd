// Matrix products through OpenBLAS.
#include <cblas.h>
#include <omp.h>

#include <mutex>

#include "compute/cpu/kernels.h"

namespace hark::compute::cpu {

void configure_blas() {
  // OpenBLAS (the pthread build Debian ships) would start its own threads next to OpenMP's and
  // both would spin on the same cores; hark splits every product across OpenMP threads itself
  // and calls OpenBLAS on one thread from each.
  static std::once_flag once;
  std::call_once(once, [] {
    // An OpenMP build of OpenBLAS (the libopenblas.so.0 alternative may be one) implements this
    // with omp_set_num_threads: keep hark's own thread count.
    const int threads = omp_get_max_threads();
    openblas_set_num_threads(1);
    omp_set_num_threads(threads);
  });
}

void sgemm(bool b_transposed, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

}  // namespace hark::compute::cpu
