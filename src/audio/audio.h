// Audio input: decode a file, standard input or bytes in memory to mono float samples at the
// models' rate. WAV is parsed natively; everything else (mp3, flac, ogg, opus, m4a, ...) goes
// through FFmpeg's libraries when hark is built with them (HARK_HAVE_FFMPEG).
//
// Input is streamed: it is read and converted block by block (downmixed to mono, resampled), so
// only the output accumulates, never the whole input in its original form.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hark::audio {

constexpr int kSampleRate = 16000;
// Sample rates hark accepts, for inputs and outputs. Below 1 kHz a tiny file would expand to an
// enormous output (and is not speech audio); above 768 kHz no real recording exists, and a
// band-limited downsampler would need absurdly long filters.
constexpr int kMinSampleRate = 1000;
constexpr int kMaxSampleRate = 768000;

// Decodes a file ("-" = standard input) to mono float samples at `sample_rate`. Throws
// hark::Error naming the file when it cannot be read or decoded, or holds no samples at all.
std::vector<float> load(const std::string& path, int sample_rate = kSampleRate);
// Same from bytes in memory (an HTTP upload).
std::vector<float> load_memory(std::span<const uint8_t> bytes, int sample_rate = kSampleRate);
// Same from an open stream, read front to back even when it is a pipe; `name` names it in errors.
// The stream is not closed.
std::vector<float> load_stream(std::FILE* stream, const std::string& name,
                               int sample_rate = kSampleRate);

// What the input was, before conversion.
struct SourceInfo {
  std::string format;   // container/codec, e.g. "wav/pcm_s16le", "mp3/mp3", "ogg/opus"
  int sample_rate = 0;  // of the input (the first block's, should a chained stream change it)
  int channels = 0;
  uint64_t frames = 0;  // frames the input declares, when its size is known; 0 otherwise
};

class ByteSource;
class Decoder;
class Resampler;

// Streams decoded audio in blocks, for callers that want to start before the end of the input
// (or never hold all of it): each read() yields the next stretch of mono samples at the output
// rate. Concatenating the blocks gives exactly what load() returns.
class Reader {
 public:
  static Reader open(const std::string& path, int sample_rate = kSampleRate);
  // `bytes` must outlive the reader. `name` is for error messages (and a format hint to FFmpeg).
  static Reader open_memory(std::span<const uint8_t> bytes, int sample_rate = kSampleRate,
                            const std::string& name = "audio in memory");
  static Reader open_stream(std::FILE* stream, const std::string& name,
                            int sample_rate = kSampleRate);

  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  ~Reader();

  // Appends the next block of samples to `out` and returns true; returns false, appending
  // nothing, once the audio has ended. Throws hark::Error on corrupt or truncated input.
  bool read(std::vector<float>& out);
  // Reads everything left.
  std::vector<float> read_all();

  const SourceInfo& source() const;
  int sample_rate() const { return sample_rate_; }
  const std::string& name() const;

 private:
  Reader(std::unique_ptr<ByteSource> source, int sample_rate);

  std::unique_ptr<ByteSource> source_;
  std::unique_ptr<Decoder> decoder_;  // reads source_, so it is declared (and destroyed) after it
  std::unique_ptr<Resampler> resampler_;
  int sample_rate_ = kSampleRate;
  int input_rate_ = 0;  // rate of the blocks resampler_ was made for
  bool ended_ = false;
  std::vector<float> block_;
};

}  // namespace hark::audio
