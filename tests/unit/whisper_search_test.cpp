// Whisper decoding (logit rules, search, long-form transcription) against a scripted model: the
// decoder's logits are a function of the tokens a sequence holds, so every rule and every search
// decision can be set up exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/whisper/logit_rules.h"
#include "models/whisper/search.h"
#include "models/whisper/tokens.h"
#include "models/whisper/transcribe.h"
#include "text/bpe.h"

namespace hark::whisper {
namespace {

constexpr float kBanned = -std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// The scripted model.

// What the decoder sees: the tokens of one sequence (prompt included) and the window it decodes.
struct Context {
  const std::vector<int32_t>& tokens;
  int window;                     // 0 for the first window encoded, 1 for the next, ...
  const std::vector<float>& mel;  // that window's log-mel
};
using Script = std::function<std::vector<float>(const Context&)>;

class FakeWindow : public EncodedWindow {
 public:
  FakeWindow(int index, std::vector<float> mel) : index(index), mel(std::move(mel)) {}
  std::vector<float> frames() const override { return {}; }
  int index;
  std::vector<float> mel;
};

class FakeSession : public DecoderSession {
 public:
  FakeSession(const Script& script, std::shared_ptr<const FakeWindow> window, int n, int context,
              int vocab)
      : script_(script),
        window_(std::move(window)),
        sequences_(n),
        context_(context),
        vocab_(vocab) {}

  int n_sequences() const override { return static_cast<int>(sequences_.size()); }
  int length() const override { return static_cast<int>(sequences_[0].size()); }

  std::vector<float> advance(const std::vector<std::vector<int32_t>>& tokens,
                             const std::vector<int>& positions) override {
    EXPECT_EQ(tokens.size(), sequences_.size());
    std::vector<float> logits;
    for (size_t s = 0; s < sequences_.size(); ++s) {
      const size_t start = sequences_[s].size();
      sequences_[s].insert(sequences_[s].end(), tokens[s].begin(), tokens[s].end());
      if (static_cast<int>(sequences_[s].size()) > context_) {
        ADD_FAILURE() << "decoder context of " << context_ << " exceeded";
      }
      std::vector<int> at = positions;
      if (at.empty()) at = {static_cast<int>(tokens[s].size()) - 1};
      for (int position : at) {
        const std::vector<int32_t> prefix(sequences_[s].begin(),
                                          sequences_[s].begin() + start + position + 1);
        const std::vector<float> row = script_(Context{prefix, window_->index, window_->mel});
        EXPECT_EQ(static_cast<int>(row.size()), vocab_);
        logits.insert(logits.end(), row.begin(), row.end());
      }
    }
    ++steps;
    return logits;
  }

  void reorder(std::span<const int> source) override {
    std::vector<std::vector<int32_t>> moved;
    for (int s : source) moved.push_back(sequences_.at(s));
    sequences_ = std::move(moved);
  }

  int steps = 0;

 private:
  const Script& script_;
  std::shared_ptr<const FakeWindow> window_;
  std::vector<std::vector<int32_t>> sequences_;
  int context_, vocab_;
};

class FakeModel : public Model {
 public:
  FakeModel(Config config, Vocabulary vocabulary, Script script)
      : config_(config), vocabulary_(std::move(vocabulary)), script_(std::move(script)) {}

  const Config& config() const override { return config_; }
  const Vocabulary& vocabulary() const override { return vocabulary_; }
  std::shared_ptr<const EncodedWindow> encode(std::span<const float> mel) const override {
    EXPECT_EQ(mel.size(), static_cast<size_t>(config_.n_mels) * config_.window_frames());
    windows.emplace_back(mel.begin(), mel.end());
    return std::make_shared<FakeWindow>(static_cast<int>(windows.size()) - 1, windows.back());
  }
  std::unique_ptr<DecoderSession> start(std::shared_ptr<const EncodedWindow> window,
                                        int n_sequences) const override {
    ++sessions;
    return std::make_unique<FakeSession>(
        script_, std::static_pointer_cast<const FakeWindow>(window), n_sequences,
        config_.max_target_positions, config_.vocab_size);
  }

  mutable std::vector<std::vector<float>> windows;  // every window encoded, in order
  mutable int sessions = 0;

