#include "compute/cuda/pass.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/little_endian.h"
#include "base/log.h"
#include "compute/cuda/kernels_conformer.h"
#include "compute/cuda/skinny_linear_sm90.h"
#include "format/quant.h"

namespace hark::compute::cuda {

namespace {

// Rows up to which logits take decode_linear_f32_out (it reads W once for 16 rows), and a Q8_0
// product reads the quants directly (decode_linear) instead of expanding the matrix for cuBLASLt:
// decode steps, batched or not.
constexpr int64_t kMaxStepRows = 16;

// Rows from which a product with an activation takes the Hopper kernel with the activation in
// its epilogue: below, the hidden layer it saves a pass over is small, and cuBLASLt's kernels for
// few rows are the better products. A Whisper window (1,500 rows) is above: with the fitted GELU
// (gemm_sm90.cu) large-v3's encoder took 5.74-5.80 ms a window at batch 1 that way against
// 5.89-5.90 through cuBLASLt and the GELU kernel (bench/RESULTS.md, fifteenth session).
constexpr int64_t kEpilogueActivationRows = 1024;

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Whether a product of m rows of x with w takes decode_linear on w's Q8_0 quants (x must be
// 16-byte aligned for it; Q8_0 rows are whole blocks, multiples of 8 values).
bool reads_q8_0_directly(const Matrix& w, int64_t m, const void* x) {
  return w.q8_0 && m <= kMaxStepRows && aligned16(x);
}

// HARK_CUDA_SM90_GEMM=0 turns the Hopper kernels off (to compare with cuBLASLt's products).
bool sm90_gemm_enabled() {
  return !environment_is("HARK_CUDA_SM90_GEMM", "0");
}

// Whether skinny_linear may take a product of m rows: up to kSkinnyMaxRows, on the Hopper
// kernels. HARK_CUDA_SKINNY_LINEAR=0 (or HARK_CUDA_SM90_GEMM=0) leaves them to cuBLASLt and
// decode_linear, to compare. Q8_0 weights it reads as they are, each stage's quants expanded in
// shared memory: at 32 sequences that took large-v3's Q8_0 step from 4.41 ms (the weights
// expanded by a kernel of their own first) to 3.62 (bench/RESULTS.md, thirty-first session).
bool skinny_linear_enabled(int64_t m) {
  return m <= kSkinnyMaxRows && sm90_gemm_enabled() &&
         !environment_is("HARK_CUDA_SKINNY_LINEAR", "0");
}

// The products' rule (Pass::linear, activation_linear, norm_linear): skinny_linear where it is
// enabled, except Q8_0 products that decode_linear reads directly (up to 16 rows).
bool takes_skinny_linear(const Matrix& w, int64_t m, const void* x) {
  return skinny_linear_enabled(m) && !reads_q8_0_directly(w, m, x);
}

// The rows from which skinny_linear takes the fused step's layers (Pass::step_linear) from
// decode_linear. Large-v3's step, ms (bench/RESULTS.md, thirty-first session): 16-bit weights,
// decode_linear against skinny_linear, 1.46 / 1.67 at 1 sequence, 2.28 / 2.32 at 6, 1.97 / 1.97
// at 7, 2.04 / 2.01 at 8; Q8_0 weights, 2.01 / 2.30 at 8 and 3.12 / 2.79 at 16. On an H100
// (thirty-second session), Q8_0 with native K/V: 3.04 / 3.21 at 9, 3.59 / 3.30 at 10, 3.39 / 3.38
// at 11, 3.54 / 3.55 at 12. HARK_CUDA_SKINNY_STEP=0 or 1 forces one of them (to compare).
constexpr int64_t kSkinnyStepMinRows = 8, kSkinnyStepMinRowsQ8 = 10;

bool step_takes_skinny_linear(const Matrix& w, int64_t m) {
  if (!skinny_linear_enabled(m) || environment_is("HARK_CUDA_SKINNY_STEP", "0")) return false;
  return environment_is("HARK_CUDA_SKINNY_STEP", "1") ||
         m >= (w.q8_0 ? kSkinnyStepMinRowsQ8 : kSkinnyStepMinRows);
}

// Whether skinny_linear applies the layer norm before its product (Pass::norm_linear): large-v3's
// step at 16 sequences took 2.41 ms so against 2.45 with the norms as kernels of their own, no
// batch lost (bench/RESULTS.md, thirty-first session). HARK_CUDA_SKINNY_NORM=0 turns it off, to
// compare.
bool skinny_norm_enabled() {
  return !environment_is("HARK_CUDA_SKINNY_NORM", "0");
}

// Whether skinny_linear's Q/K/V product of a step past the fused step's sequences (Pass::
// norm_linear with a scatter) puts K and V into the caches itself, saving append_kv's launch:
// large-v3's step took 2.36 ms so at 16 sequences against 2.41, 3.01 against 3.13 at 32
// (bench/RESULTS.md, thirty-first session). HARK_CUDA_SKINNY_SCATTER=0 turns it off, to compare.
bool skinny_scatter_enabled() {
  return !environment_is("HARK_CUDA_SKINNY_SCATTER", "0");
}

// `count` F32 values as `element` bytes, appended to `out`.
void append_as(Element element, const float* values, size_t count, std::vector<uint8_t>& out) {
  const size_t at = out.size();
  out.resize(at + count * element_size(element));
  uint8_t* dst = out.data() + at;
  if (element == Element::f32) {
    std::memcpy(dst, values, count * sizeof(float));
    return;
  }
  auto* halves = reinterpret_cast<uint16_t*>(dst);
  const bool f16 = element == Element::f16;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < count; ++i) {
    halves[i] = f16 ? quant::f32_to_f16(values[i]) : quant::f32_to_bf16(values[i]);
  }
}

bool stored_as(Element element, DType type) {
  return (element == Element::f32 && type == DType::F32) ||
         (element == Element::f16 && type == DType::F16) ||
         (element == Element::bf16 && type == DType::BF16);
}

// Appends a stored weight converted to `element` (or copied as it is when it already is).
void append_weight(Element element, const Weight& w, std::vector<uint8_t>& out) {
  if (stored_as(element, w.type)) {
    out.insert(out.end(), w.data, w.data + w.nbytes);
    return;
  }
  const int64_t rows = w.rows(), cols = w.cols();
  constexpr int64_t kChunkRows = 256;
  std::vector<float> values;
  for (int64_t first = 0; first < rows; first += kChunkRows) {
    const int64_t count = std::min(kChunkRows, rows - first);
    values.resize(static_cast<size_t>(count * cols));
    quant::to_f32_rows(w.type, w.data, cols, first, count, values.data());
    append_as(element, values.data(), values.size(), out);
  }
}

// Rows of a Q8_0 matrix rearranged (q8_0_to_device_layout, on all cores) and queued at a time:
// 2,048 rows of Whisper large's fc2 are 10 MiB of quants.
constexpr int64_t kQ8ChunkRows = 2048;

// The pieces that go through one staging buffer: large enough for all cores to copy one in
// together (StagingBuffer::upload_from), small enough that three stay a small page-locked ring.
constexpr size_t kStagedPieceBytes = size_t{16} << 20;

}  // namespace

