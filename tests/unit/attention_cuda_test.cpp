// The CUDA attention kernels (attention, decode_attention, append_kv, and INT8 keys and values:
// quantize_int8, dequantize_int8, decode_attention_int8) against a plain softmax attention
// computed in double on the CPU from the values the GPU really holds (after rounding to the
// element type, or dequantised).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "compute/cuda/cuda.h"
#include "compute/cuda/decode_attention_staged_sm90.h"
#include "compute/cuda/device.h"
#include "compute/cuda/kernels.h"
#include "format/quant.h"
#include "support/cuda_arrays.h"
#include "support/cuda_elements.h"
#include "support/scoped_env.h"

namespace hark::compute::cuda {
namespace {

using namespace testing;  // element helpers (support/cuda_elements.h)

// Largest error allowed, relative to the largest reference magnitude.
double tolerance(Element e) {
  return e == Element::f32 ? 1e-5 : 2e-2;
}

Buffer upload_ints(const std::vector<int32_t>& values) {
  return upload_vector(values);
}

// Rows of one tensor inside a host array: element (b, t, c) at offset + b·batch_stride +
// t·row_stride + c.
struct HostRows {
  const std::vector<float>* values;
  int64_t offset, row_stride, batch_stride;
  double at(int64_t b, int64_t t, int64_t c) const {
    return (*values)[offset + b * batch_stride + t * row_stride + c];
  }
};

// softmax(scale · q_i · k_j) over visible keys j, times v; zeros when no key is visible.
std::vector<double> reference_row(const HostRows& q, const HostRows& k, const HostRows& v,
                                  int64_t b, int64_t i, int head, int head_dim, int64_t visible,
                                  double scale) {
  std::vector<double> out(head_dim, 0.0);
  if (visible <= 0) return out;
  const int64_t c0 = static_cast<int64_t>(head) * head_dim;
  std::vector<double> scores(visible);
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < visible; ++j) {
    double dot = 0.0;
    for (int d = 0; d < head_dim; ++d) dot += q.at(b, i, c0 + d) * k.at(b, j, c0 + d);
    scores[j] = scale * dot;
    max_score = std::max(max_score, scores[j]);
  }
  double sum = 0.0;
  for (double& s : scores) sum += (s = std::exp(s - max_score));
  for (int64_t j = 0; j < visible; ++j) {
    for (int d = 0; d < head_dim; ++d) out[d] += scores[j] / sum * v.at(b, j, c0 + d);
  }
  return out;
}

// Tracks the largest error against the largest reference magnitude.
class Comparison {
 public:
  void add(double got, double want, const std::string& where) {
    max_reference_ = std::max(max_reference_, std::abs(want));
    const double error = std::isfinite(got) ? std::abs(got - want) : HUGE_VAL;
    if (error > max_error_) max_error_ = error, worst_ = where;
  }
  void expect_within(double relative) const {
    EXPECT_LE(max_error_, relative * max_reference_)
        << "worst at " << worst_ << " (largest reference magnitude " << max_reference_ << ")";
  }
  double relative() const { return max_reference_ > 0 ? max_error_ / max_reference_ : max_error_; }

 private:
  double max_error_ = 0.0, max_reference_ = 0.0;
  std::string worst_ = "nowhere";
};

// ---- attention ---------------------------------------------------------------------------------

struct AttentionCase {
  int batch, heads, head_dim;
  int64_t q_len, kv_len;
  bool causal = false;
  bool fused_qkv = false;   // q, k, v are slices of one [batch, steps, 3 · width] projection
  bool shared_kv = false;   // one key/value sequence for all (kv_batch_stride 0)
  int64_t row_padding = 0;  // extra elements at the end of every row (odd: unaligned rows)
};

std::string describe_case(Element e, const AttentionCase& c) {
  return std::string(element_name(e)) + " batch " + std::to_string(c.batch) + " heads " +
         std::to_string(c.heads) + " head_dim " + std::to_string(c.head_dim) + " q_len " +
         std::to_string(c.q_len) + " kv_len " + std::to_string(c.kv_len) +
         (c.causal ? " causal" : "") + (c.fused_qkv ? " fused" : "") +
         (c.shared_kv ? " shared" : "") + " padding " + std::to_string(c.row_padding);
}

void check_attention(Element e, const AttentionCase& c) {
  SCOPED_TRACE(describe_case(e, c));
  const int64_t width = int64_t{c.heads} * c.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));

  // q, k and v live in `qkv` (fused) or in three arrays.
  int64_t q_offset = 0, k_offset = 0, v_offset = 0, q_row, q_batch, kv_row, kv_batch;
  DeviceArray qkv, q_array, k_array, v_array;
  if (c.fused_qkv) {
    q_row = kv_row = 3 * width + c.row_padding;
    q_batch = kv_batch = c.q_len * q_row;
    qkv = random_array(e, c.batch * q_batch, 1, 1.5f);
    k_offset = width;
    v_offset = 2 * width;
  } else {
    q_row = kv_row = width + c.row_padding;
    q_batch = c.q_len * q_row;
    kv_batch = c.shared_kv ? 0 : c.kv_len * kv_row;
    const int64_t kv_batches = c.shared_kv ? 1 : c.batch;
    q_array = random_array(e, c.batch * q_batch, 2, 1.5f);
    k_array = random_array(e, kv_batches * c.kv_len * kv_row, 3, 1.0f);
    v_array = random_array(e, kv_batches * c.kv_len * kv_row, 4, 1.0f);
  }
  const DeviceArray& q_source = c.fused_qkv ? qkv : q_array;
  const DeviceArray& k_source = c.fused_qkv ? qkv : k_array;
  const DeviceArray& v_source = c.fused_qkv ? qkv : v_array;

  const int64_t out_row = width + c.row_padding, out_batch = c.q_len * out_row;
  const DeviceArray out = upload_values(e, std::vector<float>(c.batch * out_batch, 0.0f));

  attention(e, q_source.at(e, q_offset), q_row, q_batch, k_source.at(e, k_offset),
            v_source.at(e, v_offset), kv_row, kv_batch, out.buffer.data(), out_row, out_batch,
            c.batch, c.heads, c.head_dim, c.q_len, c.kv_len, static_cast<float>(scale), c.causal,
            nullptr);
  check(cudaDeviceSynchronize(), "attention test");
  const std::vector<float> got = read_back(e, out.buffer, c.batch * out_batch);

  const HostRows q{&q_source.values, q_offset, q_row, q_batch};
  const HostRows k{&k_source.values, k_offset, kv_row, kv_batch};
  const HostRows v{&v_source.values, v_offset, kv_row, kv_batch};
  Comparison comparison;
  for (int b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < c.q_len; ++i) {
      const int64_t visible = c.causal ? std::min(c.kv_len, c.kv_len - c.q_len + i + 1) : c.kv_len;
      for (int h = 0; h < c.heads; ++h) {
        const std::vector<double> want =
            reference_row(q, k, v, b, i, h, c.head_dim, visible, scale);
        for (int d = 0; d < c.head_dim; ++d) {
          comparison.add(got[b * out_batch + i * out_row + h * c.head_dim + d], want[d],
                         "b " + std::to_string(b) + " i " + std::to_string(i) + " h " +
                             std::to_string(h) + " d " + std::to_string(d));
        }
      }
    }
  }
  comparison.expect_within(tolerance(e));
}

