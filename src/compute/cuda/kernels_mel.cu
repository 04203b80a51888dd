// The kernels of kernels_mel.h. All but the FFT are memory-bound loops over the padded
// spectrogram; the per-utterance statistics reduce in double, as the CPU front end
// (features/mel.cpp) does.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/kernels_mel.h"

namespace hark::compute::cuda {

namespace {

constexpr int kThreads = 256;
// Position i of a signal of n samples mirrored at both ends without repeating the edge sample
// (numpy's and torch's "reflect"), for any i: long pads reflect back and forth. As mel.cpp.
__device__ int64_t reflect_index(int64_t i, int64_t n) {
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

// ---- Framing -------------------------------------------------------------------------------

// Where padded row `row` takes its frame from: frame row % padded_frames of utterance
// row / padded_frames, if that utterance exists (rows past the batch are a product's rows rounded
// up) and has that frame.
struct FrameSource {
  const float* samples = nullptr;  // the utterance's
  int64_t count = 0;               // its samples
  int64_t length = 0;              // with the zeros after them
  int64_t begin = 0;               // the signal position of column 0
  bool exists = false;
  bool audio = false;  // one of the utterance's audio frames (MelUtterance::audio_frames)
};

__device__ FrameSource frame_source(const float* signal, const MelUtterance* utterances, int batch,
                                    int64_t padded_frames, const MelFraming& framing, int64_t row) {
  const int64_t b = row / padded_frames;
  const MelUtterance u = b < batch ? utterances[b] : MelUtterance{};
  const int64_t t = row % padded_frames;
  FrameSource source;
  source.samples = signal + u.offset;
  source.count = u.samples;
  source.length = u.samples + u.zeros;
  source.begin = t * framing.hop - framing.pad + framing.first;
  source.exists = t < u.frames;
  source.audio = t < u.audio_frames;
  return source;
}

// Column c < framing.span of an existing frame (MelFraming: pre-emphasis, then zero or reflect
// padding), in double, as close to the CPU's double arithmetic as the F32 samples allow. The one
// definition of a frame's contents, for both mel_frames and mel_power_spectrum.
__device__ double framed_sample(const FrameSource& source, const MelFraming& framing, int c) {
  int64_t at = source.begin + c;
  if (at < 0 || at >= source.length) {
    if (!framing.reflect) return 0.0;
    at = reflect_index(at, source.length);
  }
  auto signal = [&](int64_t i) -> double { return i < source.count ? source.samples[i] : 0.0; };
  double emphasised = signal(at);
  if (framing.preemphasis != 0.0 && at > 0) emphasised -= framing.preemphasis * signal(at - 1);
  return emphasised;
}

// One block row per frame (grid y), its threads along the frame's columns, so that both the
// signal reads and the frame writes are coalesced.
__global__ void mel_frames_kernel(const float* signal, const MelUtterance* utterances, int batch,
                                  int64_t padded_frames, MelFraming framing, int64_t row0,
                                  int64_t rows, float* frames) {
  for (int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    const FrameSource source =
        frame_source(signal, utterances, batch, padded_frames, framing, row0 + i);
    float* frame = frames + i * framing.width;
    for (int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); c < framing.width;
         c += static_cast<int>(blockDim.x * gridDim.x)) {
      frame[c] = source.exists && c < framing.span
                     ? static_cast<float>(framed_sample(source, framing, c))
                     : 0.0f;
    }
  }
}

// ---- Power spectrum --------------------------------------------------------------------------

// log(max(energy, floor) + guard) (floor and guard 0: not applied), or the energy itself for
// MelLog::none.
__device__ float log_energy(float energy, MelLog log, float floor, float guard) {
  if (log == MelLog::none) return energy;
  if (floor > 0.0f) energy = fmaxf(energy, floor);
  energy += guard;
  return log == MelLog::log10 ? log10f(energy) : logf(energy);
}

// |X|^exponent from |X|^2, the common exponents without a power function.
__device__ float spectrum_power(float norm, float exponent) {
  return exponent == 2.0f ? norm : exponent == 1.0f ? sqrtf(norm) : powf(sqrtf(norm), exponent);
}

__global__ void mel_power_kernel(const float* spectrum, int64_t rows, int64_t bins, float exponent,
                                 float* power) {
  HARK_FLAT_LOOP(i, rows * bins) {
    const int64_t row = i / bins, bin = i - row * bins;
    const float re = spectrum[row * 2 * bins + bin], im = spectrum[row * 2 * bins + bins + bin];
    power[i] = spectrum_power(re * re + im * im, exponent);
  }
}

constexpr int kMinFft = 16, kMaxFft = 4096;
constexpr int kFftMaxWarps = 8;
constexpr int kFftSharedBytes = 48 * 1024;  // the most a block gets without opting in

// Frames per block (a warp each) for an n_fft, and the shared memory that takes: the twiddles
// (n_fft / 2 complex values), then per warp two buffers of n_fft / 2 complex values.
int fft_warps(int n_fft) {
  const int complex_bytes = static_cast<int>(sizeof(float2)) * (n_fft / 2);
  return std::min(kFftMaxWarps, (kFftSharedBytes / complex_bytes - 1) / 2);
}
size_t fft_shared_bytes(int n_fft, int warps) {
  return sizeof(float2) * static_cast<size_t>(n_fft / 2) * (1 + 2 * static_cast<size_t>(warps));
}
// Blocks for `rows` frames: enough to fill the GPU; each computes its twiddles once, then loops
// over rows.
unsigned fft_blocks(int64_t rows, int warps) {
  constexpr int64_t kMaxFftBlocks = 4096;
  return static_cast<unsigned>(std::min(ceil_div(rows, warps), kMaxFftBlocks));
}

__device__ float2 complex_mul(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// The real frame's FFT as a complex one of half the size: z[m] = x[2m] + i x[2m + 1], whose
// transform Z gives the even samples' E[k] = (Z[k] + conj Z[−k]) / 2 and the odd samples'
// O[k] = (Z[k] − conj Z[−k]) / 2i, and X[k] = E[k] + w^k O[k] with w = e^(−2πi / n_fft).
// Z by radix-2 Stockham steps (no bit reversal: each step writes its output in order) between
// the warp's two buffers. One warp per frame, so that a __syncwarp orders the steps; a block's
// warps take rows `warps` apart, and the block's twiddles serve all of them.

// twiddles[m] = w^m for m < n_fft / 2, computed in double and rounded once (the angle is exact:
// n_fft is a power of two). Followed by a barrier.
__device__ void fill_twiddles(float2* twiddles, int n_fft) {
  for (int m = static_cast<int>(threadIdx.x); m < n_fft / 2; m += static_cast<int>(blockDim.x)) {
    double sine, cosine;
    sincospi(-2.0 * m / n_fft, &sine, &cosine);
    twiddles[m] = make_float2(static_cast<float>(cosine), static_cast<float>(sine));
  }
  __syncthreads();
}

// Z of an existing frame, by the calling warp in its buffers `from` and `to` (n_fft / 2 complex
// values each): returns the one that holds Z; the other is free until the next frame.
__device__ float2* frame_fft(const FrameSource& source, const MelFraming& framing, int n_fft,
                             const double* window, const float2* twiddles, float2* from,
                             float2* to) {
  const int half = n_fft / 2;
  const int lane = static_cast<int>(threadIdx.x % 32);
  // The windowed frame in order is z, real and imaginary parts interleaved.
  float* frame = reinterpret_cast<float*>(from);
  for (int n = lane; n < n_fft; n += 32) {
    const int c = n - framing.first;
    frame[n] = c >= 0 && c < framing.span
                   ? static_cast<float>(framed_sample(source, framing, c) * window[n])
                   : 0.0f;
  }
  __syncwarp();
  // Step `size`: the transforms of size `size` pair up into ones of twice that; the twiddle of
  // position k in them, e^(−2πi k / (2 · size)), is w^(k · half / size).
  for (int size = 1; size < half; size *= 2) {
    const int stride = half / size;
    for (int j = lane; j < half / 2; j += 32) {
      const int k = j & (size - 1);
      const float2 a = from[j];
      const float2 b = complex_mul(from[j + half / 2], twiddles[k * stride]);
      const int at = 2 * (j - k) + k;
      to[at] = make_float2(a.x + b.x, a.y + b.y);
      to[at + size] = make_float2(a.x - b.x, a.y - b.y);
    }
    __syncwarp();
    float2* swap = from;
    from = to;
    to = swap;
  }
  return from;
}

// |X_k|^exponent from the frame's Z, for bin k (zero past n_fft / 2).
__device__ float bin_power(const float2* z, const float2* twiddles, int n_fft, int k,
                           float exponent) {
  const int half = n_fft / 2;
  if (k > half) return 0.0f;
  // Indices modulo half: Z[half] is Z[0].
  const float2 zk = z[k & (half - 1)], mirrored = z[(half - k) & (half - 1)];
  const float2 even = make_float2(0.5f * (zk.x + mirrored.x), 0.5f * (zk.y - mirrored.y));
  const float2 odd = make_float2(0.5f * (zk.y + mirrored.y), -0.5f * (zk.x - mirrored.x));
  const float2 w = k < half ? twiddles[k] : make_float2(-1.0f, 0.0f);
  const float2 turned = complex_mul(w, odd);
  const float re = even.x + turned.x, im = even.y + turned.y;
  return spectrum_power(re * re + im * im, exponent);
}

// The shared memory of the FFT kernels: the twiddles, then each warp's two buffers.
struct FftShared {
  float2* twiddles;
  float2* from;
  float2* to;
};

__device__ FftShared fft_shared_of_warp(float2* shared, int n_fft) {
  const int half = n_fft / 2;
  const int warp = static_cast<int>(threadIdx.x / 32);
  float2* from = shared + half + 2 * half * warp;
  return {shared, from, from + half};
}

// The loop of both FFT kernels: a warp per row of the padded batch, rows [row0, row0 + rows);
// `frame(i, source, z, spare)` gets each row (i from 0) that has a frame (with `audio_only`,
// one of the utterance's audio frames) with its FFT z and the warp's other buffer, `none(i)`
// every other row. Both buffers are the next frame's once it returns.
template <class Frame, class None>
__device__ void for_each_frame_fft(const float* signal, const MelUtterance* utterances, int batch,
                                   int64_t padded_frames, const MelFraming& framing, int n_fft,
                                   const double* window, int64_t row0, int64_t rows,
                                   bool audio_only, Frame&& frame, None&& none) {
  extern __shared__ float2 fft_shared[];
  const FftShared shared = fft_shared_of_warp(fft_shared, n_fft);
  fill_twiddles(shared.twiddles, n_fft);
  const int warps = static_cast<int>(blockDim.x / 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * warps + warp; i < rows;
       i += static_cast<int64_t>(gridDim.x) * warps) {
    const FrameSource source =
        frame_source(signal, utterances, batch, padded_frames, framing, row0 + i);
    if (!(audio_only ? source.audio : source.exists)) {
      none(i);
      continue;
    }
    float2* z = frame_fft(source, framing, n_fft, window, shared.twiddles, shared.from, shared.to);
    frame(i, z, z == shared.from ? shared.to : shared.from, shared.twiddles);
    __syncwarp();  // the next frame overwrites both buffers
  }
}

__global__ void mel_power_spectrum_kernel(const float* signal, const MelUtterance* utterances,
                                          int batch, int64_t padded_frames, MelFraming framing,
                                          int n_fft, const double* window, int first_bin, int bins,
                                          float exponent, int64_t row0, int64_t rows,
                                          float* power) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for_each_frame_fft(
      signal, utterances, batch, padded_frames, framing, n_fft, window, row0, rows,
      /*audio_only=*/false,
      [&](int64_t i, const float2* z, float2*, const float2* twiddles) {
        for (int j = lane; j < bins; j += 32) {
          power[i * bins + j] = bin_power(z, twiddles, n_fft, first_bin + j, exponent);
        }
      },
      [&](int64_t i) {
        for (int j = lane; j < bins; j += 32) power[i * bins + j] = 0.0f;
      });
}

// mel_power_spectrum, the filters and mel_log for a frame at a time: the power spectrum goes
// into the warp's free buffer, and each lane sums the bins of its mel channels that their filter
// covers.
__global__ void mel_fft_log_energies_kernel(const float* signal, const MelUtterance* utterances,
                                            int batch, int64_t padded_frames, MelFraming framing,
                                            int n_fft, const double* window, int first_bin,
                                            int bins, float exponent, const float* filters,
                                            const int2* filter_bins, int n_mels, MelLog log,
                                            float floor, float guard, int64_t rows, float* x) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for_each_frame_fft(
      signal, utterances, batch, padded_frames, framing, n_fft, window, 0, rows,
      /*audio_only=*/true,
      [&](int64_t i, const float2* z, float2* spare, const float2* twiddles) {
        float* power = reinterpret_cast<float*>(spare);
        for (int j = lane; j < bins; j += 32) {
          power[j] = bin_power(z, twiddles, n_fft, first_bin + j, exponent);
        }
        __syncwarp();
        for (int m = lane; m < n_mels; m += 32) {
          const int2 range = filter_bins[m];
          const float* filter = filters + static_cast<int64_t>(m) * bins;
          float energy = 0.0f;
          for (int j = range.x; j < range.y; ++j) energy = fmaf(filter[j], power[j], energy);
          x[i * n_mels + m] = log_energy(energy, log, floor, guard);
        }
      },
      [&](int64_t i) {
        for (int m = lane; m < n_mels; m += 32) x[i * n_mels + m] = 0.0f;
      });
}

// ---- Log -------------------------------------------------------------------------------------

__global__ void mel_log_kernel(float* x, const MelUtterance* utterances, int64_t padded_frames,
                               int64_t n_mels, int64_t count, MelLog log, float floor,
                               float guard) {
  HARK_FLAT_LOOP(i, count) {
    const int64_t row = i / n_mels;
    const int64_t t = row % padded_frames;
    if (t >= utterances[row / padded_frames].audio_frames) {
      x[i] = 0.0f;
      continue;
    }
    x[i] = log_energy(x[i], log, floor, guard);
  }
}

// ---- Normalisation -------------------------------------------------------------------------

// Per-feature statistics: a block per (utterance, 32 mel channels); each warp reads 32 adjacent
// channels of one frame (coalesced), the block's 32 warps take every 32nd frame.
constexpr int kChannelsPerBlock = 32;
constexpr int kFrameLanes = 32;

// The sum over the frame lanes of each channel's partial value, returned to all its lanes.
// `scratch` [kFrameLanes][kChannelsPerBlock + 1], `totals` [kChannelsPerBlock].
__device__ double sum_over_lanes(double value, double (*scratch)[kChannelsPerBlock + 1],
                                 double* totals) {
  scratch[threadIdx.y][threadIdx.x] = value;
  __syncthreads();
  if (threadIdx.y == 0) {
    double total = 0.0;
    for (int lane = 0; lane < kFrameLanes; ++lane) total += scratch[lane][threadIdx.x];
    totals[threadIdx.x] = total;
  }
  __syncthreads();
  const double total = totals[threadIdx.x];
  __syncthreads();  // the next call may overwrite both arrays
  return total;
}

__global__ void per_feature_kernel(float* x, const MelUtterance* utterances, int64_t padded_frames,
                                   int64_t n_mels) {
  __shared__ double scratch[kFrameLanes][kChannelsPerBlock + 1];
  __shared__ double totals[kChannelsPerBlock];
  const int64_t b = blockIdx.y;
  const int64_t mel = static_cast<int64_t>(blockIdx.x) * kChannelsPerBlock + threadIdx.x;
  const int64_t valid = utterances[b].audio_frames;
  const bool active = mel < n_mels;
  float* channel = x + b * padded_frames * n_mels + mel;

  double sum = 0.0;
  if (active) {
#pragma unroll 4
    for (int64_t t = threadIdx.y; t < valid; t += kFrameLanes) sum += channel[t * n_mels];
  }
  const double mean =
      sum_over_lanes(sum, scratch, totals) / static_cast<double>(valid > 0 ? valid : 1);
  double squares = 0.0;
  if (active) {
#pragma unroll 4
    for (int64_t t = threadIdx.y; t < valid; t += kFrameLanes) {
      const double deviation = channel[t * n_mels] - mean;
      squares += deviation * deviation;
    }
  }
  const double total_squares = sum_over_lanes(squares, scratch, totals);
  const double variance = valid > 1 ? total_squares / static_cast<double>(valid - 1) : 0.0;
  const double scale = 1.0 / (sqrt(variance) + 1e-5);
  if (active) {
    for (int64_t t = threadIdx.y; t < valid; t += kFrameLanes) {
      float& value = channel[t * n_mels];
      value = static_cast<float>((value - mean) * scale);
    }
  }
}

// Whisper's dynamic range in two kernels over the whole GPU (an hour is 46 million values): the
// largest value of each utterance, then the clamp. The largest is kept as an unsigned key whose
// order is the floats' (atomicMax on it; key 0 is below every float).
constexpr int kRangeThreads = 256;
constexpr int64_t kRangeValuesPerThread = 16;
constexpr int64_t kRangeMaxBlocks = 1024;

__device__ unsigned ordered_key(float value) {
  const unsigned bits = __float_as_uint(value);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

__device__ float from_ordered_key(unsigned key) {
  return __uint_as_float((key & 0x80000000u) != 0 ? key & 0x7fffffffu : ~key);
}

// Grid (blocks, batch): each block's largest value of utterance blockIdx.y into tops[b].
__global__ void range_top_kernel(const float* x, const MelUtterance* utterances,
                                 int64_t padded_frames, int64_t n_mels, unsigned* tops) {
  __shared__ float warp_tops[kRangeThreads / 32];
  const int64_t b = blockIdx.y;
  const int64_t count = utterances[b].audio_frames * n_mels;
  const float* values = x + b * padded_frames * n_mels;
  float top = -INFINITY;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    top = fmaxf(top, values[i]);
  }
  top = warp_max(top);
  if (threadIdx.x % 32 == 0) warp_tops[threadIdx.x / 32] = top;
  __syncthreads();
  if (threadIdx.x < 32) {
    top = threadIdx.x < blockDim.x / 32 ? warp_tops[threadIdx.x] : -INFINITY;
    top = warp_max(top);
    if (threadIdx.x == 0 && top > -INFINITY) atomicMax(&tops[b], ordered_key(top));
  }
}

__global__ void range_clamp_kernel(float* x, const MelUtterance* utterances, int64_t padded_frames,
                                   int64_t n_mels, const unsigned* tops) {
  const int64_t b = blockIdx.y;
  const int64_t count = utterances[b].audio_frames * n_mels;
  float* values = x + b * padded_frames * n_mels;
  const double least = static_cast<double>(from_ordered_key(tops[b])) - 8.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    values[i] = static_cast<float>((fmax(static_cast<double>(values[i]), least) + 4.0) / 4.0);
  }
}

