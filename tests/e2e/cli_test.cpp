// End-to-end tests of the `hark` executable: argument handling, convert -> run round trips in
// every output format, and bad inputs that must each end in one error line, never a crash.
#include <gtest/gtest.h>

#include "compute/cuda/cuda.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "support/process.h"
#include "support/scoped_env.h"
#include "support/tiny_whisper.h"
#include "support/wav.h"

namespace hark {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;
using testing::TempDir;

ProcessResult hark(std::vector<std::string> args, const std::string& input = "") {
  args.insert(args.begin(), HARK_CLI_PATH);
  return testing::run_process(args, input);
}

std::string describe(const ProcessResult& result) {
  return "exit " + std::to_string(result.exit_code) + ", signal " + std::to_string(result.signal) +
         "\n--- stdout:\n" + result.out.substr(0, 2000) + "\n--- stderr:\n" + result.err;
}

// A failure is reported on exactly one stderr line of the form "hark: error: ...", with the
// given exit code, and the process did not crash.
void expect_one_error_line(const ProcessResult& result, int exit_code, const std::string& needle) {
  EXPECT_EQ(result.signal, 0) << describe(result);
  EXPECT_FALSE(result.timed_out) << describe(result);
  EXPECT_EQ(result.exit_code, exit_code) << describe(result);
  const auto lines = result.err_lines();
  ASSERT_EQ(lines.size(), 1u) << describe(result);
  EXPECT_TRUE(lines[0].starts_with("hark: error: ")) << lines[0];
  EXPECT_NE(lines[0].find(needle), std::string::npos)
      << "expected '" << needle << "' in " << lines[0];
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  testing::write_text(path, bytes);
}

// ---------------------------------------------------------------------------------------------
// Arguments and help

TEST(Cli, HelpListsTheCommandsThatExist) {
  const ProcessResult result = hark({"--help"});
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  EXPECT_NE(result.out.find("Usage: hark COMMAND"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("  convert "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("  run "), std::string::npos) << result.out;
  EXPECT_EQ(result.out.find("  serve "), std::string::npos) << result.out;
  EXPECT_EQ(result.err, "");
  EXPECT_EQ(hark({"help"}).out, result.out);
  EXPECT_EQ(hark({"-h"}).out, result.out);
}

TEST(Cli, CommandHelpShowsEveryOption) {
  const ProcessResult result = hark({"help", "run"});
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  for (const char* option :
       {"Usage: hark run MODEL AUDIO...", "-o, --output-format FORMAT", "--output-dir DIR",
        "--language CODE", "--task TASK", "--translate", "--beam-size N", "--temperature T",
        "--no-fallback", "--timestamps MODE", "--max-tokens N", "--prompt TEXT", "--threads N",
        "--verbose", "-h, --help", "==> FILE <=="}) {
    EXPECT_NE(result.out.find(option), std::string::npos) << option << " missing from\n"
                                                          << result.out;
  }
  EXPECT_EQ(hark({"run", "--help"}).out, result.out);
  const ProcessResult convert = hark({"convert", "-h"});
  EXPECT_EQ(convert.exit_code, 0);
  EXPECT_NE(convert.out.find("--type TYPE"), std::string::npos) << convert.out;
}

TEST(Cli, VersionPrintsTheVersion) {
  const ProcessResult result = hark({"--version"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.out, "hark " HARK_VERSION "\n");
}

TEST(Cli, UsageErrorsExitWithTwo) {
  expect_one_error_line(hark({}), 2, "no command");
  expect_one_error_line(hark({"frobnicate"}), 2, "unknown command 'frobnicate'");
  expect_one_error_line(hark({"--frobnicate"}), 2, "unknown option '--frobnicate'");
  expect_one_error_line(hark({"help", "frobnicate"}), 2, "unknown command 'frobnicate'");
  expect_one_error_line(hark({"run"}), 2, "missing MODEL");
  expect_one_error_line(hark({"run", "model.gguf"}), 2, "missing AUDIO");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "--bogus"}), 2, "unknown option '--bogus'");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "-o"}), 2, "needs a value");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "-o", "docx"}), 2, "docx");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "--beam-size", "0"}), 2, "--beam-size");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "--beam-size", "2x"}), 2, "whole number");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "--temperature", "1.5"}), 2,
                        "--temperature");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "--timestamps", "word"}), 2, "word");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "--task", "summarize"}), 2, "summarize");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "--task=transcribe", "--translate"}), 2,
                        "--translate");
  expect_one_error_line(hark({"run", "m.gguf", "-", "-"}), 2, "stdin");
  expect_one_error_line(hark({"run", "m.gguf", "--no-fallback=yes", "a.wav"}), 2, "takes no value");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "--device", "tpu"}), 2, "'tpu'");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "--batch-size", "0"}), 2, "--batch-size");
  expect_one_error_line(hark({"run", "m.gguf", "a.wav", "--cross-kv", "int4"}), 2, "'int4'");
  expect_one_error_line(hark({"bench", "--cross-kv", "int4"}), 2, "'int4'");
  expect_one_error_line(hark({"bench", "--batches", "1,x"}), 2, "--batches");
  expect_one_error_line(hark({"convert"}), 2, "missing HF_DIR");
  expect_one_error_line(hark({"convert", "dir"}), 2, "-o FILE");
  expect_one_error_line(hark({"convert", "dir", "-o", "x.gguf", "--type", "q4_0"}), 2, "q4_0");
}

