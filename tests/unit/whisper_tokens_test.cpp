#include "models/whisper/tokens.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>

#include "base/error.h"
#include "text/bpe.h"

namespace {

namespace whisper = hark::whisper;
using hark::text::BpeTokenizer;

const std::string kWhisperDir = std::string(HARK_TEST_DATA) + "/tokenizers/whisper";

TEST(WhisperTokens, LanguageTableFollowsOpenai) {
  const auto languages = whisper::languages();
  ASSERT_EQ(languages.size(), 100u);
  EXPECT_EQ(languages[0].code, "en");
  EXPECT_EQ(languages[1].code, "zh");
  EXPECT_EQ(languages[29].code, "no");
  EXPECT_EQ(languages[98].code, "su");  // the last of the first 99
  EXPECT_EQ(languages[99].code, "yue");
  EXPECT_EQ(languages[93].code, "haw");
  EXPECT_EQ(whisper::language_name("ht"), "haitian creole");
  EXPECT_THROW(whisper::language_name("xx"), hark::Error);
  EXPECT_EQ(whisper::language_code("de"), "de");
  EXPECT_EQ(whisper::language_code("German"), "de");
  EXPECT_EQ(whisper::language_code("castilian"), "es");
  EXPECT_EQ(whisper::language_code("Mandarin"), "zh");
  EXPECT_EQ(whisper::language_code("klingon"), std::nullopt);
}

TEST(WhisperTokens, TimestampTokens) {
  EXPECT_EQ(whisper::timestamp_token(0), "<|0.00|>");
  EXPECT_EQ(whisper::timestamp_token(3), "<|0.06|>");
  EXPECT_EQ(whisper::timestamp_token(62), "<|1.24|>");
  EXPECT_EQ(whisper::timestamp_token(550), "<|11.00|>");
  EXPECT_EQ(whisper::timestamp_token(1500), "<|30.00|>");
  EXPECT_THROW(whisper::timestamp_token(1501), hark::Error);
}

TEST(WhisperTokens, SpecialTokenList) {
  const auto specials = whisper::special_tokens(99);
  ASSERT_EQ(specials.size(), 2u + 99u + 6u + 1501u);
  EXPECT_EQ(specials[0], "<|endoftext|>");
  EXPECT_EQ(specials[1], "<|startoftranscript|>");
  EXPECT_EQ(specials[2], "<|en|>");
  EXPECT_EQ(specials[100], "<|su|>");
  EXPECT_EQ(specials[101], "<|translate|>");
  EXPECT_EQ(specials[105], "<|nospeech|>");
  EXPECT_EQ(specials[106], "<|notimestamps|>");
  EXPECT_EQ(specials[107], "<|0.00|>");
  EXPECT_EQ(specials.back(), "<|30.00|>");
  EXPECT_EQ(whisper::special_tokens(100)[101], "<|yue|>");
  EXPECT_THROW(whisper::special_tokens(0), hark::Error);
  EXPECT_THROW(whisper::special_tokens(101), hark::Error);
}

TEST(WhisperTokens, VocabularySizesAndLanguageCounts) {
  EXPECT_FALSE(whisper::is_multilingual_vocab(51864));
  EXPECT_TRUE(whisper::is_multilingual_vocab(51865));
  EXPECT_EQ(whisper::language_count_for_vocab(51864), 99);
  EXPECT_EQ(whisper::language_count_for_vocab(51865), 99);
  EXPECT_EQ(whisper::language_count_for_vocab(51866), 100);
}

TEST(WhisperTokens, EnglishOnlyIds) {
  const BpeTokenizer tokenizer = whisper::load_tiktoken(kWhisperDir + "/gpt2.tiktoken", 99);
  EXPECT_EQ(tokenizer.vocab_size(), 51864);
  const whisper::Vocabulary vocab = whisper::find_vocabulary(tokenizer, 51864);
  EXPECT_FALSE(vocab.multilingual);
  EXPECT_EQ(vocab.eot, 50256);
  EXPECT_EQ(vocab.sot, 50257);
  EXPECT_EQ(vocab.first_language, 50258);
  EXPECT_EQ(vocab.translate, 50357);
  EXPECT_EQ(vocab.transcribe, 50358);
  EXPECT_EQ(vocab.sot_lm, 50359);
  EXPECT_EQ(vocab.sot_prev, 50360);
  EXPECT_EQ(vocab.no_speech, 50361);
  EXPECT_EQ(vocab.no_timestamps, 50362);
  EXPECT_EQ(vocab.timestamp_begin, 50363);
  EXPECT_EQ(vocab.languages.size(), 99u);
}

TEST(WhisperTokens, MultilingualIds) {
  const BpeTokenizer tokenizer = whisper::load_tiktoken(kWhisperDir + "/multilingual.tiktoken", 99);
  EXPECT_EQ(tokenizer.vocab_size(), 51865);
  const whisper::Vocabulary vocab = whisper::find_vocabulary(tokenizer, 51865);
  EXPECT_TRUE(vocab.multilingual);
  EXPECT_EQ(vocab.eot, 50257);
  EXPECT_EQ(vocab.sot, 50258);
  EXPECT_EQ(vocab.first_language, 50259);
  EXPECT_EQ(vocab.translate, 50358);
  EXPECT_EQ(vocab.transcribe, 50359);
  EXPECT_EQ(vocab.sot_lm, 50360);
  EXPECT_EQ(vocab.sot_prev, 50361);
  EXPECT_EQ(vocab.no_speech, 50362);
  EXPECT_EQ(vocab.no_timestamps, 50363);
  EXPECT_EQ(vocab.timestamp_begin, 50364);
  ASSERT_EQ(vocab.languages.size(), 99u);
  EXPECT_EQ(vocab.languages[0], "en");
  EXPECT_EQ(vocab.languages[98], "su");
  EXPECT_EQ(tokenizer.id("<|de|>"), vocab.first_language + 2);
}

TEST(WhisperTokens, LargeV3Ids) {
  const BpeTokenizer tokenizer =
      whisper::load_tiktoken(kWhisperDir + "/multilingual.tiktoken", whisper::kLanguagesV3);
  EXPECT_EQ(tokenizer.vocab_size(), 51866);
  const whisper::Vocabulary vocab = whisper::find_vocabulary(tokenizer, 51866);
  EXPECT_EQ(vocab.eot, 50257);
  EXPECT_EQ(vocab.sot, 50258);
  EXPECT_EQ(vocab.translate, 50359);
  EXPECT_EQ(vocab.transcribe, 50360);
  EXPECT_EQ(vocab.no_speech, 50363);
  EXPECT_EQ(vocab.no_timestamps, 50364);
  EXPECT_EQ(vocab.timestamp_begin, 50365);
  ASSERT_EQ(vocab.languages.size(), 100u);
  EXPECT_EQ(vocab.languages.back(), "yue");
  EXPECT_EQ(tokenizer.id("<|yue|>"), 50358);
  EXPECT_EQ(tokenizer.decode({vocab.timestamp_begin + 1500}), "<|30.00|>");
}

TEST(WhisperTokens, MissingTokensAreReported) {
  // The 99-language vocabulary has no <|yue|>, which a 51866-token model needs.
  const BpeTokenizer tokenizer = whisper::load_tiktoken(kWhisperDir + "/multilingual.tiktoken", 99);
  try {
    whisper::find_vocabulary(tokenizer, 51866);
    ADD_FAILURE() << "no error";
  } catch (const hark::Error& e) {
    EXPECT_NE(std::string(e.what()).find("<|yue|>"), std::string::npos) << e.what();
  }
  const BpeTokenizer bare =
      BpeTokenizer::from_tiktoken(kWhisperDir + "/gpt2.tiktoken", {"<|endoftext|>"});
  EXPECT_THROW(whisper::find_vocabulary(bare, 51864), hark::Error);
}

// The tokenizer files that tools/oracle saves with the reference models (tokenizer.json for
// large-v3, the slow vocab.json + merges.txt + added_tokens.json for tiny.en), when present: their
// ids must be the ones openai's tables give.
TEST(WhisperTokens, HuggingFaceTokenizerFilesAgree) {
  struct Model {
    const char* dir;
    const char* ranks;
    int vocab_size;
  };
  int checked = 0;
  for (const Model& model : {Model{"tiny-random-tiny.en", "gpt2.tiktoken", 51864},
                             Model{"tiny-random-large-v3", "multilingual.tiktoken", 51866}}) {
    const std::string dir = std::string(HARK_TEST_DATA) + "/whisper/" + model.dir;
    std::optional<BpeTokenizer> hf;
    if (std::filesystem::exists(dir + "/tokenizer.json")) {
      hf = BpeTokenizer::from_tokenizer_json(dir + "/tokenizer.json");
    } else if (std::filesystem::exists(dir + "/vocab.json")) {
      hf = BpeTokenizer::from_vocab_merges(dir + "/vocab.json", dir + "/merges.txt",
                                           dir + "/added_tokens.json");
    } else {
      continue;
    }
    SCOPED_TRACE(dir);
    const whisper::Vocabulary from_hf = whisper::find_vocabulary(*hf, model.vocab_size);
    const BpeTokenizer openai = whisper::load_tiktoken(
        kWhisperDir + "/" + model.ranks, whisper::language_count_for_vocab(model.vocab_size));
    const whisper::Vocabulary expected = whisper::find_vocabulary(openai, model.vocab_size);
    EXPECT_EQ(from_hf.eot, expected.eot);
    EXPECT_EQ(from_hf.sot, expected.sot);
    EXPECT_EQ(from_hf.translate, expected.translate);
    EXPECT_EQ(from_hf.transcribe, expected.transcribe);
    EXPECT_EQ(from_hf.sot_lm, expected.sot_lm);
    EXPECT_EQ(from_hf.sot_prev, expected.sot_prev);
    EXPECT_EQ(from_hf.no_speech, expected.no_speech);
    EXPECT_EQ(from_hf.no_timestamps, expected.no_timestamps);
    EXPECT_EQ(from_hf.timestamp_begin, expected.timestamp_begin);
    EXPECT_EQ(from_hf.first_language, expected.first_language);
    EXPECT_EQ(from_hf.languages, expected.languages);
    EXPECT_EQ(from_hf.multilingual, expected.multilingual);
    for (const char* text : {" Hello world", "Ask not what your country can do for you.",
                             "Привет, мир! 你好 😀 it's 3.14", "  two  spaces\n\nand newlines "}) {
      EXPECT_EQ(hf->encode(text), openai.encode(text)) << text;
    }
    EXPECT_EQ(hf->encode("<|startoftranscript|><|en|>", true),
              (std::vector<int32_t>{expected.sot, expected.first_language}));
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no tokenizer files under tests/data/whisper/ yet";
}

}  // namespace
