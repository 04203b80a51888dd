// Little-endian integers read from bytes that the caller has already checked hold them, whatever
// the host's byte order (file formats: WAV, ZIP).
#pragma once

#include <cstdint>

namespace hark::little_endian {

inline uint16_t u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
inline uint32_t u32(const uint8_t* p) {
  return u16(p) | static_cast<uint32_t>(u16(p + 2)) << 16;
}
inline uint64_t u64(const uint8_t* p) {
  return u32(p) | static_cast<uint64_t>(u32(p + 4)) << 32;
}

}  // namespace hark::little_endian
