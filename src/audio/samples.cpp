#include "audio/samples.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "base/error.h"

namespace hark::audio {

// WAV data is little-endian and FFmpeg's native formats are host-endian; reading samples with
// memcpy is correct for both only on a little-endian host, which is every machine hark targets.
static_assert(std::endian::native == std::endian::little, "sample decoding assumes little-endian");

namespace {

// Frames from which a block is mixed on parallel threads (a whole-file load's blocks are 256k
// frames of 16-bit stereo; a stream's 64k).
constexpr int64_t kParallelFrames = int64_t{1} << 17;

template <class T>
T load(const uint8_t* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

// G.711 expansion to the 16-bit linear scale (ITU-T G.711 / the classic Sun reference code).
int16_t expand_alaw(uint8_t code) {
  code ^= 0x55;
  int magnitude = (code & 0x0f) << 4;
  const int segment = (code & 0x70) >> 4;
  if (segment == 0) {
    magnitude += 8;
  } else {
    magnitude += 0x108;
    if (segment > 1) magnitude <<= segment - 1;
  }
  return static_cast<int16_t>((code & 0x80) ? magnitude : -magnitude);
}

int16_t expand_mulaw(uint8_t code) {
  code = static_cast<uint8_t>(~code);
  int magnitude = ((code & 0x0f) << 3) + 0x84;
  magnitude <<= (code & 0x70) >> 4;
  return static_cast<int16_t>((code & 0x80) ? (0x84 - magnitude) : (magnitude - 0x84));
}

using ByteTable = std::array<float, 256>;

template <int16_t (*expand)(uint8_t)>
const ByteTable& g711_table() {
  static const ByteTable table = [] {
    ByteTable values{};
    for (int code = 0; code < 256; ++code) {
      values[code] = static_cast<float>(expand(static_cast<uint8_t>(code))) / 32768.0f;
    }
    return values;
  }();
  return table;
}

// Reads one sample of encoding E as a float. Integers keep only their `mask`ed (valid) bits and
// are scaled so that full scale is [-1, 1).
template <Encoding E>
struct SampleReader {
  int64_t mask = -1;
  const ByteTable* table = nullptr;

  float operator()(const uint8_t* bytes) const {
    if constexpr (E == Encoding::kUnsigned8) {
      return static_cast<float>((bytes[0] & mask) - 128) * (1.0f / 128);
    } else if constexpr (E == Encoding::kSigned16) {
      return static_cast<float>(load<int16_t>(bytes) & mask) * (1.0f / 32768);
    } else if constexpr (E == Encoding::kSigned24) {
      // Place the 3 bytes in the top of an int32 and shift back down to sign-extend them.
      const uint32_t raw = bytes[0] | (bytes[1] << 8) | (static_cast<uint32_t>(bytes[2]) << 16);
      const int32_t value = static_cast<int32_t>(raw << 8) >> 8;
      return static_cast<float>(value & mask) * (1.0f / 8388608);
    } else if constexpr (E == Encoding::kSigned32) {
      return static_cast<float>(static_cast<double>(load<int32_t>(bytes) & mask) *
                                (1.0 / 2147483648.0));
    } else if constexpr (E == Encoding::kSigned64) {
      return static_cast<float>(static_cast<double>(load<int64_t>(bytes) & mask) *
                                (1.0 / 9223372036854775808.0));
    } else if constexpr (E == Encoding::kFloat32) {
      return load<float>(bytes);
    } else if constexpr (E == Encoding::kFloat64) {
      return static_cast<float>(load<double>(bytes));
    } else {
      return (*table)[bytes[0]];
    }
  }
};

template <Encoding E>
bool mix(const uint8_t* const* planes, const SampleLayout& layout, size_t frames,
         std::vector<float>& mono) {
  const size_t bytes = static_cast<size_t>(encoding_bytes(E));
  SampleReader<E> read;
  if constexpr (E == Encoding::kALaw) read.table = &g711_table<expand_alaw>();
  if constexpr (E == Encoding::kMuLaw) read.table = &g711_table<expand_mulaw>();
  const int container_bits = static_cast<int>(bytes) * 8;
  if (layout.valid_bits > 0 && layout.valid_bits < container_bits) {
    read.mask = ~((int64_t{1} << (container_bits - layout.valid_bits)) - 1);
  }

  const size_t first = mono.size();
  mono.resize(first + frames);
  float* out = mono.data() + first;
  const size_t channels = static_cast<size_t>(layout.channels);
  const float mean = 1.0f / static_cast<float>(channels);
  // Frame f's mean: its channels added in order from 0, then scaled.
  auto sample = [&](size_t c, size_t f) {
    return layout.planar ? read(planes[c] + f * bytes)
                         : read(planes[0] + (f * channels + c) * bytes);
  };
  const auto count = static_cast<int64_t>(frames);
  const bool parallel = count >= kParallelFrames;
  if (channels == 1) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t f = 0; f < count; ++f) out[f] = read(planes[0] + f * bytes);
  } else if (channels == 2) {  // the common case, which the compiler can vectorize
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t f = 0; f < count; ++f) out[f] = (0.0f + sample(0, f) + sample(1, f)) * mean;
  } else {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t f = 0; f < count; ++f) {
      float sum = 0;
      for (size_t c = 0; c < channels; ++c) sum += sample(c, f);
      out[f] = sum * mean;
    }
  }

  if constexpr (E == Encoding::kFloat32 || E == Encoding::kFloat64) {
    // A NaN or infinity in any channel makes the mean non-finite, so checking the output suffices.
    bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite) if (parallel)
    for (int64_t f = 0; f < count; ++f) finite = finite && std::isfinite(out[f]);
    return finite;
  }
  return true;
}

}  // namespace

