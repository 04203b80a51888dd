// Decoders turn an encoded byte stream into blocks of mono samples at the input's own rate;
// Reader (audio.h) picks one by sniffing the input, then resamples what it yields.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "audio/audio.h"
#include "audio/byte_source.h"
#include "base/error.h"

namespace hark::audio {

class Decoder {
 public:
  virtual ~Decoder() = default;

  const SourceInfo& info() const { return info_; }
  // Replaces `mono` with the next block of mono samples and sets `sample_rate` to their rate
  // (chained streams may change it part-way). Returns false at the end of the audio.
  virtual bool next(std::vector<float>& mono, int& sample_rate) = 0;
  // The caller reads the whole input at once: blocks may be large (fewer, larger steps for the
  // resampler's and the mixer's threads), since no one waits for the first of them.
  virtual void prefer_large_blocks() {}

 protected:
  SourceInfo info_;
};

// True when `header` (the first 12 bytes) starts a RIFF, RF64 or BW64 WAVE file.
bool looks_like_wav(std::span<const uint8_t> header);

// A well-formed WAV file whose sample encoding our parser does not decode (ADPCM, GSM, MP3 in
// WAV, ...). FFmpeg may still decode it, so the reader tries that before giving up.
class UnsupportedWavEncoding : public Error {
 public:
  using Error::Error;
};

// Parses the WAV header of `source` (positioned at its start) up to the sample data; the decoder
// then streams the samples. Throws hark::Error naming the input for any malformed header.
std::unique_ptr<Decoder> open_wav(ByteSource& source);

#ifdef HARK_HAVE_FFMPEG
// Decodes the first audio stream of anything FFmpeg's libraries can demux and decode, streaming.
std::unique_ptr<Decoder> open_ffmpeg(ByteSource& source);
#endif

}  // namespace hark::audio
