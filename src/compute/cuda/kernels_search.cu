// greedy_step: Whisper's logit rules (models/whisper/logit_rules.cpp) and the greedy choice of
// models/whisper/search.cpp at temperature 0, on the device.
//
// Each sequence gets a cluster of thread blocks, each block a slice of the vocabulary that its
// threads hold in registers (read once). A cluster rather than one block because the log-sum-exp
// that scores the choice takes one double-precision exp per vocabulary entry, as the CPU search
// does, and ~52k of them take tens of microseconds on one SM.
//
// Per sequence:
//   1. every block bans, in its slice, what the history rules out (suppress lists,
//      <|notimestamps|>, the timestamp ranges), writing the bans into the logits;
//   2. it finds, over text [0, timestamp_begin) and over timestamps, the highest score with its
//      lowest id and Σ exp(score − that maximum), in double;
//   3. the blocks exchange these through distributed shared memory; from them each block decides
//      the timestamp-mass test (which may ban all text), and block 0 the choice and its
//      log-probability.
// Everything matches the CPU exactly except the order of the double sums (per block, then
// rescaled to the overall maximum), which moves them by a few units in the last place; with
// Whisper's vocabularies all timestamps fall into the last block, so the mass test's sum is not
// even rescaled.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/element.cuh"
#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kClusterBlocks = 8;  // the largest cluster every sm_90 GPU guarantees
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = 16;                         // scores each thread holds
constexpr int kSliceCapacity = kThreads * kPerThread;  // ids per block
constexpr int kMaxVocabulary = kClusterBlocks * kSliceCapacity;

constexpr float kBanned = -std::numeric_limits<float>::infinity();
constexpr double kNegativeInfinity = -std::numeric_limits<double>::infinity();

// A candidate for the argmax: the highest score wins, the lowest id among equal scores (as
// std::max_element and torch.argmax).
struct Best {
  float score;
  int32_t id;
};
// What a region without allowed ids has; loses to every allowed id.
constexpr Best kNoBest = {kBanned, std::numeric_limits<int32_t>::max()};

__device__ Best higher(Best a, Best b) {
  return b.score > a.score || (b.score == a.score && b.id < a.id) ? b : a;
}

// What each block finds in its slice, for text and for timestamps.
struct Pair {
  Best text, timestamps;
};
struct Sums {
  double text, timestamps;
};
// One block's view of the text ids or of the timestamps in its slice: the best allowed score and
// Σ exp(score − best.score) over the allowed ones (0 when none is).
struct Region {
  Best best;
  double sum;
};
struct Partial {
  Region text, timestamps;
};

__device__ Pair combine(Pair a, Pair b) {
  return {higher(a.text, b.text), higher(a.timestamps, b.timestamps)};
}
__device__ Sums combine(Sums a, Sums b) {
  return {a.text + b.text, a.timestamps + b.timestamps};
}

__device__ Best shuffle_down(Best value, int offset) {
  return {__shfl_down_sync(kFullWarp, value.score, offset),
          __shfl_down_sync(kFullWarp, value.id, offset)};
}
__device__ double shuffle_down(double value, int offset) {
  return __shfl_down_sync(kFullWarp, value, offset);
}
__device__ Pair shuffle_down(Pair value, int offset) {
  return {shuffle_down(value.text, offset), shuffle_down(value.timestamps, offset)};
}
__device__ Sums shuffle_down(Sums value, int offset) {
  return {shuffle_down(value.text, offset), shuffle_down(value.timestamps, offset)};
}

// Combines the values of a warp's 32 lanes; the result is valid in lane 0.
template <class T, class Combine>
__device__ T warp_reduce(T value, Combine combine) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = combine(value, shuffle_down(value, offset));
  }
  return value;
}

// Combines every thread's `value`; the result is valid in thread 0 only. `scratch` (one value per
// warp) must belong to this call alone, so that no barrier is needed after it.
template <class T>
__device__ T block_reduce(T value, T identity, T* scratch) {
  auto both = [](T a, T b) { return combine(a, b); };
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  value = warp_reduce(value, both);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  if (warp == 0) value = warp_reduce(lane < kWarps ? scratch[lane] : identity, both);
  return value;
}

