#include "features/mel.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <numbers>

#include "base/error.h"

namespace hark::features {
namespace {

double hertz_to_mel(double hertz, MelScale scale) {
  switch (scale) {
    case MelScale::htk:
      return 2595.0 * std::log10(1.0 + hertz / 700.0);
    case MelScale::kaldi:
      return 1127.0 * std::log(1.0 + hertz / 700.0);
    case MelScale::slaney:
      break;
  }
  // Slaney: linear below 1 kHz (3 mels per 200 Hz), logarithmic above.
  if (hertz < 1000.0) return 3.0 * hertz / 200.0;
  return 15.0 + std::log(hertz / 1000.0) * (27.0 / std::log(6.4));
}

double mel_to_hertz(double mel, MelScale scale) {
  switch (scale) {
    case MelScale::htk:
      return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
    case MelScale::kaldi:
      return 700.0 * (std::exp(mel / 1127.0) - 1.0);
    case MelScale::slaney:
      break;
  }
  if (mel < 15.0) return 200.0 * mel / 3.0;
  return 1000.0 * std::exp((std::log(6.4) / 27.0) * (mel - 15.0));
}

// numpy.linspace: start + i * step, with the last point exactly `stop`.
std::vector<double> linspace(double start, double stop, int count) {
  std::vector<double> values(count);
  const double step = count > 1 ? (stop - start) / (count - 1) : 0.0;
  for (int i = 0; i < count; ++i) values[i] = start + i * step;
  if (count > 1) values.back() = stop;
  return values;
}

std::vector<double> make_window(WindowKind kind, int win_length, int n_fft) {
  std::vector<double> window(n_fft, 0.0);
  const int offset = (n_fft - win_length) / 2;  // torch.stft centres a shorter window
  const bool periodic = kind == WindowKind::hann_periodic || kind == WindowKind::hamming_periodic;
  const double denominator = periodic ? win_length : std::max(win_length - 1, 1);
  for (int i = 0; i < win_length; ++i) {
    const double c = std::cos(2.0 * std::numbers::pi * i / denominator);
    double w = 1.0;
    switch (kind) {
      case WindowKind::hann_periodic:
      case WindowKind::hann_symmetric:
        w = 0.5 - 0.5 * c;
        break;
      case WindowKind::hamming_periodic:
      case WindowKind::hamming_symmetric:
        w = 0.54 - 0.46 * c;
        break;
      case WindowKind::rectangular:
        break;
    }
    window[offset + i] = win_length == 1 ? 1.0 : w;
  }
  return window;
}

// Index into [0, n) of position i of the signal mirrored at both ends without repeating the edge
// sample (numpy/torch "reflect"), for any i: long pads reflect back and forth.
int64_t reflect_index(int64_t i, int64_t n) {
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

}  // namespace

std::vector<double> mel_filterbank(int sample_rate, int n_fft, int n_mels, double f_min,
                                   double f_max, MelScale scale, FilterNorm norm) {
  const int n_bins = n_fft / 2 + 1;
  // Bin centres as transformers spaces them: linspace(0, sample_rate // 2, n_bins).
  const std::vector<double> bin_hertz = linspace(0.0, sample_rate / 2, n_bins);
  std::vector<double> edges =
      linspace(hertz_to_mel(f_min, scale), hertz_to_mel(f_max, scale), n_mels + 2);
  for (double& edge : edges) edge = mel_to_hertz(edge, scale);

  std::vector<double> filters(static_cast<size_t>(n_mels) * n_bins, 0.0);
  for (int m = 0; m < n_mels; ++m) {
    const double lower = edges[m], centre = edges[m + 1], upper = edges[m + 2];
    const double scale_factor = norm == FilterNorm::slaney ? 2.0 / (upper - lower) : 1.0;
    for (int b = 0; b < n_bins; ++b) {
      const double rising = (bin_hertz[b] - lower) / (centre - lower);
      const double falling = (upper - bin_hertz[b]) / (upper - centre);
      filters[static_cast<size_t>(m) * n_bins + b] =
          std::max(0.0, std::min(rising, falling)) * scale_factor;
    }
  }
  return filters;
}

MelSpectrogram::MelSpectrogram(const MelConfig& config)
    : config_(config), fft_(config.n_fft > 0 ? static_cast<size_t>(config.n_fft) : 1) {
  MelConfig& c = config_;
  if (c.win_length == 0) c.win_length = c.n_fft;
  if (c.f_max == 0) c.f_max = c.sample_rate / 2.0;
  if (c.sample_rate <= 0) fail("mel config: sample_rate ", c.sample_rate, " must be positive");
  if (c.n_fft <= 0) fail("mel config: n_fft ", c.n_fft, " must be positive");
  if (c.win_length <= 0 || c.win_length > c.n_fft) {
    fail("mel config: win_length ", c.win_length, " must be in 1..n_fft (", c.n_fft, ")");
  }
  if (c.hop_length <= 0) fail("mel config: hop_length ", c.hop_length, " must be positive");
  if (c.n_mels <= 0) fail("mel config: n_mels ", c.n_mels, " must be positive");
  if (!(c.f_min >= 0 && c.f_min < c.f_max && c.f_max <= c.sample_rate / 2.0)) {
    fail("mel config: need 0 <= f_min (", c.f_min, ") < f_max (", c.f_max, ") <= sample_rate / 2 (",
         c.sample_rate / 2.0, ")");
  }
  if (!(c.power > 0)) fail("mel config: power ", c.power, " must be positive");
  if (c.log_floor < 0 || c.log_guard < 0) fail("mel config: log floor and guard must be >= 0");

  window_ = make_window(c.window, c.win_length, c.n_fft);
  filters_ = mel_filterbank(c.sample_rate, c.n_fft, c.n_mels, c.f_min, c.f_max, c.mel_scale,
                            c.filter_norm);
  const int bins = n_bins();
  first_bin_.assign(c.n_mels, 0);
  last_bin_.assign(c.n_mels, 0);
  for (int m = 0; m < c.n_mels; ++m) {
    const double* row = &filters_[static_cast<size_t>(m) * bins];
    int first = 0, last = bins;
    while (first < bins && row[first] == 0.0) ++first;
    while (last > first && row[last - 1] == 0.0) --last;
    first_bin_[m] = first;
    last_bin_[m] = last;
  }
}

int64_t MelSpectrogram::frame_count(int64_t n_samples) const {
  if (n_samples <= 0) return 0;
  const int64_t padded = n_samples + (config_.center ? 2 * (config_.n_fft / 2) : 0);
  if (padded < config_.n_fft) return 0;
  const int64_t frames = 1 + (padded - config_.n_fft) / config_.hop_length;
  return config_.drop_last_frame ? frames - 1 : frames;
}

std::vector<float> MelSpectrogram::compute(std::span<const float> samples,
                                           int64_t trailing_zeros) const {
  const MelConfig& c = config_;
  if (trailing_zeros < 0) fail("mel: negative padding ", trailing_zeros);
  const auto given = static_cast<int64_t>(samples.size());
  const int64_t n = given + trailing_zeros;
  const int64_t frames = frame_count(n);
  const int bins = n_bins();
  std::vector<float> out(static_cast<size_t>(c.n_mels) * static_cast<size_t>(frames));
  if (frames == 0) return out;
  for (int64_t i = 0; i < given; ++i) {
    if (!std::isfinite(samples[i])) fail("audio sample ", i, " is not a finite number");
  }

  // The signal as the STFT sees it: pre-emphasised, then padded, computed on the fly so long
  // audio is never copied.
  const int64_t pad = c.center ? c.n_fft / 2 : 0;
  auto signal = [&](int64_t i) -> double { return i < given ? samples[i] : 0.0; };
  auto emphasised = [&](int64_t i) -> double {
    double value = signal(i);
    if (c.preemphasis != 0 && i > 0) value -= c.preemphasis * signal(i - 1);
    return value;
  };
  auto padded_sample = [&](int64_t i) -> double {
    if (i >= 0 && i < n) return emphasised(i);
    if (c.pad_mode == PadMode::zeros) return 0.0;
    return emphasised(reflect_index(i, n));
  };

#pragma omp parallel
  {
    std::vector<std::complex<double>> frame(c.n_fft), spectrum(c.n_fft);
    std::vector<double> magnitude(bins);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < frames; ++t) {
      const int64_t begin = t * c.hop_length - pad;
      for (int k = 0; k < c.n_fft; ++k) frame[k] = {padded_sample(begin + k) * window_[k], 0.0};
      fft_.forward(frame.data(), spectrum.data());
      for (int b = 0; b < bins; ++b) {
        magnitude[b] =
            c.power == 2 ? std::norm(spectrum[b]) : std::pow(std::abs(spectrum[b]), c.power);
      }
      for (int m = 0; m < c.n_mels; ++m) {
        const double* row = &filters_[static_cast<size_t>(m) * bins];
        double energy = 0.0;
        for (int b = first_bin_[m]; b < last_bin_[m]; ++b) energy += row[b] * magnitude[b];
        if (c.log != LogKind::none) {
          if (c.log_floor > 0) energy = std::max(energy, c.log_floor);
          energy += c.log_guard;
          energy = c.log == LogKind::log10 ? std::log10(energy) : std::log(energy);
        }
        out[static_cast<size_t>(m) * frames + t] = static_cast<float>(energy);
      }
    }
  }

