// The one-launch decode step (compute/cuda/decoder_step_sm90.h), which the batched greedy search
// takes for a single window by default (HARK_CUDA_STEP_KERNEL=1 here), against the launch-per-op
// step (HARK_CUDA_STEP_KERNEL=0), on random models of Whisper's real widths, over 16-bit and Q8_0
// weights: the same greedy tokens over more than one chunk of self-attention positions, and the
// same log-probabilities within F16/BF16 rounding. The tiny test checkpoints have heads of 16
// values, which the kernel does not take. Skipped without a GPU, but for the check of the kernel's
// layout, which needs none.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "compute/cuda/cuda.h"
#include "compute/cuda/decoder_step_sm90.h"
#include "format/gguf.h"
#include "models/whisper/cuda/forward.h"
#include "models/whisper/model.h"
#include "models/whisper/search.h"
#include "models/whisper/synthetic.h"
#include "support/scoped_env.h"
#include "support/tiny_whisper.h"
#include "support/whisper_windows.h"

namespace hark::whisper {
namespace {

struct StepCase {
  const char* name;
  int d_model, heads, ffn, decoder_layers;
  DType type;
  int tokens;  // after a prompt of 4
};

void PrintTo(const StepCase& c, std::ostream* out) {
  *out << c.name;
}

class WhisperCudaStepKernel : public ::testing::TestWithParam<StepCase> {};

TEST_P(WhisperCudaStepKernel, MatchesTheLaunchPerOpStep) {
  if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
  const StepCase& c = GetParam();
  Config config = reference_config("tiny");
  config.d_model = c.d_model;
  config.encoder_heads = config.decoder_heads = c.heads;
  config.encoder_ffn = config.decoder_ffn = c.ffn;
  config.encoder_layers = 1;
  config.decoder_layers = c.decoder_layers;

  // (Q8_0 weights run with F16 activations.)
  const auto element =
      c.type == DType::BF16 ? compute::cuda::Element::bf16 : compute::cuda::Element::f16;
  const bool q8_0 = c.type == DType::Q8_0;
  if (!compute::cuda::decoder_step_runs(
          element, cuda::step_shape(config, config.max_target_positions, q8_0))) {
    GTEST_SKIP() << "the one-launch step does not run on " << compute::cuda::describe();
  }

  testing::TempDir temp;
  const std::string path = (temp / "model.gguf").string();
  write_random_model(config, c.type, path, 11);
  const auto model = Model::load(gguf::File::open(path), Device::cuda, {CrossKvMode::native});
  const Vocabulary& vocabulary = model->vocabulary();
  const std::vector<float> mel = testing::three_windows(config.n_mels);
  const auto windows = model->encode_batch(mel, 3);
  const Prompt prompt = make_prompt(vocabulary, config.max_target_positions, {},
                                    vocabulary.first_language, vocabulary.transcribe, false);
  // 100 tokens: the self-attention spans two chunks of 64 positions; 400: seven, which with 20
  // heads are more items than a Hopper GPU's 132 CTAs, so that some CTAs attend twice.
  const std::vector<GreedyJob> job = {{windows[1], prompt.tokens, prompt.sot_index, c.tokens}};
  std::vector<GreedyOutcome> per_op;
  {
    const testing::ScopedEnv off("HARK_CUDA_STEP_KERNEL", "0");
    per_op = model->decode_greedy(job, /*timestamps=*/false, /*exact_lengths=*/true);
  }
  ASSERT_EQ(per_op.size(), 1u);
  EXPECT_EQ(per_op[0].tokens.size(), static_cast<size_t>(c.tokens));
  // The one-launch step, with the self-attention's earlier keys and values copied ahead by the
  // copy warp (the default) and loaded by the attention itself.
  for (const char* self_copies : {"1", "0"}) {
    SCOPED_TRACE(std::string("HARK_CUDA_STEP_SELF_COPIES=") + self_copies);
    const testing::ScopedEnv on("HARK_CUDA_STEP_KERNEL", "1");
    const testing::ScopedEnv form("HARK_CUDA_STEP_SELF_COPIES", self_copies);
    const std::vector<GreedyOutcome> one_launch =
        model->decode_greedy(job, /*timestamps=*/false, /*exact_lengths=*/true);
    ASSERT_EQ(one_launch.size(), 1u);
    EXPECT_EQ(one_launch[0].tokens, per_op[0].tokens);
    EXPECT_NEAR(one_launch[0].sum_logprob, per_op[0].sum_logprob,
                1e-2 * (1 + std::abs(per_op[0].sum_logprob)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Widths, WhisperCudaStepKernel,
    ::testing::Values(StepCase{"tiny_f16", 384, 6, 1536, 4, DType::F16, 100},
                      StepCase{"tiny_bf16", 384, 6, 1536, 4, DType::BF16, 100},
                      // large-v3's widths (its fc2 is 5120 deep), two layers
                      StepCase{"large_f16", 1280, 20, 5120, 2, DType::F16, 100},
                      StepCase{"large_f16_long", 1280, 20, 5120, 2, DType::F16, 400},
                      // Q8_0: tiny's rows of 384 put a CTA's scales from an even row (the copies'
                      // 16-byte pieces hold two rows' 24 bytes), large-v3's from its first.
                      StepCase{"tiny_q8_0", 384, 6, 1536, 4, DType::Q8_0, 100},
                      StepCase{"large_q8_0", 1280, 20, 5120, 2, DType::Q8_0, 100}),
    [](const ::testing::TestParamInfo<StepCase>& info) { return std::string(info.param.name); });

// Every Whisper size's step (its decoder at full capacity) fits the kernel's layout on an H100
// SXM or H200 (132 SMs, 227 KB of shared memory a block), in F16 and BF16 and over Q8_0 matrices:
// a layout that grows past it makes decoder_step_runs refuse the step, and the decoder fall back
// to the launch-per-op step. No GPU needed.
TEST(WhisperCudaStepKernelLayout, EveryWhisperSizeFitsAHopperGpu) {
  constexpr int kMultiprocessors = 132;
  constexpr int64_t kSharedPerBlock = 227 * 1024;
  for (const NamedConfig& named : reference_configs()) {
    for (const bool q8_0 : {false, true}) {
      SCOPED_TRACE(q8_0 ? "Q8_0" : "16-bit");
      const compute::cuda::StepShape shape =
          cuda::step_shape(named.config, named.config.max_target_positions, q8_0);
      for (const auto element : {compute::cuda::Element::f16, compute::cuda::Element::bf16}) {
        EXPECT_TRUE(
            compute::cuda::decoder_step_fits(element, shape, kMultiprocessors, kSharedPerBlock))
            << named.name;
      }
      // With a tenth of the shared memory, no product's share fits twice.
      EXPECT_FALSE(compute::cuda::decoder_step_fits(compute::cuda::Element::f16, shape,
                                                    kMultiprocessors, kSharedPerBlock / 10))
          << named.name;
    }
  }
}

}  // namespace
}  // namespace hark::whisper
