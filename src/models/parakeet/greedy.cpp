#include "models/parakeet/greedy.h"

#include <utility>

namespace hark::parakeet {

int32_t argmax(const float* values, int count) {
  int32_t best = 0;
  for (int i = 1; i < count; ++i) {
    if (values[i] > values[best]) best = i;
  }
  return best;
}

std::vector<Emission> collapse_ctc(std::span<const int32_t> frame_tokens, const Config& config,
                                   const EmissionPattern* pattern) {
  const int32_t blank = config.blank_id;
  std::vector<Emission> emissions;
  int32_t previous = -1;
  for (size_t t = 0; t < frame_tokens.size(); ++t) {
    const auto frame = static_cast<int64_t>(t);
    int32_t token = frame_tokens[t];
    if (pattern != nullptr) {
      token = pattern->emits_on(frame) ? pattern->token(frame, config) : blank;
    }
    if (token != blank && token != previous) {
      emissions.push_back({token, static_cast<int32_t>(t), 1});
    }
    previous = token;
  }
  return emissions;
}

TransducerSearch::TransducerSearch(const Config& config, std::vector<int64_t> frames,
                                   const EmissionPattern* pattern)
    : config_(config),
      pattern_(pattern),
      tdt_(config.head == Head::tdt),
      blank_(config.blank_id),
      frames_(std::move(frames)),
      frame_(frames_.size(), 0),
      steps_(frames_.size(), 0),
      symbols_(frames_.size(), 0),
      emissions_(frames_.size()) {}

bool TransducerSearch::next_step() {
  // transformers' TDT has no per-frame symbol limit; its generate() stops after
  // max_symbols_per_step × T steps, which bounds a run of zero-duration tokens here too (and
  // never binds RNN-T, whose guard allows at most that many steps).
  active_.clear();
  for (size_t b = 0; b < frames_.size(); ++b) {
    if (frame_[b] < frames_[b] && steps_[b] < int64_t{config_.max_symbols_per_step} * frames_[b]) {
      active_.push_back(static_cast<int64_t>(b));
    }
  }
  return !active_.empty();
}

int32_t TransducerSearch::decide(int64_t b, int32_t token, int32_t duration) {
  if (pattern_ != nullptr) {
    // RNN-T emits at most one token on a pattern frame; the blank after it moves on.
    const bool emit = pattern_->emits_on(frame_[b]) && (tdt_ || symbols_[b] == 0);
    token = emit ? pattern_->token(frame_[b], config_) : blank_;
    duration = emit ? pattern_->duration : 1;
  }
  const auto at = static_cast<int32_t>(frame_[b]);
  ++steps_[b];
  if (tdt_) {
    // The duration's index is the number of frames (transformers; NeMo reads durations[] by it,
    // the same for [0, 1, 2, ...]). A blank always moves on.
    if (token == blank_ && duration == 0) duration = 1;
    if (token != blank_) emissions_[b].push_back({token, at, duration});
    frame_[b] += duration;
  } else if (token == blank_) {
    frame_[b] += 1;
    symbols_[b] = 0;
  } else {
    const bool forced = ++symbols_[b] >= config_.max_symbols_per_step;
    emissions_[b].push_back({token, at, forced ? 1 : 0});
    if (forced) {
      frame_[b] += 1;
      symbols_[b] = 0;
    }
  }
  return token != blank_ ? token : -1;
}

}  // namespace hark::parakeet
