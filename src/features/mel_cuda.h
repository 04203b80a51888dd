// The log-mel front end on the GPU: a MelSpectrogram's config, window and filterbank, run over a
// batch of utterances at once, the features left on the device for an encoder. The same front
// ends as mel.h (Whisper's, NeMo's), not a copy of one of them.
//
// Per batch (compute/cuda/kernels_mel.h for the kernels): the samples go up in parts, each as soon
// as it is staged, on the front end's own copy stream, then on the caller's stream
//   n_fft a power of two (NeMo's 512): per frame, one kernel: the frame (pre-emphasis, centre
//     padding, window) -> an F32 FFT in shared memory -> |X|^power -> mel filters, each an F32
//     sum over the bins it covers -> log
//   any other n_fft (Whisper's 400): frames -> DFT: one F32 product with a cos/sin basis that
//     holds the window -> |X|^power -> mel filters: an F32 product -> log
//   -> normalisation
// Only the bins some filter uses (and, for the product, the window's non-zero part) enter the
// sums. They run in full F32 (mel_product: no TF32, no cuBLASLt) where the CPU runs in double: the
// features agree with MelSpectrogram::compute to F32 rounding of the spectrum
// (tests/unit/mel_cuda_test.cpp).
// Included only by code built with CUDA.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/cuda/device.h"
#include "compute/cuda/kernels_mel.h"
#include "compute/cuda/profile.h"
#include "features/mel.h"

namespace hark::features {

// A batch's features on the device, and what they were computed from.
struct DeviceMelBatch {
  int batch = 0;
  int64_t padded_frames = 0;    // the most frames of any utterance
  std::vector<int64_t> frames;  // MelSpectrogram::frame_count of each utterance
  // F32 [batch, padded_frames, n_mels], time-major: values[b, t, m] is the CPU's
  // compute(utterance b)[m · frames[b] + t]; rows t >= frames[b] are zeros.
  compute::cuda::Buffer values;
  // The batch's samples, one utterance after another, and where each sits: the inputs, kept
  // here so that their memory goes with the batch.
  compute::cuda::Buffer signal, utterances;

  const float* data() const { return values.as<const float>(); }
};

class CudaMelSpectrogram {
 public:
  // Copies `mel`'s window and filterbank (as F32) into the products' matrices on the device.
  // Needs a usable GPU (compute::cuda::require_device). Throws hark::Error for a config it cannot
  // run.
  explicit CudaMelSpectrogram(const MelSpectrogram& mel);

  const MelSpectrogram& mel() const { return mel_; }
  const MelConfig& config() const { return mel_.config(); }
  int n_mels() const { return mel_.n_mels(); }
  // Whether the spectrum comes from the FFT kernel (n_fft a power of two it takes) rather than
  // from the DFT product.
  bool uses_fft() const { return fft_; }

  // The features of each utterance (mono samples at sample_rate, each followed by
  // `trailing_zeros` zero samples, as MelSpectrogram::compute takes them) into `out`,
  // asynchronously on `stream`: ready once the stream is synchronised. The samples are copied
  // before this returns.
  // Their upload runs on a stream of the front end's own, as soon as the last call's kernels no
  // longer read its inputs: while `stream` still runs earlier work (another batch's encoder),
  // the copies to the GPU already run beside it.
  // Throws hark::Error, before any kernel is queued, on a sample that is NaN or infinite (as
  // MelSpectrogram::compute does; copies into out's buffers may be queued, and `out` is not to be
  // used). Uses the object's scratch: one call at a time. With a `clock` (HARK_CUDA_PROFILE), the
  // wait of `stream` for the samples and the spectrum are stages of their own.
  void compute(std::span<const std::span<const float>> utterances, cudaStream_t stream,
               DeviceMelBatch& out, compute::cuda::StageClock* clock = nullptr,
               int64_t trailing_zeros = 0);

 private:
  MelSpectrogram mel_;
  compute::cuda::MelFraming framing_;
  bool fft_ = false;
  int first_bin_ = 0;  // the first FFT bin any filter uses
  int bins_ = 0;       // bins in the products (those used, padded to a multiple of 4)
  // The FFT's window [n_fft] in double. For the product instead, the DFT's rows
  // [2 · bins_, framing_.width]: window · cos, then window · −sin, of the bins first_bin_ + j.
  compute::cuda::Buffer window_, basis_;
  compute::cuda::Buffer filters_;  // the mel filters [n_mels, bins_] over the bins first_bin_ + j
  // For the FFT: the bins [x, y) of each filter from its first non-zero value to its last, int2.
  compute::cuda::Buffer filter_bins_;
  // Scratch of the product path for one chunk of frames at a time: frames [rows, width],
  // spectrum [rows, 2 · bins_] and power [rows, bins_]. Chunks bound it whatever the batch.
  compute::cuda::Buffer frames_, spectrum_, power_;
  compute::cuda::Buffer tops_;  // Whisper's normalisation: each utterance's largest value
  // The copies of the samples, ordered after the last call's kernels that read its inputs (the
  // samples and the utterance table, overwritten by the next upload) and before the kernels of
  // their own call. Declared before the staging buffer, whose destructor waits for the stream.
  compute::cuda::Stream upload_stream_;
  compute::cuda::Event inputs_read_, inputs_uploaded_;
  compute::cuda::StagingBuffer staging_;  // the samples and the utterance table on their way up
};

}  // namespace hark::features