 private:
  Config config_;
  Vocabulary vocabulary_;
  Script script_;
};

// A small vocabulary: 30 text tokens, the specials, 19 timestamps (<|0.00|> ... <|0.36|>).
constexpr int kVocab = 60;
constexpr int32_t kEot = 30, kSot = 31, kEn = 32, kDe = 33, kFr = 34, kTranslate = 35,
                  kTranscribe = 36, kSotLm = 37, kSotPrev = 38, kNoSpeech = 39, kNoTimestamps = 40,
                  kT0 = 41;
int32_t ts(int index) {
  return kT0 + index;
}

Vocabulary small_vocabulary() {
  Vocabulary v;
  v.eot = kEot;
  v.sot = kSot;
  v.first_language = kEn;
  v.languages = {"en", "de", "fr"};
  v.translate = kTranslate;
  v.transcribe = kTranscribe;
  v.sot_lm = kSotLm;
  v.sot_prev = kSotPrev;
  v.no_speech = kNoSpeech;
  v.no_timestamps = kNoTimestamps;
  v.timestamp_begin = kT0;
  v.suppress_tokens = {5, kSot, kSotLm, kSotPrev, kNoSpeech, 1000};
  v.begin_suppress_tokens = {1, kEot};
  v.max_initial_timestamp_index = 3;
  v.multilingual = true;
  return v;
}

Config small_config() {
  Config c;
  c.n_mels = 2;
  c.vocab_size = kVocab;
  c.max_source_positions = 10;  // windows of 20 mel frames
  c.max_target_positions = 40;
  return c;
}

// Logits: `base` everywhere, with the given tokens set to their values.
std::vector<float> logits(std::initializer_list<std::pair<int32_t, float>> values,
                          int vocab = kVocab, float base = 0.0f) {
  std::vector<float> row(vocab, base);
  for (auto [token, value] : values) row[token] = value;
  return row;
}

// A script that plays `steps[i]` after the i-th sampled token of a prompt of `prompt_length`.
Script after_prompt(size_t prompt_length, std::vector<std::vector<float>> steps) {
  return [prompt_length, steps = std::move(steps)](const Context& c) {
    if (c.tokens.size() < prompt_length) return std::vector<float>(kVocab, 0.0f);
    const size_t sampled = c.tokens.size() - prompt_length;
    return steps.at(std::min(sampled, steps.size() - 1));
  };
}

bool banned(const std::vector<float>& scores, int32_t token) {
  return scores[token] == kBanned;
}

// ---------------------------------------------------------------------------------------------
// Logit rules.

TEST(WhisperLogitRules, SuppressesListedTokensEverywhereAndIgnoresUnknownIds) {
  const LogitRules rules(small_vocabulary(), kVocab, /*timestamps=*/false);
  for (std::vector<int32_t> sampled : {std::vector<int32_t>{}, std::vector<int32_t>{7, 8}}) {
    std::vector<float> scores(kVocab, 1.0f);
    rules.apply(scores, sampled);
    for (int32_t id : {5, kSot, kSotLm, kSotPrev, kNoSpeech}) EXPECT_TRUE(banned(scores, id)) << id;
    EXPECT_FALSE(banned(scores, 6));
    EXPECT_FALSE(banned(scores, kNoTimestamps));  // only the timestamp rules ban it
    EXPECT_FALSE(banned(scores, ts(10)));         // timestamps off: no timestamp rule at all
  }
}

TEST(WhisperLogitRules, BeginSuppressesBlankAndEndOfTextAtTheFirstPositionOnly) {
  const LogitRules rules(small_vocabulary(), kVocab, /*timestamps=*/false);
  std::vector<float> first(kVocab, 1.0f);
  rules.apply(first, {});
  EXPECT_TRUE(banned(first, 1));
  EXPECT_TRUE(banned(first, kEot));
  std::vector<float> later(kVocab, 1.0f);
  rules.apply(later, std::vector<int32_t>{7});
  EXPECT_FALSE(banned(later, 1));
  EXPECT_FALSE(banned(later, kEot));
}

TEST(WhisperLogitRules, FirstTokenIsATimestampNoLaterThanTheInitialLimit) {
  Vocabulary vocabulary = small_vocabulary();
  const LogitRules rules(vocabulary, kVocab, /*timestamps=*/true);
  std::vector<float> scores(kVocab, 1.0f);
  rules.apply(scores, {});
  for (int32_t id = 0; id < kT0; ++id) EXPECT_TRUE(banned(scores, id)) << id;
  for (int i = 0; i <= 3; ++i) EXPECT_FALSE(banned(scores, ts(i))) << i;
  for (int i = 4; ts(i) < kVocab; ++i) EXPECT_TRUE(banned(scores, ts(i))) << i;

  vocabulary.max_initial_timestamp_index = -1;  // transformers' None: no limit
  const LogitRules unlimited(vocabulary, kVocab, /*timestamps=*/true);
  std::vector<float> free(kVocab, 1.0f);
  unlimited.apply(free, {});
  EXPECT_FALSE(banned(free, ts(18)));
}

TEST(WhisperLogitRules, NoTimestampsIsNeverSampledWithTimestamps) {
  const LogitRules rules(small_vocabulary(), kVocab, /*timestamps=*/true);
  std::vector<float> scores(kVocab, 0.0f);
  scores[kNoTimestamps] = 100;
  rules.apply(scores, std::vector<int32_t>{ts(0), 7});
  EXPECT_TRUE(banned(scores, kNoTimestamps));
}

// Scores under which timestamps are unlikely, so that the probability-mass rule stays out of the
// way of the rule under test.
std::vector<float> text_likely() {
  std::vector<float> scores(kVocab, 0.0f);
  std::fill(scores.begin() + kT0, scores.end(), -10.0f);
  return scores;
}

TEST(WhisperLogitRules, AfterTextThenTimestampOnlyATimestampOrEndOfTextFollows) {
  const LogitRules rules(small_vocabulary(), kVocab, /*timestamps=*/true);
  std::vector<float> scores = text_likely();
  rules.apply(scores, std::vector<int32_t>{ts(1), 7, 8, ts(4)});
  for (int32_t id = 0; id < kEot; ++id) EXPECT_TRUE(banned(scores, id)) << id;
  EXPECT_FALSE(banned(scores, kEot));
  // The pair may repeat the closing time (the next segment starts where this one ended) ...
  EXPECT_FALSE(banned(scores, ts(4)));
  EXPECT_FALSE(banned(scores, ts(9)));
  // ... but never go back.
  EXPECT_TRUE(banned(scores, ts(3)));
  EXPECT_TRUE(banned(scores, ts(1)));
}

TEST(WhisperLogitRules, AfterAPairOfTimestampsTextFollows) {
  const LogitRules rules(small_vocabulary(), kVocab, /*timestamps=*/true);
  std::vector<float> scores = text_likely();
  rules.apply(scores, std::vector<int32_t>{ts(1), 7, ts(4), ts(4)});
  for (int32_t id = kT0; id < kVocab; ++id) EXPECT_TRUE(banned(scores, id)) << id;
  EXPECT_FALSE(banned(scores, 7));
  EXPECT_FALSE(banned(scores, kEot));
}

TEST(WhisperLogitRules, TimestampsIncreaseStrictlyAfterTheSegmentsStart) {
  const LogitRules rules(small_vocabulary(), kVocab, /*timestamps=*/true);
  // After <|0.10|> and text, the segment's end must be later than its start.
  std::vector<float> open = text_likely();
  rules.apply(open, std::vector<int32_t>{ts(2), ts(2), ts(5), 7});
  for (int i = 0; i <= 5; ++i) EXPECT_TRUE(banned(open, ts(i))) << i;
  EXPECT_FALSE(banned(open, ts(6)));
  EXPECT_FALSE(banned(open, 7));
}

TEST(WhisperLogitRules, ForcesATimestampWhenTimestampsTogetherOutweighEveryOtherToken) {
  const LogitRules rules(small_vocabulary(), kVocab, /*timestamps=*/true);
  const std::vector<int32_t> sampled = {ts(0), 7};  // text may continue, or a timestamp close it
  auto scores_with = [](int n_timestamps, float text, float shift) {
    std::vector<float> scores(kVocab, -50.0f + shift);
    scores[9] = text + shift;
    for (int i = 1; i <= n_timestamps; ++i) scores[ts(i)] = 0.0f + shift;
    return scores;
  };
  // 10 timestamps at 0: log-sum-exp = log 10 = 2.30 > 2.0, the best text token.
  std::vector<float> forced = scores_with(10, 2.0f, 0.0f);
  rules.apply(forced, sampled);
  EXPECT_TRUE(banned(forced, 9));
  EXPECT_FALSE(banned(forced, ts(3)));
  // 5 timestamps: log 5 = 1.61 < 2.0, text stays possible.
  std::vector<float> open = scores_with(5, 2.0f, 0.0f);
  rules.apply(open, sampled);
  EXPECT_FALSE(banned(open, 9));
  // The rule reads log-probabilities or logits alike (transformers' beam search passes the former).
  std::vector<float> shifted = scores_with(10, 2.0f, -7.5f);
  rules.apply(shifted, sampled);
  EXPECT_TRUE(banned(shifted, 9));
}

TEST(WhisperLogitRules, RejectsScoresOfTheWrongSizeAndVocabulariesWithoutTimestamps) {
  const LogitRules rules(small_vocabulary(), kVocab, /*timestamps=*/true);
  std::vector<float> short_scores(kVocab - 1, 0.0f);
  EXPECT_THROW(rules.apply(short_scores, {}), Error);
  EXPECT_THROW(LogitRules(small_vocabulary(), kT0, /*timestamps=*/true), Error);
}

// ---------------------------------------------------------------------------------------------
// Prompt and language detection.

TEST(WhisperPrompt, PutsPreviousTextLanguageTaskAndNoTimestampsInOpenaisOrder) {
  const Vocabulary v = small_vocabulary();
  const Prompt plain = make_prompt(v, 40, {}, kDe, kTranslate, /*timestamps=*/true);
  EXPECT_EQ(plain.tokens, (std::vector<int32_t>{kSot, kDe, kTranslate}));
  EXPECT_EQ(plain.sot_index, 0);

  std::vector<int32_t> previous;
  for (int i = 0; i < 25; ++i) previous.push_back(i);
  const Prompt prompted = make_prompt(v, 40, previous, kEn, kTranscribe, /*timestamps=*/false);
  // The last 40 / 2 - 1 = 19 previous tokens follow <|startofprev|>.
  std::vector<int32_t> expected = {kSotPrev};
  for (int i = 6; i < 25; ++i) expected.push_back(i);
  const int sot_index = static_cast<int>(expected.size());
  for (int32_t id : {kSot, kEn, kTranscribe, kNoTimestamps}) expected.push_back(id);
  EXPECT_EQ(prompted.tokens, expected);
  EXPECT_EQ(prompted.sot_index, sot_index);

  // English-only models have neither language nor task tokens.
  EXPECT_EQ(make_prompt(v, 40, {}, -1, kTranscribe, false).tokens,
            (std::vector<int32_t>{kSot, kNoTimestamps}));
}

TEST(WhisperLanguage, DetectsTheLikeliestLanguageTokenIgnoringOthers) {
  // After <|startoftranscript|>, a text token is likeliest; among languages <|de|>.
  FakeModel model(small_config(), small_vocabulary(), [](const Context& c) {
    EXPECT_EQ(c.tokens, std::vector<int32_t>{kSot});
    return logits({{7, 9.0f}, {kEn, 1.0f}, {kDe, 2.0f}, {kFr, 1.0f}});
  });
  const auto window = model.encode(std::vector<float>(2 * 20, 0.0f));
  const LanguageDetection detection = detect_language(model, window);
  EXPECT_EQ(detection.code, "de");
  EXPECT_EQ(detection.token, kDe);
  ASSERT_EQ(detection.probabilities.size(), 3u);
  const double sum = std::exp(1.0) * 2 + std::exp(2.0);
  EXPECT_NEAR(detection.probabilities[1], std::exp(2.0) / sum, 1e-6);
  EXPECT_NEAR(detection.probabilities[0] + detection.probabilities[1] + detection.probabilities[2],
              1.0, 1e-6);

  Vocabulary english = small_vocabulary();
  english.multilingual = false;
  FakeModel english_model(small_config(), english, [](const Context&) { return logits({}); });
  EXPECT_THROW(detect_language(english_model, window), Error);
}

// ---------------------------------------------------------------------------------------------
// Greedy decoding.

// Decodes one window of a FakeModel from a plain multilingual prompt.
WindowResult decode(const FakeModel& model, const Prompt& prompt, const SearchOptions& options,
                    bool timestamps = false) {
  const LogitRules rules(model.vocabulary(), model.config().vocab_size, timestamps);
  const auto window = model.encode(std::vector<float>(2 * 20, 0.0f));
  return decode_window(model, window, prompt, rules, options);
}

const Prompt kTextPrompt{{kSot, kEn, kTranscribe, kNoTimestamps}, 0};

TEST(WhisperGreedy, StopsAtEndOfTextAndAveragesLogProbabilitiesLikeOpenai) {
  std::vector<std::vector<float>> steps = {logits({{7, 3.0f}, {8, 1.0f}}), logits({{8, 2.0f}}),
                                           logits({{kEot, 4.0f}})};
  FakeModel model(small_config(), small_vocabulary(), after_prompt(4, steps));
  const WindowResult result = decode(model, kTextPrompt, SearchOptions{});
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{7, 8}));
  EXPECT_TRUE(result.ended);