void q8_0_to_device_layout(const uint8_t* blocks, int64_t rows, int64_t cols, int8_t* quants,
                           uint16_t* scales) {
  if (cols % static_cast<int64_t>(quant::kQ8BlockValues) != 0) {
    fail("Q8_0: ", cols, " columns are not whole blocks of ", quant::kQ8BlockValues);
  }
  const int64_t count = rows * cols / static_cast<int64_t>(quant::kQ8BlockValues);
#pragma omp parallel for schedule(static) if (count >= (int64_t{1} << 12))
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* block = blocks + i * static_cast<int64_t>(quant::kQ8BlockBytes);
    scales[i] = little_endian::u16(block);
    std::memcpy(quants + i * static_cast<int64_t>(quant::kQ8BlockValues), block + 2,
                quant::kQ8BlockValues);
  }
}

Element activation_element(DType type) {
  switch (type) {
    case DType::F32:
      return Element::f32;
    case DType::BF16:
      return Element::bf16;
    default:
      return Element::f16;
  }
}

std::vector<float> download_f32(const void* device, int64_t count, Element e) {
  std::vector<float> values(static_cast<size_t>(count));
  if (e == Element::f32) {
    download(device, values.size() * sizeof(float), values.data());
    return values;
  }
  std::vector<uint16_t> halves(values.size());
  download(device, halves.size() * sizeof(uint16_t), halves.data());
  for (size_t i = 0; i < halves.size(); ++i) {
    values[i] = e == Element::f16 ? quant::f16_to_f32(halves[i]) : quant::bf16_to_f32(halves[i]);
  }
  return values;
}