// What LogitRules::apply_timestamp_rules bans before its timestamp-mass test, all of which depends
// only on the history: the text ids below `text_banned_below`, <|notimestamps|>, and the
// timestamps outside [timestamps_from, timestamps_to). Without timestamps nothing.
struct HistoryBans {
  int32_t text_banned_below = 0;
  int32_t no_timestamps = -1;
  int32_t timestamp_begin = std::numeric_limits<int32_t>::max();
  int32_t timestamps_from = 0, timestamps_to = 0;

  __device__ bool bans(int32_t id) const {
    return id < text_banned_below || id == no_timestamps ||
           (id >= timestamp_begin && (id < timestamps_from || id >= timestamps_to));
  }
};

// The ranges of apply_timestamp_rules, merged. `last_timestamp_index`: the position of the last
// timestamp in the history, -1 if none.
__device__ HistoryBans history_bans(const GreedyRules& rules, const int32_t* history, int32_t count,
                                    int32_t last_timestamp_index) {
  HistoryBans bans;
  if (!rules.timestamps) return bans;
  const int32_t timestamp_begin = rules.timestamp_begin;
  auto is_timestamp = [&](int32_t id) { return id >= timestamp_begin; };
  // <|notimestamps|> is how a prompt switches timestamps off; it is never sampled.
  bans.no_timestamps = rules.no_timestamps;
  bans.timestamp_begin = timestamp_begin;
  int64_t from = timestamp_begin, to = rules.vocab_size;

  const bool last_was_timestamp = count >= 1 && is_timestamp(history[count - 1]);
  // The window's start counts as a timestamp: a lone first timestamp opens a segment.
  const bool penultimate_was_timestamp = count < 2 || is_timestamp(history[count - 2]);
  if (last_was_timestamp) {
    if (penultimate_was_timestamp) {
      to = timestamp_begin;  // a pair was just closed: text next
    } else {
      bans.text_banned_below = rules.eot;  // a segment's end: its pair (or <|endoftext|>) next
    }
  }
  if (last_timestamp_index >= 0) {
    // The timestamp that closes a segment may repeat the one that ended it; any other must be
    // later than the last.
    const bool closing_pair = last_was_timestamp && !penultimate_was_timestamp;
    const int64_t after_last = int64_t{history[last_timestamp_index]} + (closing_pair ? 0 : 1);
    if (after_last > from) from = after_last;
  }
  if (count == 0) {
    bans.text_banned_below = timestamp_begin;  // a window starts with a timestamp
    if (rules.max_initial_timestamp_index >= 0) {
      const int64_t latest = int64_t{timestamp_begin} + rules.max_initial_timestamp_index + 1;
      if (latest < to) to = latest;
    }
  }
  bans.timestamps_from = static_cast<int32_t>(from < rules.vocab_size ? from : rules.vocab_size);
  bans.timestamps_to = static_cast<int32_t>(to);
  return bans;
}

// Marks the listed ids that fall into the slice [begin, end) in `marks` (one bit per id).
__device__ void mark_listed(const int32_t* ids, int32_t n, int32_t begin, int32_t end,
                            uint32_t* marks) {
  for (int32_t i = static_cast<int32_t>(threadIdx.x); i < n; i += kThreads) {
    const int32_t id = ids[i];
    if (id >= begin && id < end) atomicOr(&marks[(id - begin) / 32], 1u << ((id - begin) % 32));
  }
}

// A block's Σ exp(score − best) of a region, rescaled to Σ exp(score − max).
__device__ double relative_to(const Region& region, double max) {
  if (region.best.score == kBanned) return 0;  // nothing allowed there
  return region.sum * exp(static_cast<double>(region.best.score) - max);
}

