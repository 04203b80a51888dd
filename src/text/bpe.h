// Byte-level BPE, the tokenizer of Whisper (tiktoken ranks) and of Qwen (tokenizer.json).
//
// Tokens are byte strings. A vocabulary comes from tiktoken rank files (base64 token + rank per
// line), from a Hugging Face tokenizer.json (GPT-2 byte-to-unicode strings + merges), or from GGUF
// keys (tokenizer.ggml.tokens / tokenizer.ggml.merges). Special tokens are exact strings matched
// before BPE when asked for, and never produced by merging.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hark::gguf {
class File;
class Writer;
}  // namespace hark::gguf

namespace hark::text {

class BpeTokenizer {
 public:
  // tiktoken rank file; `specials` are appended after the ranks, in order, with consecutive ids.
  static BpeTokenizer from_tiktoken(const std::string& path,
                                    const std::vector<std::string>& specials);
  // Hugging Face tokenizer.json (model.type == "BPE", byte-level) with its added_tokens.
  static BpeTokenizer from_tokenizer_json(const std::string& path);
  // vocab.json + merges.txt (+ added_tokens.json when present), the "slow" tokenizer files.
  static BpeTokenizer from_vocab_merges(const std::string& vocab_json,
                                        const std::string& merges_txt,
                                        const std::string& added_tokens_json = "");
  // tokenizer.ggml.tokens / tokenizer.ggml.merges (+ tokenizer.ggml.token_type for specials).
  static BpeTokenizer from_gguf(const gguf::File& file);
  // Stores the vocabulary under the tokenizer.ggml.* keys.
  void write_gguf(gguf::Writer& writer) const;

  // Text (UTF-8) to ids. Special-token strings in the text are plain text unless allow_special.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const;
  // Ids to UTF-8 text; special tokens are rendered as their strings unless skip_special.
  // Invalid UTF-8 at token boundaries is replaced with U+FFFD, as the references do.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  int32_t vocab_size() const;
  std::optional<int32_t> find(std::string_view token) const;  // exact token (bytes) -> id
  int32_t id(std::string_view token) const;                   // throws hark::Error when absent
  const std::string& token_bytes(int32_t id) const;           // raw bytes of a token
  bool is_special(int32_t id) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace hark::text