void check_attention_all_types(const AttentionCase& c) {
  for (Element e : kElements) check_attention(e, c);
}

// Runs `check` with the Hopper attention kernel wherever it runs (HARK_CUDA_SM90_ATTENTION=1;
// by default it takes only calls with enough work) and with it turned off (0: the mma.sync
// kernel, which other GPUs and padded batches run).
template <class Check>
void with_and_without_sm90(Check check) {
  for (const char* setting : {"1", "0"}) {
    SCOPED_TRACE(std::string("HARK_CUDA_SM90_ATTENTION=") + setting);
    setenv("HARK_CUDA_SM90_ATTENTION", setting, 1);
    check();
  }
  unsetenv("HARK_CUDA_SM90_ATTENTION");
}

TEST(AttentionCuda, LongSequencesNonCausal) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  with_and_without_sm90([] {
    for (int head_dim : {64, 16}) check_attention_all_types({2, 2, head_dim, 1500, 1500});
  });
}

TEST(AttentionCuda, CausalSquare) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (int head_dim : {64, 16}) check_attention_all_types({1, 3, head_dim, 7, 7, true});
}

TEST(AttentionCuda, CausalWithOffset) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (int head_dim : {64, 16}) check_attention_all_types({2, 2, head_dim, 5, 12, true});
}

TEST(AttentionCuda, DecoderPromptCausal) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  check_attention_all_types({2, 4, 64, 448, 448, true});
}

TEST(AttentionCuda, SeveralTilesWithTails) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  with_and_without_sm90([] {
    check_attention_all_types({1, 2, 64, 130, 200});
    check_attention_all_types({1, 2, 64, 150, 200, true});
    check_attention_all_types({1, 2, 16, 40, 70, true});
  });
}

TEST(AttentionCuda, FusedQkvLayout) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  with_and_without_sm90([] {
    for (bool causal : {false, true}) {
      check_attention_all_types({2, 3, 64, 37, 37, causal, true});
      check_attention_all_types({2, 3, 16, 20, 20, causal, true});
    }
  });
}

TEST(AttentionCuda, SharedKeysAndValues) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  with_and_without_sm90([] {
    check_attention_all_types({3, 2, 64, 20, 77, false, false, true});
    check_attention_all_types({3, 2, 16, 3, 77, false, false, true});
  });
}

// On Hopper, head_dim 64 without a mask runs flash_attention_sm90: persistent CTAs that take
// several (query block, head, sequence) items each, through two query buffers and a ring of key
// and value stages. Enough items that every CTA takes at least two (6 × 20 × 3 = 360 for 132
// SMs), more key tiles than stages, a single query, and rows wider than the heads.
TEST(AttentionCuda, ManyItemsAndLongKeys) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  with_and_without_sm90([] {
    check_attention_all_types({3, 20, 64, 700, 700, false, true});
    check_attention_all_types({1, 1, 64, 1, 3000});
    check_attention_all_types({2, 2, 64, 100, 260, false, false, false, 8});
  });
}

TEST(AttentionCuda, HeadDim128) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  check_attention_all_types({2, 2, 128, 150, 300});
  check_attention_all_types({1, 2, 128, 150, 300, true});
}

TEST(AttentionCuda, UnalignedRowsTakeTheGenericPath) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  check_attention_all_types({2, 2, 64, 33, 40, false, false, false, 1});
  check_attention_all_types({2, 2, 64, 9, 9, true, true, false, 1});
}

// ---- decode_attention --------------------------------------------------------------------------

struct DecodeCase {
  int heads, head_dim;
  std::vector<int32_t> lengths;  // one per sequence
  int64_t capacity;              // cache rows per sequence
  bool shared_kv = false;        // kv_batch_stride 0
  int64_t row_padding = 0;       // extra values per row (odd: unaligned rows)
  int queries = 1;               // query rows per sequence (a prompt's tokens; INT8 only)
};

// Runs launch(stream) once and compares the result for `initial` lengths, or with graph_steps
// captures it into a graph and replays it once per lengths vector there (uploaded to `lengths`
// first), comparing each result.
template <class Launch, class Compare>
void run_decode(const Launch& launch, const Buffer& lengths, const std::vector<int32_t>& initial,
                const std::vector<std::vector<int32_t>>& graph_steps, const Compare& compare) {
  if (graph_steps.empty()) {
    launch(nullptr);
    check(cudaDeviceSynchronize(), "decode attention test");
    compare(initial);
    return;
  }
  Stream stream;
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "begin capture");
  launch(stream.get());
  check(cudaStreamEndCapture(stream.get(), &graph), "end capture");
  cudaGraphExec_t instance = nullptr;
  check(cudaGraphInstantiate(&instance, graph, 0), "instantiate graph");
  for (const std::vector<int32_t>& step_lengths : graph_steps) {
    SCOPED_TRACE("lengths " + std::to_string(step_lengths[0]) + ", ...");
    upload(step_lengths.data(), step_lengths.size() * sizeof(int32_t), lengths.data(),
           stream.get());
    check(cudaGraphLaunch(instance, stream.get()), "launch graph");
    stream.synchronize();
    compare(step_lengths);
  }
  cudaGraphExecDestroy(instance);
  cudaGraphDestroy(graph);
}