TEST(Cli, MissingModelIsAClearError) {
  TempDir temp;
  write_bytes(temp / "a.wav", testing::tone_wav(1));
  expect_one_error_line(hark({"run", (temp / "nope.gguf").string(), (temp / "a.wav").string()}), 1,
                        "not found");
  expect_one_error_line(hark({"run", "large-v3", (temp / "a.wav").string()}), 1, "'large-v3'");
  expect_one_error_line(hark({"run", temp.path().string(), (temp / "a.wav").string()}), 1,
                        "directory");
}

TEST(Cli, ConvertErrorsAreOneLine) {
  TempDir temp;
  expect_one_error_line(
      hark({"convert", (temp / "nope").string(), "-o", (temp / "x.gguf").string()}), 1,
      "not a directory");
  testing::write_tiny_whisper(temp / "tiny");
  fs::remove(temp / "tiny" / "tokenizer.json");
  expect_one_error_line(
      hark({"convert", (temp / "tiny").string(), "-o", (temp / "x.gguf").string()}), 1,
      "no tokenizer");
  EXPECT_FALSE(fs::exists(temp / "x.gguf"));
}

// ---------------------------------------------------------------------------------------------
// Round trips on a model converted by the CLI

class CliWithModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    temp_ = std::make_unique<TempDir>();
    testing::write_tiny_whisper(*temp_ / "tiny-whisper");
    model_ = (*temp_ / "tiny.gguf").string();
    convert_result_ =
        hark({"convert", (*temp_ / "tiny-whisper").string(), "-o", model_, "--type", "f16"});
    write_bytes(*temp_ / "tone.wav", testing::tone_wav(2.5));
    write_bytes(*temp_ / "short.wav", testing::tone_wav(0.5));
  }
  static void TearDownTestSuite() { temp_.reset(); }

  void SetUp() override { ASSERT_EQ(convert_result_.exit_code, 0) << describe(convert_result_); }

  // Fast, deterministic decoding: greedy, no fallback, few tokens per window.
  static std::vector<std::string> run_args(std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", model_};
    args.insert(args.end(), extra.begin(), extra.end());
    for (const char* option : {"--no-fallback", "--max-tokens", "6", "--language", "en"}) {
      args.push_back(option);
    }
    return args;
  }
  static std::string path(const std::string& name) { return (*temp_ / name).string(); }

  static std::unique_ptr<TempDir> temp_;
  static std::string model_;
  static ProcessResult convert_result_;
};

