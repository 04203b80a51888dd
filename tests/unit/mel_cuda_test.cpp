// The GPU front end (features/mel_cuda.h) against the CPU MelSpectrogram it is built from, for
// NeMo's (80 and 128 mels) and Whisper's configs on the test recordings, for odd, very short and
// empty inputs, for a batch of different lengths (each utterance as it is alone), and for the
// MelConfig options neither of those two uses.
//
// Both ways to the spectrum are covered: the F32 FFT kernel (NeMo's n_fft 512, and 256 among the
// other configs), and the DFT product (Whisper's 400); the kernel also alone, against a double
// DFT of the same frames.
//
// Tolerances: the product path takes the DFT and the mel filters as F32 products where the CPU
// runs a double FFT. An emulation of the GPU's F32 arithmetic on the CPU, over the recordings in
// tests/data/audio, stayed below 3e-4 absolute and 5e-6 in relative norm on the normalised log
// features (the largest errors where a mel energy is tiny next to its frame's); the limits leave
// several times that for another summation order. The F32 FFT rounds less than the product
// (log2(n_fft) steps instead of n_fft-term sums): an emulation of the FFT path stayed below
// 2.6e-4 and 4e-6 (the F32 filter sums dominate), and it is held to the same limits.
#include "features/mel_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "audio/audio.h"
#include "base/error.h"
#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "features/mel.h"
#include "features/nemo_mel.h"
#include "features/whisper_mel.h"

namespace hark::features {
namespace {

namespace gpu = compute::cuda;

constexpr double kMaxAbsolute = 2e-3;
constexpr double kMaxRelativeNorm = 1e-4;

std::vector<float> clip(const std::string& name) {
  return audio::load(std::string(HARK_TEST_DATA) + "/audio/" + name + ".wav");
}

std::vector<float> random_signal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<float> signal(n);
  for (float& v : signal) v = normal(rng);
  return signal;
}

// The GPU's features of a batch, back on the host: [batch, padded_frames, n_mels].
struct HostBatch {
  int64_t padded_frames = 0;
  std::vector<int64_t> frames;
  std::vector<float> values;
};

HostBatch run(CudaMelSpectrogram& gpu_mel, const std::vector<std::span<const float>>& batch,
              int64_t trailing_zeros = 0) {
  gpu::Stream stream;
  DeviceMelBatch out;
  gpu_mel.compute(batch, stream.get(), out, /*clock=*/nullptr, trailing_zeros);
  stream.synchronize();
  HostBatch host;
  host.padded_frames = out.padded_frames;
  host.frames = out.frames;
  EXPECT_EQ(out.batch, static_cast<int>(batch.size()));
  host.values.resize(static_cast<size_t>(out.batch * out.padded_frames * gpu_mel.n_mels()));
  if (!host.values.empty()) {
    gpu::download(out.data(), host.values.size() * sizeof(float), host.values.data());
  }
  return host;
}

// Utterance b of `got` against the CPU's [n_mels x frames] features of the same samples (followed
// by `trailing_zeros` zeros): the frame count, every value within the limits, and zeros in the
// rows past the utterance. `absolute`: the limit on the largest difference.
void expect_matches_cpu(const MelSpectrogram& mel, const HostBatch& got, int b,
                        std::span<const float> samples, const std::string& what,
                        double absolute = kMaxAbsolute, int64_t trailing_zeros = 0) {
  SCOPED_TRACE(what);
  const std::vector<float> want = mel.compute(samples, trailing_zeros);
  const int64_t mels = mel.n_mels();
  const int64_t frames = mel.frame_count(static_cast<int64_t>(samples.size()) + trailing_zeros);
  ASSERT_EQ(got.frames.at(b), frames);
  ASSERT_EQ(static_cast<int64_t>(want.size()), frames * mels);
  ASSERT_GE(got.padded_frames, frames);
  const float* rows = got.values.data() + b * got.padded_frames * mels;
  double max_abs = 0.0, diff_squares = 0.0, want_squares = 0.0;
  int64_t worst = -1;
  for (int64_t t = 0; t < frames; ++t) {
    for (int64_t m = 0; m < mels; ++m) {
      const double g = rows[t * mels + m], w = want[m * frames + t];
      ASSERT_TRUE(std::isfinite(g)) << "frame " << t << " mel " << m;
      const double d = std::abs(g - w);
      if (d > max_abs) {
        max_abs = d;
        worst = t * mels + m;
      }
      diff_squares += d * d;
      want_squares += w * w;
    }
  }
  const double relative =
      want_squares > 0 ? std::sqrt(diff_squares / want_squares) : std::sqrt(diff_squares);
  EXPECT_LE(max_abs, absolute) << "worst at frame " << worst / mels << " mel " << worst % mels;
  EXPECT_LE(relative, kMaxRelativeNorm);
  for (int64_t i = frames * mels; i < got.padded_frames * mels; ++i) {
    ASSERT_EQ(rows[i], 0.0f) << "padding row " << i / mels << " mel " << i % mels;
  }
}

class MelCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::available()) GTEST_SKIP() << "no GPU: " << gpu::describe();
    gpu::require_device();
  }

  // Each clip alone, then all of them in one batch, against the CPU.
  // `fft`: whether the config's spectrum should come from the FFT kernel.
  void expect_clips_match(const MelConfig& config, const std::string& name, bool fft) {
    const MelSpectrogram mel(config);
    CudaMelSpectrogram gpu_mel(mel);
    ASSERT_EQ(gpu_mel.uses_fft(), fft) << name;
    std::vector<std::vector<float>> clips;
    for (const char* recording : {"jfk", "beckett", "librivox-0870"}) {
      clips.push_back(clip(recording));
    }
    std::vector<std::span<const float>> all;
    for (size_t c = 0; c < clips.size(); ++c) {
      const HostBatch alone = run(gpu_mel, {clips[c]});
      expect_matches_cpu(mel, alone, 0, clips[c], name + " clip " + std::to_string(c) + " alone");
      all.emplace_back(clips[c]);
    }
    const HostBatch batch = run(gpu_mel, all);
    for (size_t c = 0; c < clips.size(); ++c) {
      expect_matches_cpu(mel, batch, static_cast<int>(c), clips[c],
                         name + " clip " + std::to_string(c) + " in the batch");
    }
  }
};

