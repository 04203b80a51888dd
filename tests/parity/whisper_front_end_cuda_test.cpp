// The CUDA model's front end: transcribe() computes a recording's long-form log-mel on the GPU
// (features/mel_cuda.h) and cuts the encoder's windows from it there. Against the CPU's long
// form of the same audio, and the windows cut on the GPU against the same values encoded from
// the host. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "audio/audio.h"
#include "base/error.h"
#include "compute/cuda/cuda.h"
#include "format/gguf.h"
#include "models/whisper/convert.h"
#include "models/whisper/model.h"
#include "support/compare.h"
#include "support/scoped_env.h"
#include "support/tiny_whisper.h"

namespace hark::whisper {
namespace {

namespace fs = std::filesystem;
using hark::testing::relative_error;

// The limit of mel_cuda_test.cpp: the GPU's F32 products against the CPU's double FFT, on the
// normalised log-mel.
constexpr double kMaxMelDifference = 2e-3;

class WhisperCudaFrontEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!compute::cuda::available()) GTEST_SKIP() << "no GPU: " << compute::cuda::describe();
    testing::TempDir temp;
    const std::string path = (temp / "model.gguf").string();
    convert_checkpoint((fs::path(HARK_TEST_DATA) / "whisper" / "tiny-random-large-v3").string(),
                       path, DType::F32);
    const auto file = gguf::File::open(path);
    const testing::ScopedEnv cross_kv("HARK_CUDA_CROSS_KV", "native");
    cpu_ = Model::load(file, Device::cpu);
    cuda_ = Model::load(file, Device::cuda);
    // The test recordings one after another until 75 s: two whole windows and a part of one.
    std::vector<std::vector<float>> clips;
    for (const char* name : {"jfk", "beckett", "librivox-0870"}) {
      clips.push_back(audio::load(std::string(HARK_TEST_DATA) + "/audio/" + name + ".wav"));
    }
    for (size_t i = 0; audio_.size() < 75 * 16000; ++i) {
      const std::vector<float>& clip = clips[i % clips.size()];
      audio_.insert(audio_.end(), clip.begin(), clip.end());
    }
  }

  std::unique_ptr<Model> cpu_, cuda_;
  std::vector<float> audio_;
};

TEST_F(WhisperCudaFrontEnd, LongMelMatchesTheCpu) {
  const auto gpu = cuda_->long_mel(audio_);
  const auto cpu = cpu_->long_mel(audio_);
  ASSERT_EQ(gpu->total_frames(), cpu->total_frames());
  ASSERT_EQ(gpu->content_frames(), cpu->content_frames());
  const int window_frames = cpu_->config().window_frames();
  ASSERT_GT(cpu->content_frames(), 2 * window_frames);
  // Every frame of the recording and of the 30 s of zeros after it, a window at a time.
  for (int64_t seek = 0; seek < cpu->total_frames(); seek += window_frames) {
    SCOPED_TRACE("frames from " + std::to_string(seek));
    const int64_t count = std::min<int64_t>(window_frames, cpu->total_frames() - seek);
    const std::vector<float> got = gpu->window(seek, count, window_frames);
    const std::vector<float> want = cpu->window(seek, count, window_frames);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    }
    EXPECT_LE(worst, kMaxMelDifference);
  }
}

// The windows cut on the GPU are the encoder's input exactly as the same values from the host
// (a window of the GPU's log-mel read back); a batch that mixes in a host log-mel goes through
// the host, as the CPU model's does.
TEST_F(WhisperCudaFrontEnd, WindowsCutOnTheGpuEncodeAsFromTheHost) {
  const auto gpu = cuda_->long_mel(audio_);
  const int window_frames = cuda_->config().window_frames();
  const int64_t content = gpu->content_frames();
  const std::vector<MelWindow> cuts = {{gpu.get(), 0, window_frames},
                                       {gpu.get(), 1234, 2000},
                                       {gpu.get(), 2 * window_frames, content - 2 * window_frames}};
  std::vector<float> host;
  for (const MelWindow& cut : cuts) {
    const std::vector<float> window = gpu->window(cut.seek, cut.frames, window_frames);
    host.insert(host.end(), window.begin(), window.end());
  }
  const auto from_gpu = cuda_->encode_windows(cuts);
  const auto from_host = cuda_->encode_batch(host, 3);
  ASSERT_EQ(from_gpu.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("window " + std::to_string(i));
    EXPECT_EQ(relative_error(from_gpu[i]->frames(), from_host[i]->frames()), 0.0);
  }

  const HostLongMel first(std::span<const float>(host).first(host.size() / 3),
                          cuda_->config().n_mels, window_frames);
  const std::vector<MelWindow> mixed = {{&first, 0, window_frames}, cuts[1], cuts[2]};
  const auto through_host = cuda_->encode_windows(mixed);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("mixed, window " + std::to_string(i));
    EXPECT_EQ(relative_error(through_host[i]->frames(), from_host[i]->frames()), 0.0);
  }
}

TEST_F(WhisperCudaFrontEnd, BadInputFailsClearly) {
  EXPECT_THROW(cuda_->long_mel({}), Error);
  std::vector<float> broken(audio_.begin(), audio_.begin() + 50000);
  broken[4321] = std::nanf("");
  try {
    cuda_->long_mel(broken);
    ADD_FAILURE() << "no error for a NaN sample";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4321"), std::string::npos) << e.what();
  }
  const auto gpu = cuda_->long_mel(audio_);
  const int window_frames = cuda_->config().window_frames();
  const MelWindow past_the_end{gpu.get(), gpu->total_frames() - 10, 20};
  EXPECT_THROW(cuda_->encode_windows(std::span(&past_the_end, 1)), Error);
  const MelWindow too_long{gpu.get(), 0, window_frames + 1};
  EXPECT_THROW(cuda_->encode_windows(std::span(&too_long, 1)), Error);
}

}  // namespace
}  // namespace hark::whisper
