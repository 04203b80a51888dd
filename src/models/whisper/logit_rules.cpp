#include "models/whisper/logit_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"

namespace hark::whisper {
namespace {

constexpr float kBanned = -std::numeric_limits<float>::infinity();

void ban_range(std::span<float> scores, int64_t begin, int64_t end) {
  begin = std::clamp<int64_t>(begin, 0, static_cast<int64_t>(scores.size()));
  end = std::clamp<int64_t>(end, begin, static_cast<int64_t>(scores.size()));
  std::fill(scores.begin() + begin, scores.begin() + end, kBanned);
}

// The ids of `tokens` that exist in a vocabulary of `vocab_size`, in order, without repeats.
std::vector<int32_t> existing_ids(const std::vector<int32_t>& tokens, int vocab_size) {
  std::vector<int32_t> ids;
  for (int32_t id : tokens) {
    if (id >= 0 && id < vocab_size) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace

LogitRules::LogitRules(const Vocabulary& vocabulary, int vocab_size, bool timestamps)
    : eot_(vocabulary.eot),
      no_timestamps_(vocabulary.no_timestamps),
      timestamp_begin_(vocabulary.timestamp_begin),
      vocab_size_(vocab_size),
      timestamps_(timestamps),
      max_initial_timestamp_index_(vocabulary.max_initial_timestamp_index),
      suppress_(existing_ids(vocabulary.suppress_tokens, vocab_size)),
      begin_suppress_(existing_ids(vocabulary.begin_suppress_tokens, vocab_size)) {
  if (vocab_size <= 0) fail("Whisper logit rules: vocabulary size ", vocab_size);
  if (eot_ < 0 || eot_ >= vocab_size) {
    fail("Whisper logit rules: <|endoftext|> id ", eot_, " is outside the vocabulary of ",
         vocab_size);
  }
  if (timestamps &&
      (no_timestamps_ < 0 || timestamp_begin_ <= eot_ || timestamp_begin_ >= vocab_size)) {
    fail(
        "Whisper logit rules: timestamps need <|notimestamps|> and <|0.00|> after <|endoftext|> "
        "in the vocabulary of ",
        vocab_size, " (ids ", no_timestamps_, ", ", timestamp_begin_, ")");
  }
}

void LogitRules::apply(std::span<float> scores, std::span<const int32_t> sampled) const {
  if (static_cast<int64_t>(scores.size()) != vocab_size_) {
    fail("Whisper logit rules: ", scores.size(), " scores for a vocabulary of ", vocab_size_);
  }
  if (sampled.empty()) {
    for (int32_t id : begin_suppress_) scores[id] = kBanned;
  }
  for (int32_t id : suppress_) scores[id] = kBanned;
  if (timestamps_) apply_timestamp_rules(scores, sampled);
}

void LogitRules::apply_timestamp_rules(std::span<float> scores,
                                       std::span<const int32_t> sampled) const {
  // <|notimestamps|> is how a prompt switches timestamps off; it is never sampled.
  scores[no_timestamps_] = kBanned;

  auto is_timestamp = [this](int32_t id) { return id >= timestamp_begin_; };
  const size_t n = sampled.size();
  const bool last_was_timestamp = n >= 1 && is_timestamp(sampled[n - 1]);
  // The window's start counts as a timestamp: a lone first timestamp opens a segment.
  const bool penultimate_was_timestamp = n < 2 || is_timestamp(sampled[n - 2]);
  if (last_was_timestamp) {
    if (penultimate_was_timestamp) {
      ban_range(scores, timestamp_begin_, vocab_size_);  // a pair was just closed: text next
    } else {
      ban_range(scores, 0, eot_);  // a segment's end: its pair (or <|endoftext|>) must follow
    }
  }

  const auto last_timestamp = std::find_if(sampled.rbegin(), sampled.rend(), is_timestamp);
  if (last_timestamp != sampled.rend()) {
    // The timestamp that closes a segment may repeat the one that ended it (the next segment
    // starts where the last ended); any other must be later than the last.
    const bool closing_pair = last_was_timestamp && !penultimate_was_timestamp;
    const int64_t first_allowed = *last_timestamp + (closing_pair ? 0 : 1);
    ban_range(scores, timestamp_begin_, first_allowed);
  }

  if (sampled.empty()) {
    ban_range(scores, 0, timestamp_begin_);  // a window starts with a timestamp
    if (max_initial_timestamp_index_ >= 0) {
      ban_range(scores, int64_t{timestamp_begin_} + max_initial_timestamp_index_ + 1, vocab_size_);
    }
  }

  // Force a timestamp when all timestamps together outweigh every single other token. Comparing
  // log-sum-exp of the raw scores equals comparing the log-softmax values, with no softmax.
  double max_other = -std::numeric_limits<double>::infinity();
  for (int32_t id = 0; id < timestamp_begin_; ++id)
    max_other = std::max<double>(max_other, scores[id]);
  double max_timestamp = -std::numeric_limits<double>::infinity();
  for (int32_t id = timestamp_begin_; id < vocab_size_; ++id) {
    max_timestamp = std::max<double>(max_timestamp, scores[id]);
  }
  if (max_timestamp == -std::numeric_limits<double>::infinity()) return;
  double sum = 0;
  for (int32_t id = timestamp_begin_; id < vocab_size_; ++id)
    sum += std::exp(scores[id] - max_timestamp);
  const double timestamp_mass = max_timestamp + std::log(sum);
  if (timestamp_mass > max_other) ban_range(scores, 0, timestamp_begin_);
}

}  // namespace hark::whisper