  // Each step's log-probability after the rules (which ban 6 tokens, one of them <|endoftext|>,
  // at the first step: they do not count in the normaliser).
  auto log_prob = [](const std::vector<float>& row, int32_t token, std::vector<int32_t> banned) {
    double sum = 0;
    for (int32_t id = 0; id < kVocab; ++id) {
      if (std::find(banned.begin(), banned.end(), id) == banned.end()) sum += std::exp(row[id]);
    }
    return row[token] - std::log(sum);
  };
  const std::vector<int32_t> always = {5, kSot, kSotLm, kSotPrev, kNoSpeech};
  std::vector<int32_t> first = always;
  first.insert(first.end(), {1, kEot});
  const double expected = log_prob(steps[0], 7, first) + log_prob(steps[1], 8, always) +
                          log_prob(steps[2], kEot, always);
  EXPECT_NEAR(result.sum_logprob, expected, 1e-5);
  EXPECT_NEAR(result.avg_logprob, expected / 3, 1e-5);  // openai: sum / (text tokens + 1)
}

TEST(WhisperGreedy, StopsAfterMaxTokensAndWithinTheDecoderContext) {
  FakeModel model(small_config(), small_vocabulary(), [](const Context&) {
    return logits({{7, 5.0f}});  // never ends
  });
  SearchOptions options;
  options.max_tokens = 6;
  WindowResult result = decode(model, kTextPrompt, options);
  EXPECT_EQ(result.tokens.size(), 6u);
  EXPECT_FALSE(result.ended);
  EXPECT_NEAR(result.avg_logprob, result.sum_logprob / 7, 1e-6);

  // 40 positions: a 4-token prompt leaves room to feed 36 sampled tokens; the 37th is not fed.
  options.max_tokens = 1000;
  result = decode(model, kTextPrompt, options);
  EXPECT_EQ(result.tokens.size(), 37u);
}

TEST(WhisperGreedy, AppliesTheRulesBeforeTakingTheArgmax) {
  // The model prefers a suppressed token, then <|endoftext|> at the first position.
  std::vector<std::vector<float>> steps = {logits({{5, 9.0f}, {kEot, 8.0f}, {9, 1.0f}}),
                                           logits({{kEot, 1.0f}})};
  FakeModel model(small_config(), small_vocabulary(), after_prompt(4, steps));
  EXPECT_EQ(decode(model, kTextPrompt, SearchOptions{}).tokens, std::vector<int32_t>{9});
}

TEST(WhisperGreedy, TakesNoSpeechProbabilityAtStartOfTranscript) {
  // The prompt starts with previous text: <|startoftranscript|> is at position 3 of 7.
  const Prompt prompt{{kSotPrev, 11, 12, kSot, kEn, kTranscribe, kNoTimestamps}, 3};
  FakeModel model(small_config(), small_vocabulary(), [](const Context& c) {
    if (c.tokens.back() == kSot) return logits({{kNoSpeech, 3.0f}});
    if (c.tokens.size() == 7) return logits({{kNoSpeech, -5.0f}, {7, 2.0f}});
    return logits({{kEot, 5.0f}});
  });
  const WindowResult result = decode(model, prompt, SearchOptions{});
  const double expected = std::exp(3.0) / (std::exp(3.0) + kVocab - 1);
  EXPECT_NEAR(result.no_speech_prob, expected, 1e-6);
  EXPECT_EQ(result.tokens, std::vector<int32_t>{7});
}