// Compares the attention output of each query of each sequence and head (got: one row of
// `out_row` values per query, c.queries per sequence) with the double-precision reference over
// q, k and v at `lengths`.
void expect_decode_output(const std::vector<float>& got, int64_t out_row, const HostRows& q_rows,
                          const HostRows& k_rows, const HostRows& v_rows, const DecodeCase& c,
                          const std::vector<int32_t>& lengths, double scale, double tolerance) {
  Comparison comparison;
  for (int b = 0; b < static_cast<int>(lengths.size()); ++b) {
    for (int i = 0; i < c.queries; ++i) {
      for (int h = 0; h < c.heads; ++h) {
        const std::vector<double> want =
            reference_row(q_rows, k_rows, v_rows, b, i, h, c.head_dim, lengths[b], scale);
        for (int d = 0; d < c.head_dim; ++d) {
          comparison.add(got[(b * c.queries + i) * out_row + h * c.head_dim + d], want[d],
                         "b " + std::to_string(b) + " i " + std::to_string(i) + " h " +
                             std::to_string(h) + " d " + std::to_string(d));
        }
      }
    }
  }
  comparison.expect_within(tolerance);
}

// Runs decode_attention (see run_decode) and compares each result.
void check_decode(Element e, const DecodeCase& c,
                  const std::vector<std::vector<int32_t>>& graph_steps = {}) {
  const int batch = static_cast<int>(c.lengths.size());
  SCOPED_TRACE(std::string(element_name(e)) + " batch " + std::to_string(batch) + " heads " +
               std::to_string(c.heads) + " head_dim " + std::to_string(c.head_dim) +
               (c.shared_kv ? " shared" : "") + " padding " + std::to_string(c.row_padding));
  const int64_t width = int64_t{c.heads} * c.head_dim;
  const int64_t row = width + c.row_padding;
  const int64_t kv_batches = c.shared_kv ? 1 : batch;
  const int64_t kv_batch = c.shared_kv ? 0 : c.capacity * row;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));

  const DeviceArray q = random_array(e, batch * row, 11, 1.5f);
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k_values(kv_batches * c.capacity * row), v_values(k_values.size());
  for (size_t i = 0; i < k_values.size(); ++i) k_values[i] = normal(rng), v_values[i] = normal(rng);
  // Rows past a sequence's length hold values that would dominate the result if they were read.
  if (!c.shared_kv) {
    for (int b = 0; b < batch; ++b) {
      for (int64_t t = c.lengths[b]; t < c.capacity; ++t) {
        for (int64_t x = 0; x < row; ++x) {
          k_values[b * kv_batch + t * row + x] = 30.0f;
          v_values[b * kv_batch + t * row + x] = 1000.0f;
        }
      }
    }
  }
  const DeviceArray k = upload_values(e, k_values), v = upload_values(e, v_values);
  const DeviceArray out = upload_values(e, std::vector<float>(batch * row, 0.0f));
  Buffer lengths = upload_ints(c.lengths);

  const auto launch = [&](cudaStream_t stream) {
    decode_attention(e, q.buffer.data(), row, k.buffer.data(), v.buffer.data(), row, kv_batch,
                     lengths.as<int32_t>(), out.buffer.data(), row, batch, c.heads, c.head_dim,
                     static_cast<float>(scale), stream);
  };
  const auto compare = [&](const std::vector<int32_t>& step_lengths) {
    const std::vector<float> got = read_back(e, out.buffer, batch * row);
    const HostRows q_rows{&q.values, 0, 0, row};  // one query row per sequence
    const HostRows k_rows{&k.values, 0, row, kv_batch}, v_rows{&v.values, 0, row, kv_batch};
    expect_decode_output(got, row, q_rows, k_rows, v_rows, c, step_lengths, scale, tolerance(e));
  };

  run_decode(launch, lengths, c.lengths, graph_steps, compare);
}

TEST(DecodeAttentionCuda, MixedLengths) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    for (int head_dim : {64, 16}) check_decode(e, {3, head_dim, {1, 37, 448}, 448});
  }
}

TEST(DecodeAttentionCuda, SharedCrossAttentionKeys) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    check_decode(e, {2, 64, {1500, 1500, 1500, 1500}, 1500, true});
    check_decode(e, {20, 64, {1500}, 1500, true});
    check_decode(e, {2, 16, {1500, 1500}, 1500, true});
  }
}

TEST(DecodeAttentionCuda, LargeBatch) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  std::vector<int32_t> lengths(48);
  for (size_t b = 0; b < lengths.size(); ++b) lengths[b] = static_cast<int32_t>(1 + 9 * b);
  for (Element e : kElements) {
    check_decode(e, {6, 64, lengths, 448});
    check_decode(e, {6, 128, lengths, 448});
  }
}

TEST(DecodeAttentionCuda, OtherHeadDimsAndUnalignedRows) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    check_decode(e, {2, 24, {5, 200}, 256});
    check_decode(e, {2, 64, {5, 200}, 256, false, 1});
  }
}

TEST(DecodeAttentionCuda, GraphReadsLengthsAtRunTime) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    check_decode(e, {4, 64, {3, 100}, 448}, {{3, 100}, {4, 101}, {2, 60}});
  }
}

// ---- INT8 keys and values ----------------------------------------------------------------------

