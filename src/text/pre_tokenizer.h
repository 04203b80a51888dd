// Pre-tokenizers: split text into the pieces that byte-level BPE then encodes one by one.
//
// Each model family's tokenizer defines the split with a regex; hark implements each regex by hand
// (std::regex has no \p{..} classes and is slow), so a pre-tokenizer is a small class chosen by
// name (GGUF's tokenizer.ggml.pre) or recognised from the regex in a tokenizer.json.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

namespace hark::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // The name stored under GGUF's tokenizer.ggml.pre ("gpt-2").
  virtual std::string_view name() const = 0;
  // The regex this pre-tokenizer implements, as tokenizer.json / tiktoken write it.
  virtual std::string_view pattern() const = 0;
  // Appends the pieces of `text` to `pieces`: views into `text`, in order, covering all of it.
  // Bytes that are not valid UTF-8 are kept, each ill-formed subsequence acting as a punctuation
  // character.
  virtual void split(std::string_view text, std::vector<std::string_view>& pieces) const = 0;
};

// GPT-2's split, used by Whisper (tiktoken "gpt2" / "multilingual" and Hugging Face ByteLevel):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::shared_ptr<const PreTokenizer> gpt2_pre_tokenizer();

// By GGUF name: "gpt-2" (also accepted: "gpt2", "default", "whisper"). Throws hark::Error naming
// the unknown name otherwise.
std::shared_ptr<const PreTokenizer> pre_tokenizer_by_name(std::string_view name);
// The pre-tokenizer implementing exactly `regex`, or nullptr when hark has none.
std::shared_ptr<const PreTokenizer> pre_tokenizer_for_regex(std::string_view regex);

}  // namespace hark::text