std::unique_ptr<TempDir> CliWithModel::temp_;
std::string CliWithModel::model_;
ProcessResult CliWithModel::convert_result_;

TEST_F(CliWithModel, BatchedModeOnTheCpuGivesTheSequentialTranscriptOfOneWindow) {
  // Under 30 s there is one window, and it has no earlier text: both modes decode it alike.
  const ProcessResult sequential =
      hark(run_args({path("tone.wav"), "-o", "json", "--device", "cpu"}));
  const ProcessResult batched =
      hark(run_args({path("tone.wav"), "-o", "json", "--device", "cpu", "--batch-size", "8"}));
  ASSERT_EQ(batched.exit_code, 0) << describe(batched);
  EXPECT_EQ(batched.out, sequential.out);
}

TEST_F(CliWithModel, CrossKvIsTheGpusOption) {
  // native is what the CPU runs anyway; another storage is an error there.
  const ProcessResult native =
      hark(run_args({path("short.wav"), "--device", "cpu", "--cross-kv", "native"}));
  EXPECT_EQ(native.exit_code, 0) << describe(native);
  expect_one_error_line(
      hark(run_args({path("short.wav"), "--device", "cpu", "--cross-kv", "int8-auto"})), 1,
      "int8-auto is the GPU's");
}

TEST_F(CliWithModel, CudaWithoutAGpuIsAClearError) {
  if (compute::cuda::available()) GTEST_SKIP() << "this machine has a GPU";
  expect_one_error_line(hark(run_args({path("tone.wav"), "--device", "cuda"})), 1, "--device cuda");
}

TEST_F(CliWithModel, ConvertWroteAGgufQuietly) {
  EXPECT_TRUE(fs::exists(model_));
  EXPECT_EQ(convert_result_.out, "");
  EXPECT_EQ(convert_result_.err, "");  // stderr is not a terminal: no progress, no summary
}

TEST_F(CliWithModel, TxtGoesToStdout) {
  const ProcessResult result = hark(run_args({path("tone.wav")}));
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  EXPECT_EQ(result.err, "");
  EXPECT_FALSE(result.out.empty());  // random weights, but they do say something
  // One stripped line per segment: no leading or trailing spaces on any line.
  size_t start = 0;
  while (start < result.out.size()) {
    const size_t end = result.out.find('\n', start);
    ASSERT_NE(end, std::string::npos) << "txt output does not end in a newline";
    const std::string line = result.out.substr(start, end - start);
    EXPECT_FALSE(line.empty());
    EXPECT_NE(line.front(), ' ');
    EXPECT_NE(line.back(), ' ');
    start = end + 1;
  }
}

TEST_F(CliWithModel, JsonHasTheTranscriptFields) {
  const ProcessResult result = hark(run_args({path("tone.wav"), "-o", "json"}));
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  const auto json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["language"], "en");
  EXPECT_NEAR(json["duration"].get<double>(), 2.5, 0.01);
  ASSERT_TRUE(json["segments"].is_array());
  std::string joined;
  for (const auto& segment : json["segments"]) {
    for (const char* key : {"id", "start", "end", "text", "tokens", "avg_logprob", "no_speech_prob",
                            "temperature", "compression_ratio"}) {
      EXPECT_TRUE(segment.contains(key)) << key;
    }
    EXPECT_LE(segment["start"].get<double>(), segment["end"].get<double>());
    joined += segment["text"].get<std::string>();
  }
  EXPECT_EQ(json["text"], joined);
}

TEST_F(CliWithModel, SrtAndVttAreWellFormed) {
  const ProcessResult srt = hark(run_args({path("tone.wav"), "--output-format", "srt"}));
  ASSERT_EQ(srt.exit_code, 0) << describe(srt);
  EXPECT_TRUE(srt.out.starts_with("1\n00:00:")) << srt.out;
  EXPECT_NE(srt.out.find(" --> "), std::string::npos);
  EXPECT_TRUE(srt.out.ends_with("\n\n"));
  const ProcessResult vtt = hark(run_args({path("tone.wav"), "--output-format=vtt"}));
  ASSERT_EQ(vtt.exit_code, 0) << describe(vtt);
  EXPECT_TRUE(vtt.out.starts_with("WEBVTT\n\n")) << vtt.out;
}

