#include "audio/audio.h"

#include "audio/byte_source.h"
#include "audio/decoder.h"
#include "audio/resampler.h"
#include "base/error.h"

namespace hark::audio {
namespace {

// Picks the decoder by content, never by file name: our parser for WAV, FFmpeg for the rest.
std::unique_ptr<Decoder> open_decoder(ByteSource& source) {
  const std::string& name = source.name();
  uint8_t header[12];
  const size_t got = source.read(header, sizeof header);
  if (got == 0) fail("'", name, "' is empty");
  if (!source.seek(0)) fail("cannot go back to the start of '", name, "'");

  if (looks_like_wav({header, got})) {
    try {
      return open_wav(source);
    } catch (const UnsupportedWavEncoding& unsupported) {
#ifdef HARK_HAVE_FFMPEG
      // ADPCM, GSM and friends: FFmpeg decodes most of them. If it cannot either, our message
      // says more than its would.
      if (!source.seek(0)) throw;
      try {
        return open_ffmpeg(source);
      } catch (const Error&) {
        throw unsupported;
      }
#else
      fail(unsupported.what(), " (a build of hark with FFmpeg might)");
#endif
    }
  }
#ifdef HARK_HAVE_FFMPEG
  return open_ffmpeg(source);
#else
  fail("'", name,
       "' is not a WAV file, and this build of hark has no FFmpeg to decode other formats "
       "(convert it to WAV, or use a build with FFmpeg)");
#endif
}

std::vector<float> load_all(Reader reader) {
  std::vector<float> samples = reader.read_all();
  if (samples.empty()) fail("'", reader.name(), "' holds no audio samples");
  return samples;
}

}  // namespace

Reader::Reader(std::unique_ptr<ByteSource> source, int sample_rate)
    : source_(std::move(source)), sample_rate_(sample_rate) {
  check_sample_rate(sample_rate, "the requested output sample rate");
  decoder_ = open_decoder(*source_);
}

Reader Reader::open(const std::string& path, int sample_rate) {
  return Reader(open_file(path), sample_rate);
}

Reader Reader::open_memory(std::span<const uint8_t> bytes, int sample_rate,
                           const std::string& name) {
  return Reader(audio::open_memory(bytes, name), sample_rate);
}

Reader Reader::open_stream(std::FILE* stream, const std::string& name, int sample_rate) {
  return Reader(audio::open_stream(stream, name), sample_rate);
}

Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

bool Reader::read(std::vector<float>& out) {
  const size_t before = out.size();
  // A block can resample to nothing (the filter's look-ahead), so keep going until output comes.
  while (!ended_ && out.size() == before) {
    int rate = 0;
    if (decoder_->next(block_, rate)) {
      if (rate != input_rate_) {
        // First block, or a chained stream switched rate: the old filter's tail goes out first.
        if (resampler_) resampler_->finish(out);
        resampler_ = make_resampler(rate, sample_rate_);
        input_rate_ = rate;
      }
      resampler_->process(block_, out);
    } else {
      if (resampler_) resampler_->finish(out);
      ended_ = true;
      std::vector<float>().swap(block_);
    }
  }
  return out.size() > before;
}

std::vector<float> Reader::read_all() {
  decoder_->prefer_large_blocks();
  std::vector<float> samples;
  const SourceInfo& info = source();
  if (info.frames > 0 && info.sample_rate > 0) {
    // The header's count is exact (and checked against the input's size): spare the regrowth.
    samples.reserve(
        static_cast<size_t>(static_cast<double>(info.frames) * sample_rate_ / info.sample_rate) +
        16);
  }
  while (read(samples)) {
  }
  return samples;
}

const SourceInfo& Reader::source() const {
  return decoder_->info();
}
const std::string& Reader::name() const {
  return source_->name();
}

std::vector<float> load(const std::string& path, int sample_rate) {
  return load_all(Reader::open(path, sample_rate));
}

std::vector<float> load_memory(std::span<const uint8_t> bytes, int sample_rate) {
  return load_all(Reader::open_memory(bytes, sample_rate));
}

std::vector<float> load_stream(std::FILE* stream, const std::string& name, int sample_rate) {
  return load_all(Reader::open_stream(stream, name, sample_rate));
}

}  // namespace hark::audio