TEST_F(MelCuda, NemoMatchesTheCpu) {
  expect_clips_match(nemo_mel_config(80), "nemo 80", true);
  expect_clips_match(nemo_mel_config(128), "nemo 128", true);
}

TEST_F(MelCuda, WhisperMatchesTheCpu) {
  expect_clips_match(whisper_mel_config(80), "whisper 80", false);
  expect_clips_match(whisper_mel_config(128), "whisper 128", false);
}

// Lengths that are no multiple of the hop, shorter than a window (reflect padding longer than
// the signal), two feature frames (Parakeet's least), one sample and none, in one batch: each as
// it is alone and as the CPU computes it, with each utterance's padding rows zero.
TEST_F(MelCuda, BatchOfDifferentLengthsIsEachAlone) {
  const std::vector<float> jfk = clip("jfk");
  for (const MelConfig& config : {nemo_mel_config(80), whisper_mel_config(80)}) {
    const MelSpectrogram mel(config);
    CudaMelSpectrogram gpu_mel(mel);
    const std::span<const float> audio(jfk);
    const std::vector<std::span<const float>> batch = {
        audio.subspan(1000, 33333), audio.first(320), audio.subspan(5000, 37),
        audio.subspan(20000, 1),    audio.first(0),   audio.subspan(40000, 16001)};
    const HostBatch together = run(gpu_mel, batch);
    ASSERT_EQ(together.frames.size(), batch.size());
    for (size_t b = 0; b < batch.size(); ++b) {
      const std::string what =
          "utterance " + std::to_string(b) + " of " + std::to_string(batch[b].size()) + " samples";
      expect_matches_cpu(mel, together, static_cast<int>(b), batch[b], what + " in the batch");
      const HostBatch alone = run(gpu_mel, {batch[b]});
      expect_matches_cpu(mel, alone, 0, batch[b], what + " alone");
      ASSERT_EQ(alone.frames[0], together.frames[b]);
      const int64_t count = alone.frames[0] * mel.n_mels();
      const float* in_batch =
          together.values.data() + static_cast<int64_t>(b) * together.padded_frames * mel.n_mels();
      double max_abs = 0.0;
      for (int64_t i = 0; i < count; ++i) {
        max_abs = std::max(max_abs, std::abs(double(in_batch[i]) - alone.values[i]));
      }
      EXPECT_LE(max_abs, kMaxAbsolute) << what;
    }
  }
}

