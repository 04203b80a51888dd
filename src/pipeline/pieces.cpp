#include "pipeline/pieces.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace hark {

namespace {

constexpr double kFrameSeconds = 0.030;
// The level of a boundary averages this many frames on each side (~0.5 s in all): longer than
// the gaps inside words, shorter than a pause between sentences.
constexpr size_t kHalfWindowFrames = 8;
// Floor of the frame level: digital silence, and what keeps log10 finite.
constexpr double kSilenceDb = -100;
// A window holds a pause when its quietest boundary is this far below its loud part (its 90th
// percentile). Constant noise varies by well under 1 dB at this smoothing; speech pauses, even
// in a noisy room, by far more.
constexpr double kPauseContrastDb = 6;
// Boundaries within this much of the quietest level count as one quiet stretch.
constexpr double kQuietToleranceDb = 3;

size_t to_samples(double seconds, int sample_rate) {
  return static_cast<size_t>(std::floor(seconds * sample_rate));
}

void check(const PieceLimits& limits, int sample_rate) {
  if (sample_rate <= 0) fail("sample rate must be positive, not ", sample_rate);
  const double values[] = {limits.max_seconds, limits.target_seconds, limits.search_seconds,
                           limits.min_seconds};
  for (double value : values) {
    if (!std::isfinite(value) || value < 0) {
      fail("piece limits must be finite and not negative: max ", limits.max_seconds, " s, target ",
           limits.target_seconds, " s, search ", limits.search_seconds, " s, min ",
           limits.min_seconds, " s");
    }
  }
  if (to_samples(limits.max_seconds, sample_rate) < 1) {
    fail("the longest piece (", limits.max_seconds, " s) must hold at least one sample");
  }
}

// The smoothed level at every frame boundary b (b = 0 .. frames), the boundary between frames
// b - 1 and b: the mean dB level of the frames within kHalfWindowFrames on either side.
class Levels {
 public:
  Levels(std::span<const float> samples, size_t frame_samples) : frame_samples_(frame_samples) {
    const size_t frames = (samples.size() + frame_samples - 1) / frame_samples;
    // Prefix sums of the frame levels make every boundary's mean one subtraction.
    std::vector<double> level_sum(frames + 1, 0);
    for (size_t frame = 0; frame < frames; ++frame) {
      const size_t begin = frame * frame_samples;
      const size_t end = std::min(samples.size(), begin + frame_samples);
      double energy = 0;
      for (size_t i = begin; i < end; ++i) energy += double(samples[i]) * samples[i];
      const double mean_square = energy / double(end - begin);
      const double level = std::max(kSilenceDb, 10 * std::log10(mean_square + 1e-30));
      level_sum[frame + 1] = level_sum[frame] + level;
    }
    at_boundary_.resize(frames + 1);
    for (size_t boundary = 0; boundary <= frames; ++boundary) {
      const size_t first = boundary > kHalfWindowFrames ? boundary - kHalfWindowFrames : 0;
      const size_t end = std::min(frames, boundary + kHalfWindowFrames);
      at_boundary_[boundary] = (level_sum[end] - level_sum[first]) / double(end - first);
    }
  }

  size_t frame_samples() const { return frame_samples_; }
  double at(size_t boundary) const { return at_boundary_[boundary]; }

 private:
  size_t frame_samples_;
  std::vector<double> at_boundary_;
};

// Where to cut in [lowest, highest] (samples, lowest > 0), aiming at `preferred`.
size_t find_cut(const Levels& levels, size_t lowest, size_t highest, size_t preferred) {
  const size_t frame = levels.frame_samples();
  const size_t first_boundary = (lowest + frame - 1) / frame;
  const size_t last_boundary = highest / frame;
  if (first_boundary >= last_boundary) return preferred;

  std::vector<double> window;
  for (size_t b = first_boundary; b <= last_boundary; ++b) window.push_back(levels.at(b));
  const double quietest = *std::min_element(window.begin(), window.end());
  auto loud = window.begin() + static_cast<std::ptrdiff_t>(window.size() * 9 / 10);
  std::nth_element(window.begin(), loud, window.end());
  if (*loud - quietest < kPauseContrastDb) return preferred;

  // The longest quiet stretch; of equally long ones, the one nearest the preferred cut, then
  // the earlier.
  size_t best_cut = preferred;
  size_t best_length = 0;
  size_t best_distance = 0;
  for (size_t b = first_boundary; b <= last_boundary;) {
    if (levels.at(b) > quietest + kQuietToleranceDb) {
      ++b;
      continue;
    }
    const size_t stretch_first = b;
    while (b <= last_boundary && levels.at(b) <= quietest + kQuietToleranceDb) ++b;
    const size_t length = b - stretch_first;
    const size_t cut = (stretch_first + b - 1) / 2 * frame;
    const size_t distance = cut > preferred ? cut - preferred : preferred - cut;
    if (length > best_length || (length == best_length && distance < best_distance)) {
      best_cut = cut;
      best_length = length;
      best_distance = distance;
    }
  }
  return best_cut;
}

}  // namespace

std::vector<SampleRange> split_at_pauses(std::span<const float> samples, const PieceLimits& limits,
                                         int sample_rate) {
  check(limits, sample_rate);
  const size_t total = samples.size();
  const size_t max_samples = to_samples(limits.max_seconds, sample_rate);
  if (total == 0) return {};

  const size_t target_samples = to_samples(limits.target_seconds, sample_rate);
  const size_t search_samples = to_samples(limits.search_seconds, sample_rate);
  const Levels levels(samples, std::max<size_t>(1, to_samples(kFrameSeconds, sample_rate)));

  std::vector<SampleRange> pieces;
  size_t start = 0;
  while (start < total) {
    const size_t remaining = total - start;
    size_t preferred_length = std::min(target_samples, max_samples);
    if (target_samples == 0) {
      const size_t pieces_left = (remaining + max_samples - 1) / max_samples;
      preferred_length = (remaining + pieces_left - 1) / pieces_left;
    }
    if (remaining <= preferred_length) {
      pieces.push_back({start, total});
      break;
    }
    const size_t reach = std::min(search_samples, preferred_length / 2);
    const size_t preferred = start + preferred_length;
    const size_t lowest = std::max(start + 1, preferred - reach);
    const size_t highest = std::min({preferred + reach, start + max_samples, total - 1});
    const size_t cut = find_cut(levels, lowest, highest, preferred);
    pieces.push_back({start, cut});
    start = cut;
  }

  const size_t min_samples = to_samples(limits.min_seconds, sample_rate);
  if (pieces.size() >= 2) {
    const SampleRange last = pieces.back();
    SampleRange& before = pieces[pieces.size() - 2];
    if (last.size() < min_samples && last.end - before.begin <= max_samples) {
      before.end = last.end;
      pieces.pop_back();
    }
  }
  return pieces;
}

}  // namespace hark
