// The three short test recordings as consecutive 30-s Whisper log-mel windows, the input of the
// batched GPU tests.
#pragma once

#include <string>
#include <vector>

#include "audio/audio.h"
#include "features/whisper_mel.h"

namespace hark::testing {

inline std::vector<float> three_windows(int n_mels) {
  const features::MelSpectrogram spectrogram(features::whisper_mel_config(n_mels));
  std::vector<float> mel;
  for (const char* file : {"jfk.wav", "beckett.wav", "librivox-0870.wav"}) {
    const std::vector<float> samples = audio::load(std::string(HARK_TEST_DATA) + "/audio/" + file);
    const std::vector<float> window = features::whisper_window_log_mel(spectrogram, samples);
    mel.insert(mel.end(), window.begin(), window.end());
  }
  return mel;
}

}  // namespace hark::testing
