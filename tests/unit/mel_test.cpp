#include "features/mel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <fstream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "audio/audio.h"
#include "base/error.h"
#include "features/fft.h"
#include "features/nemo_mel.h"
#include "features/whisper_mel.h"
#include "support/random_values.h"

namespace {

namespace features = hark::features;

const std::string kWhisperDir = std::string(HARK_TEST_DATA) + "/tokenizers/whisper";

std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

std::vector<float> random_signal(size_t n, uint32_t seed) {
  return hark::testing::uniform_values(n, seed);
}

// ---------------------------------------------------------------------------------------------
// FFT

TEST(Fft, MatchesDirectDft) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (size_t n : {1, 2, 3, 4, 5, 7, 8, 12, 25, 49, 143, 320, 400, 512}) {
    std::vector<std::complex<double>> in(n), out(n);
    for (auto& v : in) v = {uniform(rng), uniform(rng)};
    features::Fft(n).forward(in.data(), out.data());
    double max_error = 0.0;
    for (size_t k = 0; k < n; ++k) {
      std::complex<double> expected = 0.0;
      for (size_t t = 0; t < n; ++t) {
        expected +=
            in[t] * std::polar(1.0, -2.0 * std::numbers::pi * double(k * t % n) / double(n));
      }
      max_error = std::max(max_error, std::abs(out[k] - expected));
    }
    EXPECT_LT(max_error, 1e-12 * double(n)) << "n = " << n;
  }
  EXPECT_THROW(features::Fft(0), hark::Error);
}

// ---------------------------------------------------------------------------------------------
// Filterbank

TEST(MelFilterbank, MatchesOpenaiFilters) {
  for (int n_mels : {80, 128}) {
    const auto expected = read_f32(kWhisperDir + "/mel_filters_" + std::to_string(n_mels) + ".f32");
    ASSERT_EQ(expected.size(), size_t(n_mels) * 201);
    const features::MelSpectrogram mel(features::whisper_mel_config(n_mels));
    const auto& filters = mel.filterbank();
    ASSERT_EQ(filters.size(), expected.size());
    double max_error = 0.0;
    for (size_t i = 0; i < filters.size(); ++i) {
      max_error = std::max(max_error, std::abs(filters[i] - double(expected[i])));
    }
    EXPECT_LT(max_error, 1e-6) << n_mels << " mels";
  }
}

TEST(MelFilterbank, HtkScaleWithoutNormIsUnitPeaked) {
  const auto filters = features::mel_filterbank(16000, 512, 40, 0, 8000, features::MelScale::htk,
                                                features::FilterNorm::none);
  ASSERT_EQ(filters.size(), 40u * 257);
  for (int m = 0; m < 40; ++m) {
    double peak = 0.0;
    for (int b = 0; b < 257; ++b) peak = std::max(peak, filters[m * 257 + b]);
    EXPECT_GT(peak, 0.5) << m;
    EXPECT_LE(peak, 1.0) << m;
  }
}

// ---------------------------------------------------------------------------------------------
// The STFT and the whole front end against a direct implementation of the definition.

// Direct log-mel: reflect padding, periodic Hann, DFT by the sum, filterbank, log10 with floor.
std::vector<double> direct_log_mel(const std::vector<float>& x,
                                   const features::MelSpectrogram& mel) {
  const auto& c = mel.config();
  const int n = int(x.size()), pad = c.n_fft / 2, bins = mel.n_bins();
  std::vector<double> padded;
  for (int i = -pad; i < n + pad; ++i) {
    int j = i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i);
    padded.push_back(x[j]);
  }
  const int frames =
      1 + (int(padded.size()) - c.n_fft) / c.hop_length - (c.drop_last_frame ? 1 : 0);
  std::vector<double> out(size_t(c.n_mels) * frames);
  for (int t = 0; t < frames; ++t) {
    std::vector<double> power(bins);
    for (int k = 0; k < bins; ++k) {
      std::complex<double> sum = 0.0;
      for (int i = 0; i < c.n_fft; ++i) {
        const double w = 0.5 - 0.5 * std::cos(2 * std::numbers::pi * i / c.n_fft);
        sum += padded[t * c.hop_length + i] * w *
               std::polar(1.0, -2 * std::numbers::pi * double(k) * i / c.n_fft);
      }
      power[k] = std::norm(sum);
    }
    for (int m = 0; m < c.n_mels; ++m) {
      double e = 0.0;
      for (int k = 0; k < bins; ++k) e += mel.filterbank()[m * bins + k] * power[k];
      out[size_t(m) * frames + t] = std::log10(std::max(e, 1e-10));
    }
  }
  return out;
}

