// `hark run` on compressed audio, which needs hark built with FFmpeg.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/process.h"
#include "support/tiny_whisper.h"

namespace hark {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;
using testing::TempDir;

ProcessResult hark(std::vector<std::string> args) {
  args.insert(args.begin(), HARK_CLI_PATH);
  return testing::run_process(args);
}

std::string describe(const ProcessResult& result) {
  return "exit " + std::to_string(result.exit_code) + ", signal " + std::to_string(result.signal) +
         "\n--- stdout:\n" + result.out.substr(0, 2000) + "\n--- stderr:\n" + result.err;
}

TEST(CliFfmpeg, CompressedAudioRunsAndBadFilesFailCleanly) {
  TempDir temp;
  testing::write_tiny_whisper(temp / "tiny-whisper");
  const std::string model = (temp / "tiny.gguf").string();
  const ProcessResult convert = hark({"convert", (temp / "tiny-whisper").string(), "-o", model});
  ASSERT_EQ(convert.exit_code, 0) << describe(convert);

  const fs::path audio = fs::path(HARK_TEST_DATA) / "audio";
  const ProcessResult good =
      hark({"run", model, (audio / "jfk.mp3").string(), (audio / "jfk-44k-stereo.flac").string(),
            "-o", "json", "--no-fallback", "--max-tokens", "4", "--language", "en"});
  ASSERT_EQ(good.exit_code, 0) << describe(good);
  const size_t newline = good.out.find('\n');
  ASSERT_NE(newline, std::string::npos);
  const auto first = nlohmann::json::parse(good.out.substr(0, newline));
  EXPECT_NEAR(first["duration"].get<double>(), 11.0, 0.1);  // jfk is 11 s
  const auto second = nlohmann::json::parse(good.out.substr(newline + 1));
  EXPECT_NEAR(second["duration"].get<double>(), 11.0, 0.1);

  // Not audio, whatever the name says; and an MP3 cut off after its first kilobyte still
  // decodes what is there or fails in one line, never crashes.
  testing::write_text(temp / "notes.mp3", "Dear diary, today I pretended to be an MP3.\n");
  const std::string mp3 = testing::read_text(audio / "jfk.mp3");
  testing::write_text(temp / "cut.mp3", mp3.substr(0, 1024));
  testing::write_text(temp / "garbage.flac", std::string(4096, '\x5a'));

  const std::string bad = (temp / "notes.mp3").string();
  const ProcessResult result = hark({"run", model, bad, "--no-fallback", "--max-tokens", "4"});
  EXPECT_EQ(result.exit_code, 1) << describe(result);
  ASSERT_EQ(result.err_lines().size(), 1u) << describe(result);
  EXPECT_TRUE(result.err.starts_with("hark: error: ")) << result.err;
  EXPECT_NE(result.err.find(bad), std::string::npos) << result.err;

  for (const char* name : {"cut.mp3", "garbage.flac"}) {
    const ProcessResult other =
        hark({"run", model, (temp / name).string(), "--no-fallback", "--max-tokens", "4"});
    EXPECT_EQ(other.signal, 0) << name << ": " << describe(other);
    EXPECT_TRUE(other.exit_code == 0 || other.exit_code == 1) << name << ": " << describe(other);
    if (other.exit_code == 1) {
      EXPECT_EQ(other.err_lines().size(), 1u) << name << ": " << describe(other);
    }
  }
}

}  // namespace
}  // namespace hark
