// `hark bench` on Parakeet, end to end: the CLI writes a random-weight model, times a batch-1 clip
// and a throughput batch, and the decoder emits exactly what the fixed pattern says.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "support/process.h"

namespace hark {
namespace {

using testing::ProcessResult;

ProcessResult hark(std::vector<std::string> args) {
  args.insert(args.begin(), HARK_CLI_PATH);
  return testing::run_process(args);
}

std::string describe(const ProcessResult& result) {
  return "exit " + std::to_string(result.exit_code) + ", signal " + std::to_string(result.signal) +
         "\n--- stdout:\n" + result.out + "\n--- stderr:\n" + result.err;
}

// Encoder frames of `seconds` of 16-kHz audio: 10-ms feature frames, halved three times by the
// stride-2 convolutions (docs/parakeet.md §4.1).
int64_t encoder_frames(double seconds) {
  int64_t frames = static_cast<int64_t>(seconds * 16000) / 160;
  for (int stage = 0; stage < 3; ++stage) frames = (frames - 1) / 2 + 1;
  return frames;
}

struct Row {
  int batch = 0;
  double audio_seconds = 0, features_ms = 0, encode_ms = 0, decode_ms = 0, total_ms = 0;
  long tokens = 0;
  double rtfx = 0;
};

// The table row that starts with `label`.
Row find_row(const std::string& out, const std::string& label) {
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.starts_with(label + " ")) continue;
    std::istringstream fields(line.substr(label.size()));
    Row row;
    fields >> row.batch >> row.audio_seconds >> row.features_ms >> row.encode_ms >> row.decode_ms >>
        row.total_ms >> row.tokens >> row.rtfx;
    EXPECT_FALSE(fields.fail()) << line;
    return row;
  }
  ADD_FAILURE() << "no row '" << label << "' in\n" << out;
  return {};
}

// A row of a whole run (pipelined, mixed): its shape ("3x2", "7/2"), audio, time, tokens and RTFx;
// encoder and decoder overlap there and have no figures.
struct RunRow {
  std::string shape;
  double audio_seconds = 0, total_ms = 0, rtfx = 0;
  long tokens = 0;
};

RunRow find_run_row(const std::string& out, const std::string& label) {
  RunRow row;
  const size_t at = out.find("\n" + label + " ");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no row '" << label << "' in\n" << out;
    return row;
  }
  std::istringstream fields(out.substr(at + 1, out.find('\n', at + 1) - at - 1));
  std::string name, features, encoder, decoder;
  fields >> name >> row.shape >> row.audio_seconds >> features >> encoder >> decoder >>
      row.total_ms >> row.tokens >> row.rtfx;
  EXPECT_FALSE(fields.fail()) << out;
  EXPECT_GT(row.total_ms, 0);
  EXPECT_NEAR(row.rtfx, row.audio_seconds / (row.total_ms / 1000), 0.03 * row.rtfx + 0.1);
  return row;
}