TEST(MelSpectrogram, MatchesDirectComputation) {
  features::MelConfig config = features::whisper_mel_config(80);
  config.normalization = features::Normalization::none;
  const features::MelSpectrogram mel(config);
  const std::vector<float> signal = random_signal(2345, 11);
  const auto expected = direct_log_mel(signal, mel);
  const auto actual = mel.compute(signal);
  ASSERT_EQ(mel.frame_count(2345), 2345 / 160);
  ASSERT_EQ(actual.size(), expected.size());
  double max_error = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    max_error = std::max(max_error, std::abs(double(actual[i]) - expected[i]));
  }
  EXPECT_LT(max_error, 1e-5);
}

TEST(MelSpectrogram, ToneLandsInItsMelBand) {
  features::MelConfig config = features::whisper_mel_config(80);
  const features::MelSpectrogram mel(config);
  std::vector<float> tone(16000);
  for (size_t i = 0; i < tone.size(); ++i)
    tone[i] = float(0.5 * std::sin(2 * std::numbers::pi * 1000.0 * i / 16000.0));
  const auto out = mel.compute(tone);
  const int64_t frames = mel.frame_count(16000);
  // Bin 25 is exactly 1 kHz; the loudest channel in a middle frame must be one whose filter
  // peaks nearest it.
  int loudest = 0;
  for (int m = 1; m < 80; ++m) {
    if (out[m * frames + 50] > out[loudest * frames + 50]) loudest = m;
  }
  int best_filter = 0;
  for (int m = 1; m < 80; ++m) {
    if (mel.filterbank()[m * 201 + 25] > mel.filterbank()[best_filter * 201 + 25]) best_filter = m;
  }
  EXPECT_EQ(loudest, best_filter);
  // Whisper's normalisation puts the maximum at (max + 4) / 4 and clamps 8 decades below.
  float lo = out[0], hi = out[0];
  for (float v : out) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_NEAR(hi - lo, 2.0f, 1e-5f);
}

TEST(MelSpectrogram, FrameCounts) {
  const features::MelSpectrogram whisper(features::whisper_mel_config(80));
  EXPECT_EQ(whisper.frame_count(480000), 3000);
  EXPECT_EQ(whisper.frame_count(0), 0);
  EXPECT_EQ(whisper.frame_count(1), 0);  // one STFT frame, dropped
  EXPECT_EQ(whisper.frame_count(160), 1);
  features::MelConfig uncentred = features::whisper_mel_config(80);
  uncentred.center = false;
  uncentred.drop_last_frame = false;
  const features::MelSpectrogram plain(uncentred);
  EXPECT_EQ(plain.frame_count(399), 0);
  EXPECT_EQ(plain.frame_count(400), 1);
  EXPECT_EQ(plain.frame_count(560), 2);
  EXPECT_TRUE(plain.compute(std::vector<float>(399)).empty());
}

TEST(MelSpectrogram, ShortInputsReflectSafely) {
  // Fewer samples than the reflect padding needs: the padding keeps reflecting.
  features::MelConfig config = features::whisper_mel_config(80);
  config.drop_last_frame = false;
  const features::MelSpectrogram mel(config);
  for (size_t n : {1, 2, 5, 199, 201}) {
    const auto out = mel.compute(random_signal(n, 5));
    EXPECT_EQ(out.size(), 80u * size_t(mel.frame_count(int64_t(n)))) << n;
    for (float v : out) ASSERT_TRUE(std::isfinite(v)) << n;
  }
}

