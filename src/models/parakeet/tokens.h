// Parakeet's vocabulary and how emitted tokens become text (docs/parakeet.md §6): the pieces of
// the non-special tokens concatenated, U+2581 read as a space, except in the first piece, where
// it is dropped (tokenizers' Metaspace decoder with prepend_scheme "always"; special tokens are
// skipped before it, as transformers' decode(skip_special_tokens=True) does).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/parakeet/config.h"

namespace hark::gguf {
class File;
}

namespace hark::parakeet {

class Detokenizer {
 public:
  // tokenizer.ggml.tokens (one piece per id, exactly vocab_size of them) and
  // tokenizer.ggml.token_type: control tokens (3) are special, byte pieces (6, "<0x41>") stand for
  // their byte. The blank is special whatever its type says. Throws hark::Error naming the file.
  static Detokenizer from_gguf(const gguf::File& file, const Config& config);
  // For tests and synthetic models: pieces by id; `special` ids are left out of the text.
  Detokenizer(std::vector<std::string> pieces, const std::vector<int32_t>& special);

  int size() const { return static_cast<int>(pieces_.size()); }
  const std::string& piece(int32_t id) const;  // throws hark::Error outside the vocabulary
  bool is_special(int32_t id) const { return kinds_.at(checked(id)) == Kind::special; }
  // Whether the token starts a word (its piece begins with U+2581).
  bool starts_word(int32_t id) const;

  // The text of `ids` (specials skipped).
  std::string decode(std::span<const int32_t> ids) const;

 private:
  enum class Kind : uint8_t { normal, special, byte };
  Detokenizer() = default;
  size_t checked(int32_t id) const;

  std::vector<std::string> pieces_;
  std::vector<Kind> kinds_;
};

// The text each token adds when tokens are decoded one at a time, as tokenizers' DecodeStream
// gives it (what transformers' ParakeetProcessor times): the text of the tokens so far, minus the
// text before this token; nothing when the text did not grow (a special token, or a lone U+2581
// at the very start, whose space the next token then carries).
class TextStream {
 public:
  explicit TextStream(const Detokenizer& detokenizer) : detokenizer_(detokenizer) {}
  std::optional<std::string> step(int32_t id);

 private:
  const Detokenizer& detokenizer_;
  std::vector<int32_t> ids_;  // a window of the tokens so far: the previous token and this one
  std::string prefix_;        // the window's text before this token
  size_t prefix_index_ = 0;
};

}  // namespace hark::parakeet
