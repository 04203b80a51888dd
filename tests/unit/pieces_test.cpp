#include "pipeline/pieces.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "base/error.h"

namespace hark {
namespace {

constexpr int kRate = 16000;

size_t samples_at(double seconds) {
  return static_cast<size_t>(std::llround(seconds * kRate));
}

// Speech stand-in: a 220-Hz tone whose loudness wavers like syllables, between silences.
struct Silence {
  double start;
  double end;
};

std::vector<float> tone_with_silences(double seconds, const std::vector<Silence>& silences) {
  std::vector<float> samples(samples_at(seconds));
  for (size_t i = 0; i < samples.size(); ++i) {
    const double time = double(i) / kRate;
    const double syllables = 0.6 + 0.4 * std::sin(2 * std::numbers::pi * 4 * time);
    samples[i] = float(0.3 * syllables * std::sin(2 * std::numbers::pi * 220 * time));
  }
  for (const Silence& silence : silences) {
    const size_t end = std::min(samples.size(), samples_at(silence.end));
    for (size_t i = samples_at(silence.start); i < end; ++i) samples[i] = 0;
  }
  return samples;
}

std::vector<float> white_noise(double seconds, float amplitude, uint32_t seed = 7) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-amplitude, amplitude);
  std::vector<float> samples(samples_at(seconds));
  for (float& sample : samples) sample = uniform(random);
  return samples;
}

PieceLimits limits_of(double max_seconds, double target_seconds = 0) {
  PieceLimits limits;
  limits.max_seconds = max_seconds;
  limits.target_seconds = target_seconds;
  return limits;
}

// The pieces are contiguous, non-empty, within the limit and cover [0, total) exactly once.
void expect_exact_cover(const std::vector<SampleRange>& pieces, size_t total, size_t max_samples) {
  if (total == 0) {
    EXPECT_TRUE(pieces.empty());
    return;
  }
  ASSERT_FALSE(pieces.empty());
  EXPECT_EQ(pieces.front().begin, 0u);
  EXPECT_EQ(pieces.back().end, total);
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_LT(pieces[i].begin, pieces[i].end) << "piece " << i;
    EXPECT_LE(pieces[i].size(), max_samples) << "piece " << i;
    if (i > 0) {
      EXPECT_EQ(pieces[i].begin, pieces[i - 1].end) << "piece " << i;
    }
  }
}

bool inside(size_t cut, const Silence& silence) {
  return cut >= samples_at(silence.start) && cut <= samples_at(silence.end);
}

TEST(Pieces, EmptyAudioHasNoPiecesAndShortAudioIsOne) {
  EXPECT_TRUE(split_at_pauses({}).empty());
  const std::vector<float> short_audio = white_noise(3, 0.1f);
  EXPECT_EQ(split_at_pauses(short_audio, limits_of(10)),
            (std::vector<SampleRange>{{0, short_audio.size()}}));
  const std::vector<float> exactly_max = white_noise(10, 0.1f);
  EXPECT_EQ(split_at_pauses(exactly_max, limits_of(10)).size(), 1u);
}

TEST(Pieces, CutLandsInsideTheSilence) {
  const Silence pause{7.0, 7.8};
  const std::vector<float> audio = tone_with_silences(16, {pause});
  // Target = max: the pause is looked for in the 5 s before the limit.
  const std::vector<SampleRange> pieces = split_at_pauses(audio, limits_of(10, 10));
  expect_exact_cover(pieces, audio.size(), samples_at(10));
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_TRUE(inside(pieces[0].end, pause)) << pieces[0].end;
  // Well inside, not at the edge where the tone stops.
  EXPECT_NEAR(double(pieces[0].end) / kRate, 7.4, 0.15);
}

TEST(Pieces, LongerSilenceWinsOverAShortGap) {
  const Silence gap{5.6, 5.9};
  const Silence pause{8.0, 9.2};
  const std::vector<float> audio = tone_with_silences(15, {gap, pause});
  const std::vector<SampleRange> pieces = split_at_pauses(audio, limits_of(10, 10));
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_TRUE(inside(pieces[0].end, pause)) << pieces[0].end;
}

TEST(Pieces, QuietPauseInNoiseIsFound) {
  // Noise at -20 dBFS with a stretch 30 dB quieter: no digital silence anywhere.
  std::vector<float> audio = white_noise(25, 0.17f);
  const Silence pause{16.5, 17.3};
  for (size_t i = samples_at(pause.start); i < samples_at(pause.end); ++i) audio[i] *= 0.03f;
  const std::vector<SampleRange> pieces = split_at_pauses(audio, limits_of(20, 20));
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_TRUE(inside(pieces[0].end, pause)) << pieces[0].end;
}

TEST(Pieces, ConstantNoiseIsCutAtTheLimit) {
  const std::vector<float> audio = white_noise(25, 0.2f);
  const std::vector<SampleRange> pieces = split_at_pauses(audio, limits_of(10, 10));
  EXPECT_EQ(pieces, (std::vector<SampleRange>{{0, samples_at(10)},
                                              {samples_at(10), samples_at(20)},
                                              {samples_at(20), audio.size()}}));
}