// One group as kernels.h defines the quantisation: scale = max |x| / 127, q = x · (127 / max |x|)
// rounded half to even (all zeros when the group is).
void quantize_group(const float* x, int group, int8_t* q, float* scale) {
  float largest = 0.0f;
  for (int i = 0; i < group; ++i) largest = std::max(largest, std::abs(x[i]));
  *scale = largest / 127.0f;
  const float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
  for (int i = 0; i < group; ++i) {
    q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inverse), -127.0f, 127.0f));
  }
}

template <class T>
std::vector<T> download_all(const Buffer& buffer, size_t n) {
  std::vector<T> values(n);
  download(buffer.data(), n * sizeof(T), values.data());
  return values;
}

// Rows [0, rows) of blocks of block_rows rows, quantised in two calls split at row `split` (as
// the encoder quantises chunks of its rows), against the CPU in group_major_strides' layout.
void check_quantize(Element e, int64_t rows, int64_t cols, int group, int64_t block_rows,
                    int64_t split) {
  SCOPED_TRACE(std::string(element_name(e)) + " rows " + std::to_string(rows) + " cols " +
               std::to_string(cols) + " group " + std::to_string(group) + " block rows " +
               std::to_string(block_rows) + " split " + std::to_string(split));
  // Groups of very different magnitudes; one of zeros; one whose values fall half-way between
  // two steps (its largest is 127, so the scale is 1).
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
  std::vector<float> values(rows * cols);
  for (size_t first = 0; first < values.size(); first += group) {
    const float magnitude = std::pow(10.0f, exponent(rng));
    for (int i = 0; i < group; ++i) values[first + i] = magnitude * normal(rng);
  }
  std::fill(values.begin(), values.begin() + group, 0.0f);
  if (values.size() >= 2u * group) {
    float* ties = values.data() + group;
    for (int i = 0; i < group; ++i) ties[i] = (i % 2 == 0 ? 1.0f : -1.0f) * (0.5f + i % 9);
    ties[group - 1] = 127.0f;
  }
  const DeviceArray x = upload_values(e, values);
  const int64_t groups_per_row = cols / group, groups = rows * groups_per_row;
  Buffer q(rows * cols), scales(sizeof(float) * groups);
  const auto* x_rows = static_cast<const uint8_t*>(x.buffer.data());
  const int64_t row_bytes = cols * static_cast<int64_t>(element_size(e));
  quantize_int8(e, x_rows, 0, split, cols, group, block_rows, q.as<int8_t>(), scales.as<float>(),
                nullptr);
  quantize_int8(e, x_rows + split * row_bytes, split, rows - split, cols, group, block_rows,
                q.as<int8_t>(), scales.as<float>(), nullptr);
  check(cudaDeviceSynchronize(), "quantize_int8 test");

  const Int8Strides strides = group_major_strides(cols, group, block_rows);
  std::vector<int8_t> want_q(rows * cols);
  std::vector<float> want_scales(groups);
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t block = row / block_rows, t = row % block_rows;
    for (int64_t g = 0; g < groups_per_row; ++g) {
      const int64_t at = block * strides.batch + g * strides.group_stride + t * strides.row;
      const int64_t scale_at =
          block * strides.scale_batch + g * strides.scale_group_stride + t * strides.scale_row;
      quantize_group(x.values.data() + row * cols + g * group, group, want_q.data() + at,
                     want_scales.data() + scale_at);
    }
  }
  EXPECT_EQ(download_all<int8_t>(q, want_q.size()), want_q);
  EXPECT_EQ(download_all<float>(scales, want_scales.size()), want_scales);
}

TEST(Int8KvCuda, QuantizeMatchesTheCpu) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    check_quantize(e, 37, 3 * 64, 64, 37, 37);  // one block, one call
    check_quantize(e, 5, 2 * 24, 24, 1, 2);     // a block a row: the rows' own order
    check_quantize(e, 3, 2 * 128, 128, 3, 1);
    check_quantize(e, 1000, 40, 8, 250, 333);  // a split inside a block
  }
}

TEST(Int8KvCuda, DequantizeReadsStridedBlocks) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  // 6 groups of 8 (48 columns) from the third group on, groups 130 values apart, rows 9 apart,
  // in 2 blocks; scales with strides of their own.
  const int batch = 2, group = 8;
  const int64_t rows = 13, cols = 48, first_group = 2;
  Int8Strides strides;
  strides.row = 9;
  strides.group_stride = 130;
  strides.batch = 9 * 130 + 5;
  strides.scale_row = 1;
  strides.scale_group_stride = 15;
  strides.scale_batch = 9 * 15 + 3;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> level(-127, 127);
  std::uniform_real_distribution<float> magnitude(1e-3f, 1.0f);
  std::vector<int8_t> q(batch * strides.batch);
  for (int8_t& x : q) x = static_cast<int8_t>(level(rng));
  std::vector<float> scales(batch * strides.scale_batch);
  for (float& s : scales) s = magnitude(rng);
  const Buffer q_device = upload_vector(q), scales_device = upload_vector(scales);
  for (Element e : kElements) {
    SCOPED_TRACE(element_name(e));
    Buffer out(element_size(e) * batch * rows * cols);
    dequantize_int8(q_device.as<int8_t>() + first_group * strides.group_stride,
                    scales_device.as<float>() + first_group * strides.scale_group_stride, strides,
                    batch, rows, cols, group, e, out.data(), nullptr);
    check(cudaDeviceSynchronize(), "dequantize_int8 test");
    std::vector<float> want;
    for (int b = 0; b < batch; ++b) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t g = first_group + c / group;
          want.push_back(
              scales[b * strides.scale_batch + g * strides.scale_group_stride + r] *
              static_cast<float>(
                  q[b * strides.batch + g * strides.group_stride + r * strides.row + c % group]));
        }
      }
    }
    EXPECT_EQ(read_back(e, out, want.size()), rounded(e, want));
  }
}