TEST_F(CliWithModel, TheSameInputGivesTheSameTranscript) {
  const ProcessResult first = hark(run_args({path("tone.wav"), "-o", "json"}));
  const ProcessResult second = hark(run_args({path("tone.wav"), "-o", "json", "--threads", "1"}));
  ASSERT_EQ(first.exit_code, 0) << describe(first);
  ASSERT_EQ(second.exit_code, 0) << describe(second);
  EXPECT_EQ(nlohmann::json::parse(first.out)["text"], nlohmann::json::parse(second.out)["text"]);
}

TEST_F(CliWithModel, ReadsAudioFromStdin) {
  const ProcessResult from_file = hark(run_args({path("tone.wav"), "-o", "json"}));
  const ProcessResult from_stdin =
      hark(run_args({"-", "-o", "json"}), testing::read_text(path("tone.wav")));
  ASSERT_EQ(from_stdin.exit_code, 0) << describe(from_stdin);
  EXPECT_EQ(from_stdin.out, from_file.out);
}

TEST_F(CliWithModel, SeveralFilesOnStdoutGetHeaders) {
  const ProcessResult result = hark(run_args({path("tone.wav"), path("short.wav")}));
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  const size_t first = result.out.find("==> " + path("tone.wav") + " <==\n");
  const size_t second = result.out.find("\n==> " + path("short.wav") + " <==\n");
  EXPECT_EQ(first, 0u) << result.out;
  EXPECT_NE(second, std::string::npos) << result.out;

  const ProcessResult json = hark(run_args({path("tone.wav"), path("short.wav"), "-o", "json"}));
  ASSERT_EQ(json.exit_code, 0) << describe(json);
  std::vector<nlohmann::json> lines;
  size_t start = 0;
  while (start < json.out.size()) {
    const size_t end = json.out.find('\n', start);
    lines.push_back(nlohmann::json::parse(json.out.substr(start, end - start)));
    start = end + 1;
  }
  ASSERT_EQ(lines.size(), 2u) << json.out;
  EXPECT_EQ(lines[0]["file"], path("tone.wav"));
  EXPECT_EQ(lines[1]["file"], path("short.wav"));
  EXPECT_NEAR(lines[1]["duration"].get<double>(), 0.5, 0.01);
}

TEST_F(CliWithModel, OutputDirGetsOneFilePerInput) {
  TempDir out;
  const fs::path dir = out / "results";
  const ProcessResult result = hark(
      run_args({path("tone.wav"), path("short.wav"), "--output-dir", dir.string(), "-o", "vtt"}));
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  EXPECT_EQ(result.out, "");
  EXPECT_TRUE(testing::read_text(dir / "tone.vtt").starts_with("WEBVTT\n"));
  EXPECT_TRUE(testing::read_text(dir / "short.vtt").starts_with("WEBVTT\n"));

  write_bytes(out / "tone.wav", testing::tone_wav(1));
  expect_one_error_line(
      hark(run_args({path("tone.wav"), (out / "tone.wav").string(), "--output-dir", dir.string()})),
      2, "both be written");
}

TEST_F(CliWithModel, EveryDecodingOptionIsAccepted) {
  const ProcessResult result = hark({"run",
                                     model_,
                                     path("short.wav"),
                                     "--task",
                                     "translate",
                                     "--beam-size",
                                     "2",
                                     "--temperature",
                                     "0.4",
                                     "--timestamps",
                                     "none",
                                     "--max-tokens",
                                     "4",
                                     "--prompt",
                                     "Hello.",
                                     "--threads",
                                     "1",
                                     "--language",
                                     "auto",
                                     "--verbose"});
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  EXPECT_NE(result.err.find("hark: info: "), std::string::npos) << result.err;
  // Names and openai's aliases are accepted as well as codes; what no model knows is a usage error.
  const ProcessResult by_name = hark({"run", model_, path("short.wav"), "--language", "English",
                                      "--max-tokens", "2", "--no-fallback"});
  EXPECT_EQ(by_name.exit_code, 0) << describe(by_name);
  expect_one_error_line(hark({"run", model_, path("short.wav"), "--language", "xx"}), 2,
                        "unknown language 'xx'");
}

