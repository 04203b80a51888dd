// The kernels of kernels_mel.h. All are memory-bound loops over the padded spectrogram; the
// per-utterance statistics reduce in double, as the CPU front end (features/mel.cpp) does.
#include <algorithm>
#include <cmath>
#include <cstdint>

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

// One block row per frame (grid y), its threads along the frame's columns, so that both the
// signal reads and the frame writes are coalesced.
__global__ void mel_frames_kernel(const float* signal, const MelUtterance* utterances, int batch,
                                  int64_t padded_frames, MelFraming framing, int64_t row0,
                                  int64_t rows, float* frames) {
  for (int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    const int64_t row = row0 + i;
    const int64_t b = row / padded_frames;
    // Rows past the batch (a product's rows rounded up) are frames of no utterance.
    const MelUtterance u = b < batch ? utterances[b] : MelUtterance{};
    const int64_t t = row % padded_frames;
    const float* x = signal + u.offset;
    const int64_t begin = t * framing.hop - framing.pad + framing.first;
    float* frame = frames + i * framing.width;
    for (int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); c < framing.width;
         c += static_cast<int>(blockDim.x * gridDim.x)) {
      float value = 0.0f;
      if (t < u.frames && c < framing.span) {
        int64_t at = begin + c;
        bool inside = at >= 0 && at < u.samples;
        if (!inside && framing.reflect) {
          at = reflect_index(at, u.samples);
          inside = true;
        }
        if (inside) {
          // In double and rounded once, as close to the CPU's double arithmetic as F32 gets.
          double emphasised = x[at];
          if (framing.preemphasis != 0.0 && at > 0) emphasised -= framing.preemphasis * x[at - 1];
          value = static_cast<float>(emphasised);
        }
      }
      frame[c] = value;
    }
  }
}

// ---- Power spectrum and log ----------------------------------------------------------------

__global__ void mel_power_kernel(const float* spectrum, int64_t rows, int64_t bins, float exponent,
                                 float* power) {
  HARK_FLAT_LOOP(i, rows * bins) {
    const int64_t row = i / bins, bin = i - row * bins;
    const float re = spectrum[row * 2 * bins + bin], im = spectrum[row * 2 * bins + bins + bin];
    const float norm = re * re + im * im;
    power[i] = exponent == 2.0f   ? norm
               : exponent == 1.0f ? sqrtf(norm)
                                  : powf(sqrtf(norm), exponent);
  }
}

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
    if (log == MelLog::none) continue;
    float energy = x[i];
    if (floor > 0.0f) energy = fmaxf(energy, floor);
    energy += guard;
    x[i] = log == MelLog::log10 ? log10f(energy) : logf(energy);
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

// One block per utterance: the largest value, then the clamp.
constexpr int kRangeThreads = 1024;

__global__ void dynamic_range_kernel(float* x, const MelUtterance* utterances,
                                     int64_t padded_frames, int64_t n_mels) {
  __shared__ float warp_tops[kRangeThreads / 32];
  __shared__ float block_top;
  const int64_t b = blockIdx.x;
  const int64_t count = utterances[b].audio_frames * n_mels;
  float* values = x + b * padded_frames * n_mels;
  float top = -INFINITY;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) top = fmaxf(top, values[i]);
  top = warp_max(top);
  if (threadIdx.x % 32 == 0) warp_tops[threadIdx.x / 32] = top;
  __syncthreads();
  if (threadIdx.x < 32) {
    top = threadIdx.x < blockDim.x / 32 ? warp_tops[threadIdx.x] : -INFINITY;
    top = warp_max(top);
    if (threadIdx.x == 0) block_top = top;
  }
  __syncthreads();
  const double least = static_cast<double>(block_top) - 8.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
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

void mel_power(const float* spectrum, int64_t rows, int64_t bins, float exponent, float* power,
               cudaStream_t stream) {
  if (rows <= 0 || bins <= 0) return;
  mel_power_kernel<<<flat_blocks(rows * bins, kThreads), kThreads, 0, stream>>>(
      spectrum, rows, bins, exponent, power);
  check_launch("mel_power");
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
                                 int64_t padded_frames, int64_t n_mels, cudaStream_t stream) {
  if (batch <= 0 || padded_frames <= 0 || n_mels <= 0) return;
  dynamic_range_kernel<<<static_cast<unsigned>(batch), kRangeThreads, 0, stream>>>(
      x, utterances, padded_frames, n_mels);
  check_launch("mel_normalize_dynamic_range");
}

}  // namespace hark::compute::cuda