// decode_attention_int8 against the reference on the dequantised values: F32 arithmetic, the
// output's rounding to e, and with 16-bit queries the integer products' split of the query and
// the weights (kernels_attention.cu: at most 1 / 16,128 of their largest magnitude off) differ.
double int8_tolerance(Element e) {
  return e == Element::f32 ? 1e-5 : e == Element::f16 ? 2e-3 : 1e-2;
}

// K and V with scales laid out either as rows (a position's K heads, V heads and row_padding
// values side by side; scales [capacity, 2 · heads + 1]) or group-major as the encoder stores
// them (kernels.h: group_major_strides; each head's positions one run of head_dim + row_padding
// values apiece, K heads then V heads).
void check_decode_int8(Element e, const DecodeCase& c, bool group_major = false,
                       const std::vector<std::vector<int32_t>>& graph_steps = {}) {
  const int batch = static_cast<int>(c.lengths.size());
  const char* integers = std::getenv("HARK_CUDA_INT8_INTEGER_PRODUCTS");
  const char* staged = std::getenv("HARK_CUDA_INT8_STAGED");
  SCOPED_TRACE(std::string(element_name(e)) + " batch " + std::to_string(batch) + " heads " +
               std::to_string(c.heads) + " head_dim " + std::to_string(c.head_dim) +
               (c.shared_kv ? " shared" : "") + " padding " + std::to_string(c.row_padding) +
               (group_major ? " group-major" : " rows") + " queries " + std::to_string(c.queries) +
               " integer products " + (integers != nullptr ? integers : "default") + " staged " +
               (staged != nullptr ? staged : "default"));
  const int64_t width = int64_t{c.heads} * c.head_dim;
  const int query_rows = batch * c.queries;
  Int8Strides strides;
  if (group_major) {
    strides.row = c.head_dim + c.row_padding;
    strides.group_stride = c.capacity * strides.row;
    strides.batch = 2 * c.heads * strides.group_stride;
    strides.scale_row = 1;
    strides.scale_group_stride = c.capacity;
    strides.scale_batch = 2 * c.heads * c.capacity;
  } else {
    strides.row = 2 * width + c.row_padding;
    strides.group_stride = c.head_dim;
    strides.batch = c.capacity * strides.row;
    strides.scale_row = 2 * c.heads + 1;
    strides.scale_group_stride = 1;
    strides.scale_batch = c.capacity * strides.scale_row;
  }
  const int64_t kv_batches = c.shared_kv ? 1 : batch;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  // Group g (K heads, then V heads) of position t of block b.
  const auto value_at = [&](int64_t b, int64_t g, int64_t t) {
    return b * strides.batch + g * strides.group_stride + t * strides.row;
  };
  const auto scale_at = [&](int64_t b, int64_t g, int64_t t) {
    return b * strides.scale_batch + g * strides.scale_group_stride + t * strides.scale_row;
  };

  const DeviceArray q = random_array(e, query_rows * width, 31, 1.5f);
  std::mt19937 rng(32);
  std::uniform_int_distribution<int> level(-127, 127);
  std::uniform_real_distribution<float> magnitude(0.002f, 0.02f);
  std::vector<int8_t> values(kv_batches * strides.batch);
  std::vector<float> scales(kv_batches * strides.scale_batch);
  for (int8_t& x : values) x = static_cast<int8_t>(level(rng));
  for (float& s : scales) s = magnitude(rng);
  // Positions past a sequence's length hold values that would dominate the result if they were
  // read.
  if (!c.shared_kv) {
    for (int b = 0; b < batch; ++b) {
      for (int64_t t = c.lengths[b]; t < c.capacity; ++t) {
        for (int64_t g = 0; g < 2 * c.heads; ++g) {
          std::fill_n(values.begin() + value_at(b, g, t), c.head_dim, int8_t{127});
          scales[scale_at(b, g, t)] = 50.0f;
        }
      }
    }
  }
  const Buffer values_device = upload_vector(values), scales_device = upload_vector(scales);
  const DeviceArray out = upload_values(e, std::vector<float>(query_rows * width, 0.0f));
  Buffer lengths = upload_ints(c.lengths);

  // The dequantised keys and values [kv_batches, capacity, width].
  std::vector<float> keys(kv_batches * c.capacity * width), kv_values(keys.size());
  for (int64_t b = 0; b < kv_batches; ++b) {
    for (int64_t t = 0; t < c.capacity; ++t) {
      for (int64_t x = 0; x < width; ++x) {
        const int64_t h = x / c.head_dim, i = x % c.head_dim;
        const int64_t target = (b * c.capacity + t) * width + x;
        keys[target] =
            scales[scale_at(b, h, t)] * static_cast<float>(values[value_at(b, h, t) + i]);
        kv_values[target] = scales[scale_at(b, c.heads + h, t)] *
                            static_cast<float>(values[value_at(b, c.heads + h, t) + i]);
      }
    }
  }

  Int8Kv kv;
  kv.k = values_device.as<int8_t>();
  kv.v = kv.k + value_at(0, c.heads, 0);
  kv.k_scales = scales_device.as<float>();
  kv.v_scales = kv.k_scales + scale_at(0, c.heads, 0);
  kv.strides = strides;
  if (c.shared_kv) kv.strides.batch = kv.strides.scale_batch = 0;
  const auto launch = [&](cudaStream_t stream) {
    decode_attention_int8(e, q.buffer.data(), width, kv, lengths.as<int32_t>(), out.buffer.data(),
                          width, query_rows, c.heads, c.head_dim, static_cast<float>(scale), stream,
                          c.queries);
  };
  const auto compare = [&](const std::vector<int32_t>& step_lengths) {
    const std::vector<float> got = read_back(e, out.buffer, query_rows * width);
    const int64_t dense_batch = c.shared_kv ? 0 : c.capacity * width;
    const HostRows q_rows{&q.values, 0, width, c.queries * width};
    const HostRows k_rows{&keys, 0, width, dense_batch}, v_rows{&kv_values, 0, width, dense_batch};
    expect_decode_output(got, width, q_rows, k_rows, v_rows, c, step_lengths, scale,
                         int8_tolerance(e));
  };
  run_decode(launch, lengths, c.lengths, graph_steps, compare);
}

