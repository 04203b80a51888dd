#include "models/whisper/tokens.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "base/error.h"
#include "text/bpe.h"

namespace hark::whisper {
namespace {

// openai-whisper's LANGUAGES, in token order.
constexpr std::array<Language, kLanguagesV3> kLanguages = {{
    {"en", "english"},        {"zh", "chinese"},     {"de", "german"},        {"es", "spanish"},
    {"ru", "russian"},        {"ko", "korean"},      {"fr", "french"},        {"ja", "japanese"},
    {"pt", "portuguese"},     {"tr", "turkish"},     {"pl", "polish"},        {"ca", "catalan"},
    {"nl", "dutch"},          {"ar", "arabic"},      {"sv", "swedish"},       {"it", "italian"},
    {"id", "indonesian"},     {"hi", "hindi"},       {"fi", "finnish"},       {"vi", "vietnamese"},
    {"he", "hebrew"},         {"uk", "ukrainian"},   {"el", "greek"},         {"ms", "malay"},
    {"cs", "czech"},          {"ro", "romanian"},    {"da", "danish"},        {"hu", "hungarian"},
    {"ta", "tamil"},          {"no", "norwegian"},   {"th", "thai"},          {"ur", "urdu"},
    {"hr", "croatian"},       {"bg", "bulgarian"},   {"lt", "lithuanian"},    {"la", "latin"},
    {"mi", "maori"},          {"ml", "malayalam"},   {"cy", "welsh"},         {"sk", "slovak"},
    {"te", "telugu"},         {"fa", "persian"},     {"lv", "latvian"},       {"bn", "bengali"},
    {"sr", "serbian"},        {"az", "azerbaijani"}, {"sl", "slovenian"},     {"kn", "kannada"},
    {"et", "estonian"},       {"mk", "macedonian"},  {"br", "breton"},        {"eu", "basque"},
    {"is", "icelandic"},      {"hy", "armenian"},    {"ne", "nepali"},        {"mn", "mongolian"},
    {"bs", "bosnian"},        {"kk", "kazakh"},      {"sq", "albanian"},      {"sw", "swahili"},
    {"gl", "galician"},       {"mr", "marathi"},     {"pa", "punjabi"},       {"si", "sinhala"},
    {"km", "khmer"},          {"sn", "shona"},       {"yo", "yoruba"},        {"so", "somali"},
    {"af", "afrikaans"},      {"oc", "occitan"},     {"ka", "georgian"},      {"be", "belarusian"},
    {"tg", "tajik"},          {"sd", "sindhi"},      {"gu", "gujarati"},      {"am", "amharic"},
    {"yi", "yiddish"},        {"lo", "lao"},         {"uz", "uzbek"},         {"fo", "faroese"},
    {"ht", "haitian creole"}, {"ps", "pashto"},      {"tk", "turkmen"},       {"nn", "nynorsk"},
    {"mt", "maltese"},        {"sa", "sanskrit"},    {"lb", "luxembourgish"}, {"my", "myanmar"},
    {"bo", "tibetan"},        {"tl", "tagalog"},     {"mg", "malagasy"},      {"as", "assamese"},
    {"tt", "tatar"},          {"haw", "hawaiian"},   {"ln", "lingala"},       {"ha", "hausa"},
    {"ba", "bashkir"},        {"jw", "javanese"},    {"su", "sundanese"},     {"yue", "cantonese"},
}};

// openai's TO_LANGUAGE_CODE aliases beyond the names above.
constexpr std::array<Language, 12> kAliases = {{
    {"my", "burmese"},
    {"ca", "valencian"},
    {"nl", "flemish"},
    {"ht", "haitian"},
    {"lb", "letzeburgesch"},
    {"ps", "pushto"},
    {"pa", "panjabi"},
    {"ro", "moldavian"},
    {"ro", "moldovan"},
    {"si", "sinhalese"},
    {"es", "castilian"},
    {"zh", "mandarin"},
}};

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::span<const Language> languages() {
  return kLanguages;
}

std::optional<std::string_view> language_code(std::string_view code_or_name) {
  const std::string key = lower(code_or_name);
  for (const Language& language : kLanguages) {
    if (key == language.code || key == language.name) return language.code;
  }
  for (const Language& alias : kAliases) {
    if (key == alias.name) return alias.code;
  }
  return std::nullopt;
}

std::string_view language_name(std::string_view code) {
  for (const Language& language : kLanguages) {
    if (code == language.code) return language.name;
  }
  fail("unknown Whisper language code \"", code, "\"");
}

std::string timestamp_token(int index) {
  if (index < 0 || index >= kTimestampTokens)
    fail("Whisper timestamp index ", index, " out of range");
  // openai formats i * 0.02 with two decimals; counting in hundredths gives the same digits.
  const int hundredths = index * 2;
  std::string token = "<|";
  token += std::to_string(hundredths / 100);
  token += '.';
  token += static_cast<char>('0' + hundredths % 100 / 10);
  token += static_cast<char>('0' + hundredths % 10);
  token += "|>";
  return token;
}

std::vector<std::string> special_tokens(int n_languages) {
  if (n_languages < 1 || n_languages > kLanguagesV3) {
    fail("Whisper has 1 to ", kLanguagesV3, " languages, not ", n_languages);
  }
  std::vector<std::string> tokens = {"<|endoftext|>", "<|startoftranscript|>"};
  for (int i = 0; i < n_languages; ++i) {
    tokens.push_back("<|" + std::string(kLanguages[i].code) + "|>");
  }
  for (const char* token : {"<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
                            "<|nospeech|>", "<|notimestamps|>"}) {
    tokens.emplace_back(token);
  }
  for (int i = 0; i < kTimestampTokens; ++i) tokens.push_back(timestamp_token(i));
  return tokens;
}

text::BpeTokenizer load_tiktoken(const std::string& path, int n_languages) {
  return text::BpeTokenizer::from_tiktoken(path, special_tokens(n_languages));
}

bool is_multilingual_vocab(int model_vocab_size) {
  return model_vocab_size > kEnglishVocabSize;
}

int language_count_for_vocab(int model_vocab_size) {
  // openai and transformers: vocab - 51765 - multilingual (99 for 51864 and 51865, 100 for 51866).
  const int count = model_vocab_size - 51765 - (is_multilingual_vocab(model_vocab_size) ? 1 : 0);
  return std::clamp(count, 0, kLanguagesV3);
}

Vocabulary find_vocabulary(const text::BpeTokenizer& tokenizer, int model_vocab_size) {
  auto require = [&](std::string_view token) {
    auto id = tokenizer.find(token);
    if (!id) fail("Whisper tokenizer: special token ", token, " is missing");
    return *id;
  };
  Vocabulary vocab;
  vocab.eot = require("<|endoftext|>");
  vocab.sot = require("<|startoftranscript|>");
  vocab.translate = require("<|translate|>");
  vocab.transcribe = require("<|transcribe|>");
  vocab.sot_lm = require("<|startoflm|>");
  vocab.sot_prev = require("<|startofprev|>");
  if (auto id = tokenizer.find("<|nospeech|>")) {
    vocab.no_speech = *id;
  } else {
    vocab.no_speech = require("<|nocaptions|>");  // Hugging Face's name before large-v3
  }
  vocab.no_timestamps = require("<|notimestamps|>");
  // Older Hugging Face tokenizer files lack the timestamp tokens; their ids still follow
  // <|notimestamps|>.
  vocab.timestamp_begin = tokenizer.find("<|0.00|>").value_or(vocab.no_timestamps + 1);
  if (vocab.timestamp_begin != vocab.no_timestamps + 1) {
    fail("Whisper tokenizer: <|0.00|> is id ", vocab.timestamp_begin, ", expected ",
         vocab.no_timestamps + 1, " (right after <|notimestamps|>)");
  }

  vocab.multilingual = is_multilingual_vocab(model_vocab_size);
  const int n_languages = language_count_for_vocab(model_vocab_size);
  for (int i = 0; i < n_languages; ++i) {
    const std::string code(kLanguages[i].code);
    const int32_t id = require("<|" + code + "|>");
    if (i == 0) vocab.first_language = id;
    // Decoders address languages as first_language + index, as openai does.
    if (id != vocab.first_language + i) {
      fail("Whisper tokenizer: <|", code, "|> is id ", id, ", expected ", vocab.first_language + i);
    }
    vocab.languages.push_back(code);
  }
  return vocab;
}

Vocabulary standard_vocabulary(int model_vocab_size) {
  const int n_languages = language_count_for_vocab(model_vocab_size);
  const int n_specials = static_cast<int>(special_tokens(std::max(n_languages, 1)).size());
  if (n_languages < 1 || model_vocab_size <= n_specials) {
    fail("a Whisper vocabulary of ", model_vocab_size, " tokens has no standard layout");
  }
  Vocabulary vocab;
  vocab.eot = model_vocab_size - n_specials;
  vocab.sot = vocab.eot + 1;
  vocab.first_language = vocab.sot + 1;
  for (int i = 0; i < n_languages; ++i) vocab.languages.emplace_back(kLanguages[i].code);
  vocab.translate = vocab.first_language + n_languages;
  vocab.transcribe = vocab.translate + 1;
  vocab.sot_lm = vocab.translate + 2;
  vocab.sot_prev = vocab.translate + 3;
  vocab.no_speech = vocab.translate + 4;
  vocab.no_timestamps = vocab.translate + 5;
  vocab.timestamp_begin = vocab.translate + 6;
  vocab.multilingual = is_multilingual_vocab(model_vocab_size);
  return vocab;
}

}  // namespace hark::whisper