TEST(Pieces, DigitalSilenceIsCutAtTheLimit) {
  const std::vector<float> audio(samples_at(21), 0.0f);
  const std::vector<SampleRange> pieces = split_at_pauses(audio, limits_of(10, 10));
  EXPECT_EQ(pieces, (std::vector<SampleRange>{{0, samples_at(10)},
                                              {samples_at(10), samples_at(20)},
                                              {samples_at(20), audio.size()}}));
}

TEST(Pieces, WithoutATargetPiecesAreBalanced) {
  // 25 s under a 10-s limit: three pieces of about 8.3 s, not 10 + 10 + 5.
  const std::vector<float> noise = white_noise(25, 0.2f);
  std::vector<SampleRange> pieces = split_at_pauses(noise, limits_of(10));
  expect_exact_cover(pieces, noise.size(), samples_at(10));
  ASSERT_EQ(pieces.size(), 3u);
  for (const SampleRange& piece : pieces) EXPECT_NEAR(double(piece.size()), noise.size() / 3.0, 1);

  // With pauses near the balanced cuts, the cuts move into them.
  const Silence first{7.9, 8.6};
  const Silence second{16.5, 17.2};
  const std::vector<float> speech = tone_with_silences(25, {first, second});
  pieces = split_at_pauses(speech, limits_of(10));
  expect_exact_cover(pieces, speech.size(), samples_at(10));
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_TRUE(inside(pieces[0].end, first)) << pieces[0].end;
  EXPECT_TRUE(inside(pieces[1].end, second)) << pieces[1].end;
}

TEST(Pieces, ATargetShorterThanTheLimitMakesShorterPieces) {
  const std::vector<float> audio = white_noise(62, 0.2f);
  PieceLimits limits = limits_of(60, 20);
  const std::vector<SampleRange> pieces = split_at_pauses(audio, limits);
  expect_exact_cover(pieces, audio.size(), samples_at(60));
  ASSERT_EQ(pieces.size(), 4u);  // 20 + 20 + 20 + 2
  EXPECT_EQ(pieces[0].size(), samples_at(20));
  EXPECT_EQ(pieces[3].size(), samples_at(2));
}

TEST(Pieces, TinyRemainderJoinsThePieceBeforeWhenThatFits) {
  const std::vector<float> audio = white_noise(10.5, 0.2f);
  // Cut at the 10-s target leaves 0.5 s, and 10.5 s fits the limit of 20: one piece (the
  // target counts, not the limit, for audio shorter than the limit).
  EXPECT_EQ(split_at_pauses(audio, limits_of(20, 10)),
            (std::vector<SampleRange>{{0, audio.size()}}));
  // Under a limit of 10 s the remainder stays on its own.
  EXPECT_EQ(split_at_pauses(audio, limits_of(10, 10)),
            (std::vector<SampleRange>{{0, samples_at(10)}, {samples_at(10), audio.size()}}));
  // A remainder of at least min_seconds is kept even when it would fit.
  PieceLimits small_min = limits_of(20, 10);
  small_min.min_seconds = 0.25;
  EXPECT_EQ(split_at_pauses(audio, small_min).size(), 2u);
}

TEST(Pieces, RandomAudioIsCoveredExactlyAndDeterministically) {
  std::mt19937 random(99);
  for (int trial = 0; trial < 40; ++trial) {
    const double seconds = std::uniform_real_distribution<double>(0, 90)(random);
    std::vector<Silence> silences;
    for (double at = 0.5; at < seconds - 1;
         at += std::uniform_real_distribution<double>(1, 8)(random)) {
      silences.push_back({at, at + std::uniform_real_distribution<double>(0.05, 1.5)(random)});
    }
    std::vector<float> audio = tone_with_silences(seconds, silences);
    audio.resize(audio.size() + std::uniform_int_distribution<size_t>(0, 479)(random));
    PieceLimits limits = limits_of(std::uniform_real_distribution<double>(0.5, 30)(random));
    if (trial % 2) limits.target_seconds = std::uniform_real_distribution<double>(0.2, 40)(random);
    limits.search_seconds = std::uniform_real_distribution<double>(0, 10)(random);
    const std::vector<SampleRange> pieces = split_at_pauses(audio, limits);
    expect_exact_cover(pieces, audio.size(), static_cast<size_t>(limits.max_seconds * kRate));
    EXPECT_EQ(split_at_pauses(audio, limits), pieces);
  }
}

TEST(Pieces, OtherSampleRatesScaleTheLimits) {
  const size_t rate = 8000;
  std::vector<float> audio(25 * rate, 0.0f);
  const std::vector<SampleRange> pieces = split_at_pauses(audio, limits_of(10, 10), int(rate));
  EXPECT_EQ(pieces, (std::vector<SampleRange>{
                        {0, 10 * rate}, {10 * rate, 20 * rate}, {20 * rate, audio.size()}}));
}

TEST(Pieces, BadLimitsAreRejected) {
  const std::vector<float> audio(100, 0.0f);
  for (double bad :
       {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(split_at_pauses(audio, limits_of(bad)), Error) << bad;
    EXPECT_THROW(split_at_pauses(audio, limits_of(10, bad)), Error) << bad;
  }
  EXPECT_THROW(split_at_pauses(audio, limits_of(0)), Error);
  EXPECT_THROW(split_at_pauses(audio, limits_of(1e-5)), Error);  // less than a sample
  EXPECT_THROW(split_at_pauses(audio, {}, 0), Error);
}

}  // namespace
}  // namespace hark