TEST(WhisperGreedy, DecodesTimestampedSegments) {
  // The model would talk right away; the rules make it open with a timestamp, close the segment
  // with one, then end.
  FakeModel model(small_config(), small_vocabulary(), [](const Context& c) {
    if (c.tokens.size() < 3) return logits({});
    const size_t sampled = c.tokens.size() - 3;
    if (sampled == 0) return logits({{7, 5.0f}, {ts(2), 1.0f}, {ts(8), 4.0f}});
    if (sampled < 3) return logits({{static_cast<int32_t>(7 + sampled), 5.0f}});
    if (sampled == 3) return logits({{ts(6), 6.0f}, {ts(1), 9.0f}});  // <|0.02|> is too early
    return logits({{kEot, 5.0f}, {ts(7), 4.0f}});
  });
  const Prompt prompt{{kSot, kEn, kTranscribe}, 0};
  const WindowResult result = decode(model, prompt, SearchOptions{}, /*timestamps=*/true);
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{ts(2), 8, 9, ts(6)}));
}

// ---------------------------------------------------------------------------------------------
// Beam search and sampling.

TEST(WhisperBeamSearch, FindsTheSequenceGreedyDecodingMisses) {
  // Greedy takes 7 (p 0.55), after which nothing is likely; 8 (p 0.45) leads to a sure end.
  FakeModel model(small_config(), small_vocabulary(), [](const Context& c) {
    if (c.tokens.size() < 4) return logits({});  // <|startoftranscript|>: no_speech_prob only
    const size_t sampled = c.tokens.size() - 4;
    if (sampled == 0) return logits({{7, 10.2f}, {8, 10.0f}}, kVocab, -20.0f);
    if (c.tokens[4] == 7) return logits({}, kVocab, 0.0f);  // uniform: log(1/54) per token
    return logits({{kEot, 10.0f}}, kVocab, -20.0f);         // after 8: almost surely the end
  });
  EXPECT_EQ(decode(model, kTextPrompt, SearchOptions{}).tokens.front(), 7);

  SearchOptions beam;
  beam.beam_size = 2;
  const WindowResult result = decode(model, kTextPrompt, beam);
  EXPECT_EQ(result.tokens, std::vector<int32_t>{8});
  EXPECT_TRUE(result.ended);
  EXPECT_NEAR(result.sum_logprob, std::log(1 / (1 + std::exp(0.2))), 1e-3);
}

TEST(WhisperBeamSearch, FollowsEachBeamsOwnHistoryAcrossReorders) {
  // Each continuation depends on the whole history, so a beam fed another beam's K/V cache (a
  // wrong reorder) would see different logits. The best path is 9 9 9 <|endoftext|>.
  FakeModel model(small_config(), small_vocabulary(), [](const Context& c) {
    if (c.tokens.size() < 4) return logits({});
    const std::vector<int32_t> sampled(c.tokens.begin() + 4, c.tokens.end());
    const bool all_nines =
        std::all_of(sampled.begin(), sampled.end(), [](int32_t t) { return t == 9; });
    if (sampled.empty()) return logits({{7, 3.0f}, {8, 2.9f}, {9, 2.8f}}, kVocab, -10.0f);
    if (all_nines && sampled.size() == 3) return logits({{kEot, 10.0f}}, kVocab, -10.0f);
    if (all_nines) return logits({{9, 10.0f}}, kVocab, -10.0f);
    // Off the best path: spread out, so no single continuation is likely.
    return logits({{static_cast<int32_t>(10 + sampled.size()), 1.0f}}, kVocab, 0.0f);
  });
  SearchOptions beam;
  beam.beam_size = 3;
  const WindowResult result = decode(model, kTextPrompt, beam);
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{9, 9, 9}));
  EXPECT_TRUE(result.ended);
}

TEST(WhisperBeamSearch, StopsAtMaxTokensWithTheBestRunningBeam) {
  FakeModel model(small_config(), small_vocabulary(), [](const Context& c) {
    return logits({{static_cast<int32_t>(10 + c.tokens.size() % 3), 4.0f}, {7, 3.0f}});
  });
  SearchOptions beam;
  beam.beam_size = 2;
  beam.max_tokens = 5;
  const WindowResult result = decode(model, kTextPrompt, beam);
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{11, 12, 10, 11, 12}));
  EXPECT_FALSE(result.ended);
}

TEST(WhisperSampling, IsReproducibleFromTheSeedAndKeepsTheLikeliestOfBestOf) {
  FakeModel model(small_config(), small_vocabulary(), [](const Context& c) {
    if (c.tokens.size() >= 9) return logits({{kEot, 9.0f}});
    return logits({{7, 1.0f}, {8, 1.0f}, {9, 1.0f}, {10, 0.5f}}, kVocab, -30.0f);
  });
  SearchOptions options;
  options.temperature = 1.0f;
  options.best_of = 4;
  std::mt19937_64 random_a(42), random_b(42);
  options.random = &random_a;
  const WindowResult a = decode(model, kTextPrompt, options);
  options.random = &random_b;
  const WindowResult b = decode(model, kTextPrompt, options);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_FLOAT_EQ(a.sum_logprob, b.sum_logprob);
  EXPECT_EQ(a.tokens.size(), 5u);
  EXPECT_FLOAT_EQ(a.temperature, 1.0f);
  for (int32_t token : a.tokens) EXPECT_TRUE(token >= 7 && token <= 10) << token;

  // Of many samples, best_of keeps the one with the highest mean log-probability: with 200 draws
  // some sample avoids the less likely token 10 entirely.
  options.best_of = 200;
  const WindowResult best = decode(model, kTextPrompt, options);
  for (int32_t token : best.tokens) EXPECT_NE(token, 10);
}

TEST(WhisperSearch, RejectsInvalidOptionsAndOversizedPrompts) {
  FakeModel model(small_config(), small_vocabulary(), [](const Context&) { return logits({}); });
  SearchOptions sampling;
  sampling.temperature = 0.5f;  // no random generator
  EXPECT_THROW(decode(model, kTextPrompt, sampling), Error);
  SearchOptions zero;
  zero.max_tokens = 0;
  EXPECT_THROW(decode(model, kTextPrompt, zero), Error);
  Prompt huge{std::vector<int32_t>(41, 7), 0};
  huge.tokens[0] = kSot;
  EXPECT_THROW(decode(model, huge, SearchOptions{}), Error);
}

// ---------------------------------------------------------------------------------------------
// Compression ratio and window splitting.

TEST(WhisperCompressionRatio, MatchesPythonsZlib) {
  // len(t.encode()) / len(zlib.compress(t.encode())), as computed with CPython and zlib 1.2.13.
  EXPECT_FLOAT_EQ(compression_ratio(""), 0.0f);
  EXPECT_FLOAT_EQ(compression_ratio("Hello"), 5.0f / 13.0f);
  std::string repeated;
  for (int i = 0; i < 20; ++i) repeated += " I'm sorry.";
  EXPECT_FLOAT_EQ(compression_ratio(repeated), 220.0f / 22.0f);
  EXPECT_GT(compression_ratio(repeated), 2.4f);
  EXPECT_LT(compression_ratio(" And so my fellow Americans, ask not what your country can do."),
            2.4f);
}

