// Our own WAV parser: RIFF / RF64 / BW64 WAVE files with integer PCM (8-bit unsigned, 16/24/32/64
// bit signed), IEEE float (32/64 bit), G.711 A-law and mu-law, plain or WAVE_FORMAT_EXTENSIBLE,
// any number of channels. Chunks are walked by their declared sizes, checked against the size of
// the input whenever it is known, so a damaged header is reported instead of read past.
#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>

#include "audio/decoder.h"
#include "audio/samples.h"
#include "base/little_endian.h"

namespace hark::audio {
namespace {

using little_endian::u16;
using little_endian::u32;
using little_endian::u64;

bool is_id(const uint8_t* bytes, const char* id) {
  return std::memcmp(bytes, id, 4) == 0;
}

// A chunk id for messages: printable characters as they are, anything else as \xNN.
std::string id_text(const uint8_t* id) {
  std::string text;
  for (int i = 0; i < 4; ++i) {
    if (id[i] >= 0x20 && id[i] < 0x7f) {
      text += static_cast<char>(id[i]);
    } else {
      static const char kHex[] = "0123456789abcdef";
      text += "\\x";
      text += kHex[id[i] >> 4];
      text += kHex[id[i] & 15];
    }
  }
  return text;
}

std::string hex16(unsigned value) {
  std::ostringstream text;
  text << "0x" << std::hex;
  text.width(4);
  text.fill('0');
  text << value;
  return text.str();
}

// Well-known format tags we do not decode ourselves, named in the error message.
const char* format_tag_name(uint16_t tag) {
  switch (tag) {
    case 0x0002:
      return "Microsoft ADPCM";
    case 0x0011:
      return "IMA ADPCM";
    case 0x0031:
      return "GSM 6.10";
    case 0x0050:
      return "MPEG audio";
    case 0x0055:
      return "MPEG layer 3";
    case 0x0092:
      return "Dolby AC-3";
    case 0x00ff:
      return "AAC";
    case 0x0161:
    case 0x0162:
    case 0x0163:
      return "Windows Media Audio";
    case 0xf1ac:
      return "FLAC";
    default:
      return "unknown";
  }
}

// KSDATAFORMAT_SUBTYPE_PCM / _IEEE_FLOAT / _ALAW / _MULAW share these last 14 bytes; the first
// two hold the plain format tag.
constexpr uint8_t kSubFormatTail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                        0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71};

constexpr uint16_t kTagPcm = 0x0001;
constexpr uint16_t kTagFloat = 0x0003;
constexpr uint16_t kTagALaw = 0x0006;
constexpr uint16_t kTagMuLaw = 0x0007;
constexpr uint16_t kTagExtensible = 0xfffe;

// Writers that cannot seek back (ffmpeg or sox writing to a pipe) leave this in the size fields.
constexpr uint32_t kSizeUnknown = 0xffffffff;

struct WavFormat {
  SampleLayout layout;
  int sample_rate = 0;
  int block_align = 0;
  std::string codec;  // FFmpeg's name for the encoding, e.g. "pcm_s16le"
};

class WavDecoder final : public Decoder {
 public:
  explicit WavDecoder(ByteSource& source) : source_(source) { parse_header(); }

  bool next(std::vector<float>& mono, int& sample_rate) override {
    mono.clear();
    const auto block_align = static_cast<uint64_t>(format_.block_align);
    uint64_t frames = std::max<uint64_t>(1, block_bytes_ / block_align);
    if (!until_end_) frames = std::min(frames, data_left_ / block_align);
    if (frames == 0) return false;

    const size_t bytes = static_cast<size_t>(frames * block_align);
    block_.resize(bytes);
    const size_t got = source_.read(block_.data(), bytes);
    if (got < bytes) {
      if (!until_end_) {
        fail("'", source_.name(), "' is truncated: its data chunk declares ", data_size_,
             " bytes of samples, but the input ends after ", data_size_ - data_left_ + got);
      }
      until_end_ = false;  // reached the end of a stream of unknown length
      data_left_ = 0;
    } else if (!until_end_) {
      data_left_ -= got;
    }
    // A final partial frame (some writers pad the data) carries no whole sample: drop it.
    const size_t whole_frames = got / static_cast<size_t>(block_align);
    if (whole_frames == 0) return false;

    const uint8_t* planes[] = {block_.data()};
    if (!mix_to_mono(planes, format_.layout, whole_frames, mono)) {
      fail("'", source_.name(), "' holds a NaN or infinite sample between frames ", frames_read_,
           " and ", frames_read_ + whole_frames);
    }
    frames_read_ += whole_frames;
    sample_rate = format_.sample_rate;
    return true;
  }

