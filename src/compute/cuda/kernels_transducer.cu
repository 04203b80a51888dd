// Greedy RNN-T / TDT search on the device (kernels_conformer.h, "Greedy transducer search"): the
// joint network's hidden layer over a look-ahead window, and the decisions over it. The rules are
// those of models/parakeet/greedy.cpp (TransducerSearch) and models/parakeet/model.cpp
// (EmissionPattern::token), which the CPU model runs; they are repeated here line for line, and
// tests/unit/parakeet_transducer_cuda_test.cpp drives both from the same decisions.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/kernels_conformer.h"

namespace hark::compute::cuda {

namespace {

// Rows along grid y, packs of N columns along x: a row finds its encoder frame once, and no
// index is divided per value.
template <class T, int N>
__global__ void joint_hidden_kernel(const T* encoder, int64_t padded_frames, const T* prediction,
                                    TransducerState state, int window, int64_t rows, int64_t cols,
                                    T* y) {
  const int64_t packs = cols / N;
  HARK_ROW_LOOP(i, rows) {
    const int64_t b = i / window, w = i % window;
    // max(…, 0): an utterance without frames never decodes; its rows only have to be valid.
    const int64_t last = max(static_cast<int64_t>(state.frames[b]) - 1, int64_t{0});
    const int64_t frame = min(static_cast<int64_t>(state.frame[b]) + w, last);
    const T* encoder_row = encoder + (b * padded_frames + frame) * cols;
    const T* prediction_row = prediction + b * cols;
    HARK_PACK_LOOP(pack, packs) {
      float sum[N], predicted[N];
      load_pack(encoder_row + pack * N, sum);
      load_pack(prediction_row + pack * N, predicted);
#pragma unroll
      for (int n = 0; n < N; ++n) sum[n] = relu_value(sum[n] + predicted[n]);
      store_pack(sum, y + i * cols + pack * N);
    }
  }
}

// EmissionPattern::token.
__device__ int32_t pattern_token(const TransducerRules& rules, int64_t frame) {
  const auto id = static_cast<int32_t>(1 + frame % (rules.vocab_size - 2));
  return id == rules.blank ? rules.vocab_size - 1 : id;
}

// TransducerSearch::next_step's condition for one utterance.
__device__ bool decodes(const TransducerRules& rules, int64_t frame, int64_t steps,
                        int64_t frames) {
  return frame < frames && steps < static_cast<int64_t>(rules.max_symbols_per_step) * frames;
}

// One block: its threads take the utterances in turn and add up those still decoding.
__global__ void transducer_decide_kernel(TransducerRules rules, TransducerState state, int batch,
                                         int window, const int32_t* tokens,
                                         const int32_t* durations, int32_t* ids) {
  __shared__ int decoding;
  if (threadIdx.x == 0) decoding = 0;
  __syncthreads();
  int mine = 0;
  for (int b = threadIdx.x; b < batch; b += blockDim.x) {
    const int64_t frames = state.frames[b];
    const int64_t start = state.frame[b];
    int64_t frame = start, steps = state.steps[b];
    int32_t symbols = state.symbols[b], count = state.count[b];
    int32_t id = -1;
    while (decodes(rules, frame, steps, frames) && frame - start < window) {
      // TransducerSearch::decide.
      const int64_t at = static_cast<int64_t>(b) * window + (frame - start);
      const int64_t decided_on = frame;
      int32_t token = tokens[at];
      int32_t duration = rules.tdt ? durations[at] : 0;
      if (rules.pattern_frames_per_token > 0) {
        // RNN-T emits at most one token on a pattern frame; the blank after it moves on.
        const bool emit =
            frame % rules.pattern_frames_per_token == 0 && (rules.tdt || symbols == 0);
        token = emit ? pattern_token(rules, frame) : rules.blank;
        duration = emit ? rules.pattern_duration : 1;
      }
      ++steps;
      auto append = [&](int32_t emitted_duration) {
        // The capacity covers the bound on steps, so this always holds; the test keeps a bug in
        // the caller from writing past the buffer.
        if (count < state.capacity) {
          int32_t* slot = state.emissions + (static_cast<int64_t>(count) * batch + b) * 3;
          slot[0] = token;
          slot[1] = static_cast<int32_t>(decided_on);
          slot[2] = emitted_duration;
        }
        ++count;
      };
      if (rules.tdt) {
        // The duration's index is the number of frames; a blank always moves on.
        if (token == rules.blank && duration == 0) duration = 1;
        if (token != rules.blank) append(duration);
        frame += duration;
      } else if (token == rules.blank) {
        frame += 1;
        symbols = 0;
      } else {
        const bool forced = ++symbols >= rules.max_symbols_per_step;
        append(forced ? 1 : 0);
        if (forced) {
          frame += 1;
          symbols = 0;
        }
      }
      if (token != rules.blank) {
        // The prediction network takes the token before the next decision.
        id = token;
        break;
      }
    }
    state.frame[b] = static_cast<int32_t>(frame);
    state.steps[b] = static_cast<int32_t>(steps);
    state.symbols[b] = symbols;
    state.count[b] = count;
    ids[b] = id;
    if (decodes(rules, frame, steps, frames)) ++mine;
  }
  atomicAdd(&decoding, mine);
  __syncthreads();
  if (threadIdx.x == 0) *state.decoding = decoding;
}

}  // namespace

void joint_hidden(Element e, const void* encoder, int64_t padded_frames, const void* prediction,
                  TransducerState state, int batch, int window, int64_t cols, void* y,
                  cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(batch) * window;
  if (rows <= 0 || cols <= 0) return;
  with_type(e, [&](auto type) {
    using T = decltype(type);
    auto launch = [&](auto pack) {
      constexpr int N = decltype(pack)::value;
      const RowLaunch shape = row_launch(rows, cols / N);
      joint_hidden_kernel<T, N><<<shape.grid, shape.block, 0, stream>>>(
          static_cast<const T*>(encoder), padded_frames, static_cast<const T*>(prediction), state,
          window, rows, cols, static_cast<T*>(y));
    };
    if (packable(cols, kWidePack<T>, sizeof(T), {encoder, prediction, y})) {
      launch(std::integral_constant<int, kWidePack<T>>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
  });
  check_launch("joint_hidden");
}

void transducer_decide(const TransducerRules& rules, TransducerState state, int batch, int window,
                       const int32_t* tokens, const int32_t* durations, int32_t* ids,
                       cudaStream_t stream) {
  if (batch <= 0) return;
  // One block, so that the count of utterances still decoding needs no second pass; a thread
  // walks at most `window` decisions, and batches are tens of utterances.
  const int threads = std::min(1024, static_cast<int>(ceil_div(batch, 32)) * 32);
  transducer_decide_kernel<<<1, threads, 0, stream>>>(rules, state, batch, window, tokens,
                                                      durations, ids);
  check_launch("transducer_decide");
}

}  // namespace hark::compute::cuda