// Each case in both layouts in the register form, for 16-bit queries with the integer products
// and without, and staged through shared memory (decode_attention_staged_sm90.h: group-major
// rows of 64 values without padding on an H100/H200; elsewhere the switch leaves the register
// form).
void check_decode_int8_layouts(Element e, const DecodeCase& c,
                               const std::vector<std::vector<int32_t>>& graph_steps = {}) {
  {
    hark::testing::ScopedEnv registers("HARK_CUDA_INT8_STAGED", "0");
    for (const char* integers : {"1", "0"}) {
      if (e == Element::f32 && integers[0] == '0') continue;  // F32 queries: the F32 form only
      hark::testing::ScopedEnv setting("HARK_CUDA_INT8_INTEGER_PRODUCTS", integers);
      check_decode_int8(e, c, false, graph_steps);
      check_decode_int8(e, c, true, graph_steps);
    }
  }
  if (e == Element::f32) return;
  hark::testing::ScopedEnv staged("HARK_CUDA_INT8_STAGED", "1");
  check_decode_int8(e, c, true, graph_steps);
}

TEST(DecodeAttentionInt8Cuda, MixedLengths) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    for (int head_dim : {64, 16}) check_decode_int8_layouts(e, {3, head_dim, {1, 37, 448}, 448});
  }
}

TEST(DecodeAttentionInt8Cuda, SharedCrossAttentionKeys) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    check_decode_int8_layouts(e, {2, 64, {1500, 1500, 1500, 1500}, 1500, true});
    check_decode_int8_layouts(e, {20, 64, {1500}, 1500, true});
    check_decode_int8_layouts(e, {2, 16, {1500, 1500}, 1500, true});
  }
}

TEST(DecodeAttentionInt8Cuda, LargeBatch) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  std::vector<int32_t> lengths(48);
  for (size_t b = 0; b < lengths.size(); ++b) lengths[b] = static_cast<int32_t>(1 + 31 * b);
  for (Element e : kElements) {
    check_decode_int8_layouts(e, {6, 64, lengths, 1500});
    check_decode_int8_layouts(e, {6, 128, lengths, 1500});
  }
}

TEST(DecodeAttentionInt8Cuda, OtherHeadDimsAndUnalignedRows) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    check_decode_int8_layouts(e, {2, 24, {5, 200}, 256});
    check_decode_int8_layouts(e, {2, 64, {5, 200}, 256, false, 1});
    check_decode_int8_layouts(e, {3, 24, {1500, 1500}, 1500, true, 3});
  }
}

// A prompt's tokens: several query rows over each sequence's keys and values.
TEST(DecodeAttentionInt8Cuda, SeveralQueriesPerSequence) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    check_decode_int8_layouts(e, {20, 64, {1500, 7, 1500}, 1500, false, 0, 4});
    check_decode_int8_layouts(e, {3, 24, {1500, 1500}, 1500, true, 3, 3});
  }
}

TEST(DecodeAttentionInt8Cuda, GraphReadsLengthsAtRunTime) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    check_decode_int8_layouts(e, {4, 64, {3, 1500}, 1500}, {{3, 1500}, {4, 1499}, {2, 60}});
  }
}

// Quantised by quantize_int8 from values of element type e, against the attention over those
// values themselves: the error INT8 storage adds, reported, and held loosely.
// K and V [batch, frames, 2 · heads · head_dim] (each row its K heads, then its V heads)
// quantised group-major as the encoder stores them, and the Int8Kv that reads them.
struct GroupMajorKv {
  Buffer values, scales;
  Int8Kv kv;
};
GroupMajorKv quantize_group_major(Element e, const DeviceArray& kv_values, int batch, int frames,
                                  int heads, int head_dim) {
  const int64_t row = 2 * int64_t{heads} * head_dim;
  GroupMajorKv out{
      Buffer(batch * frames * row), Buffer(sizeof(float) * batch * frames * 2 * heads), {}};
  quantize_int8(e, kv_values.buffer.data(), 0, int64_t{batch} * frames, row, head_dim, frames,
                out.values.as<int8_t>(), out.scales.as<float>(), nullptr);
  Int8Kv& kv = out.kv;
  kv.strides = group_major_strides(row, head_dim, frames);
  kv.k = out.values.as<int8_t>();
  kv.v = kv.k + heads * kv.strides.group_stride;
  kv.k_scales = out.scales.as<float>();
  kv.v_scales = kv.k_scales + heads * kv.strides.scale_group_stride;
  return out;
}

TEST(DecodeAttentionInt8Cuda, StaysNearTheUnquantisedValues) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  const int heads = 20, head_dim = 64, batch = 4, frames = 1500;
  const int64_t width = int64_t{heads} * head_dim, row = 2 * width;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const std::vector<int32_t> lengths_host(batch, frames);
  Buffer lengths = upload_ints(lengths_host);
  for (Element e : kElements) {
    SCOPED_TRACE(element_name(e));
    const DeviceArray q = random_array(e, batch * width, 51, 1.5f);
    const DeviceArray kv_values = random_array(e, batch * frames * row, 52, 1.0f);
    const GroupMajorKv quantized =
        quantize_group_major(e, kv_values, batch, frames, heads, head_dim);
    const Int8Kv& kv = quantized.kv;
    const DeviceArray out = upload_values(e, std::vector<float>(batch * width, 0.0f));
    decode_attention_int8(e, q.buffer.data(), width, kv, lengths.as<int32_t>(), out.buffer.data(),
                          width, batch, heads, head_dim, static_cast<float>(scale), nullptr);
    check(cudaDeviceSynchronize(), "decode attention INT8 test");
    const std::vector<float> got = read_back(e, out.buffer, batch * width);

    const HostRows q_rows{&q.values, 0, 0, width};
    const HostRows k_rows{&kv_values.values, 0, row, frames * row};
    const HostRows v_rows{&kv_values.values, width, row, frames * row};
    Comparison comparison;
    for (int b = 0; b < batch; ++b) {
      for (int h = 0; h < heads; ++h) {
        const std::vector<double> want =
            reference_row(q_rows, k_rows, v_rows, b, 0, h, head_dim, frames, scale);
        for (int d = 0; d < head_dim; ++d) {
          comparison.add(got[b * width + h * head_dim + d], want[d],
                         "b " + std::to_string(b) + " h " + std::to_string(h));
        }
      }
    }
    std::printf("INT8 K/V, %s: decode attention %.2e from the unquantised values\n",
                element_name(e), comparison.relative());
    comparison.expect_within(3e-2);
  }
}

