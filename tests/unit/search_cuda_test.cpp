// greedy_step (compute/cuda/kernels_search.cu) against the CPU: Whisper's logit rules
// (LogitRules::apply) followed by the greedy step of search.cpp at temperature 0 (argmax, the
// log-probability under the ruled scores, the history), written out here as search.cpp does it.
// Tokens, histories, counts, flags and the ruled logits must match exactly; the summed
// log-probabilities to 1e-6 relative (only the order of the double-precision sums differs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"
#include "compute/cuda/kernels.h"
#include "models/whisper/logit_rules.h"
#include "models/whisper/model.h"
#include "models/whisper/tokens.h"

namespace hark::compute::cuda {
namespace {

using whisper::LogitRules;
using whisper::Vocabulary;

constexpr float kBanned = -std::numeric_limits<float>::infinity();
constexpr int kLargeV3Vocab = 51866;
constexpr int kCapacity = 448;  // Whisper's decoder context bounds the tokens of a window

// large-v3's ids, with suppress lists like its generation config's (unsorted, with a repeat and
// an id beyond the vocabulary, which the rules ignore).
Vocabulary large_v3_vocabulary() {
  Vocabulary v = whisper::standard_vocabulary(kLargeV3Vocab);
  // Part of the non-speech symbols, a repeat, an id beyond the vocabulary, the special tokens.
  v.suppress_tokens = {1,     2,     7,     8,     9,     10,    14,    25,    26,    27,    28,
                       29,    31,    58,    59,    60,    61,    62,    63,    90,    91,    92,
                       93,    359,   503,   522,   542,   873,   893,   902,   918,   922,   931,
                       1350,  1853,  1982,  2460,  2627,  3246,  3253,  3268,  3536,  3846,  3961,
                       4183,  4667,  6585,  6647,  7273,  9061,  9383,  10428, 10929, 11938, 12033,
                       12331, 12562, 13793, 14157, 14635, 15265, 15618, 16553, 16604, 18362, 18956,
                       20075, 21675, 22520, 26130, 26161, 26435, 28279, 29464, 31650, 32302, 32470,
                       36865, 42863, 47425, 49870, 50254, 9,     100000};
  for (int32_t id : {v.sot, v.sot_prev, v.sot_lm, v.no_speech}) v.suppress_tokens.push_back(id);
  v.begin_suppress_tokens = {220, v.eot};
  return v;
}

// A vocabulary smaller than a cluster has blocks: 6 text tokens, <|endoftext|>,
// <|startoftranscript|>, <|notimestamps|>, 4 timestamps. Some blocks get an empty slice.
constexpr int kTinyVocab = 13;
Vocabulary tiny_vocabulary() {
  Vocabulary v;
  v.eot = 6;
  v.sot = 7;
  v.no_timestamps = 8;
  v.timestamp_begin = 9;
  v.suppress_tokens = {7, 3};
  v.begin_suppress_tokens = {1, 6};
  v.max_initial_timestamp_index = 1;
  return v;
}

// The ids LogitRules keeps of a suppress list: inside the vocabulary, sorted, no repeats.
std::vector<int32_t> existing_ids(std::vector<int32_t> ids, int vocab) {
  std::erase_if(ids, [vocab](int32_t id) { return id < 0 || id >= vocab; });
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// The CPU rules and the same rules on the device.
struct Rules {
  Rules(const Vocabulary& vocabulary, int vocab, bool timestamps)
      : cpu(vocabulary, vocab, timestamps),
        suppress_ids(existing_ids(vocabulary.suppress_tokens, vocab)),
        begin_suppress_ids(existing_ids(vocabulary.begin_suppress_tokens, vocab)),
        suppress(upload_vector(suppress_ids)),
        begin_suppress(upload_vector(begin_suppress_ids)) {
    device.vocab_size = vocab;
    device.eot = vocabulary.eot;
    device.no_timestamps = vocabulary.no_timestamps;
    device.timestamp_begin = vocabulary.timestamp_begin;
    device.max_initial_timestamp_index = vocabulary.max_initial_timestamp_index;
    device.timestamps = timestamps;
    device.suppress = suppress.as<int32_t>();
    device.n_suppress = static_cast<int32_t>(suppress_ids.size());
    device.begin_suppress = begin_suppress.as<int32_t>();
    device.n_begin_suppress = static_cast<int32_t>(begin_suppress_ids.size());
  }

  LogitRules cpu;
  std::vector<int32_t> suppress_ids, begin_suppress_ids;
  Buffer suppress, begin_suppress;
  GreedyRules device;
};

struct Sequence {
  std::vector<int32_t> history;
  bool done = false;
  double sum_logprob = 0;
};

// search.cpp's log_sum_exp.
double log_sum_exp(std::span<const float> scores) {
  const float max = *std::max_element(scores.begin(), scores.end());
  if (max == kBanned) return kBanned;
  double sum = 0;
  for (float score : scores) sum += std::exp(static_cast<double>(score) - max);
  return max + std::log(sum);
}

// One step of search.cpp's greedy_or_sample at temperature 0 for every sequence (plus the
// capacity limit of the device state: a sequence that reaches it is done); rules `logits`
// [batch, vocab] in place, returns the tokens.
std::vector<int32_t> cpu_step(const Rules& rules, std::vector<Sequence>& sequences,
                              std::vector<float>& logits, int capacity) {
  const int vocab = rules.device.vocab_size;
  std::vector<int32_t> next(sequences.size());
  for (size_t s = 0; s < sequences.size(); ++s) {
    Sequence& sequence = sequences[s];
    if (sequence.done || static_cast<int>(sequence.history.size()) >= capacity) {
      next[s] = rules.device.eot;
      continue;
    }
    const std::span<float> scores(logits.data() + s * vocab, vocab);
    rules.cpu.apply(scores, sequence.history);
    const int32_t token =
        static_cast<int32_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
    sequence.sum_logprob += scores[token] - log_sum_exp(scores);
    sequence.history.push_back(token);
    sequence.done =
        token == rules.device.eot || static_cast<int>(sequence.history.size()) >= capacity;
    next[s] = token;
  }
  return next;
}

// The search state of a batch on the device.
class DeviceSearch {
 public:
  DeviceSearch(const std::vector<Sequence>& sequences, int capacity, int vocab)
      : batch_(static_cast<int>(sequences.size())),
        capacity_(capacity),
        vocab_(vocab),
        logits_(sizeof(float) * batch_ * vocab),
        history_(sizeof(int32_t) * batch_ * capacity),
        count_(sizeof(int32_t) * batch_),
        done_(sizeof(uint8_t) * batch_),
        sum_logprob_(sizeof(double) * batch_),
        next_tokens_(sizeof(int32_t) * batch_) {
    std::vector<int32_t> history(static_cast<size_t>(batch_) * capacity, -1), count(batch_);
    std::vector<uint8_t> done(batch_);
    std::vector<double> sum_logprob(batch_);
    for (int b = 0; b < batch_; ++b) {
      const Sequence& sequence = sequences[b];
      std::copy(sequence.history.begin(), sequence.history.end(),
                history.begin() + static_cast<size_t>(b) * capacity);
      count[b] = static_cast<int32_t>(sequence.history.size());
      done[b] = sequence.done ? 1 : 0;
      sum_logprob[b] = sequence.sum_logprob;
    }
    upload(history.data(), history_.bytes(), history_.data());
    upload(count.data(), count_.bytes(), count_.data());
    upload(done.data(), done_.bytes(), done_.data());
    upload(sum_logprob.data(), sum_logprob_.bytes(), sum_logprob_.data());
    const std::vector<int32_t> unset(batch_, -1);
    upload(unset.data(), next_tokens_.bytes(), next_tokens_.data());
  }

  void step(const Rules& rules, const std::vector<float>& logits) {
    ASSERT_EQ(logits.size(), static_cast<size_t>(batch_) * vocab_);
    upload(logits.data(), logits_.bytes(), logits_.data());
    const GreedyState state{history_.as<int32_t>(), capacity_, count_.as<int32_t>(),
                            done_.as<uint8_t>(), sum_logprob_.as<double>()};
    greedy_step(rules.device, logits_.as<float>(), batch_, state, next_tokens_.as<int32_t>(),
                nullptr);
    check(cudaDeviceSynchronize(), "greedy_step");
  }

  std::vector<Sequence> sequences() const {
    std::vector<int32_t> history(static_cast<size_t>(batch_) * capacity_), count(batch_);
    std::vector<uint8_t> done(batch_);
    std::vector<double> sum_logprob(batch_);
    download(history_.data(), history_.bytes(), history.data());
    download(count_.data(), count_.bytes(), count.data());
    download(done_.data(), done_.bytes(), done.data());
    download(sum_logprob_.data(), sum_logprob_.bytes(), sum_logprob.data());
    std::vector<Sequence> sequences(batch_);
    for (int b = 0; b < batch_; ++b) {
      EXPECT_GE(count[b], 0);
      EXPECT_LE(count[b], capacity_);
      EXPECT_LE(done[b], 1);
      const auto row = history.begin() + static_cast<size_t>(b) * capacity_;
      sequences[b].history.assign(row, row + std::clamp(count[b], 0, capacity_));
      sequences[b].done = done[b] != 0;
      sequences[b].sum_logprob = sum_logprob[b];
    }
    return sequences;
  }

  std::vector<float> logits() const {
    std::vector<float> logits(static_cast<size_t>(batch_) * vocab_);
    download(logits_.data(), logits_.bytes(), logits.data());
    return logits;
  }

  std::vector<int32_t> next_tokens() const {
    std::vector<int32_t> tokens(batch_);
    download(next_tokens_.data(), next_tokens_.bytes(), tokens.data());
    return tokens;
  }

 private:
  int batch_, capacity_, vocab_;
  Buffer logits_, history_, count_, done_, sum_logprob_, next_tokens_;
};

std::string describe_history(const std::vector<int32_t>& history) {
  std::string text = "[";
  for (size_t i = 0; i < history.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(history[i]);
  }
  return text + "]";
}

// Runs one step on both sides from `sequences` and `logits` and compares everything. Returns the
// CPU's sequences and tokens after the step.
struct StepResult {
  std::vector<Sequence> sequences;
  std::vector<int32_t> tokens;
};

void expect_same_state(const std::vector<Sequence>& expected, const std::vector<Sequence>& actual,
                       const std::vector<Sequence>& before) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t b = 0; b < expected.size(); ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b) + ", history before the step " +
                 describe_history(before[b].history));
    EXPECT_EQ(actual[b].history, expected[b].history);
    EXPECT_EQ(actual[b].done, expected[b].done);
    EXPECT_NEAR(actual[b].sum_logprob, expected[b].sum_logprob,
                1e-6 * std::abs(expected[b].sum_logprob) + 1e-12);
  }
}