// Grid: kClusterBlocks × batch; the cluster of blocks (x, y) serves sequence y.
__global__ void __launch_bounds__(kThreads, 2) __cluster_dims__(kClusterBlocks, 1, 1)
    greedy_step_kernel(GreedyRules rules, float* logits, GreedyState state, int32_t* next_tokens) {
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int sequence = static_cast<int>(blockIdx.y);
  const int thread = static_cast<int>(threadIdx.x);
  const int lane = thread % 32;
  const bool leader = thread == 0;

  float* scores = logits + int64_t{sequence} * rules.vocab_size;
  const int32_t slice = (rules.vocab_size + kClusterBlocks - 1) / kClusterBlocks;
  const int32_t begin = min(rules.vocab_size, rank * slice);
  const int32_t end = min(rules.vocab_size, begin + slice);
  // Without timestamps every id counts as text.
  const int32_t text_end = rules.timestamps ? rules.timestamp_begin : rules.vocab_size;

  // The slice, thread t holding ids begin + k · kThreads + t, loaded before anything else so that
  // the loads overlap with the rest of the reading.
  float values[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int32_t id = begin + k * kThreads + thread;
    values[k] = id < end ? scores[id] : kBanned;
  }

  // Every block reads these before the cluster barrier, and block 0 writes them after it: no
  // block sees them half-updated.
  const int32_t count = state.count[sequence];
  const int32_t limit = state.limits != nullptr ? state.limits[sequence] : state.capacity;
  if (state.done[sequence] != 0 || count >= limit) {
    if (rank == 0 && leader) next_tokens[sequence] = rules.eot;
    return;  // the whole cluster leaves, before any cluster barrier
  }
  const int32_t* history = state.history + int64_t{sequence} * state.capacity;

  __shared__ Partial exchange[kClusterBlocks];  // block r's partial in slot r of every block
  __shared__ uint32_t listed[kSliceCapacity / 32];
  __shared__ int32_t last_timestamp_index;
  __shared__ Pair pair_scratch[kWarps];
  __shared__ Sums sum_scratch[kWarps];
  __shared__ Pair block_best;
  __shared__ bool cluster_bans_text;

  // Announces that this block runs: the others write into `exchange` only once every block has
  // (a block's shared memory exists only while it runs).
  cluster.barrier_arrive();

  // 1. The bans.
  if (leader) last_timestamp_index = -1;
  for (int i = thread; i < kSliceCapacity / 32; i += kThreads) listed[i] = 0;
  __syncthreads();
  if (rules.timestamps) {
    for (int32_t i = thread; i < count; i += kThreads) {
      if (history[i] >= rules.timestamp_begin) atomicMax(&last_timestamp_index, i);
    }
  }
  if (count == 0) mark_listed(rules.begin_suppress, rules.n_begin_suppress, begin, end, listed);
  mark_listed(rules.suppress, rules.n_suppress, begin, end, listed);
  __syncthreads();
  const HistoryBans bans = history_bans(rules, history, count, last_timestamp_index);

  // 2. Per region, the best allowed score (a thread sees its ids in rising order, so keeping the
  // first of equal scores and reducing with `higher` gives the lowest id among equals) ...
  Pair best = {kNoBest, kNoBest};
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int32_t offset = k * kThreads + thread;
    const int32_t id = begin + offset;
    if (id >= end) continue;
    const bool is_listed = (listed[offset / 32] >> (offset % 32)) & 1u;
    if (values[k] != kBanned && (is_listed || bans.bans(id))) {
      values[k] = kBanned;
      scores[id] = kBanned;
    }
    if (id < text_end) {
      if (values[k] > best.text.score) best.text = {values[k], id};
    } else {
      if (values[k] > best.timestamps.score) best.timestamps = {values[k], id};
    }
  }
  best = block_reduce(best, {kNoBest, kNoBest}, pair_scratch);
  if (leader) block_best = best;
  __syncthreads();
  best = block_best;

  // ... and Σ exp(score − best) over its allowed scores, in double as on the CPU (banned scores
  // add exp(−inf) = 0 there).
  Sums sums = {0, 0};
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int32_t id = begin + k * kThreads + thread;
    if (values[k] == kBanned) continue;  // also every id past the slice
    if (id < text_end) {
      sums.text += exp(static_cast<double>(values[k]) - best.text.score);
    } else {
      sums.timestamps += exp(static_cast<double>(values[k]) - best.timestamps.score);
    }
  }
  sums = block_reduce(sums, {0, 0}, sum_scratch);

  // 3. Exchange, then decide.
  cluster.barrier_wait();  // every block of the cluster runs
  if (leader) {
    const Partial partial = {{best.text, sums.text}, {best.timestamps, sums.timestamps}};
    for (int r = 0; r < kClusterBlocks; ++r) cluster.map_shared_rank(exchange, r)[rank] = partial;
  }
  cluster.sync();  // the last access to another block's shared memory is before this

  // Warp 0 combines the partials, lane r taking block r's; every block combines the same values
  // in the same order, so all reach the same decisions. The sums for both outcomes of the mass
  // test are taken at once: with text banned, the log-sum-exp runs over the timestamps alone and
  // its sum is the mass test's.
  if (thread < 32) {
    const Partial part =
        lane < kClusterBlocks ? exchange[lane] : Partial{{kNoBest, 0.0}, {kNoBest, 0.0}};
    Pair overall = warp_reduce(Pair{part.text.best, part.timestamps.best},
                               [](Pair a, Pair b) { return combine(a, b); });
    overall = {
        {__shfl_sync(kFullWarp, overall.text.score, 0), __shfl_sync(kFullWarp, overall.text.id, 0)},
        {__shfl_sync(kFullWarp, overall.timestamps.score, 0),
         __shfl_sync(kFullWarp, overall.timestamps.id, 0)}};
    const Best best_timestamp = overall.timestamps;
    const Best best_any = higher(overall.text, overall.timestamps);
    auto warp_sum = [](double value) {
      return warp_reduce(value, [](double a, double b) { return a + b; });
    };
    // Σ exp(score − best) over every allowed id, and over the allowed timestamps.
    const double any_total = best_any.score == kBanned
                                 ? 0.0
                                 : warp_sum(relative_to(part.text, best_any.score) +
                                            relative_to(part.timestamps, best_any.score));
    const double timestamp_total =
        best_timestamp.score == kBanned
            ? 0.0
            : warp_sum(relative_to(part.timestamps, best_timestamp.score));

    if (lane == 0) {
      // Force a timestamp when all timestamps together outweigh every single other token.
      bool bans_text = false;
      if (rules.timestamps && best_timestamp.score != kBanned) {
        const double max_timestamp = best_timestamp.score;
        const double timestamp_mass = max_timestamp + log(timestamp_total);
        bans_text = timestamp_mass > static_cast<double>(overall.text.score);
      }
      cluster_bans_text = bans_text;

      if (rank == 0) {
        const Best choice = bans_text ? best_timestamp : best_any;
        int32_t token = choice.id;
        double logprob = kNegativeInfinity;
        if (choice.score == kBanned) {
          // The rules banned every token (the CPU search throws): end the window, with a
          // log-probability of -inf so that the result counts as failed.
          token = rules.eot;
        } else {
          const double max_score = choice.score;
          const double log_sum_exp = max_score + log(bans_text ? timestamp_total : any_total);
          logprob = max_score - log_sum_exp;
        }
        state.sum_logprob[sequence] += logprob;
        state.history[int64_t{sequence} * state.capacity + count] = token;
        state.count[sequence] = count + 1;
        // A window whose every token the rules banned ends even when the EOT would not.
        const bool ended = token == rules.eot && (rules.eot_ends || choice.score == kBanned);
        state.done[sequence] = ended || count + 1 >= limit ? 1 : 0;
        next_tokens[sequence] = token;
      }
    }
  }
  __syncthreads();

  if (cluster_bans_text) {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int32_t id = begin + k * kThreads + thread;
      if (id < text_end && values[k] != kBanned) scores[id] = kBanned;
    }
  }
}

