#include "models/parakeet/synthetic.h"

#include <array>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "base/random.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "models/parakeet/convert.h"
#include "models/parakeet/layout.h"

namespace hark::parakeet {

namespace {

// What sets the FastConformer encoders of the published checkpoints apart; every one of them
// has d_model 1024, 8 heads, a 4096-wide feed-forward, a kernel-9 conv module and 8x subsampling
// with 256 channels (docs/parakeet.md §1).
struct Encoder {
  int layers;
  int n_mels;
  bool bias;         // attention_bias = convolution_bias (NeMo's use_bias)
  bool scale_input;  // NeMo's xscaling
};

// XL (0.6B: 24 blocks) and XXL (1.1B: 42 blocks). The 1.1B models and ctc-0.6b take 80 mels with
// biases and x sqrt(d); the TDT 0.6B models 128 mels without either.
constexpr Encoder kXlTdt = {24, 128, false, false};
constexpr Encoder kXl = {24, 80, true, true};
constexpr Encoder kXxl = {42, 80, true, true};

// `vocab` counts the blank, which is the last id.
Config fast_conformer(Head head, int vocab, const Encoder& encoder) {
  Config c;
  c.head = head;
  c.vocab_size = vocab;
  c.blank_id = vocab - 1;
  c.n_mels = encoder.n_mels;
  c.d_model = 1024;
  c.layers = encoder.layers;
  c.heads = 8;
  c.ffn_dim = 4096;
  c.conv_kernel = 9;
  c.subsampling_factor = 8;
  c.subsampling_channels = 256;
  c.attention_bias = c.conv_bias = encoder.bias;
  c.scale_input = encoder.scale_input;
  if (head != Head::ctc) {
    // A 2-layer LSTM of 640 and a 640-wide joint network in every transducer checkpoint.
    c.predictor_hidden = c.joint_hidden = 640;
    c.predictor_layers = 2;
    c.max_symbols_per_step = 10;
  }
  if (head == Head::tdt) c.durations = {0, 1, 2, 3, 4};
  return c;
}

// The structure of the real models, shrunk: what the CLI test benchmarks in a blink.
Config tiny_test() {
  Config c = fast_conformer(Head::tdt, 128, {2, 80, true, false});
  c.d_model = 64;
  c.heads = 4;
  c.ffn_dim = 256;
  c.subsampling_channels = 32;
  c.predictor_hidden = c.joint_hidden = 48;
  return c;
}

const std::array<NamedConfig, 6> kConfigs = {{
    {"parakeet-tdt-0.6b-v2", fast_conformer(Head::tdt, 1025, kXlTdt)},
    {"parakeet-tdt-0.6b-v3", fast_conformer(Head::tdt, 8193, kXlTdt)},
    {"parakeet-ctc-1.1b", fast_conformer(Head::ctc, 1025, kXxl)},
    {"parakeet-rnnt-1.1b", fast_conformer(Head::rnnt, 1025, kXxl)},
    {"parakeet-ctc-0.6b", fast_conformer(Head::ctc, 1025, kXl)},
    {"parakeet-tiny-test", tiny_test(), /*listed=*/false},
}};

// Control tokens (<unk> first, the blank last) and a distinct word piece for every other id.
Vocabulary placeholder_vocabulary(const Config& config) {
  Vocabulary vocabulary;
  for (int id = 0; id < config.vocab_size; ++id) {
    if (id == config.blank_id) {
      vocabulary.pieces.push_back(config.head == Head::ctc ? "<pad>" : "<blank>");
    } else if (id == 0) {
      vocabulary.pieces.push_back("<unk>");
    } else {
      vocabulary.pieces.push_back("\u2581w" + std::to_string(id));
    }
    const bool control = id == 0 || id == config.blank_id;
    vocabulary.types.push_back(control ? kTokenControl : kTokenNormal);
  }
  return vocabulary;
}

// How one tensor's values are drawn: value = offset + spread * uniform(-1, 1).
struct Draw {
  float offset = 0.0f;
  float spread = 0.0f;
};

// Weights (two or more dimensions) keep unit variance through a layer: spread sqrt(3 / fan_in).
// Norm gains sit near 1, BatchNorm variances in [0.5, 1.5] (their fold divides by the square
// root), embeddings are O(1) like the features they stand beside, biases and the attention's
// position biases small.
Draw draw_for(const TensorSpec& tensor) {
  const std::string& name = tensor.name;
  if (name.ends_with("running_var")) return {1.0f, 0.5f};
  if (name.ends_with(".bias_u") || name.ends_with(".bias_v")) return {0.0f, 0.1f};
  if (name == "decoder.embedding.weight") return {0.0f, 1.0f};
  if (tensor.shape.size() >= 2) {
    int64_t fan_in = 1;
    for (size_t i = 1; i < tensor.shape.size(); ++i) fan_in *= tensor.shape[i];
    return {0.0f, std::sqrt(3.0f / static_cast<float>(fan_in))};
  }
  if (name.find("norm") != std::string::npos && name.ends_with(".weight")) return {1.0f, 0.1f};
  return {0.0f, 0.05f};
}

}  // namespace

std::span<const NamedConfig> reference_configs() {
  return kConfigs;
}

std::string reference_config_names() {
  std::string names;
  for (const NamedConfig& named : kConfigs) {
    if (named.listed) names += (names.empty() ? "" : ", ") + std::string(named.name);
  }
  return names;
}

const Config& reference_config(std::string_view name) {
  for (const NamedConfig& named : kConfigs) {
    if (named.name == name) return named.config;
  }
  fail("unknown Parakeet configuration '", name, "' (known: ", reference_config_names(), ")");
}

void write_random_model(const Config& config, DType type, const std::string& path, uint64_t seed) {
  check_weight_type(type);
  gguf::Writer writer;
  write_header(writer, config, "random-weights", placeholder_vocabulary(config), type);

  uint64_t tensor_seed = seed;
  for (const TensorSpec& tensor : tensor_layout(config)) {
    const DType stored = stored_type(tensor, type);
    int64_t count = 1;
    for (int64_t dim : tensor.shape) count *= dim;
    writer.add_tensor(tensor.name, stored, tensor.shape,
                      [count, stored, draw = draw_for(tensor), state = tensor_seed++]() {
                        std::vector<float> values(static_cast<size_t>(count));
                        SplitMix64 random(state);
                        for (float& value : values) {
                          value = draw.offset + draw.spread * random.uniform();
                        }
                        return quant::from_f32(stored, values.data(), values.size());
                      });
  }
  writer.write(path);
}

}  // namespace hark::parakeet