void expect_same_logits(const std::vector<float>& expected, const std::vector<float>& actual,
                        int vocab) {
  ASSERT_EQ(expected.size(), actual.size());
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != actual[i] && mismatches++ == 0) first = i;
  }
  EXPECT_EQ(mismatches, 0u) << "first at sequence " << first / vocab << ", id " << first % vocab
                            << ": " << actual[first] << " instead of " << expected[first];
}

StepResult compare_step(const Rules& rules, const std::vector<Sequence>& sequences,
                        const std::vector<float>& logits, int capacity = kCapacity) {
  StepResult cpu{sequences, {}};
  std::vector<float> cpu_logits = logits;
  cpu.tokens = cpu_step(rules, cpu.sequences, cpu_logits, capacity);

  DeviceSearch device(sequences, capacity, rules.device.vocab_size);
  device.step(rules, logits);
  EXPECT_EQ(device.next_tokens(), cpu.tokens);
  expect_same_state(cpu.sequences, device.sequences(), sequences);
  expect_same_logits(cpu_logits, device.logits(), rules.device.vocab_size);
  return cpu;
}

// Random logits for `batch` rows: text ~ N(0, 2), timestamps (ids from timestamp_begin on)
// shifted by `timestamp_shift`.
std::vector<float> random_logits(std::mt19937& random, int batch, int vocab,
                                 int32_t timestamp_begin, float timestamp_shift) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  for (int b = 0; b < batch; ++b) {
    for (int id = 0; id < vocab; ++id) {
      logits[static_cast<size_t>(b) * vocab + id] =
          normal(random) + (id >= timestamp_begin ? timestamp_shift : 0.0f);
    }
  }
  return logits;
}

