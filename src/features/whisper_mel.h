// Whisper's log-mel front end, as a MelConfig, and its two ways of padding audio:
//  - one 30-s window, as transformers' WhisperFeatureExtractor (padding="max_length"): the audio
//    is zero-padded or truncated to 480000 samples, giving [n_mels x 3000];
//  - long-form, as openai-whisper's transcribe(): the whole audio plus 30 s of zeros, one
//    spectrogram whose dynamic-range clamp spans the whole file, [n_mels x (samples + 480000)/160],
//    from which the decoder takes 3000-frame windows.
// The extractor with padding="longest" (transformers' long-form input) is mel.compute(samples)
// itself: the audio as it is, [n_mels x samples/160].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "features/mel.h"

namespace hark::features {

constexpr int kWhisperSampleRate = 16000;
constexpr int kWhisperHopLength = 160;
constexpr int64_t kWhisperWindowSamples = 30 * kWhisperSampleRate;                   // 480000
constexpr int64_t kWhisperWindowFrames = kWhisperWindowSamples / kWhisperHopLength;  // 3000

// n_fft 400, hop 160, periodic Hann, reflect-centred, |X|^2, slaney mel filters over 0..8000 Hz,
// last frame dropped, log10(max(x, 1e-10)), then Whisper's dynamic-range normalisation.
MelConfig whisper_mel_config(int n_mels);

// One window: [mel.n_mels() x 3000]. `mel` must be built from whisper_mel_config.
std::vector<float> whisper_window_log_mel(const MelSpectrogram& mel,
                                          std::span<const float> samples);
// Long-form: [mel.n_mels() x (samples.size() + 480000) / 160].
std::vector<float> whisper_long_log_mel(const MelSpectrogram& mel, std::span<const float> samples);

}  // namespace hark::features