  void prefer_large_blocks() override { block_bytes_ = kLargeBlockBytes; }

 private:
  // Raw bytes read per block: 64k frames of 16-bit stereo is 256 KiB (1.5 s); cap wide formats.
  // A whole-file load takes 4 times that: an hour of 44.1-kHz stereo is then 606 blocks instead
  // of 2,423, each one mixed and resampled on all cores, and the resampler's input still fits in
  // a core's L2.
  static constexpr uint64_t kBlockBytes = uint64_t{1} << 18;
  static constexpr uint64_t kLargeBlockBytes = uint64_t{1} << 20;

  [[noreturn]] void fail_at(uint64_t offset, const std::string& what) const {
    fail("'", source_.name(), "' is not a valid WAV file: ", what, " (at byte ", offset, ")");
  }

  void parse_header() {
    const std::string& name = source_.name();
    uint8_t riff[12];
    const size_t got = source_.read(riff, sizeof riff);
    if (got == 0) fail("'", name, "' is empty");
    if (got < sizeof riff || !looks_like_wav({riff, got})) {
      fail("'", name, "' is not a WAV file (it does not start with a RIFF/WAVE header)");
    }
    const bool is_rf64 = !is_id(riff, "RIFF");

    std::optional<uint64_t> ds64_data_size;
    std::optional<WavFormat> format;
    std::optional<uint64_t> data_offset;  // where a data chunk met before fmt starts
    bool data_until_end = false;
    uint64_t data_size = 0;
    while (true) {
      const uint64_t chunk_offset = source_.position();
      uint8_t header[8];
      const size_t header_bytes = source_.read(header, sizeof header);
      if (header_bytes == 0) break;
      if (header_bytes < sizeof header) fail_at(chunk_offset, "truncated chunk header");
      const uint32_t declared = u32(header + 4);
      uint64_t size = declared;
      const uint64_t body = chunk_offset + sizeof header;
      const auto input_size = source_.size();

      if (is_id(header, "data")) {
        bool until_end = false;
        if (is_rf64 && declared == kSizeUnknown) {
          if (!ds64_data_size) fail_at(chunk_offset, "RF64 data chunk without a ds64 chunk");
          size = *ds64_data_size;
        } else if (declared == kSizeUnknown) {
          until_end = true;
        }
        if (until_end && input_size) {
          size = *input_size - std::min(*input_size, body);
          until_end = false;
        }
        if (!until_end && input_size && size > *input_size - std::min(*input_size, body)) {
          fail("'", name, "' is truncated: its data chunk declares ", size,
               " bytes of samples, but only ", *input_size - std::min(*input_size, body),
               " follow it");
        }
        data_size = size;
        data_until_end = until_end;
        if (format) {
          data_offset = body;
          break;
        }
        // fmt may legally follow data; look for it, and come back if we can.
        if (until_end || !source_.seekable()) {
          fail_at(chunk_offset, "no fmt chunk before the data chunk, and a stream cannot go back");
        }
        data_offset = body;
      } else {
        if (input_size && size > *input_size - std::min(*input_size, body)) {
          fail("'", name, "' is truncated: chunk '", id_text(header), "' at byte ", chunk_offset,
               " declares ", size, " bytes, but only ", *input_size - std::min(*input_size, body),
               " follow it");
        }
        if (is_id(header, "fmt ")) {
          if (format) fail_at(chunk_offset, "a second fmt chunk");
          format = read_fmt(chunk_offset, size);
          if (data_offset) break;
          continue;  // read_fmt consumed the body and its padding
        }
        if (is_id(header, "ds64") && is_rf64) {
          ds64_data_size = read_ds64(chunk_offset, size);
          continue;
        }
      }
      skip_rest(chunk_offset, size, size);
    }

    if (!format) fail("'", name, "' is not a valid WAV file: it has no fmt chunk");
    if (!data_offset) fail("'", name, "' is not a valid WAV file: it has no data chunk");
    if (source_.position() != *data_offset && !source_.seek(*data_offset)) {
      fail("cannot seek back to the data of '", name, "'");
    }
    format_ = *format;
    data_size_ = data_size;
    data_left_ = data_size;
    until_end_ = data_until_end;

    info_.format = "wav/" + format_.codec;
    info_.sample_rate = format_.sample_rate;
    info_.channels = format_.layout.channels;
    if (!until_end_ && source_.size()) info_.frames = data_size / format_.block_align;
  }

