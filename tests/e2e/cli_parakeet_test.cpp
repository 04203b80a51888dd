// End-to-end tests of `hark run` with a Parakeet model: the transformers-made tiny TDT model of
// tests/data/parakeet, converted by `hark convert`, on real recordings. The model's own parity is
// tests/parity/parakeet_parity_test.cpp; here: the command line, word timings in the outputs, and
// long audio cut into pieces and joined back.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "audio/audio.h"
#include "support/process.h"
#include "support/tiny_whisper.h"
#include "support/wav.h"

namespace hark {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ProcessResult;
using testing::TempDir;

ProcessResult hark(std::vector<std::string> args) {
  args.insert(args.begin(), HARK_CLI_PATH);
  return testing::run_process(args, "");
}

std::string describe(const ProcessResult& result) {
  return "exit " + std::to_string(result.exit_code) + ", signal " + std::to_string(result.signal) +
         "\n--- stdout:\n" + result.out.substr(0, 2000) + "\n--- stderr:\n" + result.err;
}

fs::path data(const std::string& relative) {
  return fs::path(HARK_TEST_DATA) / relative;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream stream(text);
  std::vector<std::string> words;
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

class CliParakeet : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    temp_ = std::make_unique<TempDir>();
    model_ = (*temp_ / "tdt.gguf").string();
    convert_ = hark({"convert", data("parakeet/tiny-random-tdt").string(), "-o", model_});
  }
  static void TearDownTestSuite() { temp_.reset(); }
  void SetUp() override { ASSERT_EQ(convert_.exit_code, 0) << describe(convert_); }

  static std::string path(const std::string& name) { return (*temp_ / name).string(); }

  static std::unique_ptr<TempDir> temp_;
  static std::string model_;
  static ProcessResult convert_;
};

std::unique_ptr<TempDir> CliParakeet::temp_;
std::string CliParakeet::model_;
ProcessResult CliParakeet::convert_;

// The words of the json output, in order, are transformers' text of the clip, and every word and
// token is timed inside its segment and the recording.
TEST_F(CliParakeet, JsonWordsAreTransformersTextWithTimes) {
  const ProcessResult result = hark({"run", model_, data("audio/jfk.wav").string(), "-o", "json"});
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  EXPECT_EQ(result.err, "");
  const json transcript = json::parse(result.out);
  std::ifstream reference_file(data("parakeet/tiny-random-tdt/reference.json"));
  const json reference = json::parse(reference_file);
  const std::string expected = reference.at("decode").at("jfk").at("text").at("transformers");

  std::vector<std::string> words;
  double previous_start = 0;
  const double duration = transcript.at("duration");
  EXPECT_NEAR(duration, 11.0, 1e-9);
  ASSERT_FALSE(transcript.at("segments").empty());
  for (const json& segment : transcript.at("segments")) {
    const double start = segment.at("start"), end = segment.at("end");
    EXPECT_LE(start, end);
    EXPECT_LE(end - start, 6.5 + 1e-9) << "cues are at most 6.5 s";
    ASSERT_EQ(segment.at("tokens").size(), segment.at("token_times").size());
    std::vector<std::string> segment_words;
    for (const json& word : segment.at("words")) {
      const double word_start = word.at("start"), word_end = word.at("end");
      EXPECT_LE(start - 1e-9, word_start);
      EXPECT_LE(word_start, word_end);
      EXPECT_LE(word_end, end + 1e-9);
      EXPECT_LE(previous_start, word_start);
      previous_start = word_start;
      segment_words.push_back(word.at("word"));
      words.push_back(word.at("word"));
    }
    EXPECT_EQ(split_words(segment.at("text")), segment_words);
    for (const json& token : segment.at("token_times")) {
      EXPECT_GE(double(token.at("start")), 0.0);
      EXPECT_LE(double(token.at("end")), duration + 1e-9);
    }
  }
  EXPECT_EQ(words, split_words(expected));
  EXPECT_EQ(split_words(transcript.at("text")), split_words(expected));
}

