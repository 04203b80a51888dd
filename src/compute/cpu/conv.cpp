// 1-D convolution on the CPU as im2col + the linear op: the kernel [C_out, C_in, K] is already a
// row-major [C_out, C_in·K] matrix, so the unfolded input [T_out, C_in·K] times its transpose is
// the time-major output, and the conv gets linear's panels, threads and epilogue for free.
#include <cstring>

#include "compute/cpu/kernels.h"

namespace hark::compute::cpu {

void conv1d(const Tensor& x, const Weight& w, int stride, int padding, Tensor& y,
            const Epilogue& epilogue) {
  const int64_t steps = x.dim(0), channels = x.dim(1);
  const int64_t kernel = w.shape[2];
  const int64_t out_steps = y.dim(0);
  const int64_t width = channels * kernel;
  Tensor columns;
  columns.resize(Shape{out_steps, width});  // every value is written below
  const float* in = x.data();
  float* col = columns.data();
#pragma omp parallel for schedule(static) if (out_steps * width > 32 * 1024)
  for (int64_t t = 0; t < out_steps; ++t) {
    float* dst = col + t * width;
    for (int64_t k = 0; k < kernel; ++k) {
      const int64_t src_t = t * stride + k - padding;
      if (src_t < 0 || src_t >= steps) {
        for (int64_t c = 0; c < channels; ++c) dst[c * kernel + k] = 0.0f;
      } else {
        const float* src = in + src_t * channels;
        for (int64_t c = 0; c < channels; ++c) dst[c * kernel + k] = src[c];
      }
    }
  }
  Weight flat = w;
  flat.shape = Shape{w.shape[0], width};
  cpu::linear(columns, flat, y, epilogue);
}

}  // namespace hark::compute::cpu