  // Skips the `remaining` bytes of a chunk body of `size` bytes, and the padding byte that follows
  // an odd-sized chunk (chunks start at even offsets).
  void skip_rest(uint64_t chunk_offset, uint64_t remaining, uint64_t size) {
    if (source_.skip(remaining) < remaining) fail_at(chunk_offset, "truncated chunk");
    // A missing pad byte at the very end of the file is harmless.
    if (size % 2 == 1) source_.skip(1);
  }

  uint64_t read_ds64(uint64_t chunk_offset, uint64_t size) {
    uint8_t body[24];
    if (size < sizeof body) fail_at(chunk_offset, "ds64 chunk shorter than 24 bytes");
    if (!source_.read_exact(body, sizeof body)) fail_at(chunk_offset, "truncated ds64 chunk");
    skip_rest(chunk_offset, size - sizeof body, size);
    return u64(body + 8);  // riff size, data size, sample count
  }

  WavFormat read_fmt(uint64_t chunk_offset, uint64_t size) {
    uint8_t body[40] = {};
    if (size < 16) fail_at(chunk_offset, "fmt chunk shorter than 16 bytes");
    const size_t kept = static_cast<size_t>(std::min<uint64_t>(size, sizeof body));
    if (!source_.read_exact(body, kept)) fail_at(chunk_offset, "truncated fmt chunk");
    skip_rest(chunk_offset, size - kept, size);
    return parse_fmt(chunk_offset, body, static_cast<size_t>(size));
  }