// Zeros after each utterance (Whisper's long form appends 30 s), as the CPU takes them: frames
// that reach into the zeros, a reflect padding at the end that mirrors them, and NeMo's
// pre-emphasis across the last sample; utterances shorter than a frame included.
TEST_F(MelCuda, TrailingZerosMatchTheCpu) {
  const std::vector<float> jfk = clip("jfk");
  const std::span<const float> audio(jfk);
  const std::vector<std::span<const float>> batch = {audio, audio.subspan(7000, 320),
                                                     audio.subspan(5000, 37)};
  for (const auto& [name, config, zeros] :
       {std::tuple{"whisper 128, 30 s", whisper_mel_config(128), kWhisperWindowSamples},
        std::tuple{"nemo 80, 1001 samples", nemo_mel_config(80), int64_t{1001}}}) {
    const MelSpectrogram mel(config);
    CudaMelSpectrogram gpu_mel(mel);
    const HostBatch got = run(gpu_mel, batch, zeros);
    for (size_t b = 0; b < batch.size(); ++b) {
      expect_matches_cpu(mel, got, static_cast<int>(b), batch[b],
                         std::string(name) + ", utterance " + std::to_string(b), kMaxAbsolute,
                         zeros);
    }
  }
}

// The options of MelConfig that neither Whisper nor NeMo uses.
TEST_F(MelCuda, OtherConfigsMatchTheCpu) {
  const std::vector<float> signal = random_signal(12345, 7);
  std::vector<std::pair<std::string, MelConfig>> configs;
  {
    MelConfig c;  // magnitude, no centring, HTK filters without normalisation, ln, per feature
    c.n_fft = 256;
    c.hop_length = 100;
    c.window = WindowKind::hamming_periodic;
    c.center = false;
    c.power = 1;
    c.n_mels = 40;
    c.f_min = 50;
    c.f_max = 7000;
    c.mel_scale = MelScale::htk;
    c.filter_norm = FilterNorm::none;
    c.log = LogKind::ln;
    c.log_floor = 1e-6;
    c.normalization = Normalization::per_feature;
    configs.emplace_back("hamming, power 1, no centre, htk", c);
  }
  {
    MelConfig c;  // a short symmetric window, reflect padding, pre-emphasis, Kaldi scale
    c.n_fft = 512;
    c.win_length = 300;
    c.hop_length = 128;
    c.window = WindowKind::hamming_symmetric;
    c.pad_mode = PadMode::reflect;
    c.preemphasis = 0.9;
    c.power = 1.5;
    c.n_mels = 64;
    c.mel_scale = MelScale::kaldi;
    c.log = LogKind::log10;
    c.log_guard = 1e-6;
    c.normalization = Normalization::whisper_dynamic_range;
    c.drop_last_frame = true;
    configs.emplace_back("short window, reflect, power 1.5, kaldi", c);
  }
  {
    MelConfig c;  // a rectangular window of odd length, zero padding, the log of the last frame
    c.n_fft = 400;
    c.win_length = 321;
    c.window = WindowKind::rectangular;
    c.pad_mode = PadMode::zeros;
    c.n_mels = 80;
    c.log = LogKind::ln;
    c.log_guard = 1e-5;
    c.last_frame_is_padding = true;
    configs.emplace_back("rectangular, last frame padding, no normalisation", c);
  }
  for (const auto& [name, config] : configs) {
    const MelSpectrogram mel(config);
    CudaMelSpectrogram gpu_mel(mel);
    // n_fft 256 and 512 take the FFT kernel, 400 the DFT product.
    EXPECT_EQ(gpu_mel.uses_fft(), config.n_fft != 400) << name;
    const std::vector<std::span<const float>> batch = {signal, std::span(signal).first(4321)};
    const HostBatch got = run(gpu_mel, batch);
    for (size_t b = 0; b < batch.size(); ++b) {
      expect_matches_cpu(mel, got, static_cast<int>(b), batch[b], name);
    }
  }
}

