#include "text/bpe.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "format/gguf.h"
#include "models/whisper/tokens.h"
#include "text/pre_tokenizer.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace {

using hark::text::BpeTokenizer;

const std::string kWhisperDir = std::string(HARK_TEST_DATA) + "/tokenizers/whisper";

// Loading is what is tested elsewhere; here each vocabulary is loaded once for all tests.
const BpeTokenizer& gpt2() {
  static const BpeTokenizer tokenizer =
      hark::whisper::load_tiktoken(kWhisperDir + "/gpt2.tiktoken", 99);
  return tokenizer;
}
const BpeTokenizer& multilingual() {
  static const BpeTokenizer tokenizer =
      hark::whisper::load_tiktoken(kWhisperDir + "/multilingual.tiktoken", 99);
  return tokenizer;
}

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("hark_bpe_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
}

struct Case {
  std::string vocab, text;
  std::vector<int32_t> ids;
  bool allow_special = false;
};

std::vector<Case> read_cases(const std::string& path) {
  std::ifstream in(path);
  const auto json = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& entry : json) {
    cases.push_back({entry.at("vocab").get<std::string>(), entry.at("text").get<std::string>(),
                     entry.at("ids").get<std::vector<int32_t>>(),
                     entry.value("allow_special", false)});
  }
  return cases;
}

// Checks every case against the tokenizers; returns how many were checked.
size_t check_cases(const std::vector<Case>& cases, const BpeTokenizer& gpt2_tokenizer,
                   const BpeTokenizer& multilingual_tokenizer) {
  for (const Case& c : cases) {
    const BpeTokenizer& tokenizer = c.vocab == "gpt2" ? gpt2_tokenizer : multilingual_tokenizer;
    EXPECT_TRUE(c.vocab == "gpt2" || c.vocab == "multilingual") << c.vocab;
    EXPECT_EQ(tokenizer.encode(c.text, c.allow_special), c.ids) << c.vocab << ": " << c.text;
    EXPECT_EQ(tokenizer.decode(c.ids), c.text) << c.vocab << ": " << c.text;
  }
  return cases.size();
}

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string_view> pieces;
  hark::text::gpt2_pre_tokenizer()->split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

// Text mixing the pieces that stress the pre-tokenizer and BPE: words, numbers, runs of spaces,
// punctuation, apostrophes, non-Latin scripts and emoji, in random order.
std::string random_text(size_t pieces, uint32_t seed) {
  static const std::vector<std::string> parts = {
      "the",   " The",    "quick",  " brown", "fox's",  " don't", "'ll",  "'S",   "  ",
      "   ",   "\n",      "\n\n",   "\t",     " ",      "12",     "345",  "3.14", ",",
      ".",     "!?",      "...",    "--",     "(",      ")",      "\"",   "'",    "é",
      "naïve", "Ünïcödé", "中文",   "日本語", "한국어", "Привет", "мир",  "😀",    "👍🏽",
      "🇫🇷",    "\u00a0",  "\u3000", "x",      "zz",     "aaaa",   "====", "ー",   "\u0301",
      "٣",     "½",       "$",      "@",      "#",      "<|",     "|>"};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, parts.size() - 1);
  std::string text;
  for (size_t i = 0; i < pieces; ++i) text += parts[pick(rng)];
  return text;
}

// ---------------------------------------------------------------------------------------------
// Unicode classes and UTF-8

TEST(Unicode, ClassesFollowTheGeneralCategories) {
  for (char32_t c : {U'a', U'Z', U'é', U'ß', U'中', U'ー', U'한', U'Я', U'ا', U'\U0001D518'}) {
    EXPECT_TRUE(hark::text::is_letter(c)) << std::hex << static_cast<uint32_t>(c);
  }
  for (char32_t c : {U'1', U'½', U'٣', U'Ⅻ', U'２'}) {
    EXPECT_TRUE(hark::text::is_number(c)) << std::hex << static_cast<uint32_t>(c);
    EXPECT_FALSE(hark::text::is_letter(c));
  }
  for (char32_t c : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', U'\u0085', U'\u00a0', U'\u3000',
                     U'\u2028', U'\u2009'}) {
    EXPECT_TRUE(hark::text::is_white_space(c)) << std::hex << static_cast<uint32_t>(c);
  }
  for (char32_t c : {U'\u200b', U'\u001c', U'_', U'\u0301', U'\U0001F600', U'!'}) {
    EXPECT_FALSE(hark::text::is_white_space(c));
    EXPECT_FALSE(hark::text::is_letter(c));
    EXPECT_FALSE(hark::text::is_number(c));
  }
  EXPECT_FALSE(hark::text::unicode_version().empty());
}