  WavFormat parse_fmt(uint64_t chunk_offset, const uint8_t* body, size_t size) const {
    const std::string& name = source_.name();
    const uint16_t tag = u16(body);
    const int channels = u16(body + 2);
    const uint32_t sample_rate = u32(body + 4);
    const int block_align = u16(body + 12);
    const int bits = u16(body + 14);
    if (channels == 0) fail("'", name, "' declares 0 channels in its fmt chunk");
    if (sample_rate < kMinSampleRate || sample_rate > kMaxSampleRate) {
      fail("'", name, "' has a sample rate of ", sample_rate, " Hz; hark reads ", kMinSampleRate,
           " to ", kMaxSampleRate, " Hz");
    }

    uint16_t encoding_tag = tag;
    int valid_bits = bits;
    bool extensible = false;
    if (tag == kTagExtensible) {
      if (size < 40 || u16(body + 16) < 22) {
        fail_at(chunk_offset, "WAVE_FORMAT_EXTENSIBLE fmt chunk shorter than 40 bytes");
      }
      extensible = true;
      const uint8_t* guid = body + 24;
      encoding_tag = u16(guid);
      if (std::memcmp(guid + 2, kSubFormatTail, sizeof kSubFormatTail) != 0) {
        throw UnsupportedWavEncoding("'" + name +
                                     "' uses a WAVE_FORMAT_EXTENSIBLE sub-format that is not PCM, "
                                     "float, A-law or mu-law");
      }
      // 0 is what some writers put when every bit is valid.
      if (u16(body + 18) != 0) valid_bits = u16(body + 18);
      if (valid_bits > bits) {
        fail("'", name, "' declares ", valid_bits, " valid bits in ", bits, "-bit samples");
      }
    }

    WavFormat format;
    format.sample_rate = static_cast<int>(sample_rate);
    format.block_align = block_align;
    format.layout.channels = channels;
    // Plain PCM stores e.g. 12 or 20 bits left-justified in whole bytes.
    const int container_bytes = (bits + 7) / 8;
    switch (encoding_tag) {
      case kTagPcm:
        switch (container_bytes) {
          case 1:
            format.layout.encoding = Encoding::kUnsigned8;
            format.codec = "pcm_u8";
            break;
          case 2:
            format.layout.encoding = Encoding::kSigned16;
            format.codec = "pcm_s16le";
            break;
          case 3:
            format.layout.encoding = Encoding::kSigned24;
            format.codec = "pcm_s24le";
            break;
          case 4:
            format.layout.encoding = Encoding::kSigned32;
            format.codec = "pcm_s32le";
            break;
          case 8:
            format.layout.encoding = Encoding::kSigned64;
            format.codec = "pcm_s64le";
            break;
          default:
            fail("'", name, "' has ", bits, "-bit integer samples; hark reads 8, 16, 24, 32 or 64");
        }
        format.layout.valid_bits = valid_bits;
        if (extensible && bits % 8 != 0) {
          fail_at(chunk_offset, "WAVE_FORMAT_EXTENSIBLE container size not a multiple of 8 bits");
        }
        break;
      case kTagFloat:
        if (bits == 32) {
          format.layout.encoding = Encoding::kFloat32;
          format.codec = "pcm_f32le";
        } else if (bits == 64) {
          format.layout.encoding = Encoding::kFloat64;
          format.codec = "pcm_f64le";
        } else {
          fail("'", name, "' has ", bits, "-bit float samples; hark reads 32 or 64");
        }
        break;
      case kTagALaw:
      case kTagMuLaw:
        if (bits != 8) fail("'", name, "' has ", bits, "-bit G.711 samples; they must be 8-bit");
        format.layout.encoding = encoding_tag == kTagALaw ? Encoding::kALaw : Encoding::kMuLaw;
        format.codec = encoding_tag == kTagALaw ? "pcm_alaw" : "pcm_mulaw";
        break;
      default:
        throw UnsupportedWavEncoding("'" + name + "' is a WAV file with format tag " +
                                     hex16(encoding_tag) + " (" + format_tag_name(encoding_tag) +
                                     "), which hark does not decode");
    }
    if (block_align != channels * container_bytes) {
      fail("'", name, "' has a block align of ", block_align, " bytes, but ", channels,
           " channels of ", container_bytes, "-byte samples make ", channels * container_bytes);
    }
    return format;
  }

  ByteSource& source_;
  WavFormat format_;
  uint64_t data_size_ = 0;  // bytes of sample data the header declares
  uint64_t data_left_ = 0;  // of those, not yet read
  bool until_end_ = false;  // the size is unknown (a pipe from a streaming writer): read to the end
  uint64_t frames_read_ = 0;
  uint64_t block_bytes_ = kBlockBytes;
  std::vector<uint8_t> block_;
};

}  // namespace

bool looks_like_wav(std::span<const uint8_t> header) {
  if (header.size() < 12 || !is_id(header.data() + 8, "WAVE")) return false;
  return is_id(header.data(), "RIFF") || is_id(header.data(), "RF64") ||
         is_id(header.data(), "BW64");
}

std::unique_ptr<Decoder> open_wav(ByteSource& source) {
  return std::make_unique<WavDecoder>(source);
}

}  // namespace hark::audio
