// Whisper's logit rules: what may come next, given the tokens sampled so far in a window.
//
// The rules of openai-whisper's decoding.py (SuppressBlank, SuppressTokens, ApplyTimestampRules)
// and of transformers' Whisper logits processors (SuppressTokensAtBegin, SuppressTokens,
// WhisperTimeStamp), applied in transformers' order:
//   1. begin_suppress_tokens at the first sampled position (" " and <|endoftext|>: no empty text);
//   2. suppress_tokens (non-speech symbols and the special tokens, from the generation config);
//   3. with timestamps:
//      - <|notimestamps|> never;
//      - timestamps come in pairs: after a timestamp that follows text, only a timestamp or
//        <|endoftext|>; after two timestamps, no timestamp;
//      - timestamps never decrease, and after a closed pair the next one is strictly later (each
//        segment has a non-zero length, so seeking always advances);
//      - the first sampled token is a timestamp, at most max_initial_timestamp_index;
//      - when the timestamps together are more likely than the likeliest other token, a
//        timestamp is forced.
// A rule bans a token by setting its score to -infinity.
//
// openai additionally always suppresses <|startoftranscript|>, <|startofprev|>, <|startoflm|> and
// <|nospeech|>; transformers only suppresses what generation_config.suppress_tokens lists (which
// for the released checkpoints contains those four). hark follows transformers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/whisper/model.h"

namespace hark::whisper {

class LogitRules {
 public:
  // `vocab_size`: the decoder's output size (token ids at or above it do not exist, and ids of
  // the suppress lists beyond it are ignored). `timestamps`: sample timestamp tokens (false:
  // the prompt ended with <|notimestamps|> and no timestamp rule applies, as in the references).
  LogitRules(const Vocabulary& vocabulary, int vocab_size, bool timestamps);

  // Bans, in `scores` (one step's logits over the vocabulary), the tokens that may not follow
  // `sampled` (the tokens sampled so far in this window, after the prompt). The scores may also
  // be log-probabilities, as transformers' beam search passes them: every rule either bans tokens
  // or compares scores in a way that does not change when a constant is added to all of them.
  void apply(std::span<float> scores, std::span<const int32_t> sampled) const;

  bool timestamps() const { return timestamps_; }

 private:
  void apply_timestamp_rules(std::span<float> scores, std::span<const int32_t> sampled) const;

  int32_t eot_, no_timestamps_, timestamp_begin_;
  int vocab_size_;
  bool timestamps_;
  int max_initial_timestamp_index_;  // < 0: no limit
  std::vector<int32_t> suppress_, begin_suppress_;
};

}  // namespace hark::whisper