TEST(MelSpectrogram, TrailingZerosEqualExplicitPadding) {
  const features::MelSpectrogram mel(features::whisper_mel_config(80));
  auto signal = random_signal(5000, 9);
  const auto implicit = mel.compute(signal, 3000);
  signal.resize(8000, 0.0f);
  EXPECT_EQ(implicit, mel.compute(signal));
}

TEST(MelSpectrogram, OtherFrontEndOptions) {
  features::MelConfig config;
  config.n_fft = 512;
  config.win_length = 400;
  config.window = features::WindowKind::hann_symmetric;
  config.preemphasis = 0.97;
  config.pad_mode = features::PadMode::zeros;
  config.mel_scale = features::MelScale::htk;
  config.filter_norm = features::FilterNorm::none;
  config.log = features::LogKind::ln;
  config.log_guard = std::pow(2.0, -24);
  config.normalization = features::Normalization::per_feature;
  config.n_mels = 64;
  const features::MelSpectrogram mel(config);
  const auto out = mel.compute(random_signal(8000, 2));
  const int64_t frames = mel.frame_count(8000);
  ASSERT_EQ(frames, 51);
  for (int m = 0; m < 64; ++m) {
    double mean = 0.0, square = 0.0;
    for (int64_t t = 0; t < frames; ++t) mean += out[m * frames + t];
    mean /= double(frames);
    for (int64_t t = 0; t < frames; ++t) square += std::pow(out[m * frames + t] - mean, 2);
    EXPECT_NEAR(mean, 0.0, 1e-5) << m;
    EXPECT_NEAR(std::sqrt(square / double(frames - 1)), 1.0, 1e-3) << m;
  }
}

// NeMo (Parakeet): the STFT's last frame is padding, left out of the per-channel statistics and
// zeroed; the frames before it are normalised over themselves alone.
TEST(NemoMel, NormalisesTheAudioFramesAndZeroesTheLast) {
  const features::MelSpectrogram mel(features::nemo_mel_config(128));
  const std::vector<float> signal = random_signal(16000 + 37, 5);
  const auto out = mel.compute(signal);
  const int64_t frames = mel.frame_count(signal.size());
  ASSERT_EQ(frames, int64_t(signal.size()) / 160 + 1);
  ASSERT_EQ(out.size(), size_t(128 * frames));
  const int64_t valid = frames - 1;
  for (int m = 0; m < 128; ++m) {
    double mean = 0.0, square = 0.0;
    for (int64_t t = 0; t < valid; ++t) mean += out[m * frames + t];
    mean /= double(valid);
    for (int64_t t = 0; t < valid; ++t) square += std::pow(out[m * frames + t] - mean, 2);
    EXPECT_NEAR(mean, 0.0, 1e-5) << m;
    EXPECT_NEAR(std::sqrt(square / double(valid - 1)), 1.0, 1e-3) << m;
    EXPECT_EQ(out[m * frames + valid], 0.0f) << m;
  }
}

