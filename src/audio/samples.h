// Raw sample encodings and the one routine that turns a block of raw frames into mono floats.
// Both decoders (our WAV parser and FFmpeg's frames) come through here, so every input is
// scaled and downmixed the same way: integers to [-1, 1), channels averaged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hark::audio {

enum class Encoding {
  kUnsigned8,  // offset binary: 128 is silence (8-bit WAV)
  kSigned16,
  kSigned24,  // packed 3 bytes
  kSigned32,
  kSigned64,
  kFloat32,
  kFloat64,
  kALaw,  // G.711, one byte per sample
  kMuLaw,
};

// Bytes one sample occupies.
int encoding_bytes(Encoding encoding);
bool is_float(Encoding encoding);

struct SampleLayout {
  Encoding encoding = Encoding::kSigned16;
  int channels = 1;
  // true: one buffer per channel (FFmpeg's planar formats); false: frames of interleaved channels.
  bool planar = false;
  // Integer encodings: how many high bits carry the signal (WAVE_FORMAT_EXTENSIBLE's
  // wValidBitsPerSample); the low bits below them are ignored. 0 means all bits.
  int valid_bits = 0;
};

// Appends `frames` mono samples, each the mean of its frame's channels, to `mono`. `planes` holds
// one pointer for interleaved data or `layout.channels` pointers for planar data. Returns false
// when a float input held a NaN or infinity (the samples are still appended), so that the caller
// can say where.
bool mix_to_mono(const uint8_t* const* planes, const SampleLayout& layout, size_t frames,
                 std::vector<float>& mono);

}  // namespace hark::audio