#undef HARK_FLAT_LOOP

}  // namespace

void mel_frames(const float* signal, const MelUtterance* utterances, int batch,
                int64_t padded_frames, const MelFraming& framing, int64_t row0, int64_t rows,
                float* frames, cudaStream_t stream) {
  if (rows <= 0 || batch <= 0) return;
  constexpr int kFrameThreads = 128;
  const dim3 grid(static_cast<unsigned>(ceil_div(framing.width, kFrameThreads)),
                  static_cast<unsigned>(std::min(rows, kMaxBlocksY)));
  mel_frames_kernel<<<grid, kFrameThreads, 0, stream>>>(signal, utterances, batch, padded_frames,
                                                        framing, row0, rows, frames);
  check_launch("mel_frames");
}

namespace {

// mel_product: a block computes a tile of kProductTile × kProductTile outputs, each of its 256
// threads 4 × 4 of them, over steps of kProductStep values of k staged in shared memory (both
// operands k-major there, so that a thread's 4 rows and 4 columns are consecutive).
constexpr int kProductTile = 64, kProductStep = 16, kProductThreads = 256;
constexpr int kProductPerThread = 4;  // rows and columns a thread computes
static_assert(kProductTile / kProductPerThread * kProductTile / kProductPerThread ==
                  kProductThreads,
              "a thread per 4 × 4 outputs");

__global__ void __launch_bounds__(kProductThreads)
    mel_product_kernel(const float* a, int64_t rows, int64_t depth, const float* b, int64_t cols,
                       float* out) {
  __shared__ float a_tile[kProductStep][kProductTile + 4];
  __shared__ float b_tile[kProductStep][kProductTile + 4];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kProductTile;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kProductTile;
  const int across = kProductTile / kProductPerThread;
  const int my_rows = threadIdx.x / across * kProductPerThread;
  const int my_cols = threadIdx.x % across * kProductPerThread;
  float sums[kProductPerThread][kProductPerThread] = {};
  for (int64_t k0 = 0; k0 < depth; k0 += kProductStep) {
    // Consecutive threads read consecutive k of a row: 64-byte runs.
    for (int e = threadIdx.x; e < kProductTile * kProductStep; e += kProductThreads) {
      const int r = e / kProductStep, kk = e % kProductStep;
      const int64_t k = k0 + kk;
      const int64_t row = row0 + r, col = col0 + r;
      a_tile[kk][r] = row < rows && k < depth ? a[row * depth + k] : 0.0f;
      b_tile[kk][r] = col < cols && k < depth ? b[col * depth + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kProductStep; ++kk) {
      float as[kProductPerThread], bs[kProductPerThread];
#pragma unroll
      for (int i = 0; i < kProductPerThread; ++i) {
        as[i] = a_tile[kk][my_rows + i];
        bs[i] = b_tile[kk][my_cols + i];
      }
#pragma unroll
      for (int i = 0; i < kProductPerThread; ++i) {
#pragma unroll
        for (int j = 0; j < kProductPerThread; ++j) sums[i][j] = fmaf(as[i], bs[j], sums[i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kProductPerThread; ++i) {
    const int64_t row = row0 + my_rows + i;
    if (row >= rows) break;
#pragma unroll
    for (int j = 0; j < kProductPerThread; ++j) {
      const int64_t col = col0 + my_cols + j;
      if (col < cols) out[row * cols + col] = sums[i][j];
    }
  }
}

}  // namespace

void mel_product(const float* a, int64_t rows, int64_t depth, const float* b, int64_t cols,
                 float* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t row_tiles = ceil_div(rows, kProductTile), col_tiles = ceil_div(cols, kProductTile);
  if (row_tiles > INT32_MAX || col_tiles > 65535) {
    fail("mel_product: ", rows, " × ", cols, " outputs are too many for one launch");
  }
  mel_product_kernel<<<dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(col_tiles)),
                       kProductThreads, 0, stream>>>(a, rows, depth, b, cols, out);
  check_launch("mel_product");
}

void mel_power(const float* spectrum, int64_t rows, int64_t bins, float exponent, float* power,
               cudaStream_t stream) {
  if (rows <= 0 || bins <= 0) return;
  mel_power_kernel<<<flat_blocks(rows * bins, kThreads), kThreads, 0, stream>>>(
      spectrum, rows, bins, exponent, power);
  check_launch("mel_power");
}

bool mel_fft_supported(int n_fft) {
  return n_fft >= kMinFft && n_fft <= kMaxFft && (n_fft & (n_fft - 1)) == 0;
}

void mel_power_spectrum(const float* signal, const MelUtterance* utterances, int batch,
                        int64_t padded_frames, const MelFraming& framing, int n_fft,
                        const double* window, int first_bin, int bins, float exponent, int64_t row0,
                        int64_t rows, float* power, cudaStream_t stream) {
  if (!mel_fft_supported(n_fft)) {
    fail("mel_power_spectrum: n_fft ", n_fft, " is not a power of two from ", kMinFft, " to ",
         kMaxFft);
  }
  if (rows <= 0 || bins <= 0) return;
  const int warps = fft_warps(n_fft);
  mel_power_spectrum_kernel<<<fft_blocks(rows, warps), 32 * warps, fft_shared_bytes(n_fft, warps),
                              stream>>>(signal, utterances, batch, padded_frames, framing, n_fft,
                                        window, first_bin, bins, exponent, row0, rows, power);
  check_launch("mel_power_spectrum");
}

void mel_fft_log_energies(const float* signal, const MelUtterance* utterances, int batch,
                          int64_t padded_frames, const MelFraming& framing, int n_fft,
                          const double* window, int first_bin, int bins, float exponent,
                          const float* filters, const int2* filter_bins, int n_mels, MelLog log,
                          float floor, float guard, float* x, cudaStream_t stream) {
  if (!mel_fft_supported(n_fft)) {
    fail("mel_fft_log_energies: n_fft ", n_fft, " is not a power of two from ", kMinFft, " to ",
         kMaxFft);
  }
  // The power spectrum goes into a buffer of n_fft floats.
  if (bins > n_fft) fail("mel_fft_log_energies: ", bins, " bins for n_fft ", n_fft);
  const int64_t rows = batch * padded_frames;
  if (rows <= 0 || n_mels <= 0) return;
  const int warps = fft_warps(n_fft);
  mel_fft_log_energies_kernel<<<fft_blocks(rows, warps), 32 * warps, fft_shared_bytes(n_fft, warps),
                                stream>>>(signal, utterances, batch, padded_frames, framing, n_fft,
                                          window, first_bin, bins, exponent, filters, filter_bins,
                                          n_mels, log, floor, guard, rows, x);
  check_launch("mel_fft_log_energies");
}

void mel_log(float* x, const MelUtterance* utterances, int batch, int64_t padded_frames,
             int64_t n_mels, MelLog log, float floor, float guard, cudaStream_t stream) {
  const int64_t count = batch * padded_frames * n_mels;
  if (count <= 0) return;
  mel_log_kernel<<<flat_blocks(count, kThreads), kThreads, 0, stream>>>(
      x, utterances, padded_frames, n_mels, count, log, floor, guard);
  check_launch("mel_log");
}

void mel_normalize_per_feature(float* x, const MelUtterance* utterances, int batch,
                               int64_t padded_frames, int64_t n_mels, cudaStream_t stream) {
  if (batch <= 0 || padded_frames <= 0 || n_mels <= 0) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(n_mels, kChannelsPerBlock)),
                  static_cast<unsigned>(batch));
  const dim3 block(kChannelsPerBlock, kFrameLanes);
  per_feature_kernel<<<grid, block, 0, stream>>>(x, utterances, padded_frames, n_mels);
  check_launch("mel_normalize_per_feature");
}

void mel_normalize_dynamic_range(float* x, const MelUtterance* utterances, int batch,
                                 int64_t padded_frames, int64_t n_mels, unsigned* tops,
                                 cudaStream_t stream) {
  if (batch <= 0 || padded_frames <= 0 || n_mels <= 0) return;
  check(cudaMemsetAsync(tops, 0, sizeof(unsigned) * batch, stream), "clear the mel's maxima");
  const int64_t blocks = std::clamp<int64_t>(
      ceil_div(padded_frames * n_mels, kRangeThreads * kRangeValuesPerThread), 1, kRangeMaxBlocks);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(batch));
  range_top_kernel<<<grid, kRangeThreads, 0, stream>>>(x, utterances, padded_frames, n_mels, tops);
  check_launch("mel_normalize_dynamic_range (maxima)");
  range_clamp_kernel<<<grid, kRangeThreads, 0, stream>>>(x, utterances, padded_frames, n_mels,
                                                         tops);
  check_launch("mel_normalize_dynamic_range (clamp)");
}

}  // namespace hark::compute::cuda
