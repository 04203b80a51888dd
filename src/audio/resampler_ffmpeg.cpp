// The resampler of FFmpeg builds: libswresample with its defaults, so that hark's 16 kHz samples
// match what `ffmpeg -ar 16000` (openai-whisper's and transformers' loader) produces.
extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>
}

#include <algorithm>

#include "audio/libav.h"
#include "audio/resampler.h"
#include "base/error.h"

namespace hark::audio {
namespace {

class SwrResampler final : public Resampler {
 public:
  SwrResampler(int input_rate, int output_rate) {
    check_sample_rate(input_rate, "input sample rate");
    check_sample_rate(output_rate, "output sample rate");
    libav::quiet_logs();
    libav::forget_log_error();
    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    int status = swr_alloc_set_opts2(&context_, &mono, AV_SAMPLE_FMT_FLT, output_rate, &mono,
                                     AV_SAMPLE_FMT_FLT, input_rate, 0, nullptr);
    if (status >= 0) status = swr_init(context_);
    if (status < 0) {
      swr_free(&context_);
      fail("cannot resample from ", input_rate, " to ", output_rate,
           " Hz: ", libav::error_text(status));
    }
  }
  ~SwrResampler() override { swr_free(&context_); }
  SwrResampler(const SwrResampler&) = delete;
  SwrResampler& operator=(const SwrResampler&) = delete;

  void process(std::span<const float> input, std::vector<float>& output) override {
    // swr counts samples in ints; feed very long spans in pieces.
    constexpr size_t kPiece = size_t{1} << 20;
    for (size_t start = 0; start < input.size(); start += kPiece) {
      const size_t count = std::min(kPiece, input.size() - start);
      convert(reinterpret_cast<const uint8_t*>(input.data() + start), static_cast<int>(count),
              output);
    }
  }

  void finish(std::vector<float>& output) override {
    // With no input, swr_convert drains what its filter still holds.
    while (convert(nullptr, 0, output) > 0) {
    }
  }

 private:
  int convert(const uint8_t* input, int count, std::vector<float>& output) {
    const int capacity = swr_get_out_samples(context_, count);
    if (capacity < 0) fail("resampling failed: ", libav::error_text(capacity));
    // swr writes into a scratch buffer of its upper bound, so that `output` only ever grows by
    // what was produced (and a caller's exact reserve() holds).
    scratch_.resize(static_cast<size_t>(capacity));
    auto* out = reinterpret_cast<uint8_t*>(scratch_.data());
    const int produced = swr_convert(context_, &out, capacity, input ? &input : nullptr, count);
    if (produced < 0) fail("resampling failed: ", libav::error_text(produced));
    output.insert(output.end(), scratch_.begin(), scratch_.begin() + produced);
    return produced;
  }

  SwrContext* context_ = nullptr;
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<Resampler> make_swr_resampler(int input_rate, int output_rate) {
  return std::make_unique<SwrResampler>(input_rate, output_rate);
}

}  // namespace hark::audio