float& at(std::vector<float>& logits, int vocab, int row, int32_t id) {
  return logits[static_cast<size_t>(row) * vocab + id];
}

// ---------------------------------------------------------------------------------------------

TEST(CudaGreedyStep, MatchesTheCpuWithoutTimestamps) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const Vocabulary v = large_v3_vocabulary();
  const Rules rules(v, kLargeV3Vocab, /*timestamps=*/false);
  const int32_t t0 = v.timestamp_begin;
  const std::vector<Sequence> sequences = {
      {{}},
      {{}},
      {{}},
      {{440}},
      {{440, 1002}},
      {{440, t0}},
      {{t0 + 3, 440}},
      {{440}, false, -3.25},
      {{v.eot - 1}},
      {{}},
  };
  const int batch = static_cast<int>(sequences.size());
  std::mt19937 random(1);
  std::vector<float> logits = random_logits(random, batch, kLargeV3Vocab, t0, 0.0f);
  // The best token is banned: <|endoftext|> and " " at the first position, a suppressed token,
  // <|startoftranscript|>; later, <|endoftext|> and " " are allowed again.
  at(logits, kLargeV3Vocab, 0, v.eot) = 30;
  at(logits, kLargeV3Vocab, 1, 220) = 30;
  at(logits, kLargeV3Vocab, 2, 10929) = 30;
  at(logits, kLargeV3Vocab, 3, v.sot) = 30;
  at(logits, kLargeV3Vocab, 4, v.eot) = 30;
  at(logits, kLargeV3Vocab, 5, 220) = 30;
  // Without timestamps neither timestamps nor <|notimestamps|> are special.
  at(logits, kLargeV3Vocab, 6, v.no_timestamps) = 30;
  at(logits, kLargeV3Vocab, 8, t0 + 1000) = 30;
  at(logits, kLargeV3Vocab, 9, kLargeV3Vocab - 1) = 30;

  const StepResult cpu = compare_step(rules, sequences, logits);
  EXPECT_NE(cpu.tokens[0], v.eot);
  EXPECT_NE(cpu.tokens[1], 220);
  EXPECT_NE(cpu.tokens[2], 10929);
  EXPECT_NE(cpu.tokens[3], v.sot);
  EXPECT_EQ(cpu.tokens[4], v.eot);
  EXPECT_EQ(cpu.tokens[5], 220);
  EXPECT_EQ(cpu.tokens[6], v.no_timestamps);
  EXPECT_EQ(cpu.tokens[8], t0 + 1000);
  EXPECT_EQ(cpu.tokens[9], kLargeV3Vocab - 1);
}

