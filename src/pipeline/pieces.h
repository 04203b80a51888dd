// Long audio in pieces. A model whose encoder attends over the whole input (Parakeet's
// FastConformer) needs memory that grows with the square of its length, so an hour of audio is
// cut into pieces of bounded length, preferably where nobody speaks, and transcribed as a batch;
// the model gives each piece's times on the whole recording's clock.
//
// The cut is found from the short-time energy: levels of 30-ms frames in dB, averaged over about
// half a second around each frame boundary, so that a cut lands inside a silence rather than in
// a short gap between syllables. Within the search window around the preferred cut, the longest
// quiet stretch (within 3 dB of the quietest level) wins and is cut in its middle; when the window
// holds no stretch clearly quieter than its loud part (constant noise, digital silence, music),
// the cut goes to the preferred point itself. Everything is plain arithmetic on the samples, so
// the same audio always gives the same pieces.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "audio/audio.h"

namespace hark {

struct PieceLimits {
  // No piece is longer than this.
  double max_seconds = 20 * 60;
  // The preferred piece length (capped at max_seconds). 0: the fewest pieces max_seconds allows,
  // of about equal length, which batches better than full pieces and one short remainder.
  double target_seconds = 0;
  // How far on either side of the preferred cut a pause is looked for; never more than half the
  // preferred length, and never past max_seconds.
  double search_seconds = 15;
  // A last piece shorter than this joins the one before it, when that stays within max_seconds.
  double min_seconds = 1;
};

// Samples [begin, end) of the audio.
struct SampleRange {
  size_t begin = 0;
  size_t end = 0;

  size_t size() const { return end - begin; }
  bool operator==(const SampleRange&) const = default;
};

// The pieces of `samples` (mono, at `sample_rate`), in order: contiguous, together covering the
// audio exactly once, none longer than max_seconds. Audio no longer than the preferred length
// (max_seconds when no target is set) is one piece; empty audio, none. Throws hark::Error when a
// limit is negative or not finite, or max_seconds is shorter than one sample.
std::vector<SampleRange> split_at_pauses(std::span<const float> samples,
                                         const PieceLimits& limits = {},
                                         int sample_rate = audio::kSampleRate);

}  // namespace hark