TEST(WhisperSplitWindow, SplitsAtTimestampPairsAndSeeksToTheLastPair) {
  // <|0.00|> a b <|0.10|><|0.10|> c <|0.30|><|0.30|> d   (cut after d)
  const std::vector<int32_t> tokens = {ts(0), 1, 2, ts(5), ts(5), 3, ts(15), ts(15), 4};
  const WindowSplit split = split_window(tokens, kT0, 3000, 2);
  ASSERT_EQ(split.segments.size(), 2u);
  EXPECT_EQ(split.segments[0].first, 0u);
  EXPECT_EQ(split.segments[0].last, 4u);
  EXPECT_DOUBLE_EQ(split.segments[0].start, 0.0);
  EXPECT_DOUBLE_EQ(split.segments[0].end, 0.1);
  EXPECT_EQ(split.segments[1].first, 4u);
  EXPECT_EQ(split.segments[1].last, 7u);
  EXPECT_DOUBLE_EQ(split.segments[1].start, 0.1);
  EXPECT_DOUBLE_EQ(split.segments[1].end, 0.3);
  EXPECT_EQ(split.advance, 30);  // 15 timestamp steps of 2 mel frames
  EXPECT_EQ(split.kept, 8u);     // transformers keeps the pair's closing <|0.30|>
}

TEST(WhisperSplitWindow, SingleTimestampEndingKeepsTheLastSegmentAndSkipsTheWindow) {
  const std::vector<int32_t> tokens = {ts(0), 1, ts(5), ts(5), 3, ts(9)};
  const WindowSplit split = split_window(tokens, kT0, 1234, 2);
  ASSERT_EQ(split.segments.size(), 2u);
  EXPECT_EQ(split.segments[1].first, 3u);
  EXPECT_EQ(split.segments[1].last, 6u);
  EXPECT_DOUBLE_EQ(split.segments[1].end, 0.18);
  EXPECT_EQ(split.advance, 1234);
  EXPECT_EQ(split.kept, 6u);
}

TEST(WhisperSplitWindow, WithoutPairsTheWindowIsOneSegment) {
  // No timestamps at all: the segment spans the window's audio.
  WindowSplit split = split_window(std::vector<int32_t>{1, 2, 3}, kT0, 1000, 2);
  ASSERT_EQ(split.segments.size(), 1u);
  EXPECT_DOUBLE_EQ(split.segments[0].end, 10.0);
  EXPECT_EQ(split.advance, 1000);
  // An opening timestamp only: the segment ends at the window's end too; a later one ends it.
  split = split_window(std::vector<int32_t>{ts(0), 1, 2}, kT0, 1000, 2);
  EXPECT_DOUBLE_EQ(split.segments[0].end, 10.0);
  split = split_window(std::vector<int32_t>{ts(3), 1, 2}, kT0, 1000, 2);
  EXPECT_DOUBLE_EQ(split.segments[0].end, 0.06);
  // A final pair at time 0 would decode the same window forever: the whole window is skipped.
  split = split_window(std::vector<int32_t>{ts(0), 1, ts(0), ts(0), 2}, kT0, 1000, 2);
  EXPECT_EQ(split.advance, 1000);
}

// ---------------------------------------------------------------------------------------------
// Long-form transcription, with the real multilingual tokenizer and vocabulary.

class WhisperTranscribe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = std::make_unique<text::BpeTokenizer>(
        load_tiktoken(HARK_TEST_DATA "/tokenizers/whisper/multilingual.tiktoken", 99));
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }

  static const text::BpeTokenizer& tokenizer() { return *tokenizer_; }

  static Vocabulary vocabulary() {
    Vocabulary v = find_vocabulary(*tokenizer_, 51865);
    v.suppress_tokens = {v.sot, v.sot_prev, v.sot_lm, v.no_speech};
    v.begin_suppress_tokens = {220, v.eot};
    return v;
  }
  static Config config() {
    Config c;
    c.n_mels = 2;
    c.vocab_size = 51865;
    c.max_source_positions = 50;  // windows of 100 mel frames (1 s)
    c.max_target_positions = 64;
    return c;
  }
  int32_t token(const std::string& text) const {
    const std::vector<int32_t> ids = tokenizer().encode(text);
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.at(0);
  }
  // A log-mel whose every value is its frame's index, so a window shows where it was cut.
  static std::vector<float> frame_indexed_mel(int64_t frames) {
    std::vector<float> mel(2 * frames);
    for (int64_t f = 0; f < frames; ++f) mel[f] = mel[frames + f] = static_cast<float>(f);
    return mel;
  }
  static std::vector<float> row(std::initializer_list<std::pair<int32_t, float>> values,
                                float base = 0.0f) {
    return logits(values, 51865, base);
  }
  // A model that samples plan[window] token by token after a 3-token prompt tail
  // (<|startoftranscript|> <|lang|> <|task|>), repeating the last, with speech at every window.
  static Script planned(const Vocabulary& v, std::map<int, std::vector<int32_t>> plan) {
    return [v, plan = std::move(plan)](const Context& c) {
      const std::vector<int32_t>& script = plan.at(c.window);
      if (c.tokens.back() == v.sot) return row({{v.no_speech, -10.0f}});
      const auto sot = std::find(c.tokens.begin(), c.tokens.end(), v.sot);
      const size_t sampled = c.tokens.end() - sot - 3;
      return row({{script.at(std::min(sampled, script.size() - 1)), 20.0f}});
    };
  }

  static inline std::unique_ptr<text::BpeTokenizer> tokenizer_;
};

TEST_F(WhisperTranscribe, SeeksFromWindowToWindowAndTimesSegments) {
  const Vocabulary v = vocabulary();
  const int32_t hello = token(" hello"), world = token(" world"), again = token(" again");
  const int32_t t0 = v.timestamp_begin;
  // Window 0 (frames 0..99): <|0.00|> hello <|0.40|><|0.40|> world <|0.70|><|0.70|> again ...
  // (cut) -> seeks to frame 70. Window 1 (frames 70..169): <|0.10|> again <|0.50|> <|endoftext|>.
  // Window 2 (frames 170..249, 80 frames): no speech timestamps, just "hello", then the end.
  const std::map<int, std::vector<int32_t>> plan = {
      {0, {t0, hello, t0 + 20, t0 + 20, world, t0 + 35, t0 + 35, again, world, hello}},
      {1, {t0 + 5, again, t0 + 25, v.eot}},
      {2, {t0 + 0, hello, v.eot}},
  };
  FakeModel model(config(), v, planned(v, plan));
  Options options;
  options.language = "en";
  options.fallback = false;
  options.condition_on_previous_text = false;
  std::vector<WindowReport> reports;
  std::vector<double> progress;
  options.on_window = [&](const WindowReport& r) { reports.push_back(r); };
  options.on_progress = [&](double p) { progress.push_back(p); };

  const std::vector<float> mel = frame_indexed_mel(250 + 100);
  const Transcript transcript = transcribe_mel(model, tokenizer(), mel, 250, options);

  ASSERT_EQ(model.windows.size(), 3u);
  EXPECT_EQ(model.windows[1][0], 70.0f);   // second window starts at the last pair's frame
  EXPECT_EQ(model.windows[2][0], 170.0f);  // third after the whole second window
  EXPECT_EQ(model.windows[2][79], 249.0f);
  EXPECT_EQ(model.windows[2][80], 0.0f);  // past the audio: zeros, not the padding frames
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[0].kept, 7u);
  EXPECT_EQ(reports[1].seek, 70);
  EXPECT_EQ(reports[2].frames, 80);
  EXPECT_EQ(progress, (std::vector<double>{70.0 / 250, 170.0 / 250, 1.0}));

  EXPECT_EQ(transcript.language, "en");
  EXPECT_DOUBLE_EQ(transcript.duration, 2.5);
  ASSERT_EQ(transcript.segments.size(), 4u);
  const Segment& first = transcript.segments[0];
  EXPECT_EQ(first.text, " hello");
  EXPECT_DOUBLE_EQ(first.start, 0.0);
  EXPECT_DOUBLE_EQ(first.end, 0.4);
  EXPECT_EQ(first.tokens, (std::vector<int32_t>{t0, hello, t0 + 20}));
  EXPECT_EQ(transcript.segments[1].text, " world");
  EXPECT_DOUBLE_EQ(transcript.segments[1].start, 0.4);
  EXPECT_DOUBLE_EQ(transcript.segments[1].end, 0.7);
  // Without a pair, a segment starts at the window's start (not at its first timestamp) and ends
  // at its last timestamp.
  EXPECT_EQ(transcript.segments[2].text, " again");
  EXPECT_DOUBLE_EQ(transcript.segments[2].start, 0.7);
  EXPECT_DOUBLE_EQ(transcript.segments[2].end, 0.7 + 0.5);
  // No closing timestamp other than <|0.00|>: the segment spans the window's 0.8 s of audio.
  EXPECT_EQ(transcript.segments[3].text, " hello");
  EXPECT_DOUBLE_EQ(transcript.segments[3].start, 1.7);
  EXPECT_DOUBLE_EQ(transcript.segments[3].end, 2.5);
  EXPECT_EQ(transcript.text(), " hello world again hello");
  EXPECT_FLOAT_EQ(first.temperature, 0.0f);
  EXPECT_LT(first.no_speech_prob, 1e-3f);
  EXPECT_GT(first.avg_logprob, -0.05f);
}