Uploader::Uploader(Element element)
    : element_(element), started_(std::chrono::steady_clock::now()) {}

void Uploader::finish() {
  stream_.synchronize();
  log::info("weights: ", bytes_put_ >> 20, " MiB uploaded in ",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count(),
            " s");
}

void Uploader::put(const void* host, size_t bytes, void* device) {
  const auto* source = static_cast<const uint8_t*>(host);
  auto* target = static_cast<uint8_t*>(device);
  bytes_put_ += bytes;
  for (size_t begin = 0; begin < bytes; begin += kStagedPieceBytes) {
    StagingBuffer& staging = staging_[next_staging_];
    next_staging_ = (next_staging_ + 1) % std::size(staging_);
    staging.upload_from(source + begin, std::min(kStagedPieceBytes, bytes - begin), target + begin,
                        stream_.get());
  }
}

Buffer Uploader::to_device(const std::vector<uint8_t>& bytes) {
  Buffer buffer(bytes.size());
  put(bytes.data(), bytes.size(), buffer.data());
  return buffer;
}

Matrix Uploader::matrix(std::span<const Weight* const> parts) {
  if (parts.empty()) fail("CUDA upload: a matrix of no parts");
  Matrix m;
  m.cols = parts[0]->cols();
  // Q8_0 stays Q8_0 only when every part is Q8_0 and the products run in 16 bits.
  m.q8_0 = element_ != Element::f32;
  for (const Weight* part : parts) m.q8_0 = m.q8_0 && part->type == DType::Q8_0;
  const auto device_bytes = [&](const Weight& part) {
    return m.q8_0 ? part.nbytes
                  : static_cast<size_t>(part.rows() * m.cols) * element_size(element_);
  };
  size_t total = 0;
  for (const Weight* part : parts) {
    if (part->cols() != m.cols) {
      fail("CUDA upload: stacked matrices of ", m.cols, " and ", part->cols(), " columns");
    }
    total += device_bytes(*part);
    m.rows += part->rows();
  }
  m.data = Buffer(total);
  auto* target = m.data.as<uint8_t>();
  if (m.q8_0) {
    // Each part's rows go to their place among the quants and among the scales.
    auto* quants = m.data.as<int8_t>();
    auto* scales = reinterpret_cast<uint16_t*>(target + q8_0_scales_offset(m.rows, m.cols));
    const int64_t scales_a_row = m.cols / static_cast<int64_t>(quant::kQ8BlockValues);
    std::vector<int8_t> part_quants;
    std::vector<uint16_t> part_scales;
    int64_t row = 0;
    for (const Weight* part : parts) {
      const int64_t blocks = part->rows() * scales_a_row;
      if (m.cols % static_cast<int64_t>(quant::kQ8BlockValues) != 0 ||
          part->nbytes != static_cast<size_t>(blocks) * quant::kQ8BlockBytes) {
        fail("CUDA upload: a Q8_0 matrix of ", part->nbytes, " bytes and ", part->rows(), " × ",
             m.cols, " values is not whole blocks of ", quant::kQ8BlockValues);
      }
      for (int64_t first = 0; first < part->rows(); first += kQ8ChunkRows) {
        const int64_t count = std::min(kQ8ChunkRows, part->rows() - first);
        part_quants.resize(static_cast<size_t>(count * m.cols));
        part_scales.resize(static_cast<size_t>(count * scales_a_row));
        q8_0_to_device_layout(part->data + first * scales_a_row * quant::kQ8BlockBytes, count,
                              m.cols, part_quants.data(), part_scales.data());
        put(part_quants.data(), part_quants.size(), quants + (row + first) * m.cols);
        put(part_scales.data(), part_scales.size() * sizeof(uint16_t),
            scales + (row + first) * scales_a_row);
      }
      row += part->rows();
    }
    return m;
  }
  for (const Weight* part : parts) {
    const size_t size = device_bytes(*part);
    if (stored_as(element_, part->type)) {
      // Weights stored as they go up are copied straight from the model file.
      if (part->nbytes != size) {
        fail("CUDA upload: a matrix of ", part->nbytes, " bytes where its shape takes ", size);
      }
      put(part->data, size, target);
    } else {
      std::vector<uint8_t> converted;
      append_weight(element_, *part, converted);
      put(converted.data(), size, target);
    }
    target += size;
  }
  return m;
}

