// The GPU front end (features/mel_cuda.h) against the CPU MelSpectrogram it is built from, for
// NeMo's (80 and 128 mels) and Whisper's configs on the test recordings, for odd, very short and
// empty inputs, for a batch of different lengths (each utterance as it is alone), and for the
// MelConfig options neither of those two uses.
//
// Tolerances: the GPU takes the DFT and the mel filters as F32 products where the CPU runs a
// double FFT. An emulation of the GPU's F32 arithmetic on the CPU, over the recordings in
// tests/data/audio, stayed below 3e-4 absolute and 5e-6 in relative norm on the normalised log
// features (the largest errors where a mel energy is tiny next to its frame's); the limits leave
// several times that for another summation order.
#include "features/mel_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <string>
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

HostBatch run(CudaMelSpectrogram& gpu_mel, const std::vector<std::span<const float>>& batch) {
  gpu::Stream stream;
  DeviceMelBatch out;
  gpu_mel.compute(batch, stream.get(), out);
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

// Utterance b of `got` against the CPU's [n_mels x frames] features of the same samples: the
// frame count, every value within the limits, and zeros in the rows past the utterance.
// `absolute`: the limit on the largest difference.
void expect_matches_cpu(const MelSpectrogram& mel, const HostBatch& got, int b,
                        std::span<const float> samples, const std::string& what,
                        double absolute = kMaxAbsolute) {
  SCOPED_TRACE(what);
  const std::vector<float> want = mel.compute(samples);
  const int64_t mels = mel.n_mels();
  const int64_t frames = mel.frame_count(static_cast<int64_t>(samples.size()));
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
  void expect_clips_match(const MelConfig& config, const std::string& name) {
    const MelSpectrogram mel(config);
    CudaMelSpectrogram gpu_mel(mel);
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
  expect_clips_match(nemo_mel_config(80), "nemo 80");
  expect_clips_match(nemo_mel_config(128), "nemo 128");
}

TEST_F(MelCuda, WhisperMatchesTheCpu) {
  expect_clips_match(whisper_mel_config(80), "whisper 80");
  expect_clips_match(whisper_mel_config(128), "whisper 128");
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

}  // namespace
}  // namespace hark::features
