#include "pipeline/segmenter.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"

namespace hark {

namespace {

// Marks that end a sentence, in the scripts the models write: Latin, CJK (full and half width),
// Arabic and Urdu, Devanagari, Ethiopic, Armenian, Greek.
constexpr std::string_view kSentenceEnds[] = {".", "?",  "!",  "…",  "‼",     "⁇", "⁈",
                                              "⁉", "。", "？", "！", "｡",     "؟", "۔",
                                              "।", "॥",  "።",  "։",  "\u037E"};
// Marks that end a clause: a good place for a cut the length forces.
constexpr std::string_view kClauseEnds[] = {",", ";", ":", "，", "、", "；", "：", "،", "—", "–"};
// Closing quotes and brackets that may follow a sentence's mark: `"Stop!"` ends a sentence.
constexpr std::string_view kClosers[] = {"\"", "'",  ")",  "]",  "}",  "”",  "’",  "»",
                                         "›",  "」", "』", "）", "】", "〕", "》", "〉"};

template <size_t N>
std::string_view ending_in(std::string_view text, const std::string_view (&marks)[N]) {
  for (std::string_view mark : marks) {
    if (text.ends_with(mark)) return mark;
  }
  return {};
}

std::string_view without_closers(std::string_view text) {
  for (std::string_view closer = ending_in(text, kClosers); !closer.empty();
       closer = ending_in(text, kClosers)) {
    text.remove_suffix(closer.size());
  }
  return text;
}

bool ends_sentence(const TimedText& word) {
  return !ending_in(without_closers(word.text), kSentenceEnds).empty();
}

bool ends_clause(const TimedText& word) {
  return !ending_in(without_closers(word.text), kClauseEnds).empty();
}

// What a reader counts as characters: UTF-8 continuation bytes do not start one.
size_t code_points(std::string_view text) {
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// The text a token contributes to its word: a SentencePiece piece marks a word start with "▁",
// a decoded token with a leading space; neither is part of the word.
std::string spelled(std::string_view text) {
  constexpr std::string_view word_start = "\u2581";
  std::string letters;
  for (size_t at = 0; at < text.size();) {
    if (text.substr(at).starts_with(word_start)) {
      at += word_start.size();
    } else if (text[at] == ' ') {
      ++at;
    } else {
      letters += text[at++];
    }
  }
  return letters;
}

// first[w] = index of the first token of word w, first[words] = the token count: the tokens of
// word w are [first[w], first[w + 1]). Tokens after the last word belong to it.
using TokenBounds = std::vector<size_t>;

// Exact when the tokens spell the words, which holds for Parakeet's pieces; nullopt otherwise.
std::optional<TokenBounds> token_bounds_by_text(const std::vector<TimedText>& words,
                                                const std::vector<TimedText>& tokens) {
  TokenBounds first(words.size() + 1);
  size_t token = 0;
  for (size_t word = 0; word < words.size(); ++word) {
    first[word] = token;
    const std::string target = spelled(words[word].text);
    std::string letters;
    while (letters.size() < target.size() && token < tokens.size()) {
      letters += spelled(tokens[token++].text);
    }
    if (letters != target) return std::nullopt;
  }
  for (size_t rest = token; rest < tokens.size(); ++rest) {
    if (!spelled(tokens[rest].text).empty()) return std::nullopt;
  }
  first[words.size()] = tokens.size();
  return first;
}

// By time, for tokens whose text does not spell the words (byte pieces, unknown tokens): a token
// belongs to the last word that starts at or before it, except that a zero-length token at the
// end of a word (TDT's punctuation) stays with that word even when the next word starts there.
TokenBounds token_bounds_by_time(const std::vector<TimedText>& words,
                                 const std::vector<TimedText>& tokens) {
  TokenBounds first(words.size() + 1, tokens.size());
  first[0] = 0;
  size_t word = 0;
  for (size_t token = 0; token < tokens.size(); ++token) {
    const TimedText& timed = tokens[token];
    const auto starts_next_word = [&] {
      const TimedText& next = words[word + 1];
      if (timed.start != next.start) return timed.start > next.start;
      const bool closes_current = timed.end == timed.start && timed.start <= words[word].end;
      return !closes_current;
    };
    while (word + 1 < words.size() && starts_next_word()) first[++word] = token;
  }
  return first;  // words no token reached keep the token count: they start, empty, at the end
}

TokenBounds token_bounds(const std::vector<TimedText>& words,
                         const std::vector<TimedText>& tokens) {
  if (auto by_text = token_bounds_by_text(words, tokens)) return *by_text;
  return token_bounds_by_time(words, tokens);
}

void check(const Segment& segment, const CueLimits& limits) {
  if (!(limits.max_seconds > 0) || !std::isfinite(limits.max_seconds)) {
    fail("cue limit max_seconds must be positive, not ", limits.max_seconds);
  }
  if (limits.max_chars == 0) fail("cue limit max_chars must be positive");
  if (!(limits.min_sentence_seconds >= 0) || !(limits.pause_seconds >= 0)) {
    fail("cue limits min_sentence_seconds and pause_seconds must not be negative, not ",
         limits.min_sentence_seconds, " and ", limits.pause_seconds);
  }
  if (!segment.token_times.empty() && segment.token_times.size() != segment.tokens.size()) {
    fail("segment has ", segment.tokens.size(), " tokens but ", segment.token_times.size(),
         " token times");
  }
}

// Chooses the word ranges of the cues.
class CuePlanner {
 public:
  CuePlanner(const std::vector<TimedText>& words, const CueLimits& limits)
      : words_(words), limits_(limits), chars_before_(words.size() + 1, 0) {
    for (size_t word = 0; word < words.size(); ++word) {
      chars_before_[word + 1] = chars_before_[word] + code_points(words[word].text);
    }
  }

  // The word index each cue starts at, followed by the word count.
  std::vector<size_t> cue_starts() const {
    std::vector<size_t> starts;
    for (size_t first = 0; first < words_.size();) {
      starts.push_back(first);
      first = cue_end(first);
    }
    starts.push_back(words_.size());
    return starts;
  }

 private:
  // The cue that starts at word `first` ends before the returned word.
  size_t cue_end(size_t first) const {
    size_t end = first + 1;
    for (; end < words_.size(); ++end) {
      if (ends_sentence(words_[end - 1]) && seconds(first, end) >= limits_.min_sentence_seconds) {
        break;
      }
      if (gap_before(end) > limits_.pause_seconds) break;
      if (too_long(first, end + 1)) return best_cut(first, end);
    }
    return end;
  }

  // Word `end` does not fit in the cue [first, end): cut before a word in (first, end], the
  // cue keeping at least half of a limit, at the longest silence, a clause or sentence mark
  // counting as a silence of pause_seconds (twice that for a sentence). Scores within a
  // millisecond tie (sums of times differ in their last bits), and ties go to the later cut,
  // which fills the cue.
  size_t best_cut(size_t first, size_t end) const {
    constexpr double kTie = 1e-3;
    size_t best = end;
    double best_score = cut_score(end);
    for (size_t cut = end - 1; cut > first; --cut) {
      const bool half_full = 2 * seconds(first, cut) >= limits_.max_seconds ||
                             2 * chars(first, cut) >= limits_.max_chars;
      if (!half_full) continue;
      const double score = cut_score(cut);
      if (score > best_score + kTie) {
        best = cut;
        best_score = score;
      }
    }
    return best;
  }

  double cut_score(size_t cut) const {
    double score = gap_before(cut);
    if (ends_sentence(words_[cut - 1])) {
      score += 2 * limits_.pause_seconds;
    } else if (ends_clause(words_[cut - 1])) {
      score += limits_.pause_seconds;
    }
    return score;
  }

  bool too_long(size_t first, size_t end) const {
    return seconds(first, end) > limits_.max_seconds || chars(first, end) > limits_.max_chars;
  }
  double seconds(size_t first, size_t end) const {
    return words_[end - 1].end - words_[first].start;
  }
  // Words joined by single spaces.
  size_t chars(size_t first, size_t end) const {
    return chars_before_[end] - chars_before_[first] + (end - first - 1);
  }
  double gap_before(size_t word) const { return words_[word].start - words_[word - 1].end; }

  const std::vector<TimedText>& words_;
  const CueLimits& limits_;
  std::vector<size_t> chars_before_;  // code points of the words before each index
};

template <class T>
std::vector<T> slice(const std::vector<T>& values, size_t first, size_t end) {
  return std::vector<T>(values.begin() + static_cast<std::ptrdiff_t>(first),
                        values.begin() + static_cast<std::ptrdiff_t>(end));
}

}  // namespace

std::vector<Segment> split_by_words(const Segment& segment, const CueLimits& limits) {
  check(segment, limits);
  const std::vector<TimedText>& words = segment.words;
  if (words.empty()) return {segment};

  const bool timed_tokens = !segment.token_times.empty();
  TokenBounds token_first;
  if (timed_tokens) token_first = token_bounds(words, segment.token_times);

  const std::vector<size_t> starts = CuePlanner(words, limits).cue_starts();
  std::vector<Segment> cues;
  cues.reserve(starts.size() - 1);
  for (size_t cue = 0; cue + 1 < starts.size(); ++cue) {
    const size_t first = starts[cue];
    const size_t end = starts[cue + 1];
    Segment piece;
    piece.start = words[first].start;
    piece.end = std::max(piece.start, words[end - 1].end);
    for (size_t word = first; word < end; ++word) piece.text += " " + words[word].text;
    piece.avg_logprob = segment.avg_logprob;
    piece.no_speech_prob = segment.no_speech_prob;
    piece.temperature = segment.temperature;
    piece.compression_ratio = segment.compression_ratio;
    piece.words = slice(words, first, end);
    if (timed_tokens) {
      piece.tokens = slice(segment.tokens, token_first[first], token_first[end]);
      piece.token_times = slice(segment.token_times, token_first[first], token_first[end]);
    }
    cues.push_back(std::move(piece));
  }
  // Without token times the tokens cannot be placed; the first cue keeps them all, so none is
  // lost.
  if (!timed_tokens) cues.front().tokens = segment.tokens;
  return cues;
}

Transcript split_by_words(const Transcript& transcript, const CueLimits& limits) {
  Transcript split;
  split.language = transcript.language;
  split.duration = transcript.duration;
  for (const Segment& segment : transcript.segments) {
    for (Segment& cue : split_by_words(segment, limits)) split.segments.push_back(std::move(cue));
  }
  return split;
}

}  // namespace hark
