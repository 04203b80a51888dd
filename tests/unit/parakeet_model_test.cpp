// Parakeet's model, text and transcription on small synthetic checkpoints (tests/support/
// tiny_parakeet.h): bad input gets a clear error or an empty transcript, batches decode as their
// utterances alone, and tokens become text and timed words as docs/parakeet.md §6 says.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "format/gguf.h"
#include "models/parakeet/convert.h"
#include "models/parakeet/model.h"
#include "models/parakeet/tokens.h"
#include "models/parakeet/transcribe.h"
#include "support/tiny_parakeet.h"

namespace hark::parakeet {
namespace {

using testing::TempDir;
using testing::TinyParakeetSpec;

std::unique_ptr<Model> tiny_model(const TempDir& temp, Head head) {
  TinyParakeetSpec spec;
  spec.head = head;
  testing::write_tiny_parakeet(temp / "tiny", spec);
  const std::string path = (temp / "tiny.gguf").string();
  convert_checkpoint((temp / "tiny").string(), path, DType::F32);
  return Model::load(gguf::File::open(path));
}

// A second of a gliding tone with some noise: something to transcribe.
std::vector<float> signal(size_t samples, uint64_t seed) {
  std::vector<float> values(samples);
  uint64_t state = seed;
  for (size_t i = 0; i < samples; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const double noise = static_cast<double>(state >> 40) / double(1 << 24) - 0.5;
    values[i] = static_cast<float>(0.3 * std::sin(0.05 * i + 1e-5 * i * i) + 0.05 * noise);
  }
  return values;
}

class ParakeetModel : public ::testing::TestWithParam<Head> {
 protected:
  void SetUp() override { model_ = tiny_model(temp_, GetParam()); }
  TempDir temp_;
  std::unique_ptr<Model> model_;
};

TEST_P(ParakeetModel, EmptyAudioIsAnErrorAndTooShortAudioHasNoText) {
  EXPECT_THROW(transcribe(*model_, {}), Error);
  EXPECT_EQ(model_->min_samples(), 320);
  const std::vector<float> short_audio = signal(model_->min_samples() - 1, 1);
  const Transcript transcript = transcribe(*model_, short_audio);
  EXPECT_TRUE(transcript.segments.empty());
  EXPECT_TRUE(transcript.text().empty());
  EXPECT_NEAR(transcript.duration, 319.0 / 16000, 1e-12);

  // As a piece next to a real one: an empty segment in its place, the other decoded as alone.
  const std::vector<float> speech = signal(16000, 2);
  const Piece pieces[] = {{short_audio, 0.0}, {speech, 1.0}};
  const std::vector<Segment> segments = transcribe_pieces(*model_, pieces);
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_TRUE(segments[0].text.empty());
  EXPECT_TRUE(segments[0].tokens.empty());
  EXPECT_TRUE(segments[0].words.empty());
  const Piece alone[] = {{speech, 1.0}};
  EXPECT_EQ(segments[1].tokens, transcribe_pieces(*model_, alone)[0].tokens);

  // The model itself refuses what it cannot encode, naming the limit.
  EXPECT_THROW(model_->features(short_audio), Error);
  const std::span<const float> too_short[] = {short_audio};
  EXPECT_THROW(model_->encode(too_short), Error);
  EXPECT_THROW(model_->encode({}), Error);
  const Piece empty_piece[] = {{{}, 0.0}};
  EXPECT_THROW(transcribe_pieces(*model_, empty_piece), Error);
}

TEST_P(ParakeetModel, RejectsTooLongAndNonFiniteAudio) {
  const std::vector<float> too_long(static_cast<size_t>(model_->max_samples()) + 1, 0.0f);
  try {
    transcribe(*model_, too_long);
    FAIL() << "no error for a piece past max_samples()";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("split"), std::string::npos) << error.what();
  }
  std::vector<float> broken = signal(8000, 3);
  broken[100] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(transcribe(*model_, broken), Error);
}

TEST_P(ParakeetModel, SilenceDecodesWithoutNaN) {
  const std::vector<float> silence(16000, 0.0f);
  const std::span<const float> batch[] = {silence};
  const auto encoded = model_->encode(batch);
  for (float value : encoded->output(0)) ASSERT_TRUE(std::isfinite(value));
  EXPECT_NO_THROW(model_->decode(*encoded));
}

TEST_P(ParakeetModel, BatchDecodesAsEachUtteranceAlone) {
  const std::vector<float> a = signal(16000, 4), b = signal(5000, 5), c = signal(23456, 6);
  const std::span<const float> batch[] = {a, b, c};
  const auto encoded = model_->encode(batch);
  const std::vector<std::vector<Emission>> together = model_->decode(*encoded);
  ASSERT_EQ(together.size(), 3u);
  size_t emitted = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(encoded->frames(i), model_->encoder_frames(int64_t(batch[i].size())));
    const std::span<const float> alone[] = {batch[i]};
    const auto single = model_->encode(alone);
    const std::vector<float> x = encoded->output(i), y = single->output(0);
    ASSERT_EQ(x.size(), y.size());
    for (size_t k = 0; k < x.size(); ++k) ASSERT_NEAR(x[k], y[k], 1e-4) << k;
    const std::vector<Emission> expected = model_->decode(*single)[0];
    ASSERT_EQ(together[i].size(), expected.size()) << i;
    for (size_t k = 0; k < expected.size(); ++k) {
      EXPECT_EQ(together[i][k].token, expected[k].token);
      EXPECT_EQ(together[i][k].frame, expected[k].frame);
      EXPECT_EQ(together[i][k].duration, expected[k].duration);
      EXPECT_NE(expected[k].token, model_->config().blank_id);
      EXPECT_LT(expected[k].frame, single->frames(0));
    }
    emitted += expected.size();
  }
  EXPECT_GT(emitted, 0u) << "the tiny model emits nothing: the test would prove little";
}

