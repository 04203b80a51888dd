// What `hark bench` runs Parakeet on: the random-weight models of the real configurations
// (models/parakeet/synthetic.h) and decoding with a fixed emission pattern (model.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/random.h"
#include "format/gguf.h"
#include "models/parakeet/layout.h"
#include "models/parakeet/model.h"
#include "models/parakeet/synthetic.h"
#include "support/tiny_whisper.h"  // TempDir

namespace hark::parakeet {
namespace {

using testing::TempDir;

int64_t parameters(const Config& config) {
  int64_t total = 0;
  for (const TensorSpec& tensor : tensor_layout(config)) {
    int64_t count = 1;
    for (int64_t dim : tensor.shape) count *= dim;
    total += count;
  }
  return total;
}

TEST(ParakeetSynthetic, RealConfigurationsHaveTheirPublishedSizes) {
  // Parameter counts as NVIDIA states them (0.6B, 1.1B), and the vocabularies of the model cards.
  const struct {
    const char* name;
    Head head;
    int vocab;
    int mels;
    double billions;
  } expected[] = {
      {"parakeet-tdt-0.6b-v2", Head::tdt, 1025, 128, 0.6},
      {"parakeet-tdt-0.6b-v3", Head::tdt, 8193, 128, 0.6},
      {"parakeet-ctc-1.1b", Head::ctc, 1025, 80, 1.1},
      {"parakeet-rnnt-1.1b", Head::rnnt, 1025, 80, 1.1},
      {"parakeet-ctc-0.6b", Head::ctc, 1025, 80, 0.6},
  };
  for (const auto& model : expected) {
    SCOPED_TRACE(model.name);
    const Config& config = reference_config(model.name);
    EXPECT_NO_THROW(validate(config, model.name));
    EXPECT_EQ(config.head, model.head);
    EXPECT_EQ(config.vocab_size, model.vocab);
    EXPECT_EQ(config.blank_id, model.vocab - 1);
    EXPECT_EQ(config.n_mels, model.mels);
    EXPECT_NEAR(static_cast<double>(parameters(config)) / 1e9, model.billions, 0.08);
    EXPECT_NE(reference_config_names().find(model.name), std::string::npos);
  }
  EXPECT_EQ(reference_config("parakeet-tdt-0.6b-v2").durations, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(reference_config_names().find("tiny"), std::string::npos);
  try {
    reference_config("parakeet-tdt-9b");
    FAIL() << "an unknown name was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("parakeet-tdt-0.6b-v3"), std::string::npos);
  }
}

// Noise at speech level, as the bench feeds.
std::vector<float> noise(size_t samples, uint64_t seed) {
  std::vector<float> values(samples);
  SplitMix64 random(seed);
  for (float& value : values) value = 0.17f * random.uniform();
  return values;
}

std::unique_ptr<Model> write_and_load(const TempDir& temp, const Config& config, DType type) {
  const std::string path = (temp / ("random-" + std::string(dtype_name(type)) + ".gguf")).string();
  write_random_model(config, type, path, 42);
  return Model::load(gguf::File::open(path));
}

TEST(ParakeetSynthetic, RandomModelsLoadInEveryTypeWithBoundedActivations) {
  TempDir temp;
  const Config& config = reference_config("parakeet-tiny-test");
  const std::vector<float> audio = noise(16000, 1);
  const std::span<const float> batch[] = {audio};
  std::vector<float> reference;
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    SCOPED_TRACE(std::string(dtype_name(type)));
    const auto model = write_and_load(temp, config, type);
    EXPECT_EQ(model->config().d_model, config.d_model);
    EXPECT_EQ(model->config().layers, config.layers);
    EXPECT_EQ(model->detokenizer().size(), config.vocab_size);
    EXPECT_TRUE(model->detokenizer().is_special(config.blank_id));
    const std::vector<float> output = model->encode(batch)->output(0);
    double sum_squares = 0;
    for (float value : output) {
      ASSERT_TRUE(std::isfinite(value));
      sum_squares += double(value) * value;
    }
    // The last block ends in a LayerNorm with gains near 1: RMS near 1, not vanishing or exploding.
    const double rms = std::sqrt(sum_squares / output.size());
    EXPECT_GT(rms, 0.5);
    EXPECT_LT(rms, 2.0);
    // The same seed gives the same weights, whatever the stored type rounds them to.
    if (reference.empty()) {
      reference = output;
    } else {
      double differing = 0;
      for (size_t i = 0; i < output.size(); ++i) differing += std::abs(output[i] - reference[i]);
      EXPECT_LT(differing / output.size(), 0.1);
    }
  }
}

// The tiny test configuration with another head.
Config tiny_with_head(Head head, int max_symbols_per_step = 3) {
  Config config = reference_config("parakeet-tiny-test");
  config.head = head;
  if (head != Head::tdt) config.durations.clear();
  if (head == Head::ctc) {
    config.predictor_hidden = config.predictor_layers = config.joint_hidden = 0;
    config.max_symbols_per_step = 0;
  } else {
    config.max_symbols_per_step = max_symbols_per_step;
  }
  return config;
}

// What the pattern says, written out: a token on every frames_per_token-th frame.
std::vector<Emission> expected_emissions(const Config& config, const EmissionPattern& pattern,
                                         int64_t frames) {
  std::vector<Emission> result;
  for (int64_t t = 0; t < frames; t += pattern.frames_per_token) {
    int32_t duration = 1;  // CTC, and RNN-T whose symbol limit of 1 moves on after each token
    if (config.head == Head::tdt) duration = pattern.duration;
    if (config.head == Head::rnnt && config.max_symbols_per_step > 1) duration = 0;
    result.push_back({pattern.token(t, config), static_cast<int32_t>(t), duration});
  }
  return result;
}

struct PatternCase {
  Head head;
  int max_symbols_per_step;
  EmissionPattern pattern;
};

class ParakeetPattern : public ::testing::TestWithParam<PatternCase> {};

TEST_P(ParakeetPattern, EmitsExactlyThePattern) {
  TempDir temp;
  const PatternCase& c = GetParam();
  const auto model =
      write_and_load(temp, tiny_with_head(c.head, c.max_symbols_per_step), DType::F32);
  const Config& config = model->config();
  // Lengths of several encoder frame counts, so that the utterances finish at different steps.
  const std::vector<float> a = noise(16000, 2), b = noise(5000, 3), d = noise(23456, 4);
  const std::span<const float> batch[] = {a, b, d};
  const auto encoded = model->encode(batch);
  const std::vector<std::vector<Emission>> decoded = model->decode_pattern(*encoded, c.pattern);
  ASSERT_EQ(decoded.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const std::vector<Emission> expected =
        expected_emissions(config, c.pattern, encoded->frames(i));
    ASSERT_EQ(decoded[i].size(), expected.size());
    ASSERT_FALSE(expected.empty());
    for (size_t k = 0; k < expected.size(); ++k) {
      EXPECT_EQ(decoded[i][k].token, expected[k].token) << k;
      EXPECT_EQ(decoded[i][k].frame, expected[k].frame) << k;
      EXPECT_EQ(decoded[i][k].duration, expected[k].duration) << k;
      EXPECT_NE(decoded[i][k].token, config.blank_id);
    }
  }
  // Greedy decoding of the same batch is untouched by the pattern's existence.
  EXPECT_EQ(model->decode(*encoded).size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(
    Heads, ParakeetPattern,
    ::testing::Values(PatternCase{Head::tdt, 3, {}}, PatternCase{Head::tdt, 3, {3, 3}},
                      PatternCase{Head::tdt, 3, {5, 1}}, PatternCase{Head::rnnt, 3, {}},
                      PatternCase{Head::rnnt, 1, {2, 2}}, PatternCase{Head::ctc, 0, {}},
                      PatternCase{Head::ctc, 0, {1, 2}}),
    [](const auto& info) {
      const PatternCase& c = info.param;
      return std::string(head_name(c.head)) + "_symbols" + std::to_string(c.max_symbols_per_step) +
             "_every" + std::to_string(c.pattern.frames_per_token) + "_duration" +
             std::to_string(c.pattern.duration);
    });

TEST(ParakeetPatternChecks, RefusesPatternsTheModelCannotFollow) {
  const Config& tdt = reference_config("parakeet-tiny-test");
  EXPECT_NO_THROW((EmissionPattern{4, 2}.check(tdt)));
  EXPECT_NO_THROW((EmissionPattern{4, 4}.check(tdt)));
  EXPECT_THROW((EmissionPattern{0, 1}.check(tdt)), Error);  // no frame at all
  EXPECT_THROW((EmissionPattern{4, 0}.check(tdt)), Error);  // would stay on the frame
  EXPECT_THROW((EmissionPattern{2, 3}.check(tdt)), Error);  // would skip token frames
  EXPECT_THROW((EmissionPattern{8, 5}.check(tdt)), Error);  // no such duration (0..4)
  // Durations mean nothing to CTC.
  EXPECT_NO_THROW((EmissionPattern{4, 9}.check(tiny_with_head(Head::ctc))));

  // Never the blank, wherever it is.
  Config blank_inside = tiny_with_head(Head::ctc);
  blank_inside.blank_id = 5;
  const EmissionPattern pattern;
  for (int64_t t = 0; t < 1000; ++t) {
    const int32_t token = pattern.token(t, blank_inside);
    EXPECT_NE(token, blank_inside.blank_id);
    EXPECT_GE(token, 1);
    EXPECT_LT(token, blank_inside.vocab_size);
  }

  // A batch of another model is refused, as by decode().
  TempDir temp;
  const auto model = write_and_load(temp, tdt, DType::F32);
  TempDir other_dir;
  const auto other = write_and_load(other_dir, tdt, DType::F32);
  const std::vector<float> audio = noise(4000, 5);
  const std::span<const float> batch[] = {audio};
  EXPECT_THROW(model->decode_pattern(*other->encode(batch), pattern), Error);
}

}  // namespace
}  // namespace hark::parakeet
