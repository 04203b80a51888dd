// Parakeet against Hugging Face transformers (tests/data/parakeet, made by
// tools/oracle/parakeet.py): each tiny random-weight checkpoint (CTC, RNN-T, TDT) is converted to
// GGUF and run on three recordings; features, encoder output and head input are compared, and the
// greedy tokens, their frames and durations, the text and the token timestamps must be those of
// transformers exactly, alone and in one batch.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/parakeet/model.h"
#include "models/parakeet/transcribe.h"
#include "support/compare.h"
#include "support/parakeet_reference.h"

namespace hark::parakeet {
namespace {

using hark::testing::relative_error;
using json = nlohmann::json;

constexpr const auto& kClips = testing::kParakeetClips;
using Reference = testing::ParakeetReference;
using testing::expect_same_emissions;
using testing::expected_emissions;

std::vector<std::string> split_at_spaces(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text) {
    if (c != ' ') {
      word.push_back(c);
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

class ParakeetParity : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    reference_ = testing::load_parakeet_reference(GetParam());
    model_ = testing::convert_and_load_parakeet(reference_, DType::F32, temp_);
    for (const char* clip : kClips) clips_.push_back(testing::load_parakeet_clip(clip));
  }

  testing::TempDir temp_;
  Reference reference_;
  std::unique_ptr<Model> model_;
  std::vector<std::vector<float>> clips_;
};

TEST_P(ParakeetParity, FeaturesEncoderAndHeadMatchTransformers) {
  for (size_t c = 0; c < clips_.size(); ++c) {
    const std::string clip = kClips[c];
    SCOPED_TRACE(clip);
    const std::vector<float> features = model_->features(clips_[c]);
    const std::vector<float> expected_features = reference_.values("features." + clip);
    ASSERT_EQ(features.size(), expected_features.size());
    EXPECT_LE(relative_error(features, expected_features), 1e-4);
  }
  testing::expect_encoder_and_head_match(*model_, clips_, reference_);
}

TEST_P(ParakeetParity, GreedyDecodingAndTextMatchTransformersExactly) {
  testing::expect_greedy_decoding_matches(*model_, clips_, reference_);
  // The oracle's own implementation of docs/parakeet.md gave the same text.
  for (size_t c = 0; c < clips_.size(); ++c) {
    const json& text = reference_.info.at("decode").at(kClips[c]).at("text");
    EXPECT_EQ(text.at("spec"), text.at("transformers")) << kClips[c];
  }
}

TEST_P(ParakeetParity, BatchOfThreeDecodesAsEachAlone) {
  testing::expect_batch_decodes_as_each_alone(*model_, clips_, reference_);
}

TEST_P(ParakeetParity, TimestampsMatchTheProcessor) {
  const Config& config = model_->config();
  EXPECT_DOUBLE_EQ(model_->frame_seconds(), 0.08);
  std::vector<Piece> pieces;
  const double offset = 12.5;
  for (const std::vector<float>& clip : clips_) pieces.push_back({clip, 0.0});
  pieces.push_back({clips_[0], offset});  // the same audio later in a recording
  const std::vector<Segment> segments = transcribe_pieces(*model_, pieces);
  ASSERT_EQ(segments.size(), pieces.size());

  for (size_t c = 0; c < clips_.size(); ++c) {
    const std::string clip = kClips[c];
    SCOPED_TRACE(clip);
    const Segment& segment = segments[c];
    const json& decode = reference_.info.at("decode").at(clip);
    const std::string expected_text = decode.at("text").at("transformers").get<std::string>();
    ASSERT_FALSE(segment.text.empty());
    EXPECT_EQ(segment.text.front(), ' ');  // as Whisper's segments
    EXPECT_EQ(segment.text.substr(1), expected_text);
    EXPECT_DOUBLE_EQ(segment.start, 0.0);
    const double seconds = double(clips_[c].size()) / 16000;
    EXPECT_DOUBLE_EQ(segment.end, seconds);
    ASSERT_EQ(segment.token_times.size(), segment.tokens.size());
    EXPECT_EQ(segment.tokens, decode.at("tokens").get<std::vector<int32_t>>());

    // The tokens with text, as ParakeetProcessor.decode(..., durations=...) times them.
    std::vector<TimedText> timed;
    std::string joined;
    for (const TimedText& token : segment.token_times) {
      joined += token.text;
      if (!token.text.empty()) timed.push_back(token);
    }
    EXPECT_EQ(joined, decode.at("text").at("transformers").get<std::string>());
    if (config.head == Head::ctc) {
      // transformers gives no CTC timestamps: one frame per token, from its first frame.
      const std::vector<int32_t> frames = reference_.ints("frames." + clip);
      ASSERT_EQ(segment.token_times.size(), frames.size());
      for (size_t i = 0; i < frames.size(); ++i) {
        EXPECT_NEAR(segment.token_times[i].start, std::min(frames[i] * 0.08, seconds), 1e-9);
        EXPECT_NEAR(segment.token_times[i].end, std::min((frames[i] + 1) * 0.08, seconds), 1e-9);
      }
    } else {
      const json& expected = decode.at("text").at("timestamps").at(0);
      ASSERT_EQ(timed.size(), expected.size());
      for (size_t i = 0; i < timed.size(); ++i) {
        EXPECT_EQ(timed[i].text, expected[i].at("token").get<std::string>()) << i;
        // hark clamps times to the clip's end; transformers' run past it by up to a few frames.
        EXPECT_NEAR(timed[i].start, std::min(expected[i].at("start").get<double>(), seconds), 1e-9)
            << i;
        EXPECT_NEAR(timed[i].end, std::min(expected[i].at("end").get<double>(), seconds), 1e-9)
            << i;
      }
    }

    // Words: the text split at its spaces, each spanning its tokens.
    std::vector<std::string> words;
    for (const TimedText& word : segment.words) {
      EXPECT_LE(word.start, word.end);
      words.push_back(word.text);
    }
    EXPECT_EQ(words, split_at_spaces(expected_text));
    ASSERT_FALSE(segment.words.empty());
    EXPECT_DOUBLE_EQ(segment.words.front().start, timed.front().start);
    // A trailing lone word mark (CTC's librivox text ends with one) belongs to no word.
    auto last = timed.rbegin();
    while (last->text.find_first_not_of(' ') == std::string::npos) ++last;
    EXPECT_DOUBLE_EQ(segment.words.back().end, last->end);
  }

  // The later copy: the same text, every time shifted by the offset.
  const Segment& shifted = segments.back();
  EXPECT_EQ(shifted.text, segments[0].text);
  EXPECT_DOUBLE_EQ(shifted.start, offset);
  ASSERT_EQ(shifted.token_times.size(), segments[0].token_times.size());
  for (size_t i = 0; i < shifted.token_times.size(); ++i) {
    EXPECT_NEAR(shifted.token_times[i].start, segments[0].token_times[i].start + offset, 1e-9);
    EXPECT_NEAR(shifted.token_times[i].end, segments[0].token_times[i].end + offset, 1e-9);
  }
  ASSERT_EQ(shifted.words.size(), segments[0].words.size());
  EXPECT_NEAR(shifted.words.back().end, segments[0].words.back().end + offset, 1e-9);

  const Transcript transcript = transcribe(*model_, clips_[0]);
  ASSERT_EQ(transcript.segments.size(), 1u);
  EXPECT_EQ(transcript.text(), segments[0].text);
  EXPECT_TRUE(transcript.language.empty());
  EXPECT_DOUBLE_EQ(transcript.duration, double(clips_[0].size()) / 16000);
}

// F16 weights: the encoder stays within 1e-2 of transformers' F32 output, and on these models the
// greedy tokens come out the same.
TEST_P(ParakeetParity, F16ConversionKeepsEncoderCloseAndTokensEqual) {
  testing::TempDir temp;
  const auto half = testing::convert_and_load_parakeet(reference_, DType::F16, temp);
  std::vector<std::span<const float>> batch(clips_.begin(), clips_.end());
  const auto encoded = half->encode(batch);
  const std::vector<std::vector<Emission>> decoded = half->decode(*encoded);
  for (size_t c = 0; c < clips_.size(); ++c) {
    const std::string clip = kClips[c];
    SCOPED_TRACE(clip);
    EXPECT_LE(relative_error(encoded->output(int(c)), reference_.values("encoder." + clip)), 1e-2);
    expect_same_emissions(decoded[c], expected_emissions(reference_, clip, half->config().head));
  }
}

INSTANTIATE_TEST_SUITE_P(TinyRandom, ParakeetParity,
                         ::testing::Values("tiny-random-ctc", "tiny-random-rnnt",
                                           "tiny-random-tdt"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace hark::parakeet