TEST_F(CliWithModel, BatchedFilesShareBatchesAndKeepTheirOwnTranscripts) {
  // Both files under 30 s: one window each, decoded in one batch, each as it is decoded alone.
  const std::vector<std::string> files = {path("tone.wav"), path("short.wav")};
  std::vector<std::string> args = files;
  for (const char* extra : {"-o", "json", "--device", "cpu", "--batch-size", "4"}) {
    args.push_back(extra);
  }
  const ProcessResult together = hark(run_args(args));
  ASSERT_EQ(together.exit_code, 0) << describe(together);
  size_t start = 0;
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const size_t end = together.out.find('\n', start);
    ASSERT_NE(end, std::string::npos) << together.out;
    nlohmann::json line = nlohmann::json::parse(together.out.substr(start, end - start));
    start = end + 1;
    EXPECT_EQ(line["file"], file);
    line.erase("file");
    const ProcessResult alone = hark(run_args({file, "-o", "json", "--device", "cpu"}));
    ASSERT_EQ(alone.exit_code, 0) << describe(alone);
    EXPECT_EQ(line, nlohmann::json::parse(alone.out));
  }
  // A file that cannot be read fails alone; the others are still batched and written. On the
  // CPU, where a window's sums do not depend on the batch it is in (on the GPU, cuBLASLt picks
  // kernels by the product's shape, so batches of two and of one round differently).
  const ProcessResult mixed =
      hark(run_args({path("tone.wav"), path("missing.wav"), path("short.wav"), "-o", "json",
                     "--batch-size", "4", "--device", "cpu"}));
  EXPECT_EQ(mixed.exit_code, 1) << describe(mixed);
  EXPECT_EQ(mixed.err_lines().size(), 1u) << mixed.err;
  EXPECT_NE(mixed.out.find("\"file\":\"" + path("short.wav") + "\""), std::string::npos);
  // Groups of a file each (HARK_RUN_GROUP_SECONDS), each read while the one before is
  // transcribed: the same transcripts in the same order, the same one failure.
  testing::ScopedEnv one_file_a_group("HARK_RUN_GROUP_SECONDS", "0.5");
  const ProcessResult grouped =
      hark(run_args({path("tone.wav"), path("missing.wav"), path("short.wav"), "-o", "json",
                     "--batch-size", "4", "--device", "cpu"}));
  EXPECT_EQ(grouped.exit_code, 1) << describe(grouped);
  EXPECT_EQ(grouped.out, mixed.out);
  EXPECT_EQ(grouped.err, mixed.err);
}

TEST_F(CliWithModel, BadAudioFailsThatFileOnly) {
  TempDir temp;
  const std::string tone = testing::read_text(path("tone.wav"));
  write_bytes(temp / "truncated.wav", tone.substr(0, 30));
  write_bytes(temp / "empty.wav", "");
  write_bytes(temp / "zero-channels.wav", testing::wav_bytes(std::vector<int16_t>(1600), 0, 16000));
  write_bytes(temp / "text.wav", "this is not audio at all\n");
  for (const char* name :
       {"truncated.wav", "empty.wav", "zero-channels.wav", "text.wav", "missing.wav"}) {
    SCOPED_TRACE(name);
    const std::string bad = (temp / name).string();
    expect_one_error_line(hark(run_args({bad})), 1, bad);
    // The good file before it is still transcribed, and the exit code says something failed.
    const ProcessResult mixed = hark(run_args({path("short.wav"), bad, "-o", "json"}));
    EXPECT_EQ(mixed.exit_code, 1) << describe(mixed);
    EXPECT_EQ(mixed.signal, 0);
    EXPECT_EQ(mixed.err_lines().size(), 1u) << mixed.err;
    EXPECT_NE(mixed.out.find("\"file\":\"" + path("short.wav") + "\""), std::string::npos)
        << mixed.out;
  }
  expect_one_error_line(hark(run_args({"-"}), "not audio\n"), 1, "standard input");
  expect_one_error_line(hark(run_args({"-"}), tone.substr(0, 100)), 1, "truncated");
}