// ---- token_probability ------------------------------------------------------------------------

constexpr int kProbabilityThreads = 512;

// One block a row: the row's maximum, then Σ exp(score − maximum) in double, as the CPU search
// computes its log-sum-exp (models/whisper/search.cpp), then p = exp(score[token] − that).
__global__ void __launch_bounds__(kProbabilityThreads)
    token_probability_kernel(const float* __restrict__ logits, int64_t row_stride, int vocab,
                             int token, float* __restrict__ out) {
  __shared__ float maxima[kProbabilityThreads / 32];
  __shared__ double sums[kProbabilityThreads / 32];
  const float* row = logits + blockIdx.x * row_stride;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int warps = kProbabilityThreads / 32;

  float top = kBanned;
  for (int i = threadIdx.x; i < vocab; i += kProbabilityThreads) top = fmaxf(top, row[i]);
  top = warp_max(top);
  if (lane == 0) maxima[warp] = top;
  __syncthreads();
  top = maxima[0];
  for (int w = 1; w < warps; ++w) top = fmaxf(top, maxima[w]);
  if (top == kBanned) {  // every score banned: no probability mass anywhere
    if (threadIdx.x == 0) out[blockIdx.x] = 0.0f;
    return;
  }

  double sum = 0.0;
  for (int i = threadIdx.x; i < vocab; i += kProbabilityThreads) {
    sum += exp(static_cast<double>(row[i]) - top);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullWarp, sum, offset);
  if (lane == 0) sums[warp] = sum;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (int w = 0; w < warps; ++w) total += sums[w];
  const double log_sum_exp = top + log(total);
  out[blockIdx.x] = static_cast<float>(exp(static_cast<double>(row[token]) - log_sum_exp));
}