TEST(CudaGreedyStep, MatchesTheCpuTimestampRulesAfterEveryKindOfHistory) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const Vocabulary v = large_v3_vocabulary();
  const Rules rules(v, kLargeV3Vocab, /*timestamps=*/true);
  const int32_t t0 = v.timestamp_begin;
  const std::vector<std::vector<int32_t>> histories = {
      {},
      {440},
      {t0 + 10},
      {t0 + 10, 440},
      {440, t0 + 5},
      {t0 + 10, t0 + 20},
      {t0 + 10, 440, t0 + 20},
      {t0 + 10, 440, t0 + 20, t0 + 20},
      {t0 + 10, 440, t0 + 20, t0 + 20, 441},
      {t0 + 10, 440, 441, 442},
      {t0, 440, t0 + 1500},  // the last timestamp: only <|endoftext|> or <|30.00|> may follow
      {t0, 440, t0 + 1500, t0 + 1500},
      {440, 441, t0 + 7, 442},
  };
  // Each history with timestamps unlikely, comparable and likely (the mass rule may force one),
  // then with banned candidates made the best: <|notimestamps|>, an early timestamp, a late
  // first timestamp, text after a segment's end.
  std::mt19937 random(2);
  std::vector<Sequence> sequences;
  std::vector<float> logits;
  for (const float shift : {-12.0f, -7.0f, -4.0f, 0.0f}) {
    for (const auto& history : histories) {
      sequences.push_back({history, false, -1.5});
      const std::vector<float> row = random_logits(random, 1, kLargeV3Vocab, t0, shift);
      logits.insert(logits.end(), row.begin(), row.end());
    }
  }
  for (const auto& history : histories) {
    for (const int32_t favourite : {v.no_timestamps, t0 + 5, t0 + 51, t0 + 20, 440, v.eot}) {
      sequences.push_back({history});
      std::vector<float> row = random_logits(random, 1, kLargeV3Vocab, t0, -8.0f);
      row[favourite] = 25;
      logits.insert(logits.end(), row.begin(), row.end());
    }
  }
  SCOPED_TRACE(std::to_string(sequences.size()) + " sequences");
  compare_step(rules, sequences, logits);
}

