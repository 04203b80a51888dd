#include "audio/resampler.h"

#include "audio/audio.h"
#include "base/error.h"

namespace hark::audio {
namespace {

// Equal rates: nothing to filter, so the samples pass through untouched.
class PassThrough final : public Resampler {
 public:
  void process(std::span<const float> input, std::vector<float>& output) override {
    output.insert(output.end(), input.begin(), input.end());
  }
  void finish(std::vector<float>&) override {}
};

}  // namespace

void check_sample_rate(long long rate, const char* what) {
  if (rate < kMinSampleRate || rate > kMaxSampleRate) {
    fail(what, " of ", rate, " Hz is outside the ", kMinSampleRate, " to ", kMaxSampleRate,
         " Hz that hark handles");
  }
}

std::unique_ptr<Resampler> make_resampler(int input_rate, int output_rate) {
  check_sample_rate(input_rate, "input sample rate");
  check_sample_rate(output_rate, "output sample rate");
  if (input_rate == output_rate) return std::make_unique<PassThrough>();
#ifdef HARK_HAVE_FFMPEG
  return make_swr_resampler(input_rate, output_rate);
#else
  return make_sinc_resampler(input_rate, output_rate);
#endif
}

}  // namespace hark::audio
