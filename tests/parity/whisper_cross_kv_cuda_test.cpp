// INT8 cross-attention K/V (the default for 16-bit models on the GPU) against the same model
// keeping them in its element type (HARK_CUDA_CROSS_KV=native): the error the storage adds to the
// logits of a prompt, and the batched greedy search (whose captured step reads the INT8 K/V
// directly) run on both. The other parity tests pin native K/V, so that their bounds stay those
// of 16-bit arithmetic; this one holds the INT8 form to its own. The oracle's tiny models amplify
// rounding on purpose (whisper_weight_types_test.cpp): the same quantisation applied on the CPU
// moves their prompt logits by 0.7e-2 to 1.7e-2 (F16 rounding of the K/V alone: 5e-4).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/cuda/cuda.h"
#include "format/gguf.h"
#include "models/whisper/convert.h"
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

constexpr double kInt8Bound = 3e-2;

std::unique_ptr<Model> load_with(const std::string& path, const char* cross_kv) {
  const testing::ScopedEnv storage("HARK_CUDA_CROSS_KV", cross_kv);
  return Model::load(gguf::File::open(path), Device::cuda);
}

class WhisperCudaCrossKv : public ::testing::TestWithParam<DType> {};

TEST_P(WhisperCudaCrossKv, Int8StaysNearNative) {
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  for (const char* name : {"tiny-random-large-v3", "tiny-random-tiny.en"}) {
    SCOPED_TRACE(name);
    const fs::path dir = fs::path(HARK_TEST_DATA) / "whisper" / name;
    testing::TempDir temp;
    const std::string path = (temp / "model.gguf").string();
    convert_checkpoint(dir.string(), path, GetParam());
    const auto native = load_with(path, "native");
    const auto int8 = load_with(path, "int8");
    const Config& config = native->config();

    std::ifstream json_stream(dir / "reference.json");
    const std::vector<int32_t> prompt =
        nlohmann::json::parse(json_stream).at("prompt").get<std::vector<int32_t>>();
    std::vector<int> positions;
    for (size_t p = 0; p < prompt.size(); ++p) positions.push_back(static_cast<int>(p));

    const std::vector<float> mel = testing::three_windows(config.n_mels);
    const int count =
        static_cast<int>(mel.size() / (size_t(config.n_mels) * config.window_frames()));
    ASSERT_EQ(count, 3);
    const auto native_windows = native->encode_batch(mel, count);
    const auto int8_windows = int8->encode_batch(mel, count);
    for (int i = 0; i < count; ++i) {
      const double error =
          relative_error(int8->start(int8_windows[i], 1)->advance({prompt}, positions),
                         native->start(native_windows[i], 1)->advance({prompt}, positions));
      std::printf("%s %s window %d: INT8 cross K/V moves the prompt logits by %.2e\n", name,
                  std::string(dtype_name(GetParam())).c_str(), i, error);
      EXPECT_LE(error, kInt8Bound) << "window " << i;
    }

    // The batched search: its first choice and no_speech_prob come from the prompt's logits, the
    // rest from replayed steps over the INT8 K/V.
    const Vocabulary& vocabulary = native->vocabulary();
    const LogitRules rules(vocabulary, config.vocab_size, /*timestamps=*/false);
    const std::vector<Prompt> prompts(
        count, make_prompt(vocabulary, config.max_target_positions, {}, vocabulary.first_language,
                           vocabulary.transcribe, /*timestamps=*/false));
    constexpr int kMaxTokens = 20;
    const auto native_greedy =
        decode_windows_greedy(*native, native_windows, prompts, rules, kMaxTokens);
    const auto int8_greedy = decode_windows_greedy(*int8, int8_windows, prompts, rules, kMaxTokens);
    ASSERT_EQ(int8_greedy.size(), native_greedy.size());
    for (int i = 0; i < count; ++i) {
      size_t agreeing = 0;
      const std::vector<int32_t>& a = int8_greedy[i].tokens;
      const std::vector<int32_t>& b = native_greedy[i].tokens;
      while (agreeing < a.size() && agreeing < b.size() && a[agreeing] == b[agreeing]) ++agreeing;
      std::printf("  window %d: batched greedy, INT8 and native agree on %zu of %zu tokens\n", i,
                  agreeing, b.size());
      EXPECT_FALSE(a.empty()) << "window " << i;
      EXPECT_NEAR(int8_greedy[i].no_speech_prob, native_greedy[i].no_speech_prob, kInt8Bound)
          << "window " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, WhisperCudaCrossKv,
                         ::testing::Values(DType::F16, DType::BF16, DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hark::whisper