Matrix Uploader::matrix(const Weight& w) {
  const Weight* parts[] = {&w};
  return matrix(parts);
}

Buffer Uploader::vector(std::span<const std::pair<const Weight*, int64_t>> parts) {
  std::vector<uint8_t> bytes;
  for (const auto& [part, length] : parts) {
    if (part == nullptr) {
      bytes.resize(bytes.size() + static_cast<size_t>(length) * element_size(element_), 0);
    } else {
      if (part->shape.elements() != length) {
        fail("CUDA upload: a vector of ", part->shape.elements(), " values, expected ", length);
      }
      append_weight(element_, *part, bytes);
    }
  }
  return to_device(bytes);
}

Buffer Uploader::vector(const Weight& w) {
  const std::pair<const Weight*, int64_t> parts[] = {{&w, w.shape.elements()}};
  return vector(parts);
}

Buffer Uploader::table(const Weight& w, int64_t padding_rows) {
  std::vector<uint8_t> bytes;
  append_weight(element_, w, bytes);
  bytes.resize(bytes.size() + static_cast<size_t>(padding_rows * w.cols()) * element_size(element_),
               0);
  return to_device(bytes);
}

Linear Uploader::linear(const Weight& weight, const Weight* bias) {
  Linear layer;
  layer.weight = matrix(weight);
  if (bias != nullptr) layer.bias = vector(*bias);
  return layer;
}

LayerNorm Uploader::layer_norm(const Weight& gamma, const Weight& beta, float eps) {
  return LayerNorm{vector(gamma), vector(beta), eps};
}

const void* Pass::expanded(const Matrix& w) {
  expanded_.reserve(bytes(w.rows * w.cols));
  dequantize_q8_0(w.data.data(), w.rows, w.cols, element_, expanded_.data(), stream_);
  return expanded_.data();
}

void Pass::linear(const void* x, int64_t m, const Linear& layer, void* y, const void* residual) {
  const Matrix& w = layer.weight;
  const void* bias = layer.bias.bytes() > 0 ? layer.bias.data() : nullptr;
  if (reads_q8_0_directly(w, m, x)) {
    decode_linear(element_, x, static_cast<int>(m), w.cols, nullptr, {w.data.data(), true}, w.rows,
                  bias, false, residual, y, nullptr, stream_);
    return;
  }
  if (takes_skinny_linear(w, m, x) && skinny(x, m, layer, Activation::none, residual, y)) return;
  const void* weights = w.q8_0 ? expanded(w) : w.data.data();
  gemm_.linear(element_, x, m, w.cols, weights, w.rows, bias, residual, element_, y, stream_);
}

bool Pass::skinny(const void* x, int64_t m, const Linear& layer, Activation act,
                  const void* residual, void* y, const DecodeNorm* norm, const KvScatter* scatter) {
  const Matrix& w = layer.weight;
  SkinnyProduct product;
  product.x = x;
  product.m = m;
  product.k = w.cols;
  product.w = {w.data.data(), w.q8_0};
  product.n = w.rows;
  product.bias = layer.bias.bytes() > 0 ? layer.bias.data() : nullptr;
  product.act = act;
  product.residual = residual;
  product.y = y;
  product.norm = norm;
  product.scatter = scatter;
  if (!skinny_linear_runs(element_, product)) return false;
  skinny_linear(element_, product, stream_);
  return true;
}

