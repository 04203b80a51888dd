// The kernels of the log-mel front end on the GPU (features/mel_cuda.h), beside the shared ones in
// kernels.h and under the same rules: every pointer is device memory, every launch is
// asynchronous on `stream`, nothing synchronises with the host or allocates. All values are F32.
// The front end's products (the DFT for most n_fft, the mel filters) are mel_product's.
//
// For an n_fft that is a power of two, mel_power_spectrum replaces the framing, the DFT product and
// mel_power with one kernel: an F32 FFT per frame in shared memory; mel_fft_log_energies replaces
// the filter product and mel_log as well, summing each filter over the few bins it covers.
//
// A batch of utterances is laid out as one padded spectrogram: row r = b · padded_frames + t is
// frame t of utterance b, whether or not the utterance has that frame.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hark::compute::cuda {

// One utterance of a batch: where its samples sit in the concatenated signal, how many zeros
// follow them (MelSpectrogram::compute's trailing_zeros: Whisper's long form appends 30 s), its
// STFT frames (MelSpectrogram::frame_count of both) and how many of them hold audio (all of them,
// or all but the last with MelConfig::last_frame_is_padding).
struct MelUtterance {
  int64_t offset = 0;
  int64_t samples = 0;
  int64_t zeros = 0;
  int64_t frames = 0;
  int64_t audio_frames = 0;
};

// How frames are cut from the signal. Column c of frame t of an utterance of n samples (its
// trailing zeros included) is the signal at i = t · hop − pad + first + c, for c < span:
// pre-emphasised (y[i] = x[i] − k x[i−1], y[0] = x[0]), and outside [0, n) either zero or
// (reflect) y at the index mirrored at both ends without repeating the edge sample. `first` and
// `span` are the part of the n_fft-point window that is not zero, which is all the DFT needs to
// see.
struct MelFraming {
  int hop = 0;
  int64_t pad = 0;  // n_fft / 2 with centre padding, else 0
  int first = 0, span = 0;
  int width = 0;  // values stored per frame (≥ span; columns past span are zero)
  bool reflect = false;
  double preemphasis = 0.0;  // k; 0: off
};

// frames[i, :] for rows i < rows of [rows, width]: row i is padded row row0 + i (utterance
// (row0 + i) / padded_frames, frame (row0 + i) % padded_frames), all zeros when the utterance has
// no such frame or the row is past the batch's. utterances: `batch` entries.
void mel_frames(const float* signal, const MelUtterance* utterances, int batch,
                int64_t padded_frames, const MelFraming& framing, int64_t row0, int64_t rows,
                float* frames, cudaStream_t stream);

// power[i, j] = |re + i·im|^exponent with re = spectrum[i, j], im = spectrum[i, bins + j], for
// spectrum [rows, 2 · bins] and power [rows, bins].
void mel_power(const float* spectrum, int64_t rows, int64_t bins, float exponent, float* power,
               cudaStream_t stream);

// out[i, j] = Σ_k a[i, k] · b[j, k] for a [rows, depth], b [cols, depth] and out [rows, cols],
// row-major, in F32 (no TF32), each sum taken over k in order: the front end's DFT and filter
// products. A plain tiled kernel rather than cuBLASLt: a process's first F32 cuBLASLt product
// costs about 0.11 s (bench/RESULTS.md, twentieth session), which a short file would wait for
// before its first window, while these products, a few hundred columns deep and wide, are a
// small part of the front end's time either way.
void mel_product(const float* a, int64_t rows, int64_t depth, const float* b, int64_t cols,
                 float* out, cudaStream_t stream);

// Whether mel_power_spectrum takes this n_fft: a power of two from 16 to 4096 (a frame's FFT
// and its scratch fit one block's shared memory).
bool mel_fft_supported(int n_fft);

// power[i, j] = |X_(first_bin + j)|^exponent for rows i < rows of [rows, bins], with row i the
// padded row row0 + i as for mel_frames, and X = FFT(window · frame) over n_fft points: frame[n]
// the sample that mel_frames puts in column n − framing.first (zero outside the window's non-zero
// part [first, first + span)), window [n_fft] in double. Zeros for bins past n_fft / 2 and for
// rows of no frame. The frame is formed in double and rounded once; the FFT runs in F32.
// n_fft: mel_fft_supported.
void mel_power_spectrum(const float* signal, const MelUtterance* utterances, int batch,
                        int64_t padded_frames, const MelFraming& framing, int n_fft,
                        const double* window, int first_bin, int bins, float exponent, int64_t row0,
                        int64_t rows, float* power, cudaStream_t stream);

enum class MelLog : uint8_t { none, log10, ln };

// What mel_power_spectrum over every padded row, the product with the mel filters and mel_log
// compute, as one kernel that keeps each frame's spectrum on the chip: x [batch · padded_frames,
// n_mels] gets, for the audio frames of each utterance (MelUtterance::audio_frames),
// log(max(e, floor) + guard) (MelLog::none: e itself) of the energies
//   e[m] = Σ_j filters[m, j] · power[j]   for filter_bins[m].x ≤ j < filter_bins[m].y
// summed in F32 in that order, power[j] the power of bin first_bin + j (bins at most n_fft), and
// zeros in every other row. filters [n_mels, bins]: the bins outside each channel's range must
// hold zeros, so that the sums are those of the whole product. n_fft: mel_fft_supported.
void mel_fft_log_energies(const float* signal, const MelUtterance* utterances, int batch,
                          int64_t padded_frames, const MelFraming& framing, int n_fft,
                          const double* window, int first_bin, int bins, float exponent,
                          const float* filters, const int2* filter_bins, int n_mels, MelLog log,
                          float floor, float guard, float* x, cudaStream_t stream);

// In place over x [batch · padded_frames, n_mels]: the audio frames of each utterance become
// log(max(x, floor) + guard) (floor and guard 0: not applied; MelLog::none: kept as they are),
// every other row zero.
void mel_log(float* x, const MelUtterance* utterances, int batch, int64_t padded_frames,
             int64_t n_mels, MelLog log, float floor, float guard, cudaStream_t stream);

// In place over x [batch · padded_frames, n_mels], per utterance over its audio frames: each mel
// channel to zero mean and unit standard deviation, x = (x − mean) / (std + 1e-5), the mean and
// the unbiased variance (0 below two frames) accumulated in double.
void mel_normalize_per_feature(float* x, const MelUtterance* utterances, int batch,
                               int64_t padded_frames, int64_t n_mels, cudaStream_t stream);

// In place, per utterance over its audio frames: x = (max(x, top − 8) + 4) / 4, top the largest
// value among them (Whisper's dynamic range). tops: scratch of `batch` entries.
void mel_normalize_dynamic_range(float* x, const MelUtterance* utterances, int batch,
                                 int64_t padded_frames, int64_t n_mels, unsigned* tops,
                                 cudaStream_t stream);

}  // namespace hark::compute::cuda
