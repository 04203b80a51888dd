// Band-limited sample-rate conversion of a mono stream, fed block by block.
//
// Two implementations sit behind one interface: libswresample when hark is built with FFmpeg (the
// same resampler the ffmpeg command-line tool uses, which is how openai-whisper and transformers
// load audio), and our own Kaiser-windowed-sinc polyphase filter for builds without FFmpeg.
// make_resampler() picks at compile time; both are always aligned so that output sample k is the
// input's value at time k / output_rate.
#pragma once

#include <memory>
#include <span>
#include <vector>

namespace hark::audio {

class Resampler {
 public:
  virtual ~Resampler() = default;
  // Converts the next block of input, appending whatever output is ready to `output`.
  virtual void process(std::span<const float> input, std::vector<float>& output) = 0;
  // Appends the output still held back for filter look-ahead. Call once, after the last block.
  virtual void finish(std::vector<float>& output) = 0;
};

// The build's resampler; a plain copy when the rates are equal. Rates must lie in
// [kMinSampleRate, kMaxSampleRate] (audio.h); throws hark::Error otherwise.
std::unique_ptr<Resampler> make_resampler(int input_rate, int output_rate);

// Kaiser-windowed sinc, passband to 0.9 of the lower Nyquist frequency, stopband from it with at
// least 80 dB of attenuation. Always built.
std::unique_ptr<Resampler> make_sinc_resampler(int input_rate, int output_rate);

#ifdef HARK_HAVE_FFMPEG
// libswresample with its default (ffmpeg's) filter.
std::unique_ptr<Resampler> make_swr_resampler(int input_rate, int output_rate);
#endif

// Throws hark::Error unless kMinSampleRate <= rate <= kMaxSampleRate; `what` names it.
void check_sample_rate(long long rate, const char* what);

}  // namespace hark::audio