TEST_F(WhisperTranscribe, BatchedModeDecodesFixedWindowsIndependently) {
  const Vocabulary v = vocabulary();
  const int32_t hello = token(" hello"), world = token(" world"), again = token(" again");
  const int32_t t0 = v.timestamp_begin;
  // Window 0 is cut after its second pair: batched, the text after it ends the window as a
  // segment of its own, and the next window still starts at frame 100.
  const std::map<int, std::vector<int32_t>> plan = {
      {0, {t0, hello, t0 + 20, t0 + 20, world, t0 + 35, t0 + 35, again, v.eot}},
      {1, {t0 + 5, again, t0 + 25, v.eot}},
      {2, {t0 + 0, hello, t0 + 10, v.eot}},
  };
  FakeModel model(config(), v, planned(v, plan));
  Options options;
  options.language = "en";
  options.fallback = false;
  options.batch_size = 2;
  options.initial_prompt = "hello";
  std::vector<WindowReport> reports;
  std::vector<double> progress;
  options.on_window = [&](const WindowReport& r) { reports.push_back(r); };
  options.on_progress = [&](double p) { progress.push_back(p); };
  const Transcript transcript =
      transcribe_mel(model, tokenizer(), frame_indexed_mel(250 + 100), 250, options);

  ASSERT_EQ(model.windows.size(), 3u);
  EXPECT_EQ(model.windows[1][0], 100.0f);
  EXPECT_EQ(model.windows[2][0], 200.0f);
  EXPECT_EQ(model.windows[2][50], 0.0f);  // past the audio
  ASSERT_EQ(reports.size(), 3u);
  // No earlier text in any prompt; the initial prompt leads each.
  const std::vector<int32_t> prompt = {v.sot_prev, hello, v.sot, v.first_language, v.transcribe};
  for (const WindowReport& report : reports) EXPECT_EQ(report.prompt, prompt);
  EXPECT_EQ(reports[1].seek, 100);
  EXPECT_EQ(reports[2].frames, 50);
  EXPECT_EQ(progress, (std::vector<double>{2.0 / 3, 1.0}));  // windows done, after each batch

  std::vector<std::string> texts;
  for (const Segment& segment : transcript.segments) texts.push_back(segment.text);
  EXPECT_EQ(texts, (std::vector<std::string>{" hello", " world", " again", " again", " hello"}));
  ASSERT_EQ(transcript.segments.size(), 5u);
  EXPECT_DOUBLE_EQ(transcript.segments[2].start, 0.7);  // the tail: from its timestamp ...
  EXPECT_DOUBLE_EQ(transcript.segments[2].end, 1.0);    // ... to the window's end
  EXPECT_DOUBLE_EQ(transcript.segments[3].start, 1.0);  // window 1 from frame 100
  EXPECT_DOUBLE_EQ(transcript.segments[3].end, 1.5);
  EXPECT_DOUBLE_EQ(transcript.segments[4].start, 2.0);
  EXPECT_DOUBLE_EQ(transcript.segments[4].end, 2.2);
}

TEST_F(WhisperTranscribe, WithoutTimestampsEachWindowIsOneSegment) {
  const Vocabulary v = vocabulary();
  const int32_t hello = token(" hello");
  FakeModel model(config(), v, [&](const Context& c) {
    EXPECT_EQ(
        c.tokens.back() == v.no_timestamps || c.tokens.back() == hello || c.tokens.back() == v.sot,
        true);
    if (c.tokens.back() == v.no_timestamps) return row({{hello, 5.0f}});
    return row({{v.eot, 5.0f}});
  });
  Options options;
  options.language = "de";
  options.timestamps = false;
  options.fallback = false;
  std::vector<WindowReport> reports;
  options.on_window = [&](const WindowReport& r) { reports.push_back(r); };
  const Transcript transcript =
      transcribe_mel(model, tokenizer(), frame_indexed_mel(230), 130, options);
  ASSERT_EQ(transcript.segments.size(), 2u);
  EXPECT_DOUBLE_EQ(transcript.segments[0].start, 0.0);
  EXPECT_DOUBLE_EQ(transcript.segments[0].end, 1.0);
  EXPECT_DOUBLE_EQ(transcript.segments[1].start, 1.0);
  EXPECT_DOUBLE_EQ(transcript.segments[1].end, 1.3);
  EXPECT_EQ(transcript.segments[1].tokens, std::vector<int32_t>{hello});
  EXPECT_EQ(transcript.language, "de");
  ASSERT_EQ(reports.size(), 2u);
  const int32_t de = v.first_language + 2;
  EXPECT_EQ(reports[0].prompt, (std::vector<int32_t>{v.sot, de, v.transcribe, v.no_timestamps}));
  // condition_on_previous_text: the first window's text leads the second prompt.
  EXPECT_EQ(reports[1].prompt,
            (std::vector<int32_t>{v.sot_prev, hello, v.sot, de, v.transcribe, v.no_timestamps}));
}