// ---- the query inside the attention -------------------------------------------------------------

// decode_attention over native and INT8 K/V, computing its query from x (AttentionQuery; W in the
// element type or Q8_0), against the same attention after decode_linear's query (norm, product,
// bias, the same W): the arithmetic differs only in the order of the product's sums, so the
// outputs agree to about one rounding of q.
void check_fused_query(Element e, int heads, int64_t d, int batch, bool q8_0) {
  SCOPED_TRACE(std::string(element_name(e)) + " heads " + std::to_string(heads) + " d " +
               std::to_string(d) + " batch " + std::to_string(batch) + (q8_0 ? " Q8_0" : ""));
  const int head_dim = static_cast<int>(d / heads), frames = 1500;
  const int64_t row = 2 * d;
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  ASSERT_TRUE(attention_query_fuses(e, batch, heads, head_dim, d, q8_0));
  const DeviceArray x = random_array(e, batch * d, 61, 1.0f);
  const DeviceArray gamma = random_array(e, d, 62, 1.0f), beta = random_array(e, d, 63, 0.5f);
  const DeviceArray w = random_array(e, d * d, 64, 0.05f), bias = random_array(e, d, 65, 0.5f);
  const DeviceArray kv_values = random_array(e, batch * frames * row, 66, 1.0f);
  Buffer lengths = upload_ints(std::vector<int32_t>(batch, frames));
  const std::vector<float> zeros(batch * d, 0.0f);
  const DeviceArray q = upload_values(e, zeros);
  // Q8_0: W's values quantised, in the device layout.
  const Buffer w_q8_0 =
      upload_vector(q8_0 ? q8_0_matrix(w.values, d, d).device_bytes : std::vector<uint8_t>(16));
  const void* weights = q8_0 ? w_q8_0.data() : w.buffer.data();
  const DecodeNorm norm{gamma.buffer.data(), beta.buffer.data(), 1e-5f};
  decode_linear(e, x.buffer.data(), batch, d, &norm, {weights, q8_0}, d, bias.buffer.data(), false,
                nullptr, q.buffer.data(), nullptr, nullptr);
  AttentionQuery query{x.buffer.data(), d,       gamma.buffer.data(), beta.buffer.data(),
                       1e-5f,           weights, bias.buffer.data()};
  query.q8_0 = q8_0;

  const auto compare = [&](const DeviceArray& want, const DeviceArray& got, const char* what) {
    check(cudaDeviceSynchronize(), "fused query test");
    const std::vector<float> wanted = read_back(e, want.buffer, batch * d);
    const std::vector<float> gotten = read_back(e, got.buffer, batch * d);
    Comparison comparison;
    for (int64_t i = 0; i < batch * d; ++i) {
      comparison.add(gotten[i], wanted[i], std::string(what) + " value " + std::to_string(i));
    }
    comparison.expect_within(e == Element::f16 ? 5e-3 : 2e-2);
  };

  const void* keys = kv_values.buffer.data();
  const void* values = kv_values.buffer.as<uint8_t>() + d * element_size(e);
  const DeviceArray separate = upload_values(e, zeros), fused = upload_values(e, zeros);
  decode_attention(e, q.buffer.data(), d, keys, values, row, frames * row, lengths.as<int32_t>(),
                   separate.buffer.data(), d, batch, heads, head_dim, scale, nullptr);
  decode_attention(e, nullptr, 0, keys, values, row, frames * row, lengths.as<int32_t>(),
                   fused.buffer.data(), d, batch, heads, head_dim, scale, nullptr, &query);
  compare(separate, fused, "native");

  const GroupMajorKv quantized = quantize_group_major(e, kv_values, batch, frames, heads, head_dim);
  const Int8Kv& kv = quantized.kv;
  const DeviceArray separate_int8 = upload_values(e, zeros), fused_int8 = upload_values(e, zeros);
  decode_attention_int8(e, q.buffer.data(), d, kv, lengths.as<int32_t>(),
                        separate_int8.buffer.data(), d, batch, heads, head_dim, scale, nullptr);
  decode_attention_int8(e, nullptr, 0, kv, lengths.as<int32_t>(), fused_int8.buffer.data(), d,
                        batch, heads, head_dim, scale, nullptr, 1, &query);
  compare(separate_int8, fused_int8, "INT8");
}

TEST(DecodeAttentionCuda, ComputesItsOwnQuery) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : {Element::f16, Element::bf16}) {
    for (bool q8_0 : {false, true}) {
      // Whisper large (keys split 8 ways at batch 1, 4 ways at 5) and tiny (6 heads of 64).
      for (int batch : {1, 5}) check_fused_query(e, 20, 1280, batch, q8_0);
      for (int batch : {1, 4}) check_fused_query(e, 6, 384, batch, q8_0);
    }
  }
}

