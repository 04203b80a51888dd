// Builds WAV files byte by byte, so tests can make both good audio and precisely broken headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace hark::testing {

inline void append_le(std::string& bytes, uint64_t value, int size) {
  for (int i = 0; i < size; ++i) bytes += static_cast<char>((value >> (8 * i)) & 0xFF);
}

// A canonical 44-byte-header PCM WAV. `channels` and `sample_rate` go into the header as given
// (even 0), the samples are 16-bit, interleaved.
inline std::string wav_bytes(const std::vector<int16_t>& samples, int channels, int sample_rate) {
  const uint32_t data_bytes = static_cast<uint32_t>(samples.size() * 2);
  std::string bytes = "RIFF";
  append_le(bytes, 36 + data_bytes, 4);
  bytes += "WAVEfmt ";
  append_le(bytes, 16, 4);
  append_le(bytes, 1, 2);  // PCM
  append_le(bytes, static_cast<uint64_t>(channels), 2);
  append_le(bytes, static_cast<uint64_t>(sample_rate), 4);
  append_le(bytes, static_cast<uint64_t>(sample_rate) * channels * 2, 4);
  append_le(bytes, static_cast<uint64_t>(channels) * 2, 2);
  append_le(bytes, 16, 2);
  bytes += "data";
  append_le(bytes, data_bytes, 4);
  for (int16_t sample : samples) append_le(bytes, static_cast<uint16_t>(sample), 2);
  return bytes;
}

// `seconds` of a gliding tone at 16 kHz, mono: something that is not silence.
inline std::string tone_wav(double seconds, int sample_rate = 16000) {
  std::vector<int16_t> samples(static_cast<size_t>(seconds * sample_rate));
  double phase = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const double frequency = 200.0 + 300.0 * static_cast<double>(i) / samples.size();
    phase += 2 * M_PI * frequency / sample_rate;
    samples[i] = static_cast<int16_t>(8000 * std::sin(phase));
  }
  return wav_bytes(samples, 1, sample_rate);
}

}  // namespace hark::testing
