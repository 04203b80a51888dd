#include "text/unicode.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace hark::text {
namespace {

enum ClassBits : uint8_t { kLetterBit = 1, kNumberBit = 2, kWhiteSpaceBit = 4 };

bool in_ranges(std::span<const detail::CodepointRange> ranges, char32_t c) {
  // First range whose end is >= c; c is inside when that range also starts at or before it.
  auto it =
      std::lower_bound(ranges.begin(), ranges.end(), c,
                       [](const detail::CodepointRange& r, char32_t v) { return r.last < v; });
  return it != ranges.end() && it->first <= c;
}

// The Basic Multilingual Plane holds nearly every character a tokenizer sees, so its classes are
// looked up in one flat table; the supplementary planes fall back to a binary search.
constexpr char32_t kTableSize = 0x10000;

const std::array<uint8_t, kTableSize>& bmp_table() {
  static const auto table = [] {
    std::array<uint8_t, kTableSize> bits{};
    auto mark = [&bits](std::span<const detail::CodepointRange> ranges, uint8_t bit) {
      for (const auto& range : ranges) {
        for (char32_t c = range.first; c <= range.last && c < kTableSize; ++c) bits[c] |= bit;
      }
    };
    mark(detail::kLetters, kLetterBit);
    mark(detail::kNumbers, kNumberBit);
    mark(detail::kWhiteSpace, kWhiteSpaceBit);
    return bits;
  }();
  return table;
}

bool has_class(char32_t c, uint8_t bit, std::span<const detail::CodepointRange> ranges) {
  if (c < kTableSize) return (bmp_table()[c] & bit) != 0;
  return in_ranges(ranges, c);
}

}  // namespace

bool is_letter(char32_t c) {
  return has_class(c, kLetterBit, detail::kLetters);
}
bool is_number(char32_t c) {
  return has_class(c, kNumberBit, detail::kNumbers);
}
bool is_white_space(char32_t c) {
  return has_class(c, kWhiteSpaceBit, detail::kWhiteSpace);
}
std::string_view unicode_version() {
  return detail::kUnicodeVersion;
}

}  // namespace hark::text
