// Our own resampler, for builds without FFmpeg: a polyphase filter bank cut from one
// Kaiser-windowed sinc.
//
// Output sample n sits at input position x = n * input_rate / output_rate = i + r / L (whole part
// i, remainder r of L = output_rate / gcd). Its value is a dot product of the input around i with
// the filter row for phase r / L. Common rate pairs need few phases (44.1 kHz -> 16 kHz: L = 160),
// so the bank holds one row per phase; for awkward pairs (44056 Hz: L = 2000) it holds a finer
// fixed grid of rows and interpolates linearly between the two nearest.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <utility>

#include "audio/resampler.h"
#include "base/error.h"

namespace hark::audio {
namespace {

// The filter, relative to the lower of the two Nyquist frequencies: flat up to 0.9 of it, at least
// kAttenuationDb down from 1.0 of it (nothing that would fold back over the output's band).
constexpr double kPassbandEnd = 0.90;
constexpr double kStopbandStart = 1.00;
constexpr double kAttenuationDb = 90;
// Filter rows are padded to a multiple of this, so that the dot product needs no scalar tail.
constexpr int kLanes = 32;
// Multiply-adds of one produce() call from which its outputs are computed on parallel threads.
constexpr int64_t kParallelWork = int64_t{1} << 20;

double bessel_i0(double x) {
  // Power series; the terms fall fast for the arguments a Kaiser window uses (x < 20).
  double sum = 1, term = 1;
  for (int k = 1; k < 64 && term > 1e-12 * sum; ++k) {
    term *= (x / (2 * k)) * (x / (2 * k));
    sum += term;
  }
  return sum;
}

// Built twice on x86-64: for the baseline and for x86-64-v3 (AVX2 and FMA), chosen when the
// program loads. The 32 partial sums are four independent vector accumulators there, so that the
// multiply-adds do not wait on each other's latency; the compiler vectorizes them without
// reassociating floats.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
float dot(const float* a, const float* b, int count) {
  float partial[kLanes] = {};
  for (int i = 0; i < count; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) partial[k] += a[i + k] * b[i + k];
  }
  // Halving the width each time: unrolled, so that the sums stay in registers.
#pragma GCC unroll 32
  for (int k = 0; k < 16; ++k) partial[k] += partial[k + 16];
#pragma GCC unroll 32
  for (int k = 0; k < 8; ++k) partial[k] += partial[k + 8];
  return ((partial[0] + partial[4]) + (partial[1] + partial[5])) +
         ((partial[2] + partial[6]) + (partial[3] + partial[7]));
}

class SincResampler final : public Resampler {
 public:
  SincResampler(int input_rate, int output_rate) {
    check_sample_rate(input_rate, "input sample rate");
    check_sample_rate(output_rate, "output sample rate");
    const int common = std::gcd(input_rate, output_rate);
    const int64_t input_step = input_rate / common;
    step_den_ = output_rate / common;
    step_whole_ = input_step / step_den_;
    step_rem_ = input_step % step_den_;

    // Frequencies in cycles per input sample.
    const double lower_nyquist = 0.5 * std::min(input_rate, output_rate) / input_rate;
    const double cutoff = 0.5 * (kPassbandEnd + kStopbandStart) * lower_nyquist;
    const double transition = (kStopbandStart - kPassbandEnd) * lower_nyquist;
    // Kaiser's formulas for the window shape and the length that reach the attenuation.
    const double beta = 0.1102 * (kAttenuationDb - 8.7);
    const double length = (kAttenuationDb - 8) / (2.285 * 2 * M_PI * transition) + 1;
    half_width_ = static_cast<int>(std::ceil(length / 2));
    taps_ = (2 * half_width_ + kLanes - 1) / kLanes * kLanes;

    // Rows needed for linear interpolation between them to stay far below the stopband: the
    // kernel's curvature grows with the square of the cutoff.
    const auto fine_grid = std::clamp<int64_t>(std::llround(8192 * cutoff), 256, 4096);
    phases_ = std::min<int64_t>(step_den_, fine_grid);
    interpolate_ = phases_ < step_den_;

    const double window_norm = 1 / bessel_i0(beta);
    table_.assign(static_cast<size_t>((phases_ + 1) * taps_), 0.0f);
    for (int64_t p = 0; p <= phases_; ++p) {
      const double fraction = static_cast<double>(p) / static_cast<double>(phases_);
      float* row = &table_[static_cast<size_t>(p * taps_)];
      std::vector<double> kernel(static_cast<size_t>(taps_));
      double sum = 0;
      for (int j = 0; j < taps_; ++j) {
        // Tap j meets input sample i + first_tap_offset() + j; t is its distance from x.
        const double t = first_tap_offset() + j - fraction;
        if (std::abs(t) >= half_width_) continue;
        const double arg = 2 * cutoff * t;
        const double sinc = arg == 0 ? 1 : std::sin(M_PI * arg) / (M_PI * arg);
        const double edge = t / half_width_;
        const double window = bessel_i0(beta * std::sqrt(1 - edge * edge)) * window_norm;
        kernel[static_cast<size_t>(j)] = 2 * cutoff * sinc * window;
        sum += kernel[static_cast<size_t>(j)];
      }
      // Unit gain at DC for every phase: no ripple at the output rate from phase to phase.
      for (int j = 0; j < taps_; ++j)
        row[j] = static_cast<float>(kernel[static_cast<size_t>(j)] / sum);
    }

    // Before the first input sample the signal counts as silence.
    history_start_ = first_tap_offset();
    history_.assign(static_cast<size_t>(-history_start_), 0.0f);
  }

