#include "features/fft.h"

#include <array>
#include <cmath>
#include <numbers>

#include "base/error.h"

namespace hark::features {
namespace {

using Complex = std::complex<double>;

// Plain product: std::complex's operator* also handles infinities (a slow library call on every
// NaN result), which finite audio never needs.
inline Complex mul(Complex a, Complex b) {
  return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}

}  // namespace

Fft::Fft(size_t size) : size_(size) {
  if (size == 0) fail("FFT size must be positive");
  std::vector<size_t> radices;
  // Radix 4 first (cheapest per point), then 2, 3, 5 and any remaining primes.
  size_t rest = size;
  for (size_t radix : {4, 2, 3, 5}) {
    while (rest % radix == 0) radices.push_back(radix), rest /= radix;
  }
  for (size_t radix = 7; rest > 1; radix += 2) {
    while (rest % radix == 0) radices.push_back(radix), rest /= radix;
  }
  if (radices.empty()) radices.push_back(1);

  roots_.resize(size);
  for (size_t k = 0; k < size; ++k) {
    const double angle = -2.0 * std::numbers::pi * double(k) / double(size);
    roots_[k] = {std::cos(angle), std::sin(angle)};
  }
  size_t stride = 1;
  for (size_t radix : radices) {
    Stage stage{radix, size / (stride * radix), stride, {}};
    stage.twiddles.resize(stage.m * radix);
    for (size_t k = 0; k < stage.m; ++k) {
      for (size_t j = 0; j < radix; ++j) stage.twiddles[k * radix + j] = roots_[j * k * stride];
    }
    stages_.push_back(std::move(stage));
    stride *= radix;
  }
}

void Fft::forward(const Complex* in, Complex* out) const {
  transform(out, in, 0);
}

// Decimation in time: the `radix` interleaved sub-sequences of the input (every stride*radix-th
// value) are transformed into consecutive blocks of `out`, then combined by radix-point DFTs:
// X[k + r m] = sum_j (W^(j k) Y_j[k]) W_radix^(j r).
void Fft::transform(Complex* out, const Complex* in, size_t level) const {
  const Stage& stage = stages_[level];
  const size_t radix = stage.radix, m = stage.m, stride = stage.stride;
  if (m == 1) {
    for (size_t j = 0; j < radix; ++j) out[j] = in[j * stride];
  } else {
    for (size_t j = 0; j < radix; ++j) transform(out + j * m, in + j * stride, level + 1);
  }

  std::array<Complex, 8> small;
  std::vector<Complex> large(radix > small.size() ? radix : 0);
  Complex* a = radix > small.size() ? large.data() : small.data();
  const size_t root_step = size_ / radix;  // W_radix^1 = roots_[root_step]
  for (size_t k = 0; k < m; ++k) {
    const Complex* twiddle = &stage.twiddles[k * radix];
    a[0] = out[k];
    for (size_t j = 1; j < radix; ++j) a[j] = mul(out[j * m + k], twiddle[j]);
    switch (radix) {
      case 2:
        out[k] = a[0] + a[1];
        out[k + m] = a[0] - a[1];
        break;
      case 4: {
        // W_4 = -i: multiplying by it swaps real and imaginary parts and negates one.
        const Complex s02 = a[0] + a[2], d02 = a[0] - a[2];
        const Complex s13 = a[1] + a[3], d13 = a[1] - a[3];
        const Complex d13_times_minus_i(d13.imag(), -d13.real());
        out[k] = s02 + s13;
        out[k + m] = d02 + d13_times_minus_i;
        out[k + 2 * m] = s02 - s13;
        out[k + 3 * m] = d02 - d13_times_minus_i;
        break;
      }
      default:
        for (size_t r = 0; r < radix; ++r) {
          Complex sum = a[0];
          size_t power = 0;  // (j r) mod radix, stepped without division
          for (size_t j = 1; j < radix; ++j) {
            power += r;
            if (power >= radix) power -= radix;
            sum += mul(a[j], roots_[power * root_step]);
          }
          out[k + r * m] = sum;
        }
        break;
    }
  }
}

}  // namespace hark::features
