// The Parakeet encoder with its feed-forward modules' SiLU in the product's epilogue (Hopper,
// compute/cuda/gemm_sm90.h) against the same encoder in F32 and with cuBLASLt's product and the
// separate SiLU kernel: the transformers references are too small to take that path (it needs
// 1024 rows, compute/cuda/pass_cuda.cpp, and a hidden width that is a multiple of 128), so two
// layers of the real 0.6B configuration with random weights, on a batch of 2500 encoder rows, all
// three in one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/random.h"
#include "compute/cuda/cuda.h"
#include "compute/cuda/gemm_sm90.h"
#include "format/gguf.h"
#include "models/parakeet/model.h"
#include "models/parakeet/synthetic.h"
#include "support/compare.h"
#include "support/scoped_env.h"
#include "support/tiny_whisper.h"  // TempDir

namespace hark::parakeet {
namespace {

TEST(ParakeetFusedCuda, FeedForwardWithSiluInTheProductIsAsCloseToF32AsTheSeparateKernel) {
  namespace gpu = hark::compute::cuda;
  if (!gpu::available()) GTEST_SKIP() << "no GPU: " << gpu::describe();
  if (!gpu::activation_linear_runs(gpu::Element::bf16, 2048, 1024, 4096, nullptr, nullptr, nullptr,
                                   nullptr)) {
    GTEST_SKIP() << "not a compute capability 9.0 GPU: " << gpu::describe();
  }
  Config config = reference_config("parakeet-tdt-0.6b-v2");
  config.layers = 2;
  testing::TempDir temp;
  // One seed: the bf16 model's weights are the F32 model's, rounded.
  auto load = [&](DType type) {
    const std::string path = (temp / (std::string(dtype_name(type)) + ".gguf")).string();
    write_random_model(config, type, path, 7);
    return Model::load(gguf::File::open(path), Device::cuda);
  };
  const std::unique_ptr<Model> f32 = load(DType::F32), bf16 = load(DType::BF16);

  // Ten utterances of 20 s: 10 · 250 = 2500 encoder rows, packed.
  std::vector<std::vector<float>> clips(10, std::vector<float>(20 * 16000));
  for (size_t i = 0; i < clips.size(); ++i) {
    SplitMix64 random(100 + i);
    for (float& value : clips[i]) value = 0.17f * random.uniform();
  }
  const std::vector<std::span<const float>> spans(clips.begin(), clips.end());
  auto encode = [&](const Model& model) {
    const std::unique_ptr<EncodedBatch> batch = model.encode(spans);
    std::vector<float> all;
    for (int b = 0; b < batch->size(); ++b) {
      const std::vector<float> rows = batch->output(b);
      all.insert(all.end(), rows.begin(), rows.end());
    }
    return all;
  };
  const std::vector<float> reference = encode(*f32);
  const std::vector<float> fused = encode(*bf16);
  std::vector<float> separate;
  {
    testing::ScopedEnv off("HARK_CUDA_SM90_GEMM", "0");
    separate = encode(*bf16);
  }
  // Both bf16 ways round the hidden layer once, at different points (after the activation in the
  // epilogue; before it, with the separate kernel): against F32, the fused way within bf16's
  // bound, or no worse than half as much again as the separate way, as the parity tests hold
  // hark's bf16 to transformers' own.
  const double fused_error = testing::relative_error(fused, reference);
  const double separate_error = testing::relative_error(separate, reference);
  EXPECT_LT(fused_error, std::max(1e-2, 1.5 * separate_error))
      << "separate kernel: " << separate_error;
  // And the Hopper kernel ran: the two bf16 outputs differ.
  EXPECT_NE(fused, separate);
}

}  // namespace
}  // namespace hark::parakeet
