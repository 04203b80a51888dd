// A mixed-radix complex FFT in double precision, for the sizes front ends use (400 = 4^2 * 5^2,
// 512, 320, ...). Any size works: factors 2, 3, 4 and 5 have dedicated butterflies, other prime
// factors fall back to a direct DFT of that factor.
#pragma once

#include <complex>
#include <cstddef>
#include <vector>

namespace hark::features {

class Fft {
 public:
  // Plans a transform of `size` points (> 0): factors and twiddles are computed once here.
  explicit Fft(size_t size);

  size_t size() const { return size_; }
  // out[k] = sum_t in[t] * exp(-2 pi i k t / size). `in` and `out` hold size() values each and
  // must not overlap. Safe to call from several threads at once.
  void forward(const std::complex<double>* in, std::complex<double>* out) const;

 private:
  // One decimation-in-time stage: `radix` sub-transforms of `m` points each, read with `stride`.
  struct Stage {
    size_t radix, m, stride;
    std::vector<std::complex<double>> twiddles;  // [k * radix + j] = W_size^(j k stride)
  };
  void transform(std::complex<double>* out, const std::complex<double>* in, size_t level) const;

  size_t size_;
  std::vector<Stage> stages_;                // outermost first
  std::vector<std::complex<double>> roots_;  // W_size^k, k < size
};

}  // namespace hark::features
