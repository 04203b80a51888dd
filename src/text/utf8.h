// UTF-8 decoding and repair, with the replacement rules of Python's and Rust's decoders: every
// maximal ill-formed subsequence becomes one U+FFFD (Unicode's "substitution of maximal subparts").
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hark::text {

struct Utf8Char {
  char32_t code_point = 0;  // U+FFFD when !valid
  size_t length = 0;        // bytes consumed: the whole character, or the ill-formed subpart
  bool valid = false;
};

// Decodes the character at `text[pos]` (pos < text.size()).
Utf8Char decode_utf8(std::string_view text, size_t pos);
void append_utf8(std::string& out, char32_t code_point);
bool is_valid_utf8(std::string_view text);
// `bytes` with every ill-formed subsequence replaced by U+FFFD.
std::string repair_utf8(std::string_view bytes);

}  // namespace hark::text
