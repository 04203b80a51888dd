#include "models/parakeet/tokens.h"

#include <cctype>
#include <string_view>

#include "base/error.h"
#include "format/gguf.h"

namespace hark::parakeet {

namespace {

// tokenizer.ggml.token_type values, as llama.cpp numbers them (the converter writes them).
constexpr int64_t kTokenControl = 3;
constexpr int64_t kTokenByte = 6;

constexpr std::string_view kWordMark = "\u2581";

int hex_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c))
             ? c - '0'
             : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
}

}  // namespace

Detokenizer Detokenizer::from_gguf(const gguf::File& file, const Config& config) {
  if (!file.has("tokenizer.ggml.tokens")) {
    fail(file.path(), ": key 'tokenizer.ggml.tokens' is missing (the Parakeet vocabulary)");
  }
  Detokenizer v;
  v.pieces_ = file.get_strings("tokenizer.ggml.tokens");
  if (static_cast<int>(v.pieces_.size()) != config.vocab_size) {
    fail(file.path(), ": tokenizer.ggml.tokens holds ", v.pieces_.size(),
         " pieces, parakeet.vocab_size is ", config.vocab_size);
  }
  std::vector<int64_t> types(v.pieces_.size(), 1);
  if (file.has("tokenizer.ggml.token_type")) {
    types = file.get_ints("tokenizer.ggml.token_type");
    if (types.size() != v.pieces_.size()) {
      fail(file.path(), ": tokenizer.ggml.token_type holds ", types.size(), " values for ",
           v.pieces_.size(), " pieces");
    }
  }
  v.kinds_.resize(v.pieces_.size(), Kind::normal);
  for (size_t id = 0; id < types.size(); ++id) {
    const std::string& piece = v.pieces_[id];
    if (types[id] == kTokenControl) {
      v.kinds_[id] = Kind::special;
    } else if (types[id] == kTokenByte) {
      if (piece.size() != 6 || !piece.starts_with("<0x") || piece.back() != '>' ||
          !std::isxdigit(static_cast<unsigned char>(piece[3])) ||
          !std::isxdigit(static_cast<unsigned char>(piece[4]))) {
        fail(file.path(), ": token ", id, " '", piece, "' is typed as a byte but is not <0xNN>");
      }
      v.kinds_[id] = Kind::byte;
    }
  }
  v.kinds_[config.blank_id] = Kind::special;
  return v;
}

Detokenizer::Detokenizer(std::vector<std::string> pieces, const std::vector<int32_t>& special)
    : pieces_(std::move(pieces)), kinds_(pieces_.size(), Kind::normal) {
  for (int32_t id : special) kinds_[checked(id)] = Kind::special;
}

size_t Detokenizer::checked(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) {
    fail("Parakeet token ", id, " is outside the vocabulary of ", pieces_.size());
  }
  return static_cast<size_t>(id);
}

const std::string& Detokenizer::piece(int32_t id) const {
  return pieces_[checked(id)];
}

bool Detokenizer::starts_word(int32_t id) const {
  const size_t index = checked(id);
  return kinds_[index] == Kind::normal && pieces_[index].starts_with(kWordMark);
}

std::string Detokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  bool first = true;
  for (int32_t id : ids) {
    const size_t index = checked(id);
    if (kinds_[index] == Kind::special) continue;
    const std::string& piece = pieces_[index];
    if (kinds_[index] == Kind::byte) {
      text += static_cast<char>(hex_digit(piece[3]) * 16 + hex_digit(piece[4]));
    } else {
      // Metaspace: every mark becomes a space, but those of the first piece are dropped.
      for (size_t at = 0; at < piece.size();) {
        if (piece.compare(at, kWordMark.size(), kWordMark) == 0) {
          if (!first) text += ' ';
          at += kWordMark.size();
        } else {
          text += piece[at++];
        }
      }
    }
    first = false;
  }
  return text;
}

std::optional<std::string> TextStream::step(int32_t id) {
  ids_.push_back(id);
  const std::string text = detokenizer_.decode(ids_);
  // An incomplete UTF-8 sequence at the end (byte pieces) waits for the rest; tokenizers checks
  // for the replacement character its lossy decoding would have put there.
  auto incomplete_utf8 = [](const std::string& s) {
    size_t continuation = 0;
    for (size_t i = s.size(); i-- > 0 && continuation < 4;) {
      const auto byte = static_cast<unsigned char>(s[i]);
      if ((byte & 0xC0) == 0x80) {
        ++continuation;
        continue;
      }
      const size_t length = byte < 0x80 ? 1 : (byte >> 5) == 6 ? 2 : (byte >> 4) == 14 ? 3 : 4;
      return continuation + 1 < length;
    }
    return continuation > 0;
  };
  if (text.size() <= prefix_.size() || incomplete_utf8(text)) return std::nullopt;
  const std::string added =
      text.starts_with(prefix_) ? text.substr(prefix_.size()) : text;  // never differs for pieces
  const size_t next_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = detokenizer_.decode(ids_);
  prefix_index_ = next_prefix_index;
  return added;
}

}  // namespace hark::parakeet
