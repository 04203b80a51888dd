// Log-mel spectrogram: one STFT + mel filterbank implementation for every model's front end.
//
// A front end is a MelConfig: Whisper's, NeMo's (Parakeet) and GigaAM's differ only in window,
// padding, pre-emphasis, filterbank scale/normalisation, log and normalisation, all fields here.
// The STFT runs in double precision (a mixed-radix FFT), frames in parallel over OpenMP threads.
// features/mel_cuda.h runs the same configs (this class's window and filterbank) on the GPU.
//
// Pipeline, per frame t of hop_length samples:
//   x -> pre-emphasis -> centre padding -> window -> |FFT|^power -> mel filterbank
//     -> log -> normalisation over the whole spectrogram
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "features/fft.h"

namespace hark::features {

enum class WindowKind {
  hann_periodic,   // torch.hann_window(n) (periodic=True): Whisper
  hann_symmetric,  // torch.hann_window(n, periodic=False): NeMo
  hamming_periodic,
  hamming_symmetric,
  rectangular,
};
enum class PadMode { reflect, zeros };  // how center=true pads n_fft/2 samples at both ends
enum class MelScale { slaney, htk, kaldi };
enum class FilterNorm { none, slaney };  // slaney: each filter scaled to unit area (2 / width)
enum class LogKind { none, log10, ln };
enum class Normalization {
  none,
  // Whisper: x = max(x, max(x) - 8) over the whole spectrogram, then (x + 4) / 4.
  whisper_dynamic_range,
  // NeMo: each mel channel to zero mean and unit (unbiased) standard deviation over the frames,
  // std + 1e-5 in the denominator.
  per_feature,
};

struct MelConfig {
  int sample_rate = 16000;
  int n_fft = 400;
  int win_length = 0;  // 0: n_fft; a shorter window is centred in n_fft with zeros, as torch.stft
  int hop_length = 160;
  WindowKind window = WindowKind::hann_periodic;
  bool center = true;  // pad n_fft/2 samples at both ends so frame t is centred on t * hop
  PadMode pad_mode = PadMode::reflect;
  double preemphasis = 0;  // y[t] = x[t] - k x[t-1] (y[0] = x[0]) before the STFT; 0: off
  double power = 2;        // 2: power spectrum |X|^2, 1: magnitude |X|
  int n_mels = 80;
  double f_min = 0;
  double f_max = 0;  // 0: sample_rate / 2
  MelScale mel_scale = MelScale::slaney;
  FilterNorm filter_norm = FilterNorm::slaney;
  bool drop_last_frame = false;  // Whisper drops the STFT's final frame
  // NeMo keeps it but counts only (n + 2·(n_fft/2) − n_fft) / hop = frames − 1 frames as audio:
  // the last is left out of the normalisation and set to 0.
  bool last_frame_is_padding = false;
  LogKind log = LogKind::log10;
  double log_floor = 0;  // log(max(x, log_floor)) when > 0 (Whisper: 1e-10)
  double log_guard = 0;  // log(x + log_guard) when > 0 (NeMo: 2^-24)
  Normalization normalization = Normalization::none;
};

// Triangular mel filters over the n_fft/2 + 1 FFT bins as transformers' mel_filter_bank (and
// librosa.filters.mel) computes them: [n_mels x n_bins] row-major.
std::vector<double> mel_filterbank(int sample_rate, int n_fft, int n_mels, double f_min,
                                   double f_max, MelScale scale, FilterNorm norm);

class MelSpectrogram {
 public:
  // Validates the config (throws hark::Error naming the bad field) and precomputes the window,
  // the FFT plan and the filterbank.
  explicit MelSpectrogram(const MelConfig& config);

  const MelConfig& config() const { return config_; }
  int n_mels() const { return config_.n_mels; }
  int n_bins() const { return config_.n_fft / 2 + 1; }
  const std::vector<double>& filterbank() const { return filters_; }  // [n_mels x n_bins]
  const std::vector<double>& window() const { return window_; }       // n_fft values
  // Frames produced for `n_samples` samples.
  int64_t frame_count(int64_t n_samples) const;
  // The features of `samples` (mono, at sample_rate) followed by `trailing_zeros` zero samples
  // (padding without a copy): [n_mels x frame_count(samples + zeros)] row-major. Throws
  // hark::Error on a sample that is NaN or infinite.
  std::vector<float> compute(std::span<const float> samples, int64_t trailing_zeros = 0) const;

 private:
  MelConfig config_;
  Fft fft_;
  std::vector<double> window_;   // n_fft values, zero outside the centred win_length
  std::vector<double> filters_;  // [n_mels x n_bins]
  // Each filter is non-zero on bins [first_bin, last_bin); only those are summed.
  std::vector<int> first_bin_, last_bin_;
};

}  // namespace hark::features