  void process(std::span<const float> input, std::vector<float>& output) override {
    if (finished_) fail("resampler used after finish()");
    history_.insert(history_.end(), input.begin(), input.end());
    input_end_ += static_cast<int64_t>(input.size());
    produce(input_end_, output);
  }

  void finish(std::vector<float>& output) override {
    if (finished_) return;
    finished_ = true;
    // Outputs up to the last input sample's time need half a filter of silence after it.
    const int64_t last = input_end_;
    history_.insert(history_.end(), static_cast<size_t>(half_width_), 0.0f);
    input_end_ += half_width_;
    produce(last, output);
    std::vector<float>().swap(history_);
  }

 private:
  // Offset from the output's whole input position i to the sample the first tap meets.
  int64_t first_tap_offset() const { return half_width_ - taps_ + 1; }

  // Emits every output whose position lies before input sample `stop` and whose filter has all its
  // input in history_. The outputs are independent dot products, computed on parallel threads
  // (an hour of 44.1-kHz audio is about 36 GFLOP with this filter).
  void produce(int64_t stop, std::vector<float>& output) {
    // Output k of this call lies at input position whole(k) + rem(k) / step_den_.
    const int64_t end = std::min(stop, input_end_ - half_width_);
    auto position = [&](int64_t k) {
      const int64_t rem = next_rem_ + k * step_rem_;
      return std::pair{next_whole_ + k * step_whole_ + rem / step_den_, rem % step_den_};
    };
    // How many there are: in units of 1 / step_den_, output k lies at first + k · step, and its
    // whole part is below `end` while that is below end · step_den_.
    const int64_t first_at = next_whole_ * step_den_ + next_rem_;
    const int64_t step = step_whole_ * step_den_ + step_rem_;
    const int64_t room = end * step_den_ - first_at;
    const int64_t outputs = room > 0 ? (room + step - 1) / step : 0;
    const size_t first = output.size();
    output.resize(first + static_cast<size_t>(outputs));
#pragma omp parallel for schedule(static) if (outputs * taps_ > kParallelWork)
    for (int64_t k = 0; k < outputs; ++k) {
      const auto [whole, rem] = position(k);
      const float* input = history_.data() + (whole + first_tap_offset() - history_start_);
      const int64_t grid = rem * phases_;  // the phase on the rows' grid, times step_den_
      const int64_t row = grid / step_den_;
      float value = dot(input, &table_[static_cast<size_t>(row * taps_)], taps_);
      if (interpolate_) {
        const float weight = static_cast<float>(grid % step_den_) / static_cast<float>(step_den_);
        const float next = dot(input, &table_[static_cast<size_t>((row + 1) * taps_)], taps_);
        value += weight * (next - value);
      }
      output[first + static_cast<size_t>(k)] = value;
    }
    std::tie(next_whole_, next_rem_) = position(outputs);
    // Drop the input no later output reaches (in one go once it is worth the move).
    const int64_t keep_from = next_whole_ + first_tap_offset();
    const auto unused = static_cast<size_t>(std::max<int64_t>(0, keep_from - history_start_));
    if (unused > 0 && unused >= history_.size() / 2) {
      const size_t count = std::min(unused, history_.size());
      history_.erase(history_.begin(), history_.begin() + static_cast<std::ptrdiff_t>(count));
      history_start_ += static_cast<int64_t>(count);
    }
  }

  int64_t step_whole_ = 0, step_rem_ = 0, step_den_ = 1;  // input step per output: whole + rem/den
  int half_width_ = 0;  // the kernel spans (-half_width_, half_width_) input samples
  int taps_ = 0;        // per row, >= 2 * half_width_, padded with zeros in front
  int64_t phases_ = 1;  // rows in the bank, plus one for the phase 1.0 that ends the grid
  bool interpolate_ = false;
  std::vector<float> table_;

  std::vector<float> history_;  // input samples from absolute index history_start_ on
  int64_t history_start_ = 0;
  int64_t input_end_ = 0;                  // absolute index one past the last sample in history_
  int64_t next_whole_ = 0, next_rem_ = 0;  // position of the next output: whole + rem/step_den_
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<Resampler> make_sinc_resampler(int input_rate, int output_rate) {
  return std::make_unique<SincResampler>(input_rate, output_rate);
}

}  // namespace hark::audio