TEST(CudaGreedyStep, TimestampMassForcesATimestamp) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const Vocabulary v = large_v3_vocabulary();
  const Rules rules(v, kLargeV3Vocab, /*timestamps=*/true);
  const int32_t t0 = v.timestamp_begin;
  // After [<|0.20|>, text, text] timestamps from <|0.22|> on are allowed. The best text token
  // scores 5; n timestamps score 3 each: their mass 3 + log n beats 5 from n = 8 on.
  std::vector<Sequence> sequences;
  std::vector<float> logits;
  for (const int n : {5, 7, 8, 41}) {
    sequences.push_back({{t0 + 10, 440, 441}});
    std::vector<float> row(kLargeV3Vocab, -10.0f);
    row[1000] = 5;
    for (int i = 0; i < n; ++i) row[t0 + 20 + i] = 3;
    row[t0 + 5] = 6;  // banned (before the last timestamp), so it adds no mass
    logits.insert(logits.end(), row.begin(), row.end());
  }
  const StepResult cpu = compare_step(rules, sequences, logits);
  EXPECT_EQ(cpu.tokens[0], 1000);
  EXPECT_EQ(cpu.tokens[1], 1000);
  EXPECT_EQ(cpu.tokens[2], t0 + 20);  // the first of the equal timestamps
  EXPECT_EQ(cpu.tokens[3], t0 + 20);
}

TEST(CudaGreedyStep, TiesGoToTheLowestId) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const Vocabulary v = large_v3_vocabulary();
  const Rules text_rules(v, kLargeV3Vocab, /*timestamps=*/false);
  const int32_t t0 = v.timestamp_begin;
  {
    // Every score equal: the lowest id that is not suppressed. Equal maxima far apart, in the
    // slices of different blocks, and next to each other.
    std::vector<Sequence> sequences(4, Sequence{{440}});
    std::vector<float> logits(4 * static_cast<size_t>(kLargeV3Vocab), 0.0f);
    at(logits, kLargeV3Vocab, 1, 0) = kBanned;
    for (const int32_t id : {45000, 700, 30000, 6484, 6485}) at(logits, kLargeV3Vocab, 2, id) = 9;
    for (const int32_t id : {51000, 51001, 25933}) at(logits, kLargeV3Vocab, 3, id) = 9;
    const StepResult cpu = compare_step(text_rules, sequences, logits);
    EXPECT_EQ(cpu.tokens, (std::vector<int32_t>{0, 3, 700, 25933}));
  }
  {
    // With timestamps: equal text and timestamp maxima (the text id is lower) when the mass
    // rule does not force a timestamp; equal timestamps.
    const Rules rules(v, kLargeV3Vocab, /*timestamps=*/true);
    std::vector<Sequence> sequences(3, Sequence{{t0 + 10, 440}});
    std::vector<float> logits(3 * static_cast<size_t>(kLargeV3Vocab), -10.0f);
    std::fill(logits.begin() + t0, logits.begin() + kLargeV3Vocab, kBanned);
    at(logits, kLargeV3Vocab, 0, 100) = 5;
    at(logits, kLargeV3Vocab, 0, t0 + 20) = 5;  // the only timestamp left: mass 5, not above 5
    at(logits, kLargeV3Vocab, 1, 100) = 5;
    at(logits, kLargeV3Vocab, 1, t0 + 1400) = 7;
    at(logits, kLargeV3Vocab, 1, t0 + 30) = 7;
    at(logits, kLargeV3Vocab, 2, t0 + 300) = -3;
    at(logits, kLargeV3Vocab, 2, t0 + 200) = -3;
    const StepResult cpu = compare_step(rules, sequences, logits);
    EXPECT_EQ(cpu.tokens, (std::vector<int32_t>{100, t0 + 30, t0 + 200}));
  }
}

