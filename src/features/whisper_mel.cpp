#include "features/whisper_mel.h"

#include <algorithm>

#include "base/error.h"

namespace hark::features {
namespace {

void check_whisper_config(const MelSpectrogram& mel) {
  const MelConfig& c = mel.config();
  if (c.sample_rate != kWhisperSampleRate || c.hop_length != kWhisperHopLength ||
      !c.drop_last_frame || !c.center) {
    fail("Whisper log-mel needs a whisper_mel_config() front end");
  }
}

}  // namespace

MelConfig whisper_mel_config(int n_mels) {
  MelConfig config;
  config.sample_rate = kWhisperSampleRate;
  config.n_fft = 400;
  config.win_length = 400;
  config.hop_length = kWhisperHopLength;
  config.window = WindowKind::hann_periodic;
  config.center = true;
  config.pad_mode = PadMode::reflect;
  config.power = 2;
  config.n_mels = n_mels;
  config.f_min = 0;
  config.f_max = 8000;
  config.mel_scale = MelScale::slaney;
  config.filter_norm = FilterNorm::slaney;
  config.drop_last_frame = true;
  config.log = LogKind::log10;
  config.log_floor = 1e-10;
  config.normalization = Normalization::whisper_dynamic_range;
  return config;
}

std::vector<float> whisper_window_log_mel(const MelSpectrogram& mel,
                                          std::span<const float> samples) {
  check_whisper_config(mel);
  const auto kept = std::min<int64_t>(static_cast<int64_t>(samples.size()), kWhisperWindowSamples);
  return mel.compute(samples.first(static_cast<size_t>(kept)), kWhisperWindowSamples - kept);
}

std::vector<float> whisper_long_log_mel(const MelSpectrogram& mel, std::span<const float> samples) {
  check_whisper_config(mel);
  return mel.compute(samples, kWhisperWindowSamples);
}

}  // namespace hark::features