// Over two minutes of recordings and quiet noise, cut at --max-piece 30: several pieces, times on
// the recording's clock, and the same transcript whether the pieces run one at a time or as a
// batch (padding in a batch must not reach the valid frames). On the CPU, whose products sum in
// the same order at any batch: on the GPU, cuBLASLt picks its kernels by shape, and this random
// model's near ties flipped a few tokens between batch 8 and batch 1 (ParakeetCuda's
// F32BatchOfThreeDecodesAsEachAlone checks the GPU's padding against the reference instead).
TEST_F(CliParakeet, LongAudioIsCutIntoPiecesAndJoinedBack) {
  std::vector<float> joined;
  std::mt19937 generator(7);
  std::normal_distribution<float> hiss(0.0f, 0.002f);
  for (int round = 0; round < 4; ++round) {
    for (const char* clip : {"jfk", "beckett", "librivox-0870"}) {
      const std::vector<float> samples =
          audio::load(data(std::string("audio/") + clip + ".wav").string(), 16000);
      joined.insert(joined.end(), samples.begin(), samples.end());
      for (int i = 0; i < 16000 * 2; ++i) joined.push_back(hiss(generator));
    }
  }
  std::vector<int16_t> pcm(joined.size());
  for (size_t i = 0; i < joined.size(); ++i) {
    pcm[i] = static_cast<int16_t>(std::lround(std::clamp(joined[i], -1.0f, 1.0f) * 32767.0f));
  }
  const std::string audio_path = path("long.wav");
  {
    std::ofstream file(audio_path, std::ios::binary);
    const std::string bytes = testing::wav_bytes(pcm, 1, 16000);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const double duration = static_cast<double>(pcm.size()) / 16000;
  ASSERT_GT(duration, 120.0);

  const ProcessResult batched = hark({"run", model_, audio_path, "-o", "json", "--max-piece", "30",
                                      "--batch-size", "8", "-v", "--device", "cpu"});
  ASSERT_EQ(batched.exit_code, 0) << describe(batched);
  // At least the 5 that 30-s pieces need; cuts at pauses may make a few more, never fewer.
  const size_t said = batched.err.find(" pieces\n");
  ASSERT_NE(said, std::string::npos) << batched.err;
  const size_t number = batched.err.rfind(' ', said - 1) + 1;
  const int pieces = std::stoi(batched.err.substr(number, said - number));
  EXPECT_GE(pieces, 5);
  EXPECT_LE(pieces, 10);
  const ProcessResult alone = hark({"run", model_, audio_path, "-o", "json", "--max-piece", "30",
                                    "--batch-size", "1", "--device", "cpu"});
  ASSERT_EQ(alone.exit_code, 0) << describe(alone);
  EXPECT_EQ(alone.out, batched.out);

  const json transcript = json::parse(batched.out);
  EXPECT_NEAR(double(transcript.at("duration")), duration, 1e-3);  // printed in milliseconds
  double previous_end = 0, last_word = 0;
  for (const json& segment : transcript.at("segments")) {
    EXPECT_LE(previous_end - 1e-9, double(segment.at("start")));
    previous_end = segment.at("end");
    for (const json& word : segment.at("words")) last_word = word.at("end");
  }
  EXPECT_LE(previous_end, duration + 1e-9);
  EXPECT_GT(last_word, duration - 15) << "the last piece's words are on the recording's clock";
}

// Several files share the batches (their pieces together) and come back each as it would alone,
// in order; a file that cannot be read fails alone, and the run says so with exit code 1.
TEST_F(CliParakeet, SeveralFilesShareBatchesAndComeBackAsAlone) {
  const std::vector<std::string> clips = {data("audio/jfk.wav").string(),
                                          data("audio/beckett.wav").string(),
                                          data("audio/librivox-0870.wav").string()};
  std::vector<std::string> args = {"run", model_, "-o", "json", "--batch-size", "4"};
  args.insert(args.end(), clips.begin(), clips.end());
  const std::string missing = path("no-such-file.wav");
  args.insert(args.begin() + 4, missing);
  const ProcessResult together = hark(args);
  EXPECT_EQ(together.exit_code, 1) << describe(together);
  EXPECT_NE(together.err.find("no-such-file.wav"), std::string::npos) << together.err;
  // One JSON line per transcribed file, in order, each naming its file.
  std::istringstream lines(together.out);
  std::vector<json> transcripts;
  for (std::string line; std::getline(lines, line);) transcripts.push_back(json::parse(line));
  ASSERT_EQ(transcripts.size(), clips.size()) << together.out;
  for (size_t i = 0; i < clips.size(); ++i) {
    SCOPED_TRACE(clips[i]);
    EXPECT_EQ(transcripts[i].at("file"), clips[i]);
    const ProcessResult alone = hark({"run", model_, clips[i], "-o", "json"});
    ASSERT_EQ(alone.exit_code, 0) << describe(alone);
    json expected = json::parse(alone.out);
    expected["file"] = clips[i];
    EXPECT_EQ(transcripts[i], expected);
  }
}

TEST_F(CliParakeet, SrtCuesAreNumberedAndTimed) {
  const ProcessResult result = hark({"run", model_, data("audio/long.wav").string(), "-o", "srt"});
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  EXPECT_TRUE(result.out.starts_with("1\n00:00:")) << result.out;
  EXPECT_NE(result.out.find(" --> "), std::string::npos);
}

TEST_F(CliParakeet, WhisperOptionsAreUsageErrors) {
  for (std::vector<std::string> extra : std::vector<std::vector<std::string>>{
           {"--language", "en"}, {"--beam-size", "2"}, {"--prompt", "hi"}, {"--translate"}}) {
    std::vector<std::string> args = {"run", model_, data("audio/jfk.wav").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const ProcessResult result = hark(args);
    EXPECT_EQ(result.exit_code, 2) << describe(result);
    EXPECT_NE(result.err.find("is an option of Whisper models"), std::string::npos) << result.err;
  }
  const ProcessResult too_long =
      hark({"run", model_, data("audio/jfk.wav").string(), "--max-piece", "500"});
  EXPECT_EQ(too_long.exit_code, 2) << describe(too_long);
}

TEST_F(CliParakeet, SilenceAndTinyFilesGiveEmptyTranscripts) {
  const std::string short_path = path("short.wav");
  {
    std::ofstream file(short_path, std::ios::binary);
    const std::string bytes = testing::wav_bytes(std::vector<int16_t>(100, 0), 1, 16000);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const ProcessResult result = hark({"run", model_, short_path, "-o", "json"});
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  EXPECT_TRUE(json::parse(result.out).at("segments").empty()) << result.out;
}

}  // namespace
}  // namespace hark