// Raw mel energies (no log, no normalisation): F32 products stay within F32 rounding of the
// CPU's double, relative to the energies' scale.
TEST_F(MelCuda, MelEnergiesWithoutLogMatchTheCpu) {
  MelConfig config = nemo_mel_config(80);
  config.log = LogKind::none;
  config.log_guard = 0;
  config.normalization = Normalization::none;
  const MelSpectrogram mel(config);
  CudaMelSpectrogram gpu_mel(mel);
  const std::vector<float> samples = clip("beckett");
  const HostBatch got = run(gpu_mel, {samples});
  const std::vector<float> want = mel.compute(samples);
  const double scale = *std::max_element(want.begin(), want.end());
  ASSERT_GT(scale, 0.0);
  expect_matches_cpu(mel, got, 0, samples, "nemo energies", 1e-5 * scale);
}

TEST_F(MelCuda, NonFiniteSampleFailsAsOnTheCpu) {
  const MelSpectrogram mel(nemo_mel_config(80));
  CudaMelSpectrogram gpu_mel(mel);
  const std::vector<float> good = random_signal(5000, 3);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> broken = random_signal(9000, 4);
    broken[4567] = bad;
    std::string cpu_message;
    try {
      mel.compute(broken);
    } catch (const Error& e) {
      cpu_message = e.what();
    }
    ASSERT_FALSE(cpu_message.empty());
    gpu::Stream stream;
    DeviceMelBatch out;
    const std::vector<std::span<const float>> batch = {good, broken};
    try {
      gpu_mel.compute(batch, stream.get(), out);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), cpu_message);
    }
  }
  // The object still works after a rejected batch.
  const HostBatch got = run(gpu_mel, {good});
  expect_matches_cpu(mel, got, 0, good, "after an error");
}

// The samples go up in pieces of the concatenated batch, checked on parallel threads: a batch of
// several pieces reports the first bad sample of the first bad utterance that gives frames, as
// the CPU does for that utterance, wherever the pieces cut; audio that gives no frame is not
// looked at. Then a good batch of the same size still matches the CPU (the staging reused).
TEST_F(MelCuda, NonFiniteSampleInABatchOfManyPiecesFailsAtTheFirstBadUtterance) {
  MelConfig config = nemo_mel_config(80);
  config.center = false;  // so that a short utterance gives no frame
  const MelSpectrogram mel(config);
  CudaMelSpectrogram gpu_mel(mel);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> audio = {random_signal(300001, 11), random_signal(100, 12),
                                           random_signal(400003, 13), random_signal(5000, 14)};
  audio[1][50] = nan;  // no frame: not looked at
  audio[2][350000] = std::numeric_limits<float>::infinity();
  audio[2][390000] = nan;
  audio[3][5] = nan;
  ASSERT_EQ(mel.frame_count(100), 0);
  std::string cpu_message;
  try {
    mel.compute(audio[2]);
  } catch (const Error& e) {
    cpu_message = e.what();
  }
  ASSERT_NE(cpu_message.find("350000"), std::string::npos) << cpu_message;
  const std::vector<std::span<const float>> batch(audio.begin(), audio.end());
  gpu::Stream stream;
  DeviceMelBatch out;
  try {
    gpu_mel.compute(batch, stream.get(), out);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), cpu_message);
  }
  audio[2][350000] = 0.25f;
  audio[2][390000] = -0.5f;
  audio[3][5] = 0.0f;
  const std::vector<std::span<const float>> good = {audio[0], audio[2], audio[3]};
  const HostBatch got = run(gpu_mel, good);
  for (size_t b = 0; b < good.size(); ++b) {
    expect_matches_cpu(mel, got, static_cast<int>(b), good[b],
                       "utterance " + std::to_string(b) + " after the error");
  }
}

