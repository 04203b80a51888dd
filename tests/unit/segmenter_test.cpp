#include "pipeline/segmenter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"

namespace hark {
namespace {

struct Word {
  std::string text;
  double start;
  double end;
};

// A segment as Parakeet returns it: per word one token "▁word" with the word's times, unless a
// word ends in a punctuation mark, which gets a token of its own, of zero length at the word's
// end (TDT's timing). Token ids count up from 100.
Segment segment_of(const std::vector<Word>& words) {
  Segment segment;
  segment.avg_logprob = -0.5f;
  segment.no_speech_prob = 0.25f;
  segment.temperature = 0.2f;
  segment.compression_ratio = 1.75f;
  int32_t id = 100;
  for (const Word& word : words) {
    segment.words.push_back({word.start, word.end, word.text});
    segment.text += " " + word.text;
    const char last = word.text.back();
    const bool punctuated = word.text.size() > 1 && (last == '.' || last == ',' || last == '?');
    const std::string stem = punctuated ? word.text.substr(0, word.text.size() - 1) : word.text;
    segment.tokens.push_back(id++);
    segment.token_times.push_back({word.start, word.end, "\u2581" + stem});
    if (punctuated) {
      segment.tokens.push_back(id++);
      segment.token_times.push_back({word.end, word.end, std::string(1, last)});
    }
  }
  if (!words.empty()) {
    segment.start = words.front().start;
    segment.end = words.back().end;
  }
  return segment;
}

// `count` words "w0" "w1" ... of `length` seconds, `gap` seconds apart.
std::vector<Word> evenly_spaced(int count, double length, double gap, double start = 0) {
  std::vector<Word> words;
  for (int i = 0; i < count; ++i) {
    words.push_back({"w" + std::to_string(i), start, start + length});
    start += length + gap;
  }
  return words;
}

std::vector<std::string> cue_texts(const std::vector<Segment>& cues) {
  std::vector<std::string> texts;
  for (const Segment& cue : cues) texts.push_back(cue.text);
  return texts;
}

size_t code_points(const std::string& text) {
  size_t count = 0;
  for (char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

// What every split must keep, whatever the words: the words, tokens and token times in order and
// unchanged, each cue's text and times made from its words, tokens paired with their times, the
// window statistics copied, and the limits held by every cue of more than one word.
void expect_valid_split(const Segment& source, const std::vector<Segment>& cues,
                        const CueLimits& limits) {
  ASSERT_FALSE(cues.empty());
  std::vector<TimedText> words;
  std::vector<int32_t> tokens;
  std::vector<TimedText> token_times;
  for (const Segment& cue : cues) {
    ASSERT_FALSE(cue.words.empty());
    std::string text;
    for (const TimedText& word : cue.words) text += " " + word.text;
    EXPECT_EQ(cue.text, text);
    EXPECT_EQ(cue.start, cue.words.front().start);
    EXPECT_EQ(cue.end, std::max(cue.start, cue.words.back().end));
    EXPECT_EQ(cue.tokens.size(), cue.token_times.size());
    EXPECT_EQ(cue.avg_logprob, source.avg_logprob);
    EXPECT_EQ(cue.no_speech_prob, source.no_speech_prob);
    EXPECT_EQ(cue.temperature, source.temperature);
    EXPECT_EQ(cue.compression_ratio, source.compression_ratio);
    if (cue.words.size() > 1) {
      EXPECT_LE(cue.words.back().end - cue.words.front().start, limits.max_seconds) << text;
      EXPECT_LE(code_points(text) - 1, limits.max_chars) << text;
      for (size_t i = 1; i < cue.words.size(); ++i) {
        EXPECT_LE(cue.words[i].start - cue.words[i - 1].end, limits.pause_seconds) << text;
      }
    }
    words.insert(words.end(), cue.words.begin(), cue.words.end());
    tokens.insert(tokens.end(), cue.tokens.begin(), cue.tokens.end());
    token_times.insert(token_times.end(), cue.token_times.begin(), cue.token_times.end());
  }
  ASSERT_EQ(words.size(), source.words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    EXPECT_EQ(words[i].text, source.words[i].text);
    EXPECT_EQ(words[i].start, source.words[i].start);
    EXPECT_EQ(words[i].end, source.words[i].end);
  }
  EXPECT_EQ(tokens, source.tokens);
  ASSERT_EQ(token_times.size(), source.token_times.size());
  for (size_t i = 0; i < token_times.size(); ++i) {
    EXPECT_EQ(token_times[i].text, source.token_times[i].text);
    EXPECT_EQ(token_times[i].start, source.token_times[i].start);
  }
}

// The tokens of each cue spell its words ("▁" and punctuation pieces joined).
void expect_tokens_spell_words(const std::vector<Segment>& cues) {
  for (const Segment& cue : cues) {
    std::string spelled;
    for (const TimedText& token : cue.token_times) spelled += token.text;
    std::string expected;
    for (const TimedText& word : cue.words) expected += "\u2581" + word.text;
    EXPECT_EQ(spelled, expected);
  }
}

TEST(Segmenter, SegmentWithoutWordsIsReturnedAsItIs) {
  Segment whisper;
  whisper.start = 0;
  whisper.end = 30;
  whisper.text = " A whole window of text that is far longer than any subtitle cue should be.";
  whisper.tokens = {50364, 1, 2, 3, 51864};
  const std::vector<Segment> cues = split_by_words(whisper);
  ASSERT_EQ(cues.size(), 1u);
  EXPECT_EQ(cues[0].text, whisper.text);
  EXPECT_EQ(cues[0].tokens, whisper.tokens);
  EXPECT_EQ(cues[0].end, 30);
}

TEST(Segmenter, ShortSegmentIsOneCue) {
  const Segment source =
      segment_of({{"Hello", 0.2, 0.5}, {"there", 0.6, 1.0}, {"friend", 1.1, 1.6}});
  const std::vector<Segment> cues = split_by_words(source);
  ASSERT_EQ(cues.size(), 1u);
  EXPECT_EQ(cues[0].text, " Hello there friend");
  EXPECT_EQ(cues[0].start, 0.2);
  EXPECT_EQ(cues[0].end, 1.6);
  EXPECT_EQ(cues[0].tokens, source.tokens);
  expect_valid_split(source, cues, {});
}

TEST(Segmenter, SentenceEndsACueOnceItHasLastedLongEnough) {
  const Segment source = segment_of({{"I", 0.0, 0.3},
                                     {"came", 0.4, 0.8},
                                     {"home.", 0.9, 1.4},
                                     {"She", 1.5, 1.8},
                                     {"left?", 1.9, 2.4},
                                     {"Yes.", 2.5, 2.8}});
  const std::vector<Segment> cues = split_by_words(source);
  // "home." closes a 1.4-s cue; "left?" a cue of 0.9 s, too short, so "Yes." joins it.
  EXPECT_EQ(cue_texts(cues), (std::vector<std::string>{" I came home.", " She left? Yes."}));
  expect_valid_split(source, cues, {});
  expect_tokens_spell_words(cues);

  CueLimits patient;
  patient.min_sentence_seconds = 3;
  EXPECT_EQ(split_by_words(source, patient).size(), 1u);
}

TEST(Segmenter, SentenceMarksOfOtherScriptsAndClosingQuotesEndACue) {
  for (const std::string mark :
       {"\u3002", "\uFF1F", "\uFF01", "\u2026", "\u061F", "\u0964", "!\"", "?\u201D", ".)"}) {
    const Segment source =
        segment_of({{"one", 0, 0.6}, {"two" + mark, 0.7, 1.5}, {"three", 1.6, 2}});
    EXPECT_EQ(split_by_words(source).size(), 2u) << mark;
  }
  for (const std::string not_a_sentence : {",", "\"", "-", "a.b"}) {
    const Segment source =
        segment_of({{"one", 0, 0.6}, {"two" + not_a_sentence, 0.7, 1.5}, {"three", 1.6, 2}});
    EXPECT_EQ(split_by_words(source).size(), 1u) << not_a_sentence;
  }
}

TEST(Segmenter, PauseEndsACue) {
  const Segment source = segment_of({{"before", 0, 0.5},
                                     {"the", 0.6, 0.8},
                                     {"pause", 0.9, 1.3},
                                     {"after", 2.0, 2.4},
                                     {"it", 2.5, 2.7}});
  EXPECT_EQ(cue_texts(split_by_words(source)),
            (std::vector<std::string>{" before the pause", " after it"}));
  CueLimits longer_pauses;
  longer_pauses.pause_seconds = 0.8;
  EXPECT_EQ(split_by_words(source, longer_pauses).size(), 1u);
}

TEST(Segmenter, LongSpeechIsCutWithinMaxSeconds) {
  // 100 words of 0.3 s, 0.1 s apart: 40 s without a pause or a mark.
  const Segment source = segment_of(evenly_spaced(100, 0.3, 0.1));
  const CueLimits limits;
  const std::vector<Segment> cues = split_by_words(source, limits);
  expect_valid_split(source, cues, limits);
  // Equal gaps everywhere: each cut fills its cue.
  EXPECT_EQ(cues.size(), 7u);
  for (size_t i = 0; i + 1 < cues.size(); ++i) {
    EXPECT_GT(cues[i].end - cues[i].start, limits.max_seconds - 0.4);
  }
}

TEST(Segmenter, LongTextIsCutWithinMaxChars) {
  std::vector<Word> words;
  for (int i = 0; i < 30; ++i) {
    // Eight letters, two of them two-byte: counted as characters, not bytes.
    words.push_back({"abcdéfé" + std::to_string(i % 10), i * 0.2, i * 0.2 + 0.15});
  }
  const Segment source = segment_of(words);
  CueLimits limits;
  limits.max_chars = 42;
  const std::vector<Segment> cues = split_by_words(source, limits);
  expect_valid_split(source, cues, limits);
  // Eight letters and a space per word: four words fit in 42, five do not.
  for (size_t i = 0; i + 1 < cues.size(); ++i) EXPECT_EQ(cues[i].words.size(), 4u);
}

TEST(Segmenter, CutForLengthPrefersAClauseMarkOrTheLongestGapInTheSecondHalf) {
  std::vector<Word> words = evenly_spaced(30, 0.3, 0.1);
  words[11].text += ",";  // ends at 4.7 s, in the second half of a 6.5-s cue
  const Segment with_comma = segment_of(words);
  std::vector<Segment> cues = split_by_words(with_comma);
  ASSERT_GE(cues.size(), 2u);
  EXPECT_EQ(cues[0].words.back().text, "w11,");
  expect_valid_split(with_comma, cues, {});
  expect_tokens_spell_words(cues);

  words = evenly_spaced(30, 0.3, 0.1);
  for (size_t i = 10; i < words.size(); ++i) {
    words[i].start += 0.3;  // a 0.4-s gap before word 10, shorter than a pause
    words[i].end += 0.3;
  }
  cues = split_by_words(segment_of(words));
  ASSERT_GE(cues.size(), 2u);
  EXPECT_EQ(cues[0].words.size(), 10u);

  // A mark in the first half would leave a cue too short: the cut fills the cue instead.
  words = evenly_spaced(30, 0.3, 0.1);
  words[2].text += ",";
  cues = split_by_words(segment_of(words));
  ASSERT_GE(cues.size(), 2u);
  EXPECT_EQ(cues[0].words.size(), 16u);
}

TEST(Segmenter, WordBeyondTheLimitsIsACueOfItsOwn) {
  const std::string long_word(100, 'x');
  const Segment source =
      segment_of({{"a", 0, 0.2}, {long_word, 0.3, 8.0}, {"b", 8.1, 8.3}, {"c", 8.4, 8.6}});
  const std::vector<Segment> cues = split_by_words(source);
  EXPECT_EQ(cue_texts(cues), (std::vector<std::string>{" a", " " + long_word, " b c"}));
  expect_valid_split(source, cues, {});
}

TEST(Segmenter, TokensFollowTheirWordsAcrossCues) {
  // Words of several pieces, punctuation pieces of zero length where the next word starts.
  Segment source;
  source.words = {
      {0.0, 0.64, "Sentences"}, {0.64, 1.28, "end."}, {1.28, 1.6, "Then,"}, {1.6, 2.0, "more"}};
  source.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  source.token_times = {
      {0.0, 0.32, "\u2581Sent"}, {0.32, 0.64, "ences"},     {0.64, 1.28, "\u2581end"},
      {1.28, 1.28, "."},         {1.28, 1.52, "\u2581The"}, {1.52, 1.6, "n"},
      {1.6, 1.6, ","},           {1.6, 1.92, "\u2581mo"},   {1.92, 2.0, "re"}};
  CueLimits limits;
  limits.pause_seconds = 0;  // every word starts where the last ended: no pause
  const std::vector<Segment> cues = split_by_words(source, limits);
  ASSERT_EQ(cues.size(), 2u);
  EXPECT_EQ(cues[0].tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(cues[1].tokens, (std::vector<int32_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(cues[1].token_times[0].text, "\u2581The");
}

TEST(Segmenter, TokensThatDoNotSpellTheWordsArePlacedByTime) {
  // Byte pieces spell nothing readable: the times decide, and the zero-length "." at 1.28 s
  // stays with "end." although "Then" starts at 1.28 s.
  Segment source;
  source.words = {{0.0, 0.64, "Sentences"}, {0.64, 1.28, "end."}, {1.28, 1.6, "Then"}};
  source.tokens = {1, 2, 3, 4, 5, 6};
  source.token_times = {{0.0, 0.32, "<0x53>"}, {0.32, 0.64, "?"}, {0.64, 1.28, "?"},
                        {1.28, 1.28, "?"},     {1.28, 1.52, "?"}, {1.52, 1.6, "?"}};
  CueLimits limits;
  limits.pause_seconds = 0;
  std::vector<Segment> cues = split_by_words(source, limits);
  ASSERT_EQ(cues.size(), 2u);
  EXPECT_EQ(cues[0].tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(cues[1].tokens, (std::vector<int32_t>{5, 6}));

  // A token of some length that starts where the next word starts belongs to that word.
  source.token_times[3] = {1.28, 1.4, "?"};
  cues = split_by_words(source, limits);
  ASSERT_EQ(cues.size(), 2u);
  EXPECT_EQ(cues[1].tokens, (std::vector<int32_t>{4, 5, 6}));
}

TEST(Segmenter, WithoutTokenTimesTheFirstCueKeepsTheTokens) {
  Segment source = segment_of(evenly_spaced(40, 0.3, 0.1));
  source.token_times.clear();
  const std::vector<Segment> cues = split_by_words(source);
  ASSERT_GT(cues.size(), 1u);
  EXPECT_EQ(cues[0].tokens, source.tokens);
  for (size_t i = 1; i < cues.size(); ++i) EXPECT_TRUE(cues[i].tokens.empty());
}

TEST(Segmenter, BadInputIsRejected) {
  Segment source = segment_of(evenly_spaced(3, 0.3, 0.1));
  source.token_times.pop_back();
  EXPECT_THROW(split_by_words(source), Error);

  const Segment fine = segment_of(evenly_spaced(3, 0.3, 0.1));
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    CueLimits limits;
    limits.max_seconds = bad;
    EXPECT_THROW(split_by_words(fine, limits), Error) << bad;
  }
  CueLimits no_chars;
  no_chars.max_chars = 0;
  EXPECT_THROW(split_by_words(fine, no_chars), Error);
  CueLimits negative_pause;
  negative_pause.pause_seconds = -0.1;
  EXPECT_THROW(split_by_words(fine, negative_pause), Error);
}

TEST(Segmenter, RandomSegmentsKeepEverythingAndHoldTheLimits) {
  std::mt19937 random(1234);
  std::uniform_real_distribution<double> word_length(0.05, 0.9);
  std::uniform_real_distribution<double> gap(0.0, 0.35);
  std::uniform_int_distribution<int> letters(1, 14);
  std::uniform_int_distribution<int> ending(0, 19);
  std::uniform_int_distribution<int> long_gap(0, 29);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<Word> words;
    double time = gap(random);
    const int count = std::uniform_int_distribution<int>(1, 600)(random);
    for (int i = 0; i < count; ++i) {
      std::string text(letters(random), static_cast<char>('a' + i % 26));
      const int mark = ending(random);
      if (mark == 0) text += ".";
      if (mark == 1) text += ",";
      if (mark == 2) text += "?";
      const double length = word_length(random);
      words.push_back({text, time, time + length});
      time += length + gap(random) + (long_gap(random) == 0 ? 1.5 : 0);
    }
    const Segment source = segment_of(words);
    CueLimits limits;
    limits.max_seconds = std::uniform_real_distribution<double>(2, 8)(random);
    limits.max_chars = std::uniform_int_distribution<size_t>(20, 90)(random);
    const std::vector<Segment> cues = split_by_words(source, limits);
    expect_valid_split(source, cues, limits);
    expect_tokens_spell_words(cues);
    EXPECT_EQ(split_by_words(source, limits).size(), cues.size()) << "deterministic";
  }
}

TEST(Segmenter, TranscriptSplitKeepsLanguageDurationAndOrder) {
  Transcript transcript;
  transcript.language = "de";
  transcript.duration = 99;
  transcript.segments.push_back(segment_of(evenly_spaced(40, 0.3, 0.1)));
  Segment untimed;
  untimed.text = " untimed";
  transcript.segments.push_back(untimed);
  transcript.segments.push_back(segment_of(evenly_spaced(40, 0.3, 0.1, 30)));
  const Transcript split = split_by_words(transcript);
  EXPECT_EQ(split.language, "de");
  EXPECT_EQ(split.duration, 99);
  const size_t first = split_by_words(transcript.segments[0]).size();
  ASSERT_EQ(split.segments.size(), 2 * first + 1);
  EXPECT_EQ(split.segments[first].text, " untimed");
  EXPECT_EQ(split.text(), transcript.text());
}

}  // namespace
}  // namespace hark