__global__ void advance_search_kernel(int32_t* positions, int32_t* lengths, int by,
                                      const uint8_t* done, bool skip_finished,
                                      const int32_t* cross_lengths, int batch,
                                      int32_t* live_lengths, int32_t* live_cross_lengths) {
  const int b = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (b >= batch) return;
  const bool finished = done[b] != 0;
  if (!finished) {
    positions[b] += by;
    lengths[b] += by;
  }
  const bool live = !skip_finished || !finished;
  live_lengths[b] = live ? lengths[b] : 0;
  live_cross_lengths[b] = live ? cross_lengths[b] : 0;
}

}  // namespace

void token_probability(const float* logits, int64_t row_stride, int rows, int vocab, int token,
                       float* out, cudaStream_t stream) {
  if (rows <= 0) return;
  if (vocab <= 0 || token < 0 || token >= vocab) {
    fail("token_probability: token ", token, " outside a vocabulary of ", vocab);
  }
  token_probability_kernel<<<static_cast<unsigned>(rows), kProbabilityThreads, 0, stream>>>(
      logits, row_stride, vocab, token, out);
  check_launch("token_probability");
}

void greedy_step(const GreedyRules& rules, float* logits, int batch, GreedyState state,
                 int32_t* next_tokens, cudaStream_t stream) {
  if (batch <= 0) return;
  if (rules.vocab_size > kMaxVocabulary) {
    fail("greedy_step: a vocabulary of ", rules.vocab_size, " tokens (at most ", kMaxVocabulary,
         ")");
  }
  greedy_step_kernel<<<dim3(kClusterBlocks, static_cast<unsigned>(batch)), kThreads, 0, stream>>>(
      rules, logits, state, next_tokens);
  check_launch("greedy_step");
}

void advance_search(int32_t* positions, int32_t* lengths, int by, const uint8_t* done,
                    bool skip_finished, const int32_t* cross_lengths, int batch,
                    int32_t* live_lengths, int32_t* live_cross_lengths, cudaStream_t stream) {
  if (batch <= 0) return;
  constexpr int kAdvanceThreads = 128;
  advance_search_kernel<<<static_cast<unsigned>(ceil_div(batch, kAdvanceThreads)), kAdvanceThreads,
                          0, stream>>>(positions, lengths, by, done, skip_finished, cross_lengths,
                                       batch, live_lengths, live_cross_lengths);
  check_launch("advance_search");
}

}  // namespace hark::compute::cuda