// ---- The FFT kernel alone ---------------------------------------------------------------------

// The frame mel_power_spectrum should transform, as the MelFraming comment defines it, in double:
// window[n] times sample t · hop − pad + n of the pre-emphasised utterance, padded with zeros or
// mirrored, for n in the window's non-zero part.
std::vector<double> host_frame(std::span<const float> x, const gpu::MelFraming& framing, int n_fft,
                               const std::vector<double>& window, int64_t t) {
  const auto count = static_cast<int64_t>(x.size());
  auto emphasised = [&](int64_t i) {
    double value = x[i];
    if (framing.preemphasis != 0.0 && i > 0) value -= framing.preemphasis * x[i - 1];
    return value;
  };
  std::vector<double> frame(static_cast<size_t>(n_fft), 0.0);
  for (int n = framing.first; n < framing.first + framing.span; ++n) {
    int64_t at = t * framing.hop - framing.pad + n;
    if (at < 0 || at >= count) {
      if (!framing.reflect) continue;
      // Mirrored at both ends without repeating the edge sample, back and forth; one sample
      // mirrors to itself.
      if (count == 1) at = 0;
      while (at < 0 || at >= count) at = at < 0 ? -at : 2 * (count - 1) - at;
    }
    frame[static_cast<size_t>(n)] = emphasised(at) * window[static_cast<size_t>(n)];
  }
  return frame;
}

struct FftCase {
  std::string name;
  int n_fft = 0;
  gpu::MelFraming framing;
  int first_bin = 0, bins = 0;
  float exponent = 2.0f;
  std::vector<int64_t> lengths;  // of the batch's utterances
};

