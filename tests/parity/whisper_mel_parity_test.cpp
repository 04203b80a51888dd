// Whisper's log-mel against transformers' WhisperFeatureExtractor: tools/oracle stores, for each
// reference model, the extractor's output for test audio as F32 tensors "mel.<audio name>" of
// shape [n_mels, 3000] in tests/data/whisper/<model>/reference.safetensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "audio/audio.h"
#include "features/whisper_mel.h"
#include "format/safetensors.h"

namespace {

namespace features = hark::features;

constexpr double kTolerance = 1e-4;

// tests/data/audio/<name>.<ext> for the first extension that exists; empty when none does.
std::string find_audio(const std::string& name) {
  for (const char* ext : {".wav", ".flac", ".mp3"}) {
    const std::string path = std::string(HARK_TEST_DATA) + "/audio/" + name + ext;
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

void check_model(const std::string& model, int n_mels) {
  const std::string path =
      std::string(HARK_TEST_DATA) + "/whisper/" + model + "/reference.safetensors";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is not there yet (made by tools/oracle on the GPU machine)";
  }
  const auto file = hark::safetensors::File::open(path);
  const features::MelSpectrogram mel(features::whisper_mel_config(n_mels));
  int compared = 0;
  for (const auto& tensor : file->tensors()) {
    if (!tensor.name.starts_with("mel.")) continue;
    SCOPED_TRACE(model + ": " + tensor.name);
    ASSERT_EQ(tensor.type, hark::safetensors::ElementType::F32);
    ASSERT_EQ(tensor.shape.size(), 2u);
    ASSERT_EQ(tensor.shape[0], n_mels);
    const std::string audio_path = find_audio(tensor.name.substr(4));
    ASSERT_FALSE(audio_path.empty()) << "no test audio named " << tensor.name.substr(4);
    const std::vector<float> audio = hark::audio::load(audio_path);

    std::vector<float> actual;
    if (tensor.shape[1] == features::kWhisperWindowFrames) {
      actual = features::whisper_window_log_mel(mel, audio);
    } else {
      actual = features::whisper_long_log_mel(mel, audio);  // openai's whole-file variant
    }
    ASSERT_EQ(int64_t(actual.size()), tensor.elements()) << "frames differ from the reference";
    std::vector<float> expected(actual.size());
    std::memcpy(expected.data(), tensor.data, expected.size() * sizeof(float));  // unaligned

    double max_error = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
      const double error = std::abs(double(actual[i]) - double(expected[i]));
      if (error > max_error) max_error = error, worst = i;
    }
    EXPECT_LE(max_error, kTolerance)
        << "worst at mel " << worst / tensor.shape[1] << ", frame " << worst % tensor.shape[1];
    ::testing::Test::RecordProperty(tensor.name + ".max_abs_error", std::to_string(max_error));
    ++compared;
  }
  EXPECT_GT(compared, 0) << path << " holds no mel.* tensors";
}

TEST(WhisperMelParity, LargeV3With128Mels) {
  check_model("tiny-random-large-v3", 128);
}

TEST(WhisperMelParity, TinyEnWith80Mels) {
  check_model("tiny-random-tiny.en", 80);
}

}  // namespace