// Where the staged INT8 form is the default: from the batches where each (row, head) pair's keys
// are split among at most 2 CTAs. On the GPU it was measured on (H100, 132 SMs, 3 CTAs an SM)
// that is large-v3 from 8 sequences (bench/RESULTS.md, thirty-fifth session); a change of the
// kernel's shared memory or registers that moves this line should be measured again.
TEST(DecodeAttentionInt8Cuda, StagedFormPaysFromEightSequences) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  Int8Kv kv;
  kv.strides = group_major_strides(2 * 1280, 64, 1500);
  if (!staged_int8_attention_runs(Element::f16, kv, 64)) {
    EXPECT_FALSE(staged_int8_attention_pays(64, 20));
    GTEST_SKIP() << "no H100/H200: " << describe();
  }
  EXPECT_FALSE(staged_int8_attention_runs(Element::f32, kv, 64));
  EXPECT_FALSE(staged_int8_attention_runs(Element::f16, kv, 32));
  for (int rows = 1; rows < 256; ++rows) {
    if (staged_int8_attention_pays(rows, 20)) {
      EXPECT_TRUE(staged_int8_attention_pays(rows + 1, 20)) << rows;
    }
  }
  if (multiprocessor_count() == 132) {
    for (int rows : {1, 2, 4}) EXPECT_FALSE(staged_int8_attention_pays(rows, 20)) << rows;
    for (int rows : {8, 16, 64, 120}) EXPECT_TRUE(staged_int8_attention_pays(rows, 20)) << rows;
  }
}

TEST(DecodeAttentionCuda, FusedQueryShapes) {
  EXPECT_TRUE(attention_query_fuses(Element::f16, 1, 20, 64, 1280, false));
  EXPECT_TRUE(attention_query_fuses(Element::bf16, 6, 20, 64, 1280, true));
  EXPECT_FALSE(attention_query_fuses(Element::f16, 7, 20, 64, 1280, false));  // 2 CTAs a head
  EXPECT_FALSE(attention_query_fuses(Element::f32, 1, 20, 64, 1280, false));
  EXPECT_FALSE(attention_query_fuses(Element::f16, 1, 20, 128, 2560, false));  // too large
  EXPECT_FALSE(attention_query_fuses(Element::f16, 1, 20, 64, 1284, false));   // not whole packs
  EXPECT_TRUE(attention_query_fuses(Element::f16, 1, 20, 64, 1272, false));
  EXPECT_FALSE(attention_query_fuses(Element::f16, 1, 20, 64, 1272, true));  // not whole blocks
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  EXPECT_FALSE(attention_query_in_one_wave(Element::f32, 1, 20, 64));
  // On the GPUs it was measured on (H100 and H200, 132 SMs): large-v3's query pays at 1, 2 and 4
  // sequences (160-320 CTAs), and at 3, 5 and 6 (400-480) its CTAs would take two waves. A
  // change of the kernel's registers that moves this line should be measured again.
  if (multiprocessor_count() == 132) {
    for (Element e : {Element::f16, Element::bf16}) {
      for (int rows : {1, 2, 4}) EXPECT_TRUE(attention_query_in_one_wave(e, rows, 20, 64)) << rows;
      for (int rows : {3, 5, 6}) EXPECT_FALSE(attention_query_in_one_wave(e, rows, 20, 64)) << rows;
    }
  }
  // A query the kernel cannot compute is an error, not a wrong result.
  const int batch = 8, heads = 20, head_dim = 64;
  const int64_t d = 1280;
  const DeviceArray x = random_array(Element::f16, batch * d, 71, 1.0f);
  const DeviceArray out = random_array(Element::f16, batch * d, 72, 1.0f);
  Buffer lengths = upload_ints(std::vector<int32_t>(batch, 4));
  const AttentionQuery query{x.buffer.data(), d,      x.buffer.data(), x.buffer.data(), 1e-5f,
                             x.buffer.data(), nullptr};
  EXPECT_THROW(decode_attention(Element::f16, nullptr, 0, x.buffer.data(), x.buffer.data(), d, 0,
                                lengths.as<int32_t>(), out.buffer.data(), d, batch, heads, head_dim,
                                0.125f, nullptr, &query),
               Error);
}

// ---- append_kv ---------------------------------------------------------------------------------

void check_append_kv(Element e, int64_t width, int64_t steps) {
  SCOPED_TRACE(std::string(element_name(e)) + " width " + std::to_string(width) + " steps " +
               std::to_string(steps));
  const int batch = 3;
  const int64_t capacity = 24;
  const std::vector<int32_t> positions = {0, 5, static_cast<int32_t>(capacity - steps)};
  // New rows as slices of a fused QKV projection [batch, steps, 3 · width].
  const int64_t new_row = 3 * width, new_batch = steps * new_row;
  const DeviceArray fresh = random_array(e, batch * new_batch, 21, 1.0f);
  const DeviceArray k_cache = random_array(e, batch * capacity * width, 22, 1.0f);
  const DeviceArray v_cache = random_array(e, batch * capacity * width, 23, 1.0f);
  Buffer position_buffer = upload_ints(positions);

  append_kv(e, fresh.at(e, width), fresh.at(e, 2 * width), new_row, new_batch, batch, steps, width,
            k_cache.buffer.data(), v_cache.buffer.data(), capacity * width,
            position_buffer.as<int32_t>(), nullptr);
  check(cudaDeviceSynchronize(), "append_kv test");

  std::vector<float> want_k = k_cache.values, want_v = v_cache.values;
  for (int b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < steps; ++t) {
      for (int64_t x = 0; x < width; ++x) {
        const int64_t target = b * capacity * width + (positions[b] + t) * width + x;
        want_k[target] = fresh.values[b * new_batch + t * new_row + width + x];
        want_v[target] = fresh.values[b * new_batch + t * new_row + 2 * width + x];
      }
    }
  }
  EXPECT_EQ(read_back(e, k_cache.buffer, want_k.size()), want_k);
  EXPECT_EQ(read_back(e, v_cache.buffer, want_v.size()), want_v);
}

TEST(AppendKvCuda, PerSequencePositions) {
  if (!available()) GTEST_SKIP() << "no GPU: " << describe();
  require_device();
  for (Element e : kElements) {
    check_append_kv(e, 48, 2);
    check_append_kv(e, 48, 1);
    check_append_kv(e, 5, 3);  // rows that allow no wide copies
  }
}

}  // namespace
}  // namespace hark::compute::cuda