TEST(CudaGreedyStep, FinishedAndFullSequencesEmitEndOfTextAndChangeNothing) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const Vocabulary v = large_v3_vocabulary();
  const Rules rules(v, kLargeV3Vocab, /*timestamps=*/true);
  const int32_t t0 = v.timestamp_begin;
  constexpr int kSmallCapacity = 4;
  const std::vector<Sequence> sequences = {
      {{t0, 440, v.eot}, true, -2.5},
      {{t0, 440, 441}, false, -1.0},
      {{t0, 440, 441, 442}, false, -1.25},  // full
      {{v.eot}, true, -0.5},
      {{}, false, 0.0},
  };
  std::mt19937 random(3);
  const std::vector<float> logits = random_logits(random, 5, kLargeV3Vocab, t0, -6.0f);
  const StepResult cpu = compare_step(rules, sequences, logits, kSmallCapacity);
  EXPECT_EQ(cpu.tokens[0], v.eot);
  EXPECT_EQ(cpu.tokens[2], v.eot);
  EXPECT_EQ(cpu.tokens[3], v.eot);
}

// Several steps on a batch of 64, each step's tokens appended on both sides, with <|endoftext|>
// made likely now and then so that sequences finish, and a capacity the longest ones reach.
void follow_the_cpu_search(const Vocabulary& v, int vocab, bool timestamps, int batch, int steps,
                           int capacity, unsigned seed) {
  const Rules rules(v, vocab, timestamps);
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> shift(-11.0f, 0.0f);
  std::uniform_real_distribution<float> chance(0.0f, 1.0f);
  std::vector<Sequence> sequences(batch);
  DeviceSearch device(sequences, capacity, vocab);
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<float> logits;
    for (int b = 0; b < batch; ++b) {
      std::vector<float> row = random_logits(random, 1, vocab, v.timestamp_begin, shift(random));
      if (chance(random) < 0.05f) row[v.eot] = 12;
      logits.insert(logits.end(), row.begin(), row.end());
    }
    const std::vector<Sequence> before = sequences;
    std::vector<float> cpu_logits = logits;
    const std::vector<int32_t> tokens = cpu_step(rules, sequences, cpu_logits, capacity);
    device.step(rules, logits);
    EXPECT_EQ(device.next_tokens(), tokens);
    expect_same_state(sequences, device.sequences(), before);
    expect_same_logits(cpu_logits, device.logits(), vocab);
    if (testing::Test::HasFailure()) return;
    // Carry on from the CPU's state, which the device's equals up to rounding.
  }
}

TEST(CudaGreedyStep, FollowsTheCpuSearchStepByStep) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const Vocabulary v = large_v3_vocabulary();
  follow_the_cpu_search(v, kLargeV3Vocab, /*timestamps=*/true, 64, 40, 32, 4);
  follow_the_cpu_search(v, kLargeV3Vocab, /*timestamps=*/false, 3, 10, 448, 5);
  follow_the_cpu_search(v, kLargeV3Vocab, /*timestamps=*/true, 1, 20, 448, 6);
}

TEST(CudaGreedyStep, HandlesAVocabularySmallerThanTheCluster) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const Vocabulary v = tiny_vocabulary();
  follow_the_cpu_search(v, kTinyVocab, /*timestamps=*/true, 17, 12, 10, 7);
  follow_the_cpu_search(v, kTinyVocab, /*timestamps=*/false, 5, 12, 10, 8);
}