  switch (c.normalization) {
    case Normalization::none:
      break;
    case Normalization::whisper_dynamic_range: {
      const double ceiling = *std::max_element(out.begin(), out.end());
      for (float& v : out) v = static_cast<float>((std::max<double>(v, ceiling - 8.0) + 4.0) / 4.0);
      break;
    }
    case Normalization::per_feature: {
      const int64_t valid = c.last_frame_is_padding ? frames - 1 : frames;
      for (int m = 0; m < c.n_mels; ++m) {
        float* row = &out[static_cast<size_t>(m) * frames];
        double mean = 0.0;
        for (int64_t t = 0; t < valid; ++t) mean += row[t];
        mean /= static_cast<double>(std::max<int64_t>(valid, 1));
        double variance = 0.0;
        for (int64_t t = 0; t < valid; ++t) variance += (row[t] - mean) * (row[t] - mean);
        variance = valid > 1 ? variance / static_cast<double>(valid - 1) : 0.0;
        const double scale = 1.0 / (std::sqrt(variance) + 1e-5);
        for (int64_t t = 0; t < valid; ++t) row[t] = static_cast<float>((row[t] - mean) * scale);
      }
      break;
    }
  }
  if (c.last_frame_is_padding) {
    for (int m = 0; m < c.n_mels; ++m) out[static_cast<size_t>(m) * frames + frames - 1] = 0.0f;
  }
  return out;
}

}  // namespace hark::features