// mel_power_spectrum over every padded row of a batch and a few rows past it, in two launches
// (the second from row0 > 0, as a later chunk), against a double DFT of host_frame: each bin's
// magnitude within 1e-6 of the frame's spectrum norm (F32 FFT errors stay near 3e-8 of it; a
// wrong twiddle, index or sample is of the order of the bins themselves), and exact zeros for
// rows of no frame and bins past n_fft / 2.
void expect_power_spectrum_matches_dft(const FftCase& c) {
  SCOPED_TRACE(c.name);
  ASSERT_TRUE(gpu::mel_fft_supported(c.n_fft));
  const int batch = static_cast<int>(c.lengths.size());
  std::vector<std::vector<float>> audio;
  std::vector<float> signal;
  std::vector<gpu::MelUtterance> table;
  int64_t padded_frames = 0;
  for (int b = 0; b < batch; ++b) {
    // Noise and a tone, so that the spectrum has a peak and a floor.
    std::vector<float> x = random_signal(static_cast<size_t>(c.lengths[b]), 100 + b);
    for (size_t i = 0; i < x.size(); ++i) x[i] += 0.5f * std::sin(0.3f * static_cast<float>(i));
    gpu::MelUtterance u;
    u.offset = static_cast<int64_t>(signal.size());
    u.samples = c.lengths[b];
    const int64_t padded = u.samples + 2 * c.framing.pad;
    u.frames = u.samples > 0 && padded >= c.n_fft ? 1 + (padded - c.n_fft) / c.framing.hop : 0;
    u.audio_frames = u.frames;
    padded_frames = std::max(padded_frames, u.frames);
    signal.insert(signal.end(), x.begin(), x.end());
    audio.push_back(std::move(x));
    table.push_back(u);
  }
  // A Hann window over [first, first + span), zero elsewhere.
  std::vector<double> window(static_cast<size_t>(c.n_fft), 0.0);
  for (int i = 0; i < c.framing.span; ++i) {
    window[static_cast<size_t>(c.framing.first + i)] =
        0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * (i + 1) / (c.framing.span + 1));
  }
  const int64_t rows = batch * padded_frames + 3;  // 3 rows past the batch: no frame
  const gpu::Buffer signal_dev = gpu::upload_vector(signal);
  const gpu::Buffer table_dev = gpu::upload_vector(table);
  const gpu::Buffer window_dev = gpu::upload_vector(window);
  // NaN everywhere first, so that a value the kernel does not write shows.
  std::vector<float> got(static_cast<size_t>(rows * c.bins),
                         std::numeric_limits<float>::quiet_NaN());
  const gpu::Buffer power_dev = gpu::upload_vector(got);
  const int64_t split = rows / 3;
  gpu::Stream stream;
  for (const auto& [row0, count] : {std::pair{int64_t{0}, split}, std::pair{split, rows - split}}) {
    gpu::mel_power_spectrum(signal_dev.as<const float>(), table_dev.as<const gpu::MelUtterance>(),
                            batch, padded_frames, c.framing, c.n_fft, window_dev.as<const double>(),
                            c.first_bin, c.bins, c.exponent, row0, count,
                            power_dev.as<float>() + row0 * c.bins, stream.get());
  }
  stream.synchronize();
  gpu::download(power_dev.data(), got.size() * sizeof(float), got.data());

  std::vector<double> cosines(static_cast<size_t>(c.n_fft)), sines(cosines.size());
  for (int m = 0; m < c.n_fft; ++m) {
    cosines[static_cast<size_t>(m)] = std::cos(2.0 * std::numbers::pi * m / c.n_fft);
    sines[static_cast<size_t>(m)] = std::sin(2.0 * std::numbers::pi * m / c.n_fft);
  }
  int64_t checked_frames = 0;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t b = row / padded_frames, t = row % padded_frames;
    const float* values = got.data() + row * c.bins;
    if (b >= batch || t >= table[static_cast<size_t>(b)].frames) {
      for (int j = 0; j < c.bins; ++j) ASSERT_EQ(values[j], 0.0f) << "row " << row << " bin " << j;
      continue;
    }
    ++checked_frames;
    const std::vector<double> frame =
        host_frame(audio[static_cast<size_t>(b)], c.framing, c.n_fft, window, t);
    double squares = 0.0;
    for (const double v : frame) squares += v * v;
    const double spectrum_norm = std::sqrt(c.n_fft * squares);  // Parseval
    for (int j = 0; j < c.bins; ++j) {
      const int64_t k = c.first_bin + j;
      if (k > c.n_fft / 2) {
        ASSERT_EQ(values[j], 0.0f) << "row " << row << " bin " << k;
        continue;
      }
      double re = 0.0, im = 0.0;
      for (int64_t n = 0; n < c.n_fft; ++n) {
        const auto m = static_cast<size_t>(k * n % c.n_fft);  // e^(−2πi k n / n_fft), exactly
        re += frame[static_cast<size_t>(n)] * cosines[m];
        im -= frame[static_cast<size_t>(n)] * sines[m];
      }
      ASSERT_TRUE(std::isfinite(values[j]) && values[j] >= 0.0f)
          << "row " << row << " bin " << k << ": " << values[j];
      const double magnitude = std::pow(static_cast<double>(values[j]), 1.0 / c.exponent);
      ASSERT_NEAR(magnitude, std::hypot(re, im), 1e-6 * spectrum_norm + 1e-30)
          << "utterance " << b << " frame " << t << " bin " << k;
    }
  }
  EXPECT_GT(checked_frames, 0);
}

