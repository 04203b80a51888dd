// Stored weight types against F32: the same weights stored as F16 and Q8_0 must give logits within
// 1e-2 and 3e-2 (relative to the largest F32 logit) of the F32 model on real speech.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "audio/audio.h"
#include "features/mel.h"
#include "features/whisper_mel.h"
#include "format/gguf.h"
#include "models/whisper/convert.h"
#include "models/whisper/model.h"
#include "models/whisper/synthetic.h"
#include "support/compare.h"
#include "support/tiny_whisper.h"

namespace hark::whisper {
namespace {

namespace fs = std::filesystem;

using hark::testing::relative_error;

// Logits at every position of a transcription prompt, after encoding jfk.wav.
std::vector<float> prompt_logits(const std::string& gguf_path) {
  const auto model = Model::load(gguf::File::open(gguf_path));
  const Vocabulary& vocab = model->vocabulary();
  const features::MelSpectrogram mel(features::whisper_mel_config(model->config().n_mels));
  const std::vector<float> samples =
      audio::load((fs::path(HARK_TEST_DATA) / "audio" / "jfk.wav").string());
  const auto window = model->encode(features::whisper_window_log_mel(mel, samples));
  std::vector<int32_t> prompt = {vocab.sot};
  if (vocab.multilingual)
    prompt.insert(prompt.end(), {vocab.language_token("en"), vocab.transcribe});
  prompt.push_back(vocab.no_timestamps);
  prompt.push_back(vocab.timestamp_begin - 1000);  // an ordinary text token
  std::vector<int> positions(prompt.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int>(i);
  return model->start(window, 1)->advance({prompt}, positions);
}

// The reference checkpoint (F16 values): F16 holds it exactly, Q8_0 approximates it.
TEST(WhisperWeightTypes, ConvertedCheckpointLogitsStayCloseToF32) {
  const fs::path dir = fs::path(HARK_TEST_DATA) / "whisper" / "tiny-random-large-v3";
  if (!fs::exists(dir / "model.safetensors")) GTEST_SKIP() << "no checkpoint in " << dir;
  testing::TempDir temp;
  std::vector<float> logits[3];
  const DType types[3] = {DType::F32, DType::F16, DType::Q8_0};
  for (int i = 0; i < 3; ++i) {
    const std::string path = (temp / (std::string(dtype_name(types[i])) + ".gguf")).string();
    convert_checkpoint(dir.string(), path, types[i]);
    logits[i] = prompt_logits(path);
  }
  EXPECT_LE(relative_error(logits[1], logits[0]), 1e-2);
  EXPECT_EQ(relative_error(logits[1], logits[0]), 0.0) << "the checkpoint's values are F16";
  // The oracle's init amplifies every weight error on purpose (small embeddings, final norm x4,
  // attention and MLP gains, so that greedy decisions have clear margins); Q8_0 measured 9.1e-2
  // here (max-relative; 7.6e-2 in L2). The 3e-2 target is checked on weights scaled like a
  // trained model's below; this bound only guards against regressions.
  EXPECT_LE(relative_error(logits[2], logits[0]), 1e-1);
}

// Weights drawn in F32 (not F16-representable): here F16 rounding is real too.
TEST(WhisperWeightTypes, RandomF32WeightsStayCloseInF16AndQ8) {
  Config config = reference_config("tiny.en");
  config.d_model = 64;
  config.encoder_layers = config.decoder_layers = 2;
  config.encoder_heads = config.decoder_heads = 2;
  config.encoder_ffn = config.decoder_ffn = 128;
  testing::TempDir temp;
  std::vector<float> logits[3];
  const DType types[3] = {DType::F32, DType::F16, DType::Q8_0};
  for (int i = 0; i < 3; ++i) {
    const std::string path = (temp / (std::string(dtype_name(types[i])) + ".gguf")).string();
    write_random_model(config, types[i], path, 42);
    logits[i] = prompt_logits(path);
  }
  const double f16_error = relative_error(logits[1], logits[0]);
  EXPECT_LE(f16_error, 1e-2);
  EXPECT_GT(f16_error, 0.0);
  EXPECT_LE(relative_error(logits[2], logits[0]), 3e-2);
}

}  // namespace
}  // namespace hark::whisper
