// Whisper at full large-v3 size on the GPU against Hugging Face transformers on the GPU. The
// checkpoint (random weights, the real large-v3 configuration) and transformers' float16 and
// float32 results on it come from tools/oracle/whisper_large.py; at 3 GB they are not in the
// repository, so the test runs only where HARK_LARGE_V3_DIR names the folder the script wrote.
// The checkpoint is converted to an F16 GGUF and loaded on the GPU; the encoder output, the logits
// of the prompt and greedy decoding are compared with both of transformers' precisions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "compute/cuda/cuda.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "format/safetensors.h"
#include "models/whisper/convert.h"
#include "models/whisper/logit_rules.h"
#include "models/whisper/model.h"
#include "models/whisper/search.h"
#include "support/compare.h"
#include "support/tensor_values.h"
#include "support/tiny_whisper.h"

namespace hark::whisper {
namespace {

namespace fs = std::filesystem;
using hark::testing::relative_error;

constexpr int kMaxNewTokens = 20;  // whisper_large.py's generate(max_new_tokens=20)
// transformers' own float16 and float32 runs differ by 2-5e-3 on this model; hark's F16 weights
// with its own accumulation order land in the same range.
constexpr double kTolerance = 1e-2;

std::vector<int32_t> token_ids(const safetensors::File& file, const std::string& name) {
  const safetensors::TensorView& view = file.tensor(name);
  EXPECT_EQ(view.type, safetensors::ElementType::I32) << name;
  std::vector<int32_t> values(static_cast<size_t>(view.elements()));
  std::memcpy(values.data(), view.data, values.size() * sizeof(int32_t));
  return values;
}

std::string to_string(const std::vector<int32_t>& tokens) {
  std::string text = "[";
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text += ' ';
    text += std::to_string(tokens[i]);
  }
  text += ']';
  return text;
}

size_t agreeing_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const auto [a_end, b_end] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<size_t>(a_end - a.begin());
}

// The choices of a greedy decode as the references list them: <|endoftext|> included when the
// window ended with it.
std::vector<int32_t> chosen_tokens(const WindowResult& result, int32_t eot) {
  std::vector<int32_t> chosen = result.tokens;
  if (result.ended) chosen.push_back(eot);
  return chosen;
}

// Greedy choices must equal transformers' as far as its float16 and float32 runs agree; where
// they part, the reference hinges on a near-tie and neither is more right than hark.
void expect_greedy_matches(const std::string& what, const std::vector<int32_t>& chosen,
                           const std::vector<int32_t>& f16, const std::vector<int32_t>& f32) {
  SCOPED_TRACE(what);
  std::printf("%s: %s\n  equals transformers float16: %s, float32: %s\n", what.c_str(),
              to_string(chosen).c_str(), chosen == f16 ? "yes" : "no",
              chosen == f32 ? "yes" : "no");
  const size_t settled = agreeing_prefix(f16, f32);
  if (settled == f16.size() && settled == f32.size()) {
    EXPECT_EQ(chosen, f32);
    return;
  }
  std::printf("  transformers float16 and float32 agree on the first %zu tokens only\n", settled);
  ASSERT_GE(chosen.size(), settled);
  EXPECT_EQ(std::vector<int32_t>(chosen.begin(), chosen.begin() + settled),
            std::vector<int32_t>(f32.begin(), f32.begin() + settled));
}