int encoding_bytes(Encoding encoding) {
  switch (encoding) {
    case Encoding::kUnsigned8:
    case Encoding::kALaw:
    case Encoding::kMuLaw:
      return 1;
    case Encoding::kSigned16:
      return 2;
    case Encoding::kSigned24:
      return 3;
    case Encoding::kSigned32:
    case Encoding::kFloat32:
      return 4;
    case Encoding::kSigned64:
    case Encoding::kFloat64:
      return 8;
  }
  fail("unknown sample encoding ", static_cast<int>(encoding));
}

bool is_float(Encoding encoding) {
  return encoding == Encoding::kFloat32 || encoding == Encoding::kFloat64;
}

bool mix_to_mono(const uint8_t* const* planes, const SampleLayout& layout, size_t frames,
                 std::vector<float>& mono) {
  if (layout.channels < 1) fail("cannot mix ", layout.channels, " channels to mono");
  switch (layout.encoding) {
    case Encoding::kUnsigned8:
      return mix<Encoding::kUnsigned8>(planes, layout, frames, mono);
    case Encoding::kSigned16:
      return mix<Encoding::kSigned16>(planes, layout, frames, mono);
    case Encoding::kSigned24:
      return mix<Encoding::kSigned24>(planes, layout, frames, mono);
    case Encoding::kSigned32:
      return mix<Encoding::kSigned32>(planes, layout, frames, mono);
    case Encoding::kSigned64:
      return mix<Encoding::kSigned64>(planes, layout, frames, mono);
    case Encoding::kFloat32:
      return mix<Encoding::kFloat32>(planes, layout, frames, mono);
    case Encoding::kFloat64:
      return mix<Encoding::kFloat64>(planes, layout, frames, mono);
    case Encoding::kALaw:
      return mix<Encoding::kALaw>(planes, layout, frames, mono);
    case Encoding::kMuLaw:
      return mix<Encoding::kMuLaw>(planes, layout, frames, mono);
  }
  fail("unknown sample encoding ", static_cast<int>(layout.encoding));
}

}  // namespace hark::audio