TEST_P(ParakeetModel, RefusesABatchOfAnotherModel) {
  TempDir other_dir;
  const auto other = tiny_model(other_dir, GetParam());
  const std::vector<float> audio = signal(4000, 7);
  const std::span<const float> batch[] = {audio};
  EXPECT_THROW(model_->decode(*other->encode(batch)), Error);
}

INSTANTIATE_TEST_SUITE_P(Heads, ParakeetModel, ::testing::Values(Head::ctc, Head::rnnt, Head::tdt),
                         [](const auto& info) { return std::string(head_name(info.param)); });

// ▁ = U+2581.
Detokenizer test_detokenizer() {
  return Detokenizer({"<unk>", "\u2581the", "\u2581c", "at", "\u2581", "s", ".", "<blank>"},
                     {0, 7});
}

TEST(ParakeetText, MetaspaceDropsTheFirstPiecesMarkAndSkipsSpecials) {
  const Detokenizer v = test_detokenizer();
  EXPECT_EQ(v.decode(std::vector<int32_t>{1, 2, 3, 5, 6}), "the cats.");
  EXPECT_EQ(v.decode(std::vector<int32_t>{0, 7, 1, 0, 2, 3}), "the cat");  // specials skipped
  EXPECT_EQ(v.decode(std::vector<int32_t>{3, 2}), "at c");
  EXPECT_EQ(v.decode(std::vector<int32_t>{4, 2, 4}), " c ");  // a lone mark first: dropped
  EXPECT_EQ(v.decode(std::vector<int32_t>{}), "");
  EXPECT_TRUE(v.is_special(7));
  EXPECT_FALSE(v.is_special(3));
  EXPECT_TRUE(v.starts_word(1));
  EXPECT_FALSE(v.starts_word(3));
  EXPECT_THROW(v.decode(std::vector<int32_t>{8}), Error);
  EXPECT_THROW(v.piece(-1), Error);
}

TEST(ParakeetText, StreamGivesWhatEachTokenAdds) {
  const Detokenizer v = test_detokenizer();
  TextStream stream(v);
  EXPECT_EQ(stream.step(1), "the");
  EXPECT_EQ(stream.step(0), std::nullopt);  // special: no text
  EXPECT_EQ(stream.step(2), " c");
  EXPECT_EQ(stream.step(3), "at");
  EXPECT_EQ(stream.step(6), ".");

  // A lone mark at the very start adds nothing; the next token carries its space.
  TextStream lone(v);
  EXPECT_EQ(lone.step(4), std::nullopt);
  EXPECT_EQ(lone.step(2), " c");
  EXPECT_EQ(lone.step(4), " ");
}

}  // namespace
}  // namespace hark::parakeet