TEST(Utf8, ReplacesEachMaximalIllFormedSubsequence) {
  const std::string fffd = "\xEF\xBF\xBD";
  using hark::text::repair_utf8;
  EXPECT_EQ(repair_utf8("plain ascii"), "plain ascii");
  EXPECT_EQ(repair_utf8("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(repair_utf8("\xE4\xBD"), fffd);                               // truncated 3-byte
  EXPECT_EQ(repair_utf8("\xF0\x9F\x98"), fffd);                           // truncated 4-byte
  EXPECT_EQ(repair_utf8("\xC0\xAF"), fffd + fffd);                        // overlong lead
  EXPECT_EQ(repair_utf8("\xED\xA0\x80"), fffd + fffd + fffd);             // surrogate
  EXPECT_EQ(repair_utf8("a\x80z"), "a" + fffd + "z");                     // stray continuation
  EXPECT_EQ(repair_utf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // above U+10FFFF
  EXPECT_TRUE(hark::text::is_valid_utf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(hark::text::is_valid_utf8("\xF0\x9F\x98"));
}

// ---------------------------------------------------------------------------------------------
// GPT-2 pre-tokenizer

TEST(PreTokenizer, SplitsLikeTheGpt2Regex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(split("I'm here, aren't you?"),
            (V{"I", "'m", " here", ",", " aren", "'t", " you", "?"}));
  EXPECT_EQ(split("'sup 'S"), (V{"'s", "up", " '", "S"}));
  EXPECT_EQ(split("abc123 456"), (V{"abc", "123", " 456"}));
  EXPECT_EQ(split("end  "), (V{"end", "  "}));
  EXPECT_EQ(split("\n\nx"), (V{"\n", "\n", "x"}));
  EXPECT_EQ(split("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(split("!!'s ..."), (V{"!!'", "s", " ..."}));
  EXPECT_EQ(split(" \xE4\xB8\xAD\xE6\x96\x87"), (V{" \xE4\xB8\xAD\xE6\x96\x87"}));
  EXPECT_EQ(split(""), V{});
  // Ill-formed bytes are kept, as punctuation.
  EXPECT_EQ(split("a\xFF\xFE b"), (V{"a", "\xFF\xFE", " b"}));
}

TEST(PreTokenizer, IsChosenByNameOrRegex) {
  EXPECT_EQ(hark::text::pre_tokenizer_by_name("gpt-2")->name(), "gpt-2");
  EXPECT_THROW(hark::text::pre_tokenizer_by_name("no-such-split"), hark::Error);
  const auto gpt2 = hark::text::gpt2_pre_tokenizer();
  EXPECT_EQ(hark::text::pre_tokenizer_for_regex(gpt2->pattern()), gpt2);
  EXPECT_EQ(hark::text::pre_tokenizer_for_regex("\\w+"), nullptr);
}

// ---------------------------------------------------------------------------------------------
// BPE on the Whisper vocabularies

TEST(Bpe, KnownGpt2Ids) {
  EXPECT_EQ(gpt2().encode(" Hello world"), (std::vector<int32_t>{18435, 995}));
  EXPECT_EQ(gpt2().encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(gpt2().encode(""), std::vector<int32_t>{});
  EXPECT_EQ(gpt2().decode({18435, 995}), " Hello world");
}

TEST(Bpe, MatchesTiktokenOnTrickyText) {
  // Expected ids made with the real tiktoken (see tests/data/SOURCES.md).
  const auto cases = read_cases(kWhisperDir + "/tiktoken_cases.json");
  EXPECT_GT(check_cases(cases, gpt2(), multilingual()), 60u);
}

TEST(Bpe, MatchesHuggingFaceTokenizerCases) {
  const std::string path = std::string(HARK_TEST_DATA) + "/whisper/tokenizer_cases.json";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is not there yet (made by tools/oracle with the HF tokenizer)";
  }
  EXPECT_GT(check_cases(read_cases(path), gpt2(), multilingual()), 0u);
}

TEST(Bpe, RoundTripsArbitraryText) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const std::string text = random_text(200, seed);
    EXPECT_EQ(gpt2().decode(gpt2().encode(text)), text) << seed;
    EXPECT_EQ(multilingual().decode(multilingual().encode(text)), text) << seed;
  }
  // Long runs with no split point stay exact (and fast: merging is O(n log n)).
  const std::string run(20000, 'a');
  EXPECT_EQ(gpt2().decode(gpt2().encode(run)), run);
  // Bytes that are not UTF-8 are still encoded byte-exactly; decoding replaces them.
  const std::string bad = "ok \xFF\xC3 end";
  EXPECT_EQ(gpt2().decode(gpt2().encode(bad)), "ok \xEF\xBF\xBD\xEF\xBF\xBD end");
}

TEST(Bpe, SpecialTokensAreTextUnlessAllowed) {
  const BpeTokenizer& tokenizer = multilingual();
  const int32_t eot = tokenizer.id("<|endoftext|>");
  EXPECT_EQ(eot, 50257);
  EXPECT_TRUE(tokenizer.is_special(eot));
  EXPECT_FALSE(tokenizer.is_special(tokenizer.id("!")));
  const std::vector<int32_t> as_text = tokenizer.encode("<|endoftext|>");
  EXPECT_GT(as_text.size(), 1u);
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), eot), 0);
  EXPECT_EQ(tokenizer.encode("<|endoftext|>", true), std::vector<int32_t>{eot});
  EXPECT_EQ(tokenizer.encode("a<|endoftext|>", true).back(), eot);
  EXPECT_EQ(tokenizer.decode({tokenizer.id("<|startoftranscript|>"), 2425, eot}),
            "<|startoftranscript|> Hello<|endoftext|>");
  EXPECT_EQ(tokenizer.decode({tokenizer.id("<|startoftranscript|>"), 2425, eot}, true), " Hello");
}

TEST(Bpe, DecodeReplacesSplitCharactersWithReplacementCharacter) {
  const BpeTokenizer& tokenizer = multilingual();
  const int32_t lead = tokenizer.id("\xE4");  // first byte of a 3-byte character, on its own
  EXPECT_EQ(tokenizer.token_bytes(lead), "\xE4");
  EXPECT_EQ(tokenizer.decode({lead}), "\xEF\xBF\xBD");
  const std::vector<int32_t> ids = tokenizer.encode("\xE4\xBD\xA0");  // 你
  EXPECT_EQ(tokenizer.decode(ids), "\xE4\xBD\xA0");
  EXPECT_THROW(tokenizer.decode({tokenizer.vocab_size()}), hark::Error);
  EXPECT_THROW(tokenizer.decode({-1}), hark::Error);
  EXPECT_THROW(tokenizer.token_bytes(-5), hark::Error);
}

TEST(Bpe, LookupByToken) {
  EXPECT_EQ(gpt2().find(" Hello"), 18435);
  EXPECT_EQ(gpt2().find("no such token at all"), std::nullopt);
  EXPECT_THROW(gpt2().id("no such token at all"), hark::Error);
  // multilingual.tiktoken's last rank is an empty placeholder token: it keeps its id.
  EXPECT_EQ(multilingual().token_bytes(50256), "");
  EXPECT_EQ(multilingual().find(""), std::nullopt);
}

TEST(Bpe, LoadsTiktokenRanksQuickly) {
  const auto start = std::chrono::steady_clock::now();
  const BpeTokenizer tokenizer =
      BpeTokenizer::from_tiktoken(kWhisperDir + "/gpt2.tiktoken", {"<|endoftext|>"});
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(tokenizer.vocab_size(), 50257);
  // Well under 100 ms in a release build; the bound leaves room for sanitizer builds.
  EXPECT_LT(ms, 1000.0);
  RecordProperty("load_ms", std::to_string(ms));
}

TEST(Bpe, RejectsBrokenRankFiles) {
  TempDir dir;
  const auto expect_error = [&](const std::string& contents, const std::string& message_part) {
    const std::string path = dir.file("bad.tiktoken");
    write_file(path, contents);
    try {
      BpeTokenizer::from_tiktoken(path, {});
      ADD_FAILURE() << "no error for: " << contents;
    } catch (const hark::Error& e) {
      EXPECT_NE(std::string(e.what()).find(message_part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expect_error("IQ==\n", ":1: expected");
  expect_error("IQ== x\n", "invalid rank");
  expect_error("I*== 0\n", "invalid base64");
  expect_error("IQ== 0\nIQ== 0\n", "appears twice");
  expect_error("IQ== 0\nIg== 5\n", "ranks are not");
  expect_error("IQ== 0\n", "single byte");  // not every byte has a token
  expect_error("", "empty");
  EXPECT_THROW(BpeTokenizer::from_tiktoken(dir.file("missing.tiktoken"), {}), hark::Error);
}

// ---------------------------------------------------------------------------------------------
// GGUF and Hugging Face files

// Writes the tokenizer's GGUF keys into a file and reads them back.
BpeTokenizer through_gguf(const BpeTokenizer& tokenizer, const TempDir& dir,
                          std::shared_ptr<const hark::gguf::File>* file_out = nullptr) {
  hark::gguf::Writer writer;
  tokenizer.write_gguf(writer);
  const std::string path = dir.file("tokenizer.gguf");
  writer.write(path);
  auto file = hark::gguf::File::open(path);
  if (file_out) *file_out = file;
  return BpeTokenizer::from_gguf(*file);
}

void expect_same_encodings(const BpeTokenizer& expected, const BpeTokenizer& actual) {
  ASSERT_EQ(expected.vocab_size(), actual.vocab_size());
  for (int32_t id = 0; id < expected.vocab_size(); ++id) {
    ASSERT_EQ(expected.token_bytes(id), actual.token_bytes(id)) << id;
    ASSERT_EQ(expected.is_special(id), actual.is_special(id)) << id;
  }
  const auto cases = read_cases(kWhisperDir + "/tiktoken_cases.json");
  for (const Case& c : cases) {
    EXPECT_EQ(expected.encode(c.text, c.allow_special), actual.encode(c.text, c.allow_special))
        << c.text;
  }
  // Rank merging (tiktoken) and listed merges (GGUF, HF) must agree on everything.
  const std::string text = random_text(20000, 7);
  EXPECT_EQ(expected.encode(text), actual.encode(text));
}

TEST(BpeGguf, RoundTripGivesIdenticalEncodings) {
  TempDir dir;
  for (const BpeTokenizer* tokenizer : {&gpt2(), &multilingual()}) {
    std::shared_ptr<const hark::gguf::File> file;
    const BpeTokenizer loaded = through_gguf(*tokenizer, dir, &file);
    EXPECT_EQ(file->get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(file->get_string("tokenizer.ggml.pre"), "gpt-2");
    const auto tokens = file->get_strings("tokenizer.ggml.tokens");
    EXPECT_EQ(tokens[tokenizer->id(" Hello")],
              "\xC4\xA0Hello");  // "ĠHello": the space is spelled U+0120
    EXPECT_EQ(file->get_ints("tokenizer.ggml.token_type")[tokenizer->id("<|endoftext|>")], 3);
    // One merge per multi-byte token, as GPT-2's merges.txt has.
    EXPECT_GT(file->get_strings("tokenizer.ggml.merges").size(), 49000u);
    expect_same_encodings(*tokenizer, loaded);
    // And once more: a merges-based tokenizer writes its own merges back.
    expect_same_encodings(*tokenizer, through_gguf(loaded, dir));
  }
}

TEST(BpeGguf, RejectsInconsistentKeys) {
  TempDir dir;
  const auto open_with = [&](auto&& fill) {
    hark::gguf::Writer writer;
    fill(writer);
    const std::string path = dir.file("bad.gguf");
    writer.write(path);
    return hark::gguf::File::open(path);
  };
  // The 256 single-byte tokens, in their byte-level spelling (GPT-2's ranks 0..255).
  std::shared_ptr<const hark::gguf::File> gpt2_file;
  through_gguf(gpt2(), dir, &gpt2_file);
  auto all_tokens = gpt2_file->get_strings("tokenizer.ggml.tokens");
  const std::vector<std::string> bytes(all_tokens.begin(), all_tokens.begin() + 256);

  auto missing_merges =
      open_with([&](hark::gguf::Writer& w) { w.set_strings("tokenizer.ggml.tokens", bytes); });
  EXPECT_THROW(BpeTokenizer::from_gguf(*missing_merges), hark::Error);

  auto unknown_merge = open_with([&](hark::gguf::Writer& w) {
    w.set_strings("tokenizer.ggml.tokens", bytes);
    w.set_strings("tokenizer.ggml.merges", {"a b"});  // "ab" is not a token
  });
  EXPECT_THROW(BpeTokenizer::from_gguf(*unknown_merge), hark::Error);

  auto short_types = open_with([&](hark::gguf::Writer& w) {
    w.set_strings("tokenizer.ggml.tokens", bytes);
    w.set_i32s("tokenizer.ggml.token_type", {1, 1});
    w.set_strings("tokenizer.ggml.merges", {});
  });
  EXPECT_THROW(BpeTokenizer::from_gguf(*short_types), hark::Error);

  auto wrong_model = open_with([&](hark::gguf::Writer& w) {
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", bytes);
  });
  EXPECT_THROW(BpeTokenizer::from_gguf(*wrong_model), hark::Error);

  auto valid = open_with([&](hark::gguf::Writer& w) {
    auto tokens = bytes;
    tokens.push_back("ab");
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_strings("tokenizer.ggml.merges", {"a b"});
  });
  const BpeTokenizer tokenizer = BpeTokenizer::from_gguf(*valid);
  EXPECT_EQ(tokenizer.encode("abc ab"),
            (std::vector<int32_t>{256, tokenizer.id("c"), tokenizer.id(" "), 256}));
}

// The Hugging Face files of the GPT-2 vocabulary, written from the GGUF keys (which hold the same
// byte-level strings and merges).
struct HfFiles {
  std::string tokenizer_json, vocab_json, merges_txt, added_tokens_json;
};

HfFiles write_hf_files(const BpeTokenizer& tokenizer, const TempDir& dir) {
  std::shared_ptr<const hark::gguf::File> file;
  through_gguf(tokenizer, dir, &file);
  const auto tokens = file->get_strings("tokenizer.ggml.tokens");
  const auto types = file->get_ints("tokenizer.ggml.token_type");
  const auto merges = file->get_strings("tokenizer.ggml.merges");
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  nlohmann::json added_map = nlohmann::json::object();
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] == 3) {
      added.push_back({{"id", id},
                       {"content", tokens[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
      added_map[tokens[id]] = id;
    } else {
      vocab[tokens[id]] = id;
    }
  }
  nlohmann::json merge_pairs = nlohmann::json::array();
  std::string merges_text = "#version: 0.2\n";
  for (const std::string& merge : merges) {
    const size_t space = merge.find(' ');
    merge_pairs.push_back({merge.substr(0, space), merge.substr(space + 1)});
    merges_text += merge + "\n";
  }
  nlohmann::json root = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_pairs}}},
  };
  HfFiles files{dir.file("tokenizer.json"), dir.file("vocab.json"), dir.file("merges.txt"),
                dir.file("added_tokens.json")};
  write_file(files.tokenizer_json, root.dump());
  write_file(files.vocab_json, vocab.dump());
  write_file(files.merges_txt, merges_text);
  write_file(files.added_tokens_json, added_map.dump());
  return files;
}

TEST(BpeHuggingFace, TokenizerJsonAndSlowFilesGiveIdenticalEncodings) {
  TempDir dir;
  const HfFiles files = write_hf_files(gpt2(), dir);
  expect_same_encodings(gpt2(), BpeTokenizer::from_tokenizer_json(files.tokenizer_json));
  expect_same_encodings(gpt2(), BpeTokenizer::from_vocab_merges(files.vocab_json, files.merges_txt,
                                                                files.added_tokens_json));
}

TEST(BpeHuggingFace, RejectsWhatItCannotHonour) {
  TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  const auto expect_error = [&](const std::string& json, const std::string& message_part) {
    write_file(path, json);
    try {
      BpeTokenizer::from_tokenizer_json(path);
      ADD_FAILURE() << "no error for: " << json;
    } catch (const hark::Error& e) {
      EXPECT_NE(std::string(e.what()).find(message_part), std::string::npos) << e.what();
    }
  };
  expect_error("{not json", "not valid JSON");
  expect_error(R"({"model": {"type": "WordPiece", "vocab": {}}})", "not \"BPE\"");
  expect_error(R"({"normalizer": {"type": "NFC"}, "model": {"type": "BPE", "vocab": {}}})",
               "normalizer");
  expect_error(
      R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"}}, "model": {"type": "BPE", "vocab": {}}})",
      "regex");
  expect_error(R"({"pre_tokenizer": null, "model": {"type": "BPE", "vocab": {}}})", "byte-level");
  expect_error(
      R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 1}}})",
      "missing");
}

}  // namespace
