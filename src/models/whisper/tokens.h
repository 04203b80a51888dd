// Whisper's special tokens and languages, as openai-whisper's tokenizer.py defines them.
//
// After the BPE ranks come, in this order: <|endoftext|>, <|startoftranscript|>, one <|xx|> per
// language, <|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>, <|nospeech|>,
// <|notimestamps|>, and 1501 timestamps <|0.00|> ... <|30.00|>. English-only models use the GPT-2
// ranks, multilingual ones the "multilingual" ranks; both list 99 languages, large-v3 lists 100.
// Hugging Face's files name <|nospeech|> <|nocaptions|> before v3.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/whisper/model.h"

namespace hark::text {
class BpeTokenizer;
}

namespace hark::whisper {

struct Language {
  std::string_view code;  // "en"
  std::string_view name;  // "english"
};

constexpr int kLanguagesBeforeV3 = 99;  // English-only and multilingual up to large-v2
constexpr int kLanguagesV3 = 100;       // large-v3 adds <|yue|>
constexpr int kTimestampTokens = 1501;  // 0.00 .. 30.00 s in steps of 0.02 s

// All 100 languages, in token order.
std::span<const Language> languages();
// Accepts a code ("de"), an English name ("german") or one of openai's aliases ("castilian"),
// in any case; nullopt when unknown.
std::optional<std::string_view> language_code(std::string_view code_or_name);
// The English name of a code; throws hark::Error for an unknown code.
std::string_view language_name(std::string_view code);

// "<|1.24|>" for index 62.
std::string timestamp_token(int index);
// The special tokens that follow the ranks, in id order, for `n_languages` (1..100) languages.
std::vector<std::string> special_tokens(int n_languages);
// openai's tokenizer: a tiktoken rank file (gpt2.tiktoken or multilingual.tiktoken) plus the
// special tokens.
text::BpeTokenizer load_tiktoken(const std::string& path, int n_languages);

// Model vocabulary sizes from which openai and Hugging Face infer the kind of model.
constexpr int kEnglishVocabSize = 51864;
bool is_multilingual_vocab(int model_vocab_size);    // >= 51865
int language_count_for_vocab(int model_vocab_size);  // 99 or 100

// Looks the Whisper special ids up by their strings in any tokenizer (tiktoken, tokenizer.json,
// GGUF). `model_vocab_size` is the decoder's vocabulary size; it decides, as in the references,
// whether the model is multilingual and how many languages it has. Throws hark::Error naming the
// first required token that is missing. The suppress lists are left empty (they come from the
// generation config).
Vocabulary find_vocabulary(const text::BpeTokenizer& tokenizer, int model_vocab_size);

// The ids of the real vocabularies (51864, 51865, 51866 tokens) without a tokenizer: the special
// tokens are the last ones, in special_tokens() order. For random-weight models (`hark bench`).
// Suppress lists are left empty.
Vocabulary standard_vocabulary(int model_vocab_size);

}  // namespace hark::whisper
