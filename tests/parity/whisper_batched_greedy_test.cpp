// The GPU model against the CPU model on the same GGUF file: encoder output and logits per weight
// type, and the batched greedy search (one CUDA Graph step for several windows, logit rules and
// argmax on the GPU) against decode_window() on the CPU, window by window. Skipped without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "compute/cuda/cuda.h"
#include "format/gguf.h"
#include "models/whisper/convert.h"
#include "models/whisper/logit_rules.h"
#include "models/whisper/model.h"
#include "models/whisper/search.h"
#include "support/compare.h"
#include "support/scoped_env.h"
#include "support/tiny_whisper.h"
#include "support/whisper_windows.h"

namespace hark::whisper {
namespace {

namespace fs = std::filesystem;
using hark::testing::relative_error;

struct Pair {
  std::unique_ptr<Model> cpu, cuda;
};

Pair load_pair(const std::string& name, DType type) {
  const fs::path dir = fs::path(HARK_TEST_DATA) / "whisper" / name;
  testing::TempDir temp;
  const std::string path = (temp / "model.gguf").string();
  convert_checkpoint(dir.string(), path, type);
  const auto file = gguf::File::open(path);
  // The bounds are those of the arithmetic, whatever the caller's environment asks: INT8
  // cross-attention K/V (HARK_CUDA_CROSS_KV=int8) are held to their own bound by
  // whisper_cross_kv_cuda_test.cpp.
  const testing::ScopedEnv cross_kv("HARK_CUDA_CROSS_KV", "native");
  return {Model::load(file, Device::cpu), Model::load(file, Device::cuda)};
}

// Nine windows of log-mel: the three test windows three times over.
std::vector<float> nine_windows(int n_mels) {
  const std::vector<float> three = testing::three_windows(n_mels);
  std::vector<float> mel;
  for (int i = 0; i < 3; ++i) mel.insert(mel.end(), three.begin(), three.end());
  return mel;
}

class WhisperCudaAgainstCpu : public ::testing::TestWithParam<DType> {};

TEST_P(WhisperCudaAgainstCpu, BatchedEncoderAndLogitsMatchTheCpu) {
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  const DType type = GetParam();
  const Pair models = load_pair("tiny-random-large-v3", type);
  const Config& config = models.cpu->config();
  const std::vector<float> mel = testing::three_windows(config.n_mels);
  const auto gpu_windows = models.cuda->encode_batch(mel, 3);
  const auto cpu_windows = models.cpu->encode_batch(mel, 3);
  // F32 weights compute in F32 on both; otherwise the GPU's activations are 16-bit, and this
  // model's init amplifies rounding on purpose (whisper_weight_types_test.cpp): BF16, with 8
  // bits, lands at 5e-2 to 7e-2 here.
  const double bound = type == DType::F32 ? 1e-4 : type == DType::BF16 ? 1e-1 : 2e-2;
  const std::vector<int32_t> prompt = {50258, 50259, 50360, 50364};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("window " + std::to_string(i));
    EXPECT_LE(relative_error(gpu_windows[i]->frames(), cpu_windows[i]->frames()), bound);
    const std::vector<float> gpu_logits =
        models.cuda->start(gpu_windows[i], 2)->advance({prompt, prompt}, {0, 3});
    const std::vector<float> cpu_logits =
        models.cpu->start(cpu_windows[i], 2)->advance({prompt, prompt}, {0, 3});
    EXPECT_LE(relative_error(gpu_logits, cpu_logits), bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, WhisperCudaAgainstCpu,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The decoder's three norms a layer inside its products (skinny_linear with the norm, which takes
// up to 32 rows: here two 4-token prompts) against the CPU, within the bound of F16 above, and
// against the same GPU model with the norms as kernels of their own (HARK_CUDA_SKINNY_NORM=0).
TEST(WhisperCudaSkinnyNorm, LogitsMatchTheCpuWithTheNormsInTheProducts) {
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  const Pair models = load_pair("tiny-random-large-v3", DType::F16);
  const Config& config = models.cpu->config();
  const std::vector<float> mel = testing::three_windows(config.n_mels);
  const auto gpu_windows = models.cuda->encode_batch(mel, 3);
  const auto cpu_windows = models.cpu->encode_batch(mel, 3);
  const std::vector<int32_t> prompt = {50258, 50259, 50360, 50364};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("window " + std::to_string(i));
    const std::vector<float> fused =
        models.cuda->start(gpu_windows[i], 2)->advance({prompt, prompt}, {0, 3});
    const testing::ScopedEnv separate_norms("HARK_CUDA_SKINNY_NORM", "0");
    const std::vector<float> separate =
        models.cuda->start(gpu_windows[i], 2)->advance({prompt, prompt}, {0, 3});
    const std::vector<float> cpu_logits =
        models.cpu->start(cpu_windows[i], 2)->advance({prompt, prompt}, {0, 3});
    EXPECT_LE(relative_error(fused, cpu_logits), 2e-2);
    EXPECT_LE(relative_error(fused, separate), 1e-2);
  }
}

// A step of 9 sequences (past the fused step's 8): skinny_linear's Q/K/V product puts K and V
// into the caches itself instead of append_kv copying them there from its output (as with
// HARK_CUDA_SKINNY_SCATTER=0). The same sums land in the same places, so every token and
// log-probability must be the same bits both ways, with the norms inside the products and as
// kernels of their own (HARK_CUDA_SKINNY_NORM=0). (Where skinny_linear does not run, on a GPU
// other than compute capability 9.0, both runs take the same path.)
TEST(WhisperCudaSkinnyScatter, KeysAndValuesScatteredByTheProductDecodeAsAppendedOnes) {
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  const Pair models = load_pair("tiny-random-large-v3", DType::F16);
  const Config& config = models.cpu->config();
  const Vocabulary& vocabulary = models.cpu->vocabulary();
  const std::vector<float> mel = nine_windows(config.n_mels);
  constexpr int kWindows = 9;
  const auto windows = models.cuda->encode_batch(mel, kWindows);
  const Prompt prompt = make_prompt(vocabulary, config.max_target_positions, {},
                                    vocabulary.first_language, vocabulary.transcribe, false);
  std::vector<GreedyJob> jobs;
  for (int i = 0; i < kWindows; ++i) {
    jobs.push_back({windows[i], prompt.tokens, prompt.sot_index, 12 + 2 * i});
  }
  for (const char* norm : {"0", "1"}) {
    SCOPED_TRACE(std::string("HARK_CUDA_SKINNY_NORM=") + norm);
    const testing::ScopedEnv norms("HARK_CUDA_SKINNY_NORM", norm);
    const std::vector<GreedyOutcome> scattered =
        models.cuda->decode_greedy(jobs, /*timestamps=*/false);
    const testing::ScopedEnv appending("HARK_CUDA_SKINNY_SCATTER", "0");
    const std::vector<GreedyOutcome> appended =
        models.cuda->decode_greedy(jobs, /*timestamps=*/false);
    ASSERT_EQ(scattered.size(), appended.size());
    for (int i = 0; i < kWindows; ++i) {
      SCOPED_TRACE("window " + std::to_string(i));
      EXPECT_EQ(scattered[i].tokens, appended[i].tokens);
      EXPECT_EQ(scattered[i].sum_logprob, appended[i].sum_logprob);
    }
  }
}

// A batch of up to 3 windows replays its encoder layers as a CUDA Graph from the second call
// with the same buffers on: the replay must compute what the eager launches compute, for a new
// input too (the graph reads the buffers, not what they held at its capture).
TEST(WhisperCudaEncoder, ReplayedLayersMatchEagerOnes) {
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  const Pair models = load_pair("tiny-random-large-v3", DType::F32);
  const Config& config = models.cpu->config();
  const std::vector<float> first = testing::three_windows(config.n_mels);
  // The same windows in another order: another input of the same shape.
  const size_t window = first.size() / 3;
  std::vector<float> second(first.begin() + window, first.end());
  second.insert(second.end(), first.begin(), first.begin() + window);
  models.cuda->encode_batch(first, 3);  // eager
  models.cuda->encode_batch(first, 3);  // captured, then launched
  const auto replayed = models.cuda->encode_batch(second, 3);
  const testing::ScopedEnv eager("HARK_CUDA_ENCODER_GRAPH", "0");
  const auto expected = models.cuda->encode_batch(second, 3);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("window " + std::to_string(i));
    EXPECT_EQ(relative_error(replayed[i]->frames(), expected[i]->frames()), 0.0);
  }
}

// F32 on both sides, so the greedy choices must agree token for token.
TEST(WhisperCudaBatchedGreedy, MatchesDecodeWindowOnTheCpu) {
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  const Pair models = load_pair("tiny-random-large-v3", DType::F32);
  const Config& config = models.cpu->config();
  const Vocabulary& vocabulary = models.cpu->vocabulary();
  const std::vector<float> mel = testing::three_windows(config.n_mels);
  const auto gpu_windows = models.cuda->encode_batch(mel, 3);
  const auto cpu_windows = models.cpu->encode_batch(mel, 3);
  for (bool timestamps : {false, true}) {
    SCOPED_TRACE(timestamps ? "timestamps" : "no timestamps");
    const LogitRules rules(vocabulary, config.vocab_size, timestamps);
    // Prompts of different lengths: the batch's sequences sit at different positions.
    std::vector<Prompt> prompts;
    const std::vector<int32_t> previous = {440, 1029, 8462};
    for (int i = 0; i < 3; ++i) {
      prompts.push_back(make_prompt(vocabulary, config.max_target_positions,
                                    std::span(previous).first(i), vocabulary.first_language,
                                    vocabulary.transcribe, timestamps));
    }
    constexpr int kMaxTokens = 40;
    const std::vector<WindowResult> batched =
        decode_windows_greedy(*models.cuda, gpu_windows, prompts, rules, kMaxTokens);
    ASSERT_EQ(batched.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE("window " + std::to_string(i));
      SearchOptions options;
      options.max_tokens = kMaxTokens;
      const WindowResult expected =
          decode_window(*models.cpu, cpu_windows[i], prompts[i], rules, options);
      EXPECT_EQ(batched[i].tokens, expected.tokens);
      EXPECT_EQ(batched[i].ended, expected.ended);
      EXPECT_NEAR(batched[i].sum_logprob, expected.sum_logprob,
                  1e-4 * (1 + std::abs(expected.sum_logprob)));
      EXPECT_NEAR(batched[i].no_speech_prob, expected.no_speech_prob, 1e-4);
      // decode_window on the CUDA model (the sequential mode's search): the window alone, a
      // batch of one on the device, wherever it sits in its encode_batch() call.
      const WindowResult alone =
          decode_window(*models.cuda, gpu_windows[i], prompts[i], rules, options);
      EXPECT_EQ(alone.tokens, expected.tokens);
      EXPECT_EQ(alone.ended, expected.ended);
      EXPECT_NEAR(alone.sum_logprob, expected.sum_logprob,
                  1e-4 * (1 + std::abs(expected.sum_logprob)));
      EXPECT_NEAR(alone.no_speech_prob, expected.no_speech_prob, 1e-4);
    }
  }
  // Windows that do not follow each other in their batch are refused, not misread.
  const Prompt prompt = make_prompt(vocabulary, config.max_target_positions, {},
                                    vocabulary.first_language, vocabulary.transcribe, false);
  const std::vector<GreedyJob> gap = {{gpu_windows[0], prompt.tokens, prompt.sot_index, 5},
                                      {gpu_windows[2], prompt.tokens, prompt.sot_index, 5}};
  EXPECT_THROW(models.cuda->decode_greedy(gap, /*timestamps=*/false), Error);
  const std::vector<GreedyJob> past_the_end = {
      {gpu_windows[2], prompt.tokens, prompt.sot_index, 5},
      {gpu_windows[2], prompt.tokens, prompt.sot_index, 5}};
  EXPECT_THROW(models.cuda->decode_greedy(past_the_end, /*timestamps=*/false), Error);
}

// Windows whose limits differ end at different steps; once done, their attentions read no keys
// (gpu::advance_search) while the others go on. Every window must still decode as it does alone
// on the CPU, with skipping and without, in the fused step (up to 8 windows) and past it.
TEST(WhisperCudaBatchedGreedy, WindowsEndingEarlyLeaveTheOthersAsTheyWere) {
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  const Pair models = load_pair("tiny-random-large-v3", DType::F32);
  const Config& config = models.cpu->config();
  const Vocabulary& vocabulary = models.cpu->vocabulary();
  const std::vector<float> mel = nine_windows(config.n_mels);
  const std::vector<int> limits = {3, 40, 11, 25, 1, 40, 7, 33, 19};
  const LogitRules rules(vocabulary, config.vocab_size, /*timestamps=*/false);
  const Prompt prompt = make_prompt(vocabulary, config.max_target_positions, {},
                                    vocabulary.first_language, vocabulary.transcribe, false);
  const auto cpu_windows = models.cpu->encode_batch(mel, 9);
  std::vector<WindowResult> expected;
  for (int i = 0; i < 9; ++i) {
    SearchOptions options;
    options.max_tokens = limits[i];
    expected.push_back(decode_window(*models.cpu, cpu_windows[i], prompt, rules, options));
  }
  for (const int count : {5, 9}) {
    const auto gpu_windows =
        models.cuda->encode_batch(std::span(mel).first(mel.size() / 9 * count), count);
    for (const char* skip : {"1", "0"}) {
      SCOPED_TRACE(std::to_string(count) + " windows, HARK_CUDA_SKIP_FINISHED=" + skip);
      const testing::ScopedEnv skipping("HARK_CUDA_SKIP_FINISHED", skip);
      std::vector<GreedyJob> jobs;
      for (int i = 0; i < count; ++i) {
        jobs.push_back({gpu_windows[i], prompt.tokens, prompt.sot_index, limits[i]});
      }
      const std::vector<GreedyOutcome> outcomes =
          models.cuda->decode_greedy(jobs, /*timestamps=*/false);
      for (int i = 0; i < count; ++i) {
        SCOPED_TRACE("window " + std::to_string(i) + ", limit " + std::to_string(limits[i]));
        std::vector<int32_t> tokens = expected[i].tokens;
        if (expected[i].ended) tokens.push_back(vocabulary.eot);
        EXPECT_EQ(outcomes[i].tokens, tokens);
        EXPECT_NEAR(outcomes[i].sum_logprob, expected[i].sum_logprob,
                    1e-4 * (1 + std::abs(expected[i].sum_logprob)));
      }
    }
  }
}

}  // namespace
}  // namespace hark::whisper
