// The greedy transducer search on the device (compute/cuda/kernels_transducer.cu, driven through
// models/parakeet/cuda/forward.h's Search) against TransducerSearch (models/parakeet/greedy.h),
// the rules the CPU model runs. The joint network is replaced by a table of argmax decisions
// indexed by (utterance, frame, tokens emitted so far): as long as an utterance emits nothing its
// prediction is unchanged, so a window of frames looked at in one device step sees exactly the
// decisions the frame-by-frame search sees. Both searches read the same table and must emit the
// same tokens on the same frames with the same durations, and take the same number of decisions.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "compute/cuda/kernels_conformer.h"
#include "models/parakeet/config.h"
#include "models/parakeet/cuda/forward.h"
#include "models/parakeet/greedy.h"
#include "models/parakeet/model.h"

namespace hark::parakeet {
namespace {

namespace gpu = compute::cuda;

// A decision of the table: the argmax of the token logits and (TDT) of the duration logits.
struct Decision {
  int32_t token = 0, duration = 0;
};

// How the table decides: tokens with probability token_share (else the blank); a TDT token's
// duration is 0 with probability zero_share, else uniform over the others; a blank's duration
// likewise (0 becomes 1 by the rules).
struct TableShape {
  double token_share = 0.3;
  double zero_share = 0.3;
  uint32_t seed = 1;
};

// A fixed pseudo-random decision per (utterance, frame, emitted): a hash, so that the table needs
// no storage and both searches read the same values in any order.
Decision decision_at(const Config& config, const TableShape& shape, int64_t utterance,
                     int64_t frame, int64_t emitted) {
  uint64_t h = shape.seed * 0x9E3779B97F4A7C15ull;
  for (const int64_t part : {utterance, frame, emitted}) {
    h ^= static_cast<uint64_t>(part) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  auto uniform = [&h] {
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    return static_cast<double>(h >> 11) / static_cast<double>(uint64_t{1} << 53);
  };
  Decision d;
  if (uniform() < shape.token_share) {
    // Any id but the blank.
    d.token = static_cast<int32_t>(uniform() * (config.vocab_size - 1));
    if (d.token >= config.blank_id) ++d.token;
  } else {
    d.token = config.blank_id;
  }
  const auto durations = static_cast<int32_t>(config.durations.size());
  if (durations > 0) {
    if (durations == 1 || uniform() < shape.zero_share) {
      d.duration = 0;
    } else {
      d.duration = 1 + static_cast<int32_t>(uniform() * (durations - 1));
    }
  }
  return d;
}

Config transducer_config(Head head, int vocab, int blank, int max_symbols, int durations = 5) {
  Config c;
  c.head = head;
  c.vocab_size = vocab;
  c.blank_id = blank;
  c.max_symbols_per_step = max_symbols;
  if (head == Head::tdt) {
    c.durations.resize(static_cast<size_t>(durations));
    std::iota(c.durations.begin(), c.durations.end(), 0);
  }
  return c;
}

struct Decoded {
  std::vector<std::vector<Emission>> emissions;
  std::vector<int64_t> decisions;  // decisions taken per utterance
  std::vector<int64_t> end_frame;  // the frame pointer at the end
  int64_t steps = 0;               // joint evaluations (host) or device steps
};

// TransducerSearch fed from the table, as the CPU model feeds it from the joint network.
Decoded decode_on_host(const Config& config, const TableShape& shape,
                       const std::vector<int64_t>& frames, const EmissionPattern* pattern) {
  TransducerSearch search(config, frames, pattern);
  Decoded out;
  const size_t batch = frames.size();
  std::vector<int64_t> emitted(batch, 0);
  out.decisions.assign(batch, 0);
  out.end_frame.assign(batch, 0);
  while (search.next_step()) {
    ++out.steps;
    for (const int64_t b : search.active()) {
      const Decision d = decision_at(config, shape, b, search.frame(b), emitted[b]);
      ++out.decisions[b];
      if (search.decide(b, d.token, d.duration) >= 0) ++emitted[b];
    }
  }
  for (size_t b = 0; b < batch; ++b) out.end_frame[b] = search.frame(static_cast<int64_t>(b));
  out.emissions = search.take_emissions();
  return out;
}

std::vector<int32_t> download_ints(const int32_t* device, size_t count, cudaStream_t stream) {
  std::vector<int32_t> values(count);
  gpu::download(device, count * sizeof(int32_t), values.data(), stream);
  gpu::check(cudaStreamSynchronize(stream), "download");
  return values;
}

// The device search (start_search, transducer_decide, still_decoding, take_emissions) with the
// table in place of the joint network's head, one step at a time; checks on the way which frames
// every step's joint hidden layer (joint_hidden) reads, and the tokens fed to the prediction.
Decoded decode_on_device(const Config& config, const TableShape& shape,
                         const std::vector<int64_t>& frames, const EmissionPattern* pattern,
                         int window) {
  const int batch = static_cast<int>(frames.size());
  gpu::Stream stream;
  gpu::Pass pass(gpu::Element::f32, stream.get());
  cuda::Encoded encoded;
  encoded.batch = batch;
  // Padded past the longest, as the encoder's batches are.
  encoded.padded_frames = *std::max_element(frames.begin(), frames.end()) + 3;
  encoded.frames = frames;
  cuda::Search search;
  cuda::start_search(pass, config, encoded, pattern, search);
  const gpu::TransducerState state = search.state();

  const int64_t n = int64_t{batch} * window;
  // joint_hidden's inputs made to name their rows: encoder row r is (r, 0), utterance b's
  // prediction (0, b), so that hidden row i is (the encoder row it read, the prediction's);
  // exact in F32, and no sum is negative, so the ReLU keeps them.
  constexpr int64_t kCols = 2;
  std::vector<float> encoder_rows(static_cast<size_t>(batch * encoded.padded_frames * kCols), 0);
  for (int64_t r = 0; r < batch * encoded.padded_frames; ++r) {
    encoder_rows[r * kCols] = static_cast<float>(r);
  }
  std::vector<float> prediction_rows(static_cast<size_t>(batch * kCols), 0);
  for (int b = 0; b < batch; ++b) prediction_rows[b * kCols + 1] = static_cast<float>(b);
  gpu::Buffer encoder(sizeof(float) * encoder_rows.size()),
      prediction(sizeof(float) * prediction_rows.size()), hidden(sizeof(float) * n * kCols);
  gpu::upload(encoder_rows.data(), sizeof(float) * encoder_rows.size(), encoder.data(),
              stream.get());
  gpu::upload(prediction_rows.data(), sizeof(float) * prediction_rows.size(), prediction.data(),
              stream.get());
  gpu::Buffer tokens(sizeof(int32_t) * n), durations(sizeof(int32_t) * n),
      ids(sizeof(int32_t) * batch);
  std::vector<int32_t> count, host_tokens(n), host_durations(n);
  std::vector<std::vector<int32_t>> fed(batch);  // the ids each utterance's prediction took
  Decoded out;
  // Each device step takes at least one decision of every utterance still decoding.
  const int64_t most_steps =
      int64_t{config.max_symbols_per_step} * *std::max_element(frames.begin(), frames.end());
  while (cuda::still_decoding(pass, search, count) > 0) {
    if (out.steps > most_steps) {
      ADD_FAILURE() << "still decoding after " << out.steps << " steps";
      break;
    }
    ++out.steps;
    const std::vector<int32_t> frame = download_ints(state.frame, batch, stream.get());
    gpu::joint_hidden(gpu::Element::f32, encoder.data(), encoded.padded_frames, prediction.data(),
                      state, batch, window, kCols, hidden.data(), stream.get());
    std::vector<float> row(static_cast<size_t>(n * kCols));
    gpu::download(hidden.data(), sizeof(float) * row.size(), row.data(), stream.get());
    gpu::check(cudaStreamSynchronize(stream.get()), "download");
    for (int b = 0; b < batch; ++b) {
      for (int w = 0; w < window; ++w) {
        const int64_t i = int64_t{b} * window + w;
        const int64_t want = std::min<int64_t>(frame[b] + w, std::max<int64_t>(frames[b] - 1, 0));
        const auto encoder_row = static_cast<int64_t>(row[i * kCols]);
        EXPECT_EQ(encoder_row, b * encoded.padded_frames + want) << "utterance " << b << " w " << w;
        EXPECT_EQ(static_cast<int64_t>(row[i * kCols + 1]), b) << "utterance " << b << " w " << w;
        // The joint network at that row, from the table.
        const int64_t at = encoder_row - b * encoded.padded_frames;
        const Decision d = decision_at(config, shape, b, at, count[b]);
        host_tokens[i] = d.token;
        // Garbage where a TDT table has none: RNN-T must not read it.
        host_durations[i] = config.head == Head::tdt ? d.duration : 12345;
      }
    }
    gpu::upload(host_tokens.data(), n * sizeof(int32_t), tokens.data(), stream.get());
    gpu::upload(host_durations.data(), n * sizeof(int32_t), durations.data(), stream.get());
    gpu::transducer_decide(search.rules, state, batch, window, tokens.as<int32_t>(),
                           durations.as<int32_t>(), ids.as<int32_t>(), stream.get());
    const std::vector<int32_t> id = download_ints(ids.as<int32_t>(), batch, stream.get());
    for (int b = 0; b < batch; ++b) {
      EXPECT_NE(id[b], config.blank_id) << "the blank is never fed";
      if (id[b] >= 0) fed[b].push_back(id[b]);
    }
  }
  out.emissions = cuda::take_emissions(pass, search, count);
  const std::vector<int32_t> steps = download_ints(state.steps, batch, stream.get());
  const std::vector<int32_t> end = download_ints(state.frame, batch, stream.get());
  out.decisions.assign(steps.begin(), steps.end());
  out.end_frame.assign(end.begin(), end.end());
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> emitted;
    for (const Emission& e : out.emissions[b]) emitted.push_back(e.token);
    EXPECT_EQ(fed[b], emitted) << "utterance " << b << ": the prediction takes each emitted token";
  }
  return out;
}

// Both searches on the same table; returns the device's and the host's numbers of steps.
std::pair<int64_t, int64_t> expect_same_search(const Config& config, const TableShape& shape,
                                               const std::vector<int64_t>& frames,
                                               const EmissionPattern* pattern, int window,
                                               const std::string& what) {
  SCOPED_TRACE(what + ", window " + std::to_string(window));
  const Decoded host = decode_on_host(config, shape, frames, pattern);
  const Decoded device = decode_on_device(config, shape, frames, pattern, window);
  EXPECT_EQ(device.decisions, host.decisions);
  EXPECT_EQ(device.end_frame, host.end_frame);
  EXPECT_EQ(device.emissions.size(), host.emissions.size());
  for (size_t b = 0; b < std::min(device.emissions.size(), host.emissions.size()); ++b) {
    const auto& got = device.emissions[b];
    const auto& want = host.emissions[b];
    EXPECT_EQ(got.size(), want.size()) << "utterance " << b;
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
      EXPECT_EQ(got[i].token, want[i].token) << "utterance " << b << " emission " << i;
      EXPECT_EQ(got[i].frame, want[i].frame) << "utterance " << b << " emission " << i;
      EXPECT_EQ(got[i].duration, want[i].duration) << "utterance " << b << " emission " << i;
    }
  }
  // A window never needs more steps than the frame-by-frame search.
  EXPECT_LE(device.steps, host.steps);
  return {device.steps, host.steps};
}

const std::vector<int64_t> kFrames = {13, 1, 7, 31, 2, 20, 9};

bool no_gpu() {
  return !gpu::available();
}

#define SKIP_WITHOUT_GPU() \
  if (no_gpu()) GTEST_SKIP() << "no GPU: " << gpu::describe()

TEST(ParakeetTransducerCuda, RnntForcedByMaxSymbolsPerStep) {
  SKIP_WITHOUT_GPU();
  // Mostly tokens: runs of max_symbols_per_step tokens on one frame force the move.
  for (const int max_symbols : {1, 2, 3}) {
    const Config config = transducer_config(Head::rnnt, 9, 8, max_symbols);
    for (const int window : {1, 3, 8}) {
      TableShape shape;
      shape.token_share = 0.7;
      shape.seed = 10 + max_symbols;
      expect_same_search(config, shape, kFrames, nullptr, window,
                         "max_symbols_per_step " + std::to_string(max_symbols));
    }
  }
}

TEST(ParakeetTransducerCuda, RnntMostlyBlanksTakesFewerSteps) {
  SKIP_WITHOUT_GPU();
  // A blank at id 0 (the CTC convention) as well as the last id.
  for (const int blank : {0, 10}) {
    const Config config = transducer_config(Head::rnnt, 11, blank, 5);
    TableShape shape;
    shape.token_share = 0.1;
    shape.seed = 20 + blank;
    const auto [device_steps, host_steps] =
        expect_same_search(config, shape, kFrames, nullptr, 8, "blank " + std::to_string(blank));
    EXPECT_LT(device_steps, host_steps);
  }
}

TEST(ParakeetTransducerCuda, TdtZeroDurationsOnTokensAndBlanks) {
  SKIP_WITHOUT_GPU();
  const Config config = transducer_config(Head::tdt, 9, 8, 10);
  for (const double zero_share : {0.0, 0.3, 0.6}) {
    for (const int window : {1, 2, 8}) {
      TableShape shape;
      shape.token_share = 0.4;
      shape.zero_share = zero_share;
      shape.seed = 30 + static_cast<uint32_t>(zero_share * 10);
      expect_same_search(config, shape, kFrames, nullptr, window,
                         "zero share " + std::to_string(zero_share));
    }
  }
}

TEST(ParakeetTransducerCuda, TdtBlankDurationsSkipPastTheWindowAndTheEnd) {
  SKIP_WITHOUT_GPU();
  // Long durations (up to 7 frames, beyond a window of 4) and mostly blanks.
  const Config config = transducer_config(Head::tdt, 6, 5, 4, 8);
  for (const int window : {4, 8}) {
    TableShape shape;
    shape.token_share = 0.15;
    shape.zero_share = 0.1;
    shape.seed = 40;
    expect_same_search(config, shape, kFrames, nullptr, window, "long durations");
  }
}

TEST(ParakeetTransducerCuda, TdtStepBoundStopsZeroDurationTokens) {
  SKIP_WITHOUT_GPU();
  // Tokens that keep their frame most of the time: max_symbols_per_step · T decisions end some
  // utterances before their last frame.
  const Config config = transducer_config(Head::tdt, 7, 6, 2);
  TableShape shape;
  shape.token_share = 0.95;
  shape.zero_share = 0.9;
  shape.seed = 50;
  expect_same_search(config, shape, kFrames, nullptr, 8, "step bound");
  const Decoded host = decode_on_host(config, shape, kFrames, nullptr);
  bool bound_reached = false;
  for (size_t b = 0; b < kFrames.size(); ++b) {
    if (host.end_frame[b] < kFrames[b]) {
      bound_reached = true;
      EXPECT_EQ(host.decisions[b], config.max_symbols_per_step * kFrames[b]);
    }
  }
  EXPECT_TRUE(bound_reached) << "the table should reach the bound on steps";
}

TEST(ParakeetTransducerCuda, EmissionPatternRnntAndTdt) {
  SKIP_WITHOUT_GPU();
  for (const int frames_per_token : {1, 3, 4}) {
    EmissionPattern pattern;
    pattern.frames_per_token = frames_per_token;
    pattern.duration = std::min(2, frames_per_token);
    // The table would decide otherwise: the pattern replaces it.
    TableShape shape;
    shape.token_share = 0.5;
    shape.seed = 60;
    for (const int max_symbols : {1, 2}) {
      const Config rnnt = transducer_config(Head::rnnt, 7, 6, max_symbols);
      pattern.check(rnnt);
      expect_same_search(rnnt, shape, kFrames, &pattern, 8,
                         "RNN-T pattern " + std::to_string(frames_per_token));
    }
    // A pattern token that would be the blank (blank 1 = 1 + t % (V - 2) at t = 0) becomes V - 1.
    const Config tdt = transducer_config(Head::tdt, 7, 1, 10);
    pattern.check(tdt);
    expect_same_search(tdt, shape, kFrames, &pattern, 8,
                       "TDT pattern " + std::to_string(frames_per_token));
  }
}

TEST(ParakeetTransducerCuda, ManyUtterancesOfOneBlock) {
  SKIP_WITHOUT_GPU();
  // More utterances than the decide kernel's threads: each thread takes several.
  std::vector<int64_t> frames(1100);
  for (size_t b = 0; b < frames.size(); ++b) frames[b] = 1 + static_cast<int64_t>(b * 7 % 11);
  const Config config = transducer_config(Head::tdt, 9, 8, 3);
  TableShape shape;
  shape.token_share = 0.4;
  shape.seed = 70;
  expect_same_search(config, shape, frames, nullptr, 8, "1100 utterances");
}

}  // namespace
}  // namespace hark::parakeet