TEST(WhisperLargeCuda, MatchesTransformersOnTheGpu) {
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  const char* folder = std::getenv("HARK_LARGE_V3_DIR");
  if (folder == nullptr || *folder == '\0') {
    GTEST_SKIP() << "HARK_LARGE_V3_DIR is not set (the folder tools/oracle/whisper_large.py "
                    "writes: a random-weight large-v3 and transformers' results on it)";
  }
  const fs::path dir(folder);
  ASSERT_TRUE(fs::exists(dir / "reference.safetensors"))
      << "HARK_LARGE_V3_DIR=" << dir << " has no reference.safetensors";

  testing::TempDir temp;
  const std::string gguf_path = (temp / "model.gguf").string();
  // The checkpoint is F16: an F16 conversion holds exactly the weights transformers ran.
  convert_checkpoint(dir.string(), gguf_path, DType::F16);
  const auto model = Model::load(gguf::File::open(gguf_path), Device::cuda);
  ASSERT_EQ(model->device(), Device::cuda);
  const Config& config = model->config();
  ASSERT_EQ(config.d_model, 1280);
  ASSERT_EQ(config.encoder_layers, 32);
  ASSERT_EQ(config.decoder_layers, 32);
  ASSERT_EQ(config.n_mels, 128);
  ASSERT_EQ(config.vocab_size, 51866);
  const auto reference = safetensors::File::open((dir / "reference.safetensors").string());

  const std::vector<float> mel = testing::values_of(*reference, "input_features");
  ASSERT_EQ(mel.size(), size_t(config.n_mels) * config.window_frames());
  const auto window = model->encode(mel);
  const std::vector<float> frames = window->frames();
  const double encoder_f16 = relative_error(frames, testing::values_of(*reference, "encoder_f16"));
  const double encoder_f32 = relative_error(frames, testing::values_of(*reference, "encoder_f32"));
  std::printf("encoder vs transformers: float16 %.2e, float32 %.2e\n", encoder_f16, encoder_f32);
  EXPECT_LE(encoder_f16, kTolerance);
  EXPECT_LE(encoder_f32, kTolerance);

  // Logits at every position of <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>.
  const Vocabulary& vocabulary = model->vocabulary();
  const Prompt prompt = make_prompt(vocabulary, config.max_target_positions, {},
                                    vocabulary.language_token("en"), vocabulary.transcribe,
                                    /*timestamps=*/false);
  ASSERT_EQ(prompt.tokens, token_ids(*reference, "prompt"));
  std::vector<int> positions(prompt.tokens.size());
  std::iota(positions.begin(), positions.end(), 0);
  auto session = model->start(window, 1);
  const std::vector<float> logits = session->advance({prompt.tokens}, positions);
  const double logits_f16 = relative_error(logits, testing::values_of(*reference, "logits_f16"));
  const double logits_f32 = relative_error(logits, testing::values_of(*reference, "logits_f32"));
  std::printf("logits vs transformers: float16 %.2e, float32 %.2e\n", logits_f16, logits_f32);
  EXPECT_LE(logits_f16, kTolerance);
  EXPECT_LE(logits_f32, kTolerance);

  // Greedy decoding, step by step through a DecoderSession and as the batched search on the
  // device, against generate()'s choices.
  const std::vector<int32_t> greedy_f16 = token_ids(*reference, "greedy_f16");
  const std::vector<int32_t> greedy_f32 = token_ids(*reference, "greedy_f32");
  std::printf("transformers greedy float16: %s\ntransformers greedy float32: %s\n",
              to_string(greedy_f16).c_str(), to_string(greedy_f32).c_str());
  const LogitRules rules(vocabulary, config.vocab_size, /*timestamps=*/false);
  SearchOptions options;
  options.max_tokens = kMaxNewTokens;
  const WindowResult stepwise = decode_window(*model, window, prompt, rules, options);
  expect_greedy_matches("decode_window", chosen_tokens(stepwise, vocabulary.eot), greedy_f16,
                        greedy_f32);

  const auto batch = model->encode_batch(mel, 1);
  const std::vector<Prompt> prompts = {prompt};
  const std::vector<WindowResult> batched =
      decode_windows_greedy(*model, batch, prompts, rules, kMaxNewTokens);
  ASSERT_EQ(batched.size(), 1u);
  expect_greedy_matches("decode_windows_greedy", chosen_tokens(batched[0], vocabulary.eot),
                        greedy_f16, greedy_f32);
}

// BF16 weights and activations: the checkpoint's F16 weights rounded to BF16, so the error also
// holds that rounding. Compared with transformers' float32 run. BF16 keeps 8 bits of mantissa
// to F16's 11, and 32 chaotic random layers amplify rounding: transformers' own bfloat16 run of
// this model is ~3e-2 from float32, so hark is held to 1e-2 or, when transformers' bfloat16
// itself is further off, to 1.5 times transformers' own error.
TEST(WhisperLargeCuda, Bfloat16StaysNearTransformers) {
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  const char* folder = std::getenv("HARK_LARGE_V3_DIR");
  if (folder == nullptr || *folder == '\0') GTEST_SKIP() << "HARK_LARGE_V3_DIR is not set";
  const fs::path dir(folder);
  testing::TempDir temp;
  const std::string gguf_path = (temp / "model.gguf").string();
  convert_checkpoint(dir.string(), gguf_path, DType::BF16);
  const auto model = Model::load(gguf::File::open(gguf_path), Device::cuda);
  const auto reference = safetensors::File::open((dir / "reference.safetensors").string());
  const std::vector<float> encoder_f32 = testing::values_of(*reference, "encoder_f32");
  const std::vector<float> logits_f32 = testing::values_of(*reference, "logits_f32");
  const double transformers_encoder =
      relative_error(testing::values_of(*reference, "encoder_bf16"), encoder_f32);
  const double transformers_logits =
      relative_error(testing::values_of(*reference, "logits_bf16"), logits_f32);

  const auto window = model->encode(testing::values_of(*reference, "input_features"));
  const double encoder = relative_error(window->frames(), encoder_f32);
  const std::vector<int32_t> prompt = token_ids(*reference, "prompt");
  std::vector<int> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  const double logits =
      relative_error(model->start(window, 1)->advance({prompt}, positions), logits_f32);
  std::printf(
      "bf16 vs transformers float32: hark encoder %.2e, logits %.2e; "
      "transformers bfloat16 encoder %.2e, logits %.2e\n",
      encoder, logits, transformers_encoder, transformers_logits);
  EXPECT_LE(encoder, std::max(kTolerance, 1.5 * transformers_encoder));
  EXPECT_LE(logits, std::max(kTolerance, 1.5 * transformers_logits));
}

}  // namespace
}  // namespace hark::whisper