TEST_F(WhisperTranscribe, DetectsTheLanguageAndUsesInitialPromptAndTranslateTask) {
  const Vocabulary v = vocabulary();
  const int32_t fr = v.first_language + 6;
  ASSERT_EQ(v.languages[6], "fr");
  FakeModel model(config(), v, [&](const Context& c) {
    if (c.tokens.size() == 1 && c.tokens[0] == v.sot) return row({{fr, 4.0f}, {220, 9.0f}});
    return row({{v.eot, 9.0f}, {token(" hello"), 10.0f}});
  });
  Options options;
  options.task = Task::translate;
  options.initial_prompt = "  Names: Zoe. ";
  options.fallback = false;
  options.max_tokens = 1;
  std::vector<WindowReport> reports;
  options.on_window = [&](const WindowReport& r) { reports.push_back(r); };
  const Transcript transcript =
      transcribe_mel(model, tokenizer(), frame_indexed_mel(150), 50, options);
  EXPECT_EQ(transcript.language, "fr");
  ASSERT_EQ(reports.size(), 1u);
  std::vector<int32_t> expected = {v.sot_prev};
  for (int32_t id : tokenizer().encode(" Names: Zoe.")) expected.push_back(id);
  expected.insert(expected.end(), {v.sot, fr, v.translate});
  EXPECT_EQ(reports[0].prompt, expected);
}

TEST_F(WhisperTranscribe, CarriesTheInitialPromptToEveryWindowWhenAsked) {
  const Vocabulary v = vocabulary();
  const int32_t hello = token(" hello");
  FakeModel model(config(), v, [&](const Context& c) {
    if (c.tokens.back() == v.no_timestamps) return row({{hello, 5.0f}});
    return row({{v.eot, 5.0f}});
  });
  Options options;
  options.language = "en";
  options.timestamps = false;
  options.fallback = false;
  options.initial_prompt = "Zoe";
  std::vector<WindowReport> reports;
  options.on_window = [&](const WindowReport& r) { reports.push_back(r); };
  const std::vector<int32_t> zoe = tokenizer().encode(" Zoe");
  const std::vector<int32_t> plain = {v.sot, v.first_language, v.transcribe, v.no_timestamps};
  auto with_previous = [&](std::vector<int32_t> previous) {
    previous.insert(previous.begin(), v.sot_prev);
    previous.insert(previous.end(), plain.begin(), plain.end());
    return previous;
  };

  // openai's default: the initial prompt, then the text so far.
  transcribe_mel(model, tokenizer(), frame_indexed_mel(300), 200, options);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].prompt, with_previous(zoe));
  std::vector<int32_t> zoe_hello = zoe;
  zoe_hello.push_back(hello);
  EXPECT_EQ(reports[1].prompt, with_previous(zoe_hello));

  // Not conditioned on earlier text: the initial prompt leads the first window only ...
  options.condition_on_previous_text = false;
  reports.clear();
  transcribe_mel(model, tokenizer(), frame_indexed_mel(300), 200, options);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].prompt, plain);
  // ... unless carried, as transformers does with prompt_ids.
  options.carry_initial_prompt = true;
  reports.clear();
  transcribe_mel(model, tokenizer(), frame_indexed_mel(300), 200, options);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].prompt, with_previous(zoe));
  // Carried and conditioned: the initial prompt, then the newest text.
  options.condition_on_previous_text = true;
  reports.clear();
  transcribe_mel(model, tokenizer(), frame_indexed_mel(300), 200, options);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].prompt, with_previous(zoe_hello));
}

TEST_F(WhisperTranscribe, FallsBackToHigherTemperaturesOnRepetitiveText) {
  const Vocabulary v = vocabulary();
  // Greedy repeats " the" until max_tokens: a compression ratio far above 2.4. Sampled at 0.2 the
  // same logits give a mix of words, which compress less.
  std::vector<int32_t> words;
  for (const char* w : {" the", " cat", " sat", " on", " mat", " dog", " ran", " far", " away"}) {
    words.push_back(token(w));
  }
  FakeModel model(config(), v, [&](const Context& c) {
    if (c.tokens.back() == v.sot) return row({{v.no_speech, -10.0f}});
    std::vector<float> r = row({}, -10.0f);
    for (int32_t w : words) r[w] = 1.0f;
    r[words[0]] = 1.3f;
    return r;
  });
  Options options;
  options.language = "en";
  options.timestamps = false;
  options.max_tokens = 40;
  options.logprob_threshold = -std::numeric_limits<float>::infinity();
  options.seed = 7;
  std::vector<WindowReport> reports;
  options.on_window = [&](const WindowReport& r) { reports.push_back(r); };
  const Transcript transcript =
      transcribe_mel(model, tokenizer(), frame_indexed_mel(200), 100, options);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_FLOAT_EQ(reports[0].temperature, 0.2f);
  EXPECT_LE(reports[0].compression_ratio, 2.4f);
  ASSERT_EQ(transcript.segments.size(), 1u);
  EXPECT_FLOAT_EQ(transcript.segments[0].temperature, 0.2f);

  // Without fallback the repetitive text stays.
  options.fallback = false;
  reports.clear();
  transcribe_mel(model, tokenizer(), frame_indexed_mel(200), 100, options);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_FLOAT_EQ(reports[0].temperature, 0.0f);
  EXPECT_GT(reports[0].compression_ratio, 2.4f);
  EXPECT_EQ(reports[0].tokens, std::vector<int32_t>(40, words[0]));
}

TEST_F(WhisperTranscribe, FallsBackOnLowLogProbabilityUpToTheLastTemperature) {
  const Vocabulary v = vocabulary();
  // Every token equally likely: avg_logprob is about -log(51865) = -10.9 at any temperature.
  FakeModel model(config(), v, [&](const Context& c) {
    if (c.tokens.back() == v.sot) return row({{v.no_speech, -10.0f}});
    return row({});
  });
  Options options;
  options.language = "en";
  options.timestamps = false;
  options.max_tokens = 3;
  options.temperatures = {0.0f, 0.5f, 1.0f};
  std::vector<WindowReport> reports;
  options.on_window = [&](const WindowReport& r) { reports.push_back(r); };
  transcribe_mel(model, tokenizer(), frame_indexed_mel(200), 100, options);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_FLOAT_EQ(reports[0].temperature, 1.0f);
  // Three tokens of log(1/51865) each, over 3 + 1 (openai counts a missing <|endoftext|> too).
  EXPECT_NEAR(reports[0].avg_logprob, 3 * std::log(1.0 / 51865) / 4, 0.01);
  EXPECT_EQ(model.sessions, 3);  // one decoding per temperature
}

TEST_F(WhisperTranscribe, SkipsSilentWindowsWithoutFallingBack) {
  const Vocabulary v = vocabulary();
  // <|nospeech|> is likely and the text is not: the window is silence.
  FakeModel model(config(), v, [&](const Context& c) {
    if (c.tokens.back() == v.sot) return row({{v.no_speech, 15.0f}});
    return row({});
  });
  Options options;
  options.language = "en";
  std::vector<WindowReport> reports;
  options.on_window = [&](const WindowReport& r) { reports.push_back(r); };
  const Transcript transcript =
      transcribe_mel(model, tokenizer(), frame_indexed_mel(250), 150, options);
  EXPECT_TRUE(transcript.segments.empty());
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_TRUE(reports[0].skipped);
  EXPECT_GT(reports[0].no_speech_prob, 0.6f);
  EXPECT_EQ(reports[1].seek, 100);  // skipped a whole window
  EXPECT_EQ(model.sessions, 2);     // no fallback decodings
}