TEST(CudaGreedyStep, EveryTokenBannedEndsTheWindowWithMinusInfinity) {
  // The CPU search throws here; the device ends the window and marks it as failed.
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const Vocabulary v = large_v3_vocabulary();
  const Rules rules(v, kLargeV3Vocab, /*timestamps=*/true);
  const int32_t t0 = v.timestamp_begin;
  const std::vector<Sequence> sequences = {{{t0, 440}, false, -1.0}};
  DeviceSearch device(sequences, kCapacity, kLargeV3Vocab);
  device.step(rules, std::vector<float>(kLargeV3Vocab, kBanned));
  EXPECT_EQ(device.next_tokens(), (std::vector<int32_t>{v.eot}));
  const std::vector<Sequence> after = device.sequences();
  EXPECT_EQ(after[0].history, (std::vector<int32_t>{t0, 440, v.eot}));
  EXPECT_TRUE(after[0].done);
  EXPECT_EQ(after[0].sum_logprob, -std::numeric_limits<double>::infinity());
}

// Benchmarks of fixed lengths: with eot_ends false an <|endoftext|> is a token like any other,
// and the window goes on to its limit, where it is done.
TEST(CudaGreedyStep, WithoutEotEndingAWindowRunsToItsLimit) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const Vocabulary v = large_v3_vocabulary();
  Rules rules(v, kLargeV3Vocab, /*timestamps=*/false);
  rules.device.eot_ends = false;
  const std::vector<Sequence> sequences = {{{440, 1002}}, {{440}}};
  DeviceSearch device(sequences, /*capacity=*/3, kLargeV3Vocab);
  std::vector<float> logits(2 * kLargeV3Vocab, 0.0f);
  at(logits, kLargeV3Vocab, 0, v.eot) = 30;  // the third token: the capacity
  at(logits, kLargeV3Vocab, 1, v.eot) = 30;
  device.step(rules, logits);
  EXPECT_EQ(device.next_tokens(), (std::vector<int32_t>{v.eot, v.eot}));
  const std::vector<Sequence> after = device.sequences();
  EXPECT_EQ(after[0].history, (std::vector<int32_t>{440, 1002, v.eot}));
  EXPECT_TRUE(after[0].done);
  EXPECT_EQ(after[1].history, (std::vector<int32_t>{440, v.eot}));
  EXPECT_FALSE(after[1].done);
}

// advance_search: sequences that are not done move on; done ones stay where they ended, and
// with skip_finished their attentions get no keys.
TEST(CudaAdvanceSearch, MovesLiveSequencesAndHidesFinishedOnes) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const std::vector<int32_t> positions = {4, 9, 200, 7}, lengths = {5, 10, 201, 8};
  const std::vector<uint8_t> done = {0, 1, 0, 1};
  const std::vector<int32_t> cross = {1500, 1500, 1500, 1500};
  for (const bool skip : {true, false}) {
    SCOPED_TRACE(skip ? "skipping finished sequences" : "keeping them");
    Buffer positions_device = upload_vector(positions), lengths_device = upload_vector(lengths);
    const Buffer done_device = upload_vector(done), cross_device = upload_vector(cross);
    Buffer live(sizeof(int32_t) * 4), live_cross(sizeof(int32_t) * 4);
    advance_search(positions_device.as<int32_t>(), lengths_device.as<int32_t>(), 1,
                   done_device.as<uint8_t>(), skip, cross_device.as<int32_t>(), 4,
                   live.as<int32_t>(), live_cross.as<int32_t>(), nullptr);
    check(cudaDeviceSynchronize(), "advance_search");
    auto host = [](const Buffer& buffer) {
      std::vector<int32_t> values(buffer.bytes() / sizeof(int32_t));
      download(buffer.data(), buffer.bytes(), values.data());
      return values;
    };
    EXPECT_EQ(host(positions_device), (std::vector<int32_t>{5, 9, 201, 7}));
    EXPECT_EQ(host(lengths_device), (std::vector<int32_t>{6, 10, 202, 8}));
    EXPECT_EQ(host(live),
              skip ? (std::vector<int32_t>{6, 0, 202, 0}) : (std::vector<int32_t>{6, 10, 202, 8}));
    EXPECT_EQ(host(live_cross), skip ? (std::vector<int32_t>{1500, 0, 1500, 0}) : cross);
  }
}

}  // namespace
}  // namespace hark::compute::cuda