bool Pass::norm_linear(const void* x, int64_t m, const LayerNorm& norm, const Linear& layer,
                       Activation act, void* normed, void* y, const KvScatter* scatter) {
  // The scatter only where skinny_linear runs the product.
  const bool skinny_runs = takes_skinny_linear(layer.weight, m, x);
  const KvScatter* scattering = skinny_scatter_enabled() ? scatter : nullptr;
  if (skinny_runs && skinny_norm_enabled()) {
    const DecodeNorm fused{norm.gamma.data(), norm.beta.data(), norm.eps};
    if (skinny(x, m, layer, act, nullptr, y, &fused, scattering)) return scattering != nullptr;
  }
  layer_norm(x, m, norm, layer.in_features(), normed);
  if (skinny_runs && scattering != nullptr &&
      skinny(normed, m, layer, act, nullptr, y, nullptr, scattering)) {
    return true;
  }
  if (act == Activation::none) {
    linear(normed, m, layer, y);
  } else {
    activation_linear(normed, m, layer, act, y);
  }
  return false;
}

void Pass::activation_linear(const void* x, int64_t m, const Linear& layer, Activation act,
                             void* y) {
  const Matrix& w = layer.weight;
  const void* bias = layer.bias.bytes() > 0 ? layer.bias.data() : nullptr;
  if (m >= kEpilogueActivationRows && sm90_gemm_enabled()) {
    const void* weights = w.q8_0 ? expanded(w) : w.data.data();
    if (activation_linear_runs(element_, m, w.cols, w.rows, x, weights, bias, y)) {
      cuda::activation_linear(element_, x, m, w.cols, weights, w.rows, bias, act, y, stream_);
      return;
    }
  }
  if (takes_skinny_linear(w, m, x) && skinny(x, m, layer, act, nullptr, y)) return;
  linear(x, m, layer, y);
  switch (act) {
    case Activation::none:
      return;
    case Activation::gelu:
      return bias_gelu(element_, y, nullptr, m, w.rows, stream_);
    case Activation::silu:
      return silu(element_, y, m * w.rows, stream_);
    case Activation::relu:
      return relu(element_, y, m * w.rows, stream_);
  }
}

void Pass::quantized_linear(const void* x, int64_t m, const Linear& layer, int group,
                            int64_t block_rows, int8_t* q, float* scales, Buffer& scratch) {
  const Matrix& w = layer.weight;
  const void* bias = layer.bias.bytes() > 0 ? layer.bias.data() : nullptr;
  const int64_t n = w.rows;
  if (sm90_gemm_enabled()) {
    const void* weights = w.q8_0 ? expanded(w) : w.data.data();
    if (quantized_linear_runs(element_, m, w.cols, n, group, block_rows, x, weights, bias, q,
                              scales)) {
      cuda::quantized_linear(element_, x, m, w.cols, weights, n, bias, group, block_rows, q, scales,
                             stream_);
      return;
    }
  }
  // Chunks as large as the scratch holds, and at least 256 rows or 32 MiB: fewer rows would waste
  // the product's tiles, and smaller chunks take more launches.
  constexpr int64_t kMinChunkRows = 256, kMinChunkBytes = int64_t{32} << 20;
  const auto row_bytes_out = static_cast<int64_t>(bytes(n));
  const int64_t fitting_rows = static_cast<int64_t>(scratch.bytes()) / row_bytes_out;
  const int64_t chunk_rows =
      std::min(m, std::max({fitting_rows, kMinChunkRows, kMinChunkBytes / row_bytes_out}));
  scratch.reserve(bytes(chunk_rows * n));
  const size_t row_bytes = bytes(w.cols);
  for (int64_t first = 0; first < m; first += chunk_rows) {
    const int64_t chunk = std::min(chunk_rows, m - first);
    linear(static_cast<const uint8_t*>(x) + first * row_bytes, chunk, layer, scratch.data());
    quantize_int8(element_, scratch.data(), first, chunk, n, group, block_rows, q, scales, stream_);
  }
}

