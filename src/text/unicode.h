// Unicode code point classes used by the pre-tokenizers' regexes (\p{L}, \p{N}, \s).
//
// The tables are generated from Python's unicodedata by tools/gen_unicode_tables.py into
// unicode_tables.cpp; the queries here are what the tokenizer code calls.
#pragma once

#include <span>
#include <string_view>

namespace hark::text {

bool is_letter(char32_t c);       // \p{L}: general category L*
bool is_number(char32_t c);       // \p{N}: general category N*
bool is_white_space(char32_t c);  // \s: the Unicode White_Space property
// The Unicode version the tables were generated from.
std::string_view unicode_version();

namespace detail {

struct CodepointRange {
  char32_t first;
  char32_t last;  // inclusive
};

// Sorted, non-overlapping ranges (unicode_tables.cpp).
extern const std::span<const CodepointRange> kLetters;
extern const std::span<const CodepointRange> kNumbers;
extern const std::span<const CodepointRange> kWhiteSpace;
extern const std::string_view kUnicodeVersion;

}  // namespace detail
}  // namespace hark::text
