// The other cross-attention storages against the same model keeping every layer's K/V in its
// element type (HARK_CUDA_CROSS_KV=native, the default): attending over the frames with the
// projections folded in, and INT8 K/V. Each is held to its own
// bound on the logits of a prompt, and the batched greedy search (whose captured step reads the
// storage directly) runs on both. The oracle's tiny models amplify rounding on purpose
// (whisper_weight_types_test.cpp): INT8 quantisation applied on the CPU moves their prompt
// logits by 0.7e-2 to 1.7e-2 (F16 rounding of the K/V alone: 5e-4).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "compute/cuda/cuda.h"
#include "compute/cuda/frame_attention_sm90.h"
#include "format/gguf.h"
#include "models/whisper/convert.h"
#include "models/whisper/cuda/forward.h"
#include "models/whisper/logit_rules.h"
#include "models/whisper/model.h"
#include "models/whisper/search.h"
#include "support/compare.h"
#include "support/scoped_env.h"
#include "support/tensor_values.h"
#include "support/tiny_whisper.h"
#include "support/whisper_windows.h"

namespace hark::whisper {
namespace {

namespace fs = std::filesystem;
using hark::testing::relative_error;

struct StorageCase {
  const char* storage;  // --cross-kv
  DType type;
  double bound;  // on the prompt logits and no_speech_prob
};

// Loaded with the storage named (as --cross-kv names it), whatever HARK_CUDA_CROSS_KV says.
std::unique_ptr<Model> load_with(const std::string& path, const char* cross_kv) {
  const std::optional<CrossKvMode> mode = cross_kv_mode_from_name(cross_kv);
  if (!mode) throw std::invalid_argument(std::string("no storage ") + cross_kv);
  const testing::ScopedEnv storage("HARK_CUDA_CROSS_KV", "bogus");  // not read: the option wins
  return Model::load(gguf::File::open(path), Device::cuda, {*mode});
}

// The model converted from checkpoint `dir` to c.type, loaded with c.storage and with native
// K/V: the logits of `prompt` (and, over the frames, of a 40-token prompt) within c.bound of
// each other on three windows, and the batched greedy search on both.
void compare_with_native(const fs::path& dir, const std::vector<int32_t>& prompt,
                         const StorageCase& c) {
  testing::TempDir temp;
  const std::string path = (temp / "model.gguf").string();
  convert_checkpoint(dir.string(), path, c.type);
  const auto native = load_with(path, "native");
  const auto other = load_with(path, c.storage);
  const Config& config = native->config();

  std::vector<int> positions;
  for (size_t p = 0; p < prompt.size(); ++p) positions.push_back(static_cast<int>(p));
  // A prompt longer than the 16 tokens a window up to which a prompt attends over the frames
  // (forward_cuda.cpp): text tokens after the special ones, as a previous window's text gives.
  std::vector<int32_t> long_prompt = prompt;
  std::vector<int> long_positions = positions;
  while (long_prompt.size() < 40) {
    long_positions.push_back(static_cast<int>(long_prompt.size()));
    long_prompt.push_back(static_cast<int32_t>(400 + 7 * long_prompt.size()) %
                          (config.vocab_size - 1));
  }

  const std::vector<float> mel = testing::three_windows(config.n_mels);
  const int count = static_cast<int>(mel.size() / (size_t(config.n_mels) * config.window_frames()));
  ASSERT_EQ(count, 3);
  const auto native_windows = native->encode_batch(mel, count);
  const auto other_windows = other->encode_batch(mel, count);
  const bool frames = std::string(c.storage).find("frames") != std::string::npos;
  for (int i = 0; i < count; ++i) {
    const double error =
        relative_error(other->start(other_windows[i], 1)->advance({prompt}, positions),
                       native->start(native_windows[i], 1)->advance({prompt}, positions));
    std::printf("%s window %d: %s cross-attention moves the prompt logits by %.2e\n",
                std::string(dtype_name(c.type)).c_str(), i, c.storage, error);
    EXPECT_LE(error, c.bound) << "window " << i;
    // Over the frames only: INT8 K/V's error grows along a long prompt on the oracle models
    // (3-5e-2 at 40 tokens), which says nothing about the path a long prompt takes.
    if (!frames) continue;
    const double long_error =
        relative_error(other->start(other_windows[i], 1)->advance({long_prompt}, long_positions),
                       native->start(native_windows[i], 1)->advance({long_prompt}, long_positions));
    std::printf("  window %d: %zu-token prompt: %.2e\n", i, long_prompt.size(), long_error);
    EXPECT_LE(long_error, c.bound) << "window " << i << ", long prompt";
  }

  // The batched search: its first choice and no_speech_prob come from the prompt's logits, the
  // rest from replayed steps over the storage.
  const Vocabulary& vocabulary = native->vocabulary();
  const LogitRules rules(vocabulary, config.vocab_size, /*timestamps=*/false);
  const std::vector<Prompt> prompts(
      count, make_prompt(vocabulary, config.max_target_positions, {}, vocabulary.first_language,
                         vocabulary.transcribe, /*timestamps=*/false));
  constexpr int kMaxTokens = 20;
  const auto native_greedy =
      decode_windows_greedy(*native, native_windows, prompts, rules, kMaxTokens);
  const auto other_greedy =
      decode_windows_greedy(*other, other_windows, prompts, rules, kMaxTokens);
  ASSERT_EQ(other_greedy.size(), native_greedy.size());
  for (int i = 0; i < count; ++i) {
    size_t agreeing = 0;
    const std::vector<int32_t>& a = other_greedy[i].tokens;
    const std::vector<int32_t>& b = native_greedy[i].tokens;
    while (agreeing < a.size() && agreeing < b.size() && a[agreeing] == b[agreeing]) ++agreeing;
    std::printf("  window %d: batched greedy, %s and native agree on %zu of %zu tokens\n", i,
                c.storage, agreeing, b.size());
    EXPECT_FALSE(a.empty()) << "window " << i;
    EXPECT_NEAR(other_greedy[i].no_speech_prob, native_greedy[i].no_speech_prob, c.bound)
        << "window " << i;
  }
}

class WhisperCudaCrossKv : public ::testing::TestWithParam<StorageCase> {};

TEST_P(WhisperCudaCrossKv, StaysNearNative) {
  const StorageCase c = GetParam();
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  for (const char* name : {"tiny-random-large-v3", "tiny-random-tiny.en"}) {
    SCOPED_TRACE(name);
    const fs::path dir = fs::path(HARK_TEST_DATA) / "whisper" / name;
    std::ifstream json_stream(dir / "reference.json");
    compare_with_native(
        dir, nlohmann::json::parse(json_stream).at("prompt").get<std::vector<int32_t>>(), c);
  }
}

// INT8 frames need a width that is a multiple of 128, and the staged INT8 attention heads of 64,
// which the oracle models (64 wide) do not have: a tiny Whisper of the tests' own with 4 heads of
// 64 and two decoder layers, and its usual prompt.
struct WideTinyWhisper {
  testing::TempDir checkpoint;
  std::vector<int32_t> prompt = {testing::kTinySot, testing::kTinySot + 1,
                                 testing::kTinySot + 2 + testing::kTinyLanguages,
                                 testing::kTinySot + 2 + testing::kTinyLanguages + 4};
  WideTinyWhisper() {
    testing::TinyWhisperSpec spec;
    spec.d_model = 256;
    spec.heads = 4;
    spec.encoder_ffn = 512;
    spec.decoder_ffn = 512;
    spec.decoder_layers = 2;
    spec.storage = safetensors::ElementType::F16;
    testing::write_tiny_whisper(checkpoint.path(), spec);
  }
};

TEST(WhisperCudaInt8Frames, StaysNearNative) {
  if (!compute::cuda::available() ||
      !compute::cuda::frame_attention_int8_runs(compute::cuda::Element::f16, 4, 256)) {
    GTEST_SKIP() << "no H100/H200: " << compute::cuda::describe();
  }
  const WideTinyWhisper model;
  for (const StorageCase& c :
       {StorageCase{"frames", DType::F16, 1e-2}, StorageCase{"int8-frames", DType::F16, 3e-2}}) {
    SCOPED_TRACE(c.storage);
    compare_with_native(model.checkpoint.path(), model.prompt, c);
  }
}

// int8-auto picks the storage by the batch: a batch of fewer than kInt8AutoFramesFromWindows
// windows decodes exactly as with int8, one of that many exactly as with int8-frames (the same
// kernels on the same inputs: the same tokens and log-probabilities).
TEST(WhisperCudaInt8Auto, TakesInt8FramesFromItsBatchSize) {
  if (!compute::cuda::available() ||
      !compute::cuda::frame_attention_int8_runs(compute::cuda::Element::f16, 4, 256)) {
    GTEST_SKIP() << "no H100/H200: " << compute::cuda::describe();
  }
  const WideTinyWhisper model;
  testing::TempDir temp;
  const std::string path = (temp / "model.gguf").string();
  convert_checkpoint(model.checkpoint.path().string(), path, DType::F16);
  // int8-auto from the environment, the others by the option.
  const auto automatic = [&] {
    const testing::ScopedEnv storage("HARK_CUDA_CROSS_KV", "int8-auto");
    return Model::load(gguf::File::open(path), Device::cuda);
  }();
  const auto int8 = load_with(path, "int8");
  const auto int8_frames = load_with(path, "int8-frames");
  const Config& config = automatic->config();
  const Vocabulary& vocabulary = automatic->vocabulary();
  const LogitRules rules(vocabulary, config.vocab_size, /*timestamps=*/false);
  const std::vector<float> three = testing::three_windows(config.n_mels);
  const size_t window_values = three.size() / 3;
  for (const int count : {3, kInt8AutoFramesFromWindows}) {
    SCOPED_TRACE(count);
    // The three recordings' windows over and over.
    std::vector<float> mel;
    for (int i = 0; i < count; ++i) {
      mel.insert(mel.end(), three.begin() + static_cast<int64_t>(i % 3 * window_values),
                 three.begin() + static_cast<int64_t>((i % 3 + 1) * window_values));
    }
    const std::vector<Prompt> prompts(
        count, make_prompt(vocabulary, config.max_target_positions, {}, vocabulary.first_language,
                           vocabulary.transcribe, /*timestamps=*/false));
    const auto decode = [&](const Model& m) {
      return decode_windows_greedy(m, m.encode_batch(mel, count), prompts, rules, 12);
    };
    const bool frames = count >= kInt8AutoFramesFromWindows;
    const auto got = decode(*automatic);
    const auto want = decode(frames ? *int8_frames : *int8);
    const auto other = decode(frames ? *int8 : *int8_frames);
    ASSERT_EQ(got.size(), want.size());
    bool storages_differ = false;
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "window " << i;
      EXPECT_EQ(got[i].sum_logprob, want[i].sum_logprob) << "window " << i;
      storages_differ |= other[i].sum_logprob != want[i].sum_logprob;
    }
    // So the equalities above tell the two storages apart.
    EXPECT_TRUE(storages_differ);
  }
}

// INT8 K/V through the staged attention (HARK_CUDA_INT8_STAGED, decode_attention_staged_sm90.h):
// the prompt's rows and the replayed steps, held to INT8's bound as the register form is.
TEST(WhisperCudaInt8Staged, StaysNearNative) {
  // Where INT8 frames run, so does the staged form: both want a GPU of compute capability 9.0.
  if (!compute::cuda::available() ||
      !compute::cuda::frame_attention_int8_runs(compute::cuda::Element::f16, 4, 256)) {
    GTEST_SKIP() << "no H100/H200: " << compute::cuda::describe();
  }
  const testing::ScopedEnv staged("HARK_CUDA_INT8_STAGED", "1");
  const WideTinyWhisper model;
  compare_with_native(model.checkpoint.path(), model.prompt, StorageCase{"int8", DType::F16, 3e-2});
}

// Frames: F16 rounds the folded query and the attended frames where native rounds K and V
// (about 5e-4 each); BF16 has 8 bits. Q8_0 weights keep native K/V (forward.h).
INSTANTIATE_TEST_SUITE_P(Storages, WhisperCudaCrossKv,
                         ::testing::Values(StorageCase{"frames", DType::F16, 1e-2},
                                           StorageCase{"frames", DType::BF16, 3e-2},
                                           StorageCase{"int8", DType::F16, 3e-2},
                                           StorageCase{"int8", DType::BF16, 3e-2},
                                           StorageCase{"int8", DType::Q8_0, 3e-2}),
                         [](const auto& info) {
                           return std::string(info.param.storage) + "_" +
                                  std::string(dtype_name(info.param.type));
                         });

}  // namespace
}  // namespace hark::whisper