TEST(CliBench, ParakeetTimesTheClipAndABatchWithThePattern) {
  const ProcessResult result =
      hark({"bench", "--model", "parakeet-tiny-test", "--threads", "1", "--batches", "2",
            "--seconds", "3", "--repeats", "2", "--device", "cpu", "--type", "q8_0"});
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  EXPECT_NE(result.out.find("parakeet-tiny-test (q8_0 weights, random) on cpu"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("a token every 4 encoder frames (320 ms), TDT duration 2"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("peak RSS"), std::string::npos) << result.out;

  // One token every 4 frames, from frame 0.
  const auto tokens = [](double seconds) { return (encoder_frames(seconds) + 3) / 4; };
  const Row latency = find_row(result.out, "latency");
  EXPECT_EQ(latency.batch, 1);
  EXPECT_DOUBLE_EQ(latency.audio_seconds, 10.0);
  EXPECT_EQ(latency.tokens, tokens(10.0));
  const Row throughput = find_row(result.out, "throughput");
  EXPECT_EQ(throughput.batch, 2);
  EXPECT_DOUBLE_EQ(throughput.audio_seconds, 6.0);
  EXPECT_EQ(throughput.tokens, 2 * tokens(3.0));
  for (const Row& row : {latency, throughput}) {
    EXPECT_GT(row.encode_ms, 0);
    EXPECT_GT(row.decode_ms, 0);
    EXPECT_NEAR(row.total_ms, row.encode_ms + row.decode_ms, 0.15);
    // RTFx = audio / total; both printed rounded to 0.1.
    EXPECT_NEAR(row.rtfx, row.audio_seconds / (row.total_ms / 1000), 0.03 * row.rtfx + 0.1);
  }

  // The pipelined row: 3 batches of the row's 2 utterances through encode_and_decode, every
  // token of every batch counted, the whole run timed.
  const RunRow pipelined = find_run_row(result.out, "pipelined");
  EXPECT_EQ(pipelined.shape, "3x2");
  EXPECT_DOUBLE_EQ(pipelined.audio_seconds, 18.0);
  EXPECT_EQ(pipelined.tokens, 3 * 2 * tokens(3.0));
}

// The mixed row: utterances of 10-30 s up to the asked audio, batched longest first, every one
// decoded with the pattern.
TEST(CliBench, ParakeetMixedWorkloadRow) {
  const ProcessResult result =
      hark({"bench", "--model", "parakeet-tiny-test", "--threads", "1", "--batches", "2",
            "--seconds", "1", "--pipeline", "1", "--mixed", "75", "--device", "cpu"});
  ASSERT_EQ(result.exit_code, 0) << describe(result);
  EXPECT_EQ(result.out.find("\npipelined "), std::string::npos) << result.out;
  const RunRow mixed = find_run_row(result.out, "mixed");
  const std::string& shape = mixed.shape;
  const double audio_seconds = mixed.audio_seconds;
  // "utterances/batch size": 75 s of 10-30-s utterances are 3 to 8 of them.
  const size_t slash = shape.find('/');
  ASSERT_NE(slash, std::string::npos) << shape;
  const int utterances = std::stoi(shape.substr(0, slash));
  EXPECT_EQ(shape.substr(slash + 1), "2");
  EXPECT_GE(utterances, 3);
  EXPECT_LE(utterances, 8);
  // All of it but a last remainder under a second.
  EXPECT_GT(audio_seconds, 74.0 - 1e-9);
  EXPECT_LE(audio_seconds, 75.0 + 1e-9);
  // A token every 4 frames (320 ms) of each utterance, rounded up per utterance.
  EXPECT_NEAR(static_cast<double>(mixed.tokens), audio_seconds / 0.32, 2.0 * utterances);
}

TEST(CliBench, ParakeetHelpAndErrors) {
  const ProcessResult help = hark({"help", "bench"});
  ASSERT_EQ(help.exit_code, 0) << describe(help);
  for (const char* text :
       {"parakeet-tdt-0.6b-v2", "parakeet-ctc-1.1b", "--seconds S", "every 4th encoder frame"}) {
    EXPECT_NE(help.out.find(text), std::string::npos) << text << " missing from\n" << help.out;
  }
  for (const auto& [args, exit_code, needle] :
       std::vector<std::tuple<std::vector<std::string>, int, std::string>>{
           {{"bench", "--model", "parakeet-tdt-9b"}, 1, "parakeet-tdt-0.6b-v3"},
           {{"bench", "--model", "parakeet-tiny-test", "--tokens", "5"}, 2, "--tokens"},
           {{"bench", "--model", "parakeet-tiny-test", "--seconds", "0"}, 2, "--seconds"},
           {{"bench", "--model", "parakeet-tiny-test", "--batches", "0"}, 2, "--batches"},
           {{"bench", "--model", "parakeet-tiny-test", "--pipeline", "0"}, 2, "--pipeline"},
           {{"bench", "--model", "tiny", "--pipeline", "2"}, 2, "--pipeline"},
           {{"bench", "--model", "parakeet-tiny-test", "--mixed", "60"}, 2, "--mixed"},
           {{"bench", "--model", "parakeet-tiny-test", "--mixed", "0", "--batches", "2"},
            2,
            "--mixed"},
           {{"bench", "--model", "tiny", "--mixed", "60"}, 2, "--mixed"},
           {{"bench", "--model", "tiny", "--seconds", "5"}, 2, "--seconds"},
           {{"bench", "--model", "parakeet-tiny-test", "--spread"}, 2, "--spread"},
           {{"bench", "--model", "tiny", "--spread", "--device", "cpu"}, 2, "--device cuda"},
           {{"bench", "--model", "tiny", "--spread", "--tokens", "300"}, 2, "context"},
       }) {
    const ProcessResult result = hark(args);
    EXPECT_EQ(result.signal, 0) << describe(result);
    EXPECT_EQ(result.exit_code, exit_code) << describe(result);
    const auto lines = result.err_lines();
    ASSERT_EQ(lines.size(), 1u) << describe(result);
    EXPECT_TRUE(lines[0].starts_with("hark: error: ")) << lines[0];
    EXPECT_NE(lines[0].find(needle), std::string::npos) << needle << " not in " << lines[0];
  }
}

}  // namespace
}  // namespace hark