TEST_F(WhisperTranscribe, BatchesTheWindowsOfSeveralRecordingsTogether) {
  const Vocabulary v = vocabulary();
  const int32_t hello = token(" hello");
  FakeModel model(config(), v, [&](const Context& c) {
    if (c.tokens.back() == v.no_timestamps) return row({{hello, 20.0f}});
    return row({{v.eot, 20.0f}});
  });
  auto tone = [](size_t n) {
    std::vector<float> samples(n);
    for (size_t i = 0; i < n; ++i) samples[i] = 0.5f * std::sin(0.17f * static_cast<float>(i));
    return samples;
  };
  // 2.5 s (windows at frames 0, 100, 200) and 1.2 s (0, 100), windows of 100 frames.
  const std::vector<float> first = tone(40000), second = tone(19200);
  const std::span<const float> recordings[] = {first, second};
  Options options;
  options.language = "en";
  options.timestamps = false;
  options.batch_size = 4;
  std::vector<WindowReport> reports;
  std::vector<double> progress;
  options.on_window = [&](const WindowReport& r) { reports.push_back(r); };
  options.on_progress = [&](double p) { progress.push_back(p); };
  const std::vector<Transcript> transcripts =
      transcribe_many(model, tokenizer(), recordings, options);

  ASSERT_EQ(transcripts.size(), 2u);
  EXPECT_DOUBLE_EQ(transcripts[0].duration, 2.5);
  EXPECT_DOUBLE_EQ(transcripts[1].duration, 1.2);
  EXPECT_EQ(transcripts[0].text(), " hello hello hello");
  EXPECT_EQ(transcripts[1].text(), " hello hello");
  ASSERT_EQ(transcripts[1].segments.size(), 2u);
  EXPECT_DOUBLE_EQ(transcripts[1].segments[1].start, 1.0);
  EXPECT_DOUBLE_EQ(transcripts[1].segments[1].end, 1.2);
  // One queue: the first batch ends with the second recording's first window.
  ASSERT_EQ(reports.size(), 5u);
  EXPECT_EQ(reports[3].seek, 0);
  EXPECT_EQ(reports[4].seek, 100);
  EXPECT_EQ(reports[4].frames, 20);
  EXPECT_EQ(progress, (std::vector<double>{4.0 / 5, 1.0}));

  // Sequentially, each recording on its own, the same text.
  options.batch_size = 1;
  const std::vector<Transcript> sequential =
      transcribe_many(model, tokenizer(), recordings, options);
  ASSERT_EQ(sequential.size(), 2u);
  EXPECT_EQ(sequential[0].text(), transcripts[0].text());
  EXPECT_EQ(sequential[1].text(), transcripts[1].text());
}

// A model whose device holds at most `room` windows at once.
class CrampedModel : public FakeModel {
 public:
  CrampedModel(Config config, Vocabulary vocabulary, Script script, int room)
      : FakeModel(config, std::move(vocabulary), std::move(script)), room_(room) {}
  std::vector<std::shared_ptr<const EncodedWindow>> encode_batch(std::span<const float> mel,
                                                                 int count) const override {
    batches.push_back(count);
    if (count > room_) throw OutOfMemory("out of GPU memory: test");
    return FakeModel::encode_batch(mel, count);
  }
  mutable std::vector<int> batches;

 private:
  int room_;
};

TEST_F(WhisperTranscribe, BatchesThatDoNotFitAreHalved) {
  const Vocabulary v = vocabulary();
  const int32_t hello = token(" hello");
  auto script = [&](const Context& c) {
    if (c.tokens.back() == v.no_timestamps) return row({{hello, 20.0f}});
    return row({{v.eot, 20.0f}});
  };
  Options options;
  options.language = "en";
  options.timestamps = false;
  options.batch_size = 8;
  std::vector<double> progress;
  options.on_progress = [&](double p) { progress.push_back(p); };
  const std::vector<float> mel = frame_indexed_mel(450 + 100);  // 5 windows

  CrampedModel model(config(), v, script, 2);
  const Transcript transcript = transcribe_mel(model, tokenizer(), mel, 450, options);
  EXPECT_EQ(model.batches, (std::vector<int>{5, 2, 2, 1}));
  EXPECT_EQ(transcript.text(), " hello hello hello hello hello");
  EXPECT_EQ(progress, (std::vector<double>{2.0 / 5, 4.0 / 5, 1.0}));

  CrampedModel hopeless(config(), v, script, 0);
  EXPECT_THROW(transcribe_mel(hopeless, tokenizer(), mel, 450, options), OutOfMemory);
}

TEST_F(WhisperTranscribe, TranscribesSamplesThroughTheLongFormLogMel) {
  const Vocabulary v = vocabulary();
  const int32_t hello = token(" hello");
  FakeModel model(config(), v, [&](const Context& c) {
    if (c.tokens.back() == v.no_timestamps) return row({{hello, 20.0f}});
    return row({{v.eot, 20.0f}});
  });
  Options options;
  options.language = "English";  // names work as well as codes
  options.timestamps = false;
  std::vector<WindowReport> reports;
  options.on_window = [&](const WindowReport& r) { reports.push_back(r); };
  // 2.5 s of a 440 Hz tone: 250 frames of audio, windows of 100 frames.
  std::vector<float> samples(40000);
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i] = 0.5f * static_cast<float>(std::sin(2 * std::numbers::pi * 440.0 * i / 16000));
  }
  const Transcript transcript = transcribe(model, tokenizer(), samples, options);
  EXPECT_EQ(transcript.language, "en");
  EXPECT_DOUBLE_EQ(transcript.duration, 2.5);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[2].seek, 200);
  EXPECT_EQ(reports[2].frames, 50);
  ASSERT_EQ(model.windows.size(), 3u);
  // Past the audio the window holds zeros (not the log-mel of the silence after it).
  EXPECT_NE(model.windows[2][49], 0.0f);
  EXPECT_EQ(model.windows[2][50], 0.0f);
  ASSERT_EQ(transcript.segments.size(), 3u);
  EXPECT_DOUBLE_EQ(transcript.segments[2].end, 2.5);
  EXPECT_EQ(transcript.text(), " hello hello hello");
}

TEST_F(WhisperTranscribe, RejectsWhatItCannotDo) {
  Vocabulary english = vocabulary();
  english.multilingual = false;
  FakeModel model(config(), english, [&](const Context&) { return row({}); });
  const std::vector<float> mel = frame_indexed_mel(200);
  Options translate;
  translate.task = Task::translate;
  EXPECT_THROW(transcribe_mel(model, tokenizer(), mel, 100, translate), Error);
  Options german;
  german.language = "de";
  EXPECT_THROW(transcribe_mel(model, tokenizer(), mel, 100, german), Error);
  Options no_temperature;
  no_temperature.temperatures.clear();
  EXPECT_THROW(transcribe_mel(model, tokenizer(), mel, 100, no_temperature), Error);
  EXPECT_THROW(transcribe_mel(model, tokenizer(), mel, 201, Options{}), Error);
  EXPECT_THROW(transcribe_mel(model, tokenizer(), std::vector<float>(3), 1, Options{}), Error);
  EXPECT_THROW(transcribe(model, tokenizer(), std::vector<float>{}, Options{}), Error);
}

}  // namespace
}  // namespace hark::whisper