// Byte offset of the data-offset field of tensor `name` in a GGUF file: its info record is the
// name (u64 length + bytes), u32 n_dims, n_dims u64 dims, u32 type, then the u64 offset.
size_t tensor_offset_field(const std::string& file, const std::string& name, int n_dims) {
  std::string record;
  testing::append_le(record, name.size(), 8);
  record += name;
  const size_t at = file.find(record);
  if (at == std::string::npos) return std::string::npos;
  return at + record.size() + 4 + 8 * static_cast<size_t>(n_dims) + 4;
}

TEST_F(CliWithModel, CorruptModelsAreOneErrorLine) {
  TempDir temp;
  const std::string good = testing::read_text(model_);
  const std::string audio = path("short.wav");

  write_bytes(temp / "truncated.gguf", good.substr(0, good.size() / 2));
  write_bytes(temp / "header-only.gguf", good.substr(0, 20));
  std::string wrong_magic = good;
  wrong_magic.replace(0, 4, "GGUX");
  write_bytes(temp / "wrong-magic.gguf", wrong_magic);
  std::string bad_offset = good;
  const size_t field = tensor_offset_field(good, "decoder.layer_norm.bias", 1);
  ASSERT_NE(field, std::string::npos);
  bad_offset.replace(field, 8, std::string("\0\0\0\0\0\x01\0\0", 8));  // 2^40
  write_bytes(temp / "bad-offset.gguf", bad_offset);
  write_bytes(temp / "empty.gguf", "");

  for (const char* name : {"truncated.gguf", "header-only.gguf", "wrong-magic.gguf",
                           "bad-offset.gguf", "empty.gguf"}) {
    SCOPED_TRACE(name);
    expect_one_error_line(hark({"run", (temp / name).string(), audio}), 1, name);
  }
}

// The checkpoints the oracle built with transformers, when they are in the tree.
TEST(CliOracleModels, ConvertAndRunEveryFormat) {
  TempDir temp;
  const std::string audio = (temp / "tone.wav").string();
  write_bytes(audio, testing::tone_wav(3));
  for (const char* name : {"tiny-random-tiny.en", "tiny-random-large-v3"}) {
    const fs::path dir = fs::path(HARK_TEST_DATA) / "whisper" / name;
    if (!fs::exists(dir / "config.json")) {
      std::cout << "skipping " << name << ": " << dir << " is not there\n";
      continue;
    }
    SCOPED_TRACE(name);
    const std::string model = (temp / (std::string(name) + ".gguf")).string();
    const ProcessResult convert = hark({"convert", dir.string(), "-o", model, "--type", "q8_0"});
    ASSERT_EQ(convert.exit_code, 0) << describe(convert);
    // Every format on one model; json (which holds everything) on the other.
    const bool all_formats = std::string(name) == "tiny-random-tiny.en";
    for (const char* format : {"json", "txt", "srt", "vtt"}) {
      if (!all_formats && std::string(format) != "json") continue;
      const ProcessResult result =
          hark({"run", model, audio, "-o", format, "--no-fallback", "--max-tokens", "6"});
      ASSERT_EQ(result.exit_code, 0) << format << ": " << describe(result);
      EXPECT_EQ(result.err, "");
      if (std::string(format) == "json") {
        EXPECT_NO_THROW(nlohmann::json::parse(result.out));
      }
      if (std::string(format) == "vtt") {
        EXPECT_TRUE(result.out.starts_with("WEBVTT\n"));
      }
    }
  }
}

}  // namespace
}  // namespace hark