TEST(MelCudaKernels, PowerSpectrumMatchesADoubleDft) {
  if (!gpu::available()) GTEST_SKIP() << "no GPU: " << gpu::describe();
  gpu::require_device();
  std::vector<FftCase> cases;
  {
    // NeMo's: a 400-point window centred in 512, centre padding by reflection, pre-emphasis;
    // bins padded past n_fft / 2 + 1 (257), as the filters' bins are. Utterances shorter than
    // the padding (reflected back and forth) and of one sample.
    FftCase c{"nemo-like 512", 512, {}, 0, 260, 2.0f, {4000, 37, 1, 1601}};
    c.framing.hop = 160;
    c.framing.pad = 256;
    c.framing.first = 56;
    c.framing.span = 400;
    c.framing.reflect = true;
    c.framing.preemphasis = 0.97;
    cases.push_back(c);
  }
  {
    // No centring, the whole window, a magnitude power, bins from 3 on; one utterance too short
    // for a frame.
    FftCase c{"256, no padding, power 1.5", 256, {}, 3, 100, 1.5f, {3000, 200, 2560}};
    c.framing.hop = 100;
    c.framing.first = 0;
    c.framing.span = 256;
    cases.push_back(c);
  }
  {
    // Zero padding, magnitude, the smallest FFT, and more rows than the kernel's blocks hold at
    // once (its loop over rows).
    FftCase c{"16, zero padding, 40000 frames", 16, {}, 0, 12, 1.0f, {160000, 7}};
    c.framing.hop = 4;
    c.framing.pad = 8;
    c.framing.first = 2;
    c.framing.span = 13;
    cases.push_back(c);
  }
  {
    // The largest FFT (one frame per block), reflect padding.
    FftCase c{"4096, reflect", 4096, {}, 1, 2052, 2.0f, {9000, 3000}};
    c.framing.hop = 1000;
    c.framing.pad = 2048;
    c.framing.first = 0;
    c.framing.span = 4096;
    c.framing.reflect = true;
    cases.push_back(c);
  }
  for (const FftCase& c : cases) expect_power_spectrum_matches_dft(c);
}

// The front end's products against sums in double: every tile edge (rows, columns and depth
// that are not multiples of the kernel's 64 × 64 tiles and 16-deep steps), Whisper's DFT
// (400 deep, 402 columns) and filters (201 deep, 128 columns), and a single value. F32 sums
// of n terms are within a few n ulps of Σ|a · b|; 1e-5 of it is far above that and far below
// any wrong or missing term.
TEST(MelCudaKernels, ProductMatchesADoubleSum) {
  if (!gpu::available()) GTEST_SKIP() << "no GPU: " << gpu::describe();
  gpu::require_device();
  std::mt19937 random(5);
  std::uniform_real_distribution<float> values(-1.0f, 1.0f);
  for (auto [rows, depth, cols] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                                   {3000, 400, 402},
                                   {130, 201, 128},
                                   {65, 17, 3},
                                   {64, 16, 64},
                                   {2, 1000, 65}}) {
    SCOPED_TRACE(std::to_string(rows) + " × " + std::to_string(depth) + " · " +
                 std::to_string(depth) + " × " + std::to_string(cols));
    std::vector<float> a(static_cast<size_t>(rows * depth)), b(static_cast<size_t>(cols * depth));
    for (float& v : a) v = values(random);
    for (float& v : b) v = values(random);
    const gpu::Buffer a_dev = gpu::upload_vector(a), b_dev = gpu::upload_vector(b);
    gpu::Buffer out_dev(static_cast<size_t>(rows * cols) * sizeof(float));
    gpu::mel_product(a_dev.as<const float>(), rows, depth, b_dev.as<const float>(), cols,
                     out_dev.as<float>(), nullptr);
    std::vector<float> out(static_cast<size_t>(rows * cols));
    gpu::download(out_dev.data(), out.size() * sizeof(float), out.data());
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        double sum = 0.0, magnitude = 0.0;
        for (int64_t k = 0; k < depth; ++k) {
          const double term = static_cast<double>(a[i * depth + k]) * b[j * depth + k];
          sum += term;
          magnitude += std::abs(term);
        }
        ASSERT_NEAR(out[i * cols + j], sum, 1e-5 * magnitude) << "row " << i << ", column " << j;
      }
    }
  }
}

TEST(MelCudaKernels, FftTakesPowersOfTwoFrom16To4096) {
  for (int n : {16, 32, 256, 512, 1024, 4096}) EXPECT_TRUE(gpu::mel_fft_supported(n)) << n;
  for (int n : {0, 1, 2, 8, 400, 500, 513, 8192}) EXPECT_FALSE(gpu::mel_fft_supported(n)) << n;
}

}  // namespace
}  // namespace hark::features