TEST(MelSpectrogram, RejectsBadConfigAndSamples) {
  auto with = [](auto change) {
    features::MelConfig config = features::whisper_mel_config(80);
    change(config);
    return config;
  };
  EXPECT_THROW(features::MelSpectrogram(with([](auto& c) { c.n_fft = 0; })), hark::Error);
  EXPECT_THROW(features::MelSpectrogram(with([](auto& c) { c.win_length = 500; })), hark::Error);
  EXPECT_THROW(features::MelSpectrogram(with([](auto& c) { c.hop_length = 0; })), hark::Error);
  EXPECT_THROW(features::MelSpectrogram(with([](auto& c) { c.n_mels = 0; })), hark::Error);
  EXPECT_THROW(features::MelSpectrogram(with([](auto& c) { c.f_max = 9000; })), hark::Error);
  EXPECT_THROW(features::MelSpectrogram(with([](auto& c) { c.sample_rate = -1; })), hark::Error);
  const features::MelSpectrogram mel(features::whisper_mel_config(80));
  std::vector<float> signal(1000, 0.1f);
  signal[500] = std::nanf("");
  EXPECT_THROW(mel.compute(signal), hark::Error);
  EXPECT_THROW(mel.compute(std::vector<float>(10), -1), hark::Error);
  features::MelConfig not_whisper = features::whisper_mel_config(80);
  not_whisper.hop_length = 128;
  EXPECT_THROW(features::whisper_window_log_mel(features::MelSpectrogram(not_whisper), signal),
               hark::Error);
}

// ---------------------------------------------------------------------------------------------
// Whisper on jfk.wav. The expected values come from a float64 numpy implementation of
// transformers' WhisperFeatureExtractor (see tests/data/SOURCES.md); the full-array comparison
// against transformers itself is tests/parity/whisper_mel_parity_test.cpp.

struct Spot {
  int mel, frame;
  double value;
};

void expect_spots(const std::vector<float>& out, int64_t frames, const std::vector<Spot>& spots,
                  double mean) {
  for (const Spot& s : spots) {
    EXPECT_NEAR(out[size_t(s.mel) * frames + s.frame], s.value, 2e-5)
        << "mel " << s.mel << " frame " << s.frame;
  }
  double sum = 0.0;
  for (float v : out) sum += v;
  EXPECT_NEAR(sum / double(out.size()), mean, 1e-6);
}

TEST(WhisperMel, JfkWindowAndLongForm) {
  const std::vector<float> audio =
      hark::audio::load(std::string(HARK_TEST_DATA) + "/audio/jfk.wav");
  ASSERT_EQ(audio.size(), 176000u);
  {
    const features::MelSpectrogram mel(features::whisper_mel_config(80));
    const auto window = features::whisper_window_log_mel(mel, audio);
    ASSERT_EQ(window.size(), 80u * 3000);
    const std::vector<Spot> spots = {
        {0, 0, -0.538741946220398},      {10, 100, 0.42843809723854065},
        {40, 500, -0.04436195641756058}, {60, 800, -0.3257032334804535},
        {5, 1099, 0.71381676197052},     {3, 2999, -0.538741946220398}};
    expect_spots(window, 3000, spots, -0.29502898651450365);
    const auto long_form = features::whisper_long_log_mel(mel, audio);
    ASSERT_EQ(long_form.size(), 80u * 4100);
    expect_spots(long_form, 4100, spots, -0.3604153903380364);
  }
  {
    const features::MelSpectrogram mel(features::whisper_mel_config(128));
    const auto window = features::whisper_window_log_mel(mel, audio);
    ASSERT_EQ(window.size(), 128u * 3000);
    const std::vector<Spot> spots = {{0, 0, -0.5063077211380005},
                                     {10, 100, 0.8887722492218018},
                                     {64, 500, -0.03442095220088959},
                                     {5, 1099, 0.3898526728153229},
                                     {127, 1000, -0.5063077211380005}};
    expect_spots(window, 3000, spots, -0.2811701895020207);
    expect_spots(features::whisper_long_log_mel(mel, audio), 4100, spots, -0.3415729418921617);
  }
}

TEST(WhisperMel, LongAudioIsTruncatedToOneWindow) {
  const features::MelSpectrogram mel(features::whisper_mel_config(80));
  auto audio = random_signal(500000, 4);
  const auto window = features::whisper_window_log_mel(mel, audio);
  audio.resize(480000);
  EXPECT_EQ(window, features::whisper_window_log_mel(mel, audio));
  EXPECT_EQ(features::whisper_window_log_mel(mel, {}).size(), 80u * 3000);
}

}  // namespace