void Pass::step_linear(const void* x, int64_t m, const Linear& layer, void* y,
                       const LayerNorm* norm, bool gelu, const void* residual,
                       const KvScatter* scatter) {
  const Matrix& w = layer.weight;
  if (m > INT32_MAX) fail("step_linear: ", m, " rows are too many for a decode step");
  DecodeNorm decode_norm;
  if (norm != nullptr) decode_norm = DecodeNorm{norm->gamma.data(), norm->beta.data(), norm->eps};
  const DecodeNorm* fused_norm = norm != nullptr ? &decode_norm : nullptr;
  if (step_takes_skinny_linear(w, m) &&
      skinny(x, m, layer, gelu ? Activation::gelu : Activation::none, residual, y, fused_norm,
             scatter)) {
    return;
  }
  const void* bias = layer.bias.bytes() > 0 ? layer.bias.data() : nullptr;
  decode_linear(element_, x, static_cast<int>(m), w.cols, fused_norm, {w.data.data(), w.q8_0},
                w.rows, bias, gelu, residual, y, scatter, stream_);
}

void Pass::linear_f32_out(const void* x, int64_t m, const Matrix& w, float* y) {
  if (reads_q8_0_directly(w, m, x)) {
    decode_linear_f32_out(element_, x, static_cast<int>(m), w.cols, nullptr, {w.data.data(), true},
                          w.rows, y, stream_);
    return;
  }
  const void* weights = w.q8_0 ? expanded(w) : w.data.data();
  gemm_.linear(element_, x, m, w.cols, weights, w.rows, nullptr, nullptr, Element::f32, y, stream_);
}

void Pass::norm_linear_f32_out(void* x, int64_t m, const LayerNorm& norm, int64_t cols,
                               const Matrix& w, float* y) {
  if (m <= kMaxStepRows && w.cols % 8 == 0 && aligned16(x) && aligned16(w.data.data())) {
    const DecodeNorm decode_norm{norm.gamma.data(), norm.beta.data(), norm.eps};
    decode_linear_f32_out(element_, x, static_cast<int>(m), w.cols, &decode_norm,
                          {w.data.data(), w.q8_0}, w.rows, y, stream_);
    return;
  }
  layer_norm(x, m, norm, cols, x);
  linear_f32_out(x, m, w, y);
}

void Pass::layer_norm(const void* x, int64_t rows, const LayerNorm& norm, int64_t cols, void* y) {
  cuda::layer_norm(element_, x, norm.gamma.data(), norm.beta.data(), norm.eps, rows, cols, y,
                   stream_);
}

void Pass::rel_pos_attention(const void* q, const void* k, const void* v, int64_t row_stride,
                             const void* p, int64_t p_row_stride, const void* content_bias,
                             const int32_t* lengths, const int32_t* starts, int batch,
                             int64_t steps, int heads, int head_dim, float scale, void* out,
                             int64_t out_row_stride) {
  if (!padded_attention_runs(element_, head_dim)) {
    // (q + v') + (u − v') is q + u up to the rounding of q + v' and u − v' to the element type:
    // in F32, ulps of F32.
    mark("attention: F32 kernel");
    cuda::rel_pos_attention(element_, q, k, v, row_stride, p, p_row_stride, content_bias, nullptr,
                            lengths, starts, batch, steps, heads, head_dim, scale, out,
                            out_row_stride, stream_);
    return;
  }
  mark("attention: flash kernel");
  const RelativePositions positions{p, p_row_stride, steps};
  padded_attention(element_, q, row_stride, steps * row_stride, k, v, row_stride,
                   steps * row_stride, out, out_row_stride, steps * out_row_stride, lengths, starts,
                   &positions, content_bias, batch, heads, head_dim, steps, scale, stream_);
}

}  // namespace hark::compute::cuda
