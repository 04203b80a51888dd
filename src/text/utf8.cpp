#include "text/utf8.h"

#include <cstdint>

namespace hark::text {

Utf8Char decode_utf8(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return {lead, 1, true};

  // Sequence length and the allowed range of the second byte, which excludes overlong forms,
  // surrogates (ED A0..BF) and code points above U+10FFFF (Unicode Table 3-7).
  size_t length = 0;
  uint8_t second_min = 0x80, second_max = 0xBF;
  char32_t value = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, value = lead & 0x0F;
    if (lead == 0xE0) second_min = 0xA0;
    if (lead == 0xED) second_max = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, value = lead & 0x07;
    if (lead == 0xF0) second_min = 0x90;
    if (lead == 0xF4) second_max = 0x8F;
  } else {
    return {0xFFFD, 1, false};  // continuation byte, C0, C1 or F5..FF: never a valid start
  }

  size_t consumed = 1;
  while (consumed < length) {
    if (pos + consumed >= text.size()) return {0xFFFD, consumed, false};
    const uint8_t next = byte(pos + consumed);
    const uint8_t low = consumed == 1 ? second_min : 0x80;
    const uint8_t high = consumed == 1 ? second_max : 0xBF;
    if (next < low || next > high) return {0xFFFD, consumed, false};
    value = (value << 6) | (next & 0x3F);
    ++consumed;
  }
  return {value, length, true};
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char ch = decode_utf8(text, pos);
    if (!ch.valid) return false;
    pos += ch.length;
  }
  return true;
}

std::string repair_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const Utf8Char ch = decode_utf8(bytes, pos);
    if (ch.valid) {
      out.append(bytes.substr(pos, ch.length));
    } else {
      append_utf8(out, 0xFFFD);
    }
    pos += ch.length;
  }
  return out;
}

}  // namespace hark::text
