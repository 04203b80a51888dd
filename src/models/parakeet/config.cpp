#include "models/parakeet/config.h"

#include <cmath>
#include <cstdint>

#include "base/error.h"
#include "format/gguf.h"

namespace hark::parakeet {

namespace {

// Bounds far above any real Parakeet (ctc-1.1b: d 1024, 42 layers; v3: 8193 tokens) that keep a
// corrupt file from asking for absurd buffers.
constexpr int64_t kMaxWidth = 1 << 16;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxDuration = 1024;

constexpr std::string_view kArchitecture = "parakeet";

int read_int(const gguf::File& file, const std::string& key, int64_t min, int64_t max) {
  if (!file.has(key)) fail(file.path(), ": key '", key, "' is missing");
  const int64_t value = file.get_int(key);
  if (value < min || value > max) {
    fail(file.path(), ": key '", key, "' is ", value, ", expected ", min, " to ", max);
  }
  return static_cast<int>(value);
}

int read_size(const gguf::File& file, const std::string& key, int64_t max) {
  return read_int(file, key, 1, max);
}

float read_float(const gguf::File& file, const std::string& key) {
  if (!file.has(key)) fail(file.path(), ": key '", key, "' is missing");
  return static_cast<float>(file.get_float(key));
}

bool read_bool(const gguf::File& file, const std::string& key) {
  if (!file.has(key)) fail(file.path(), ": key '", key, "' is missing");
  return file.get_bool(key);
}

bool is_power_of_two(int value) {
  return value > 0 && (value & (value - 1)) == 0;
}

}  // namespace

std::string_view head_name(Head head) {
  switch (head) {
    case Head::ctc:
      return "ctc";
    case Head::rnnt:
      return "rnnt";
    case Head::tdt:
      return "tdt";
  }
  return "?";
}

Head head_from_name(std::string_view name) {
  for (Head head : {Head::ctc, Head::rnnt, Head::tdt}) {
    if (head_name(head) == name) return head;
  }
  fail("unknown Parakeet head '", name, "' (expected ctc, rnnt or tdt)");
}

int Config::subsampling_stages() const {
  int stages = 0;
  for (int factor = subsampling_factor; factor > 1; factor /= 2) ++stages;
  return stages;
}

int Config::subsampled_mels() const {
  // Every stage is a kernel-3, stride-2, padding-1 convolution: n -> (n - 1) / 2 + 1.
  int bins = n_mels;
  for (int stage = 0; stage < subsampling_stages(); ++stage) bins = (bins - 1) / 2 + 1;
  return bins;
}

void validate(const Config& c, const std::string& where) {
  auto require = [&](bool ok, const auto&... parts) {
    if (!ok) fail(where, ": ", parts...);
  };
  require(c.vocab_size >= 1 && c.vocab_size <= kMaxVocab, "parakeet.vocab_size is ", c.vocab_size);
  require(c.blank_id >= 0 && c.blank_id < c.vocab_size, "parakeet.blank_id ", c.blank_id,
          " is outside the vocabulary of ", c.vocab_size);
  require(c.n_mels >= 1 && c.n_mels <= 4096, "parakeet.n_mels is ", c.n_mels);
  require(c.sample_rate >= 1 && c.n_fft >= 1 && c.hop_length >= 1 && c.win_length >= 1,
          "the front end's sample rate, n_fft, hop and window must be positive");
  require(c.win_length <= c.n_fft, "parakeet.win_length ", c.win_length, " exceeds parakeet.n_fft ",
          c.n_fft);
  require(std::isfinite(c.preemphasis) && c.preemphasis >= 0.0f && c.preemphasis < 1.0f,
          "parakeet.preemphasis is ", c.preemphasis, ", expected 0 <= x < 1");

  require(c.d_model >= 2 && c.d_model <= kMaxWidth && c.d_model % 2 == 0,
          "parakeet.encoder.d_model is ", c.d_model,
          ", expected an even width (the positions are sin/cos pairs)");
  require(c.layers >= 1 && c.layers <= kMaxLayers, "parakeet.encoder.layers is ", c.layers);
  require(c.heads >= 1 && c.heads <= c.d_model && c.d_model % c.heads == 0,
          "parakeet.encoder.d_model ", c.d_model, " is not divisible by parakeet.encoder.heads ",
          c.heads);
  require(c.ffn_dim >= 1 && c.ffn_dim <= 16 * kMaxWidth, "parakeet.encoder.ffn_dim is ", c.ffn_dim);
  require(c.conv_kernel >= 1 && c.conv_kernel <= 1023 && c.conv_kernel % 2 == 1,
          "parakeet.encoder.conv_kernel is ", c.conv_kernel,
          ", expected an odd size (the conv module pads (k - 1) / 2 on each side)");
  require(is_power_of_two(c.subsampling_factor) && c.subsampling_factor >= 2 &&
              c.subsampling_factor <= 64,
          "parakeet.subsampling.factor is ", c.subsampling_factor,
          ", expected a power of two from 2 to 64");
  require(c.subsampling_channels >= 1 && c.subsampling_channels <= kMaxWidth,
          "parakeet.subsampling.channels is ", c.subsampling_channels);
  for (const auto& [eps, key] : {std::pair{c.layer_norm_eps, "parakeet.encoder.layer_norm_eps"},
                                 std::pair{c.batch_norm_eps, "parakeet.encoder.batch_norm_eps"}}) {
    require(std::isfinite(eps) && eps > 0.0f, key, " is ", eps, ", expected a positive number");
  }

  if (!c.is_transducer()) return;
  require(c.predictor_hidden >= 1 && c.predictor_hidden <= kMaxWidth,
          "parakeet.predictor.hidden is ", c.predictor_hidden);
  require(c.predictor_layers >= 1 && c.predictor_layers <= kMaxLayers,
          "parakeet.predictor.layers is ", c.predictor_layers);
  require(c.joint_hidden >= 1 && c.joint_hidden <= kMaxWidth, "parakeet.joint.hidden is ",
          c.joint_hidden);
  require(c.max_symbols_per_step >= 1 && c.max_symbols_per_step <= kMaxDuration,
          "parakeet.max_symbols_per_step is ", c.max_symbols_per_step);
  if (c.head == Head::rnnt) {
    require(c.durations.empty(), "an RNN-T model has no parakeet.tdt.durations");
    return;
  }
  require(!c.durations.empty() && c.durations.size() <= kMaxDuration,
          "parakeet.tdt.durations holds ", c.durations.size(), " values, expected 1 to ",
          kMaxDuration);
  for (int duration : c.durations) {
    require(duration >= 0 && duration <= kMaxDuration, "parakeet.tdt.durations holds ", duration);
  }
}

Config read_config(const gguf::File& file) {
  const std::string architecture = file.get_string_or("general.architecture", "");
  if (architecture != kArchitecture) {
    fail(file.path(), ": general.architecture is '", architecture, "', expected '", kArchitecture,
         "'");
  }
  if (!file.has("parakeet.head")) fail(file.path(), ": key 'parakeet.head' is missing");
  const std::string head = file.get_string("parakeet.head");
  Config c;
  try {
    c.head = head_from_name(head);
  } catch (const Error& error) {
    fail(file.path(), ": key 'parakeet.head': ", error.what());
  }
  c.vocab_size = read_size(file, "parakeet.vocab_size", kMaxVocab);
  c.blank_id = read_int(file, "parakeet.blank_id", 0, c.vocab_size - 1);

  c.n_mels = read_size(file, "parakeet.n_mels", 4096);
  c.sample_rate = read_size(file, "parakeet.sample_rate", 1 << 20);
  c.n_fft = read_size(file, "parakeet.n_fft", 1 << 16);
  c.win_length = read_size(file, "parakeet.win_length", 1 << 16);
  c.hop_length = read_size(file, "parakeet.hop_length", 1 << 16);
  c.preemphasis = read_float(file, "parakeet.preemphasis");

  c.d_model = read_size(file, "parakeet.encoder.d_model", kMaxWidth);
  c.layers = read_size(file, "parakeet.encoder.layers", kMaxLayers);
  c.heads = read_size(file, "parakeet.encoder.heads", kMaxWidth);
  c.ffn_dim = read_size(file, "parakeet.encoder.ffn_dim", 16 * kMaxWidth);
  c.conv_kernel = read_size(file, "parakeet.encoder.conv_kernel", 1023);
  c.attention_bias = read_bool(file, "parakeet.encoder.attention_bias");
  c.conv_bias = read_bool(file, "parakeet.encoder.conv_bias");
  c.scale_input = read_bool(file, "parakeet.encoder.scale_input");
  c.layer_norm_eps = read_float(file, "parakeet.encoder.layer_norm_eps");
  c.batch_norm_eps = read_float(file, "parakeet.encoder.batch_norm_eps");
  c.subsampling_factor = read_size(file, "parakeet.subsampling.factor", 64);
  c.subsampling_channels = read_size(file, "parakeet.subsampling.channels", kMaxWidth);

  if (c.is_transducer()) {
    c.predictor_hidden = read_size(file, "parakeet.predictor.hidden", kMaxWidth);
    c.predictor_layers = read_size(file, "parakeet.predictor.layers", kMaxLayers);
    c.joint_hidden = read_size(file, "parakeet.joint.hidden", kMaxWidth);
    c.max_symbols_per_step = read_size(file, "parakeet.max_symbols_per_step", kMaxDuration);
  }
  if (c.head == Head::tdt) {
    if (!file.has("parakeet.tdt.durations")) {
      fail(file.path(), ": key 'parakeet.tdt.durations' is missing");
    }
    for (int64_t duration : file.get_ints("parakeet.tdt.durations")) {
      if (duration < 0 || duration > kMaxDuration) {
        fail(file.path(), ": key 'parakeet.tdt.durations' holds ", duration);
      }
      c.durations.push_back(static_cast<int>(duration));
    }
  }
  validate(c, file.path());
  return c;
}

void write_config(gguf::Writer& writer, const Config& c) {
  validate(c, "Parakeet config");
  const auto u32 = [](int value) { return static_cast<uint32_t>(value); };
  writer.set_string("general.architecture", std::string(kArchitecture));
  writer.set_string("parakeet.head", std::string(head_name(c.head)));
  writer.set_u32("parakeet.vocab_size", u32(c.vocab_size));
  writer.set_u32("parakeet.blank_id", u32(c.blank_id));

  writer.set_u32("parakeet.n_mels", u32(c.n_mels));
  writer.set_u32("parakeet.sample_rate", u32(c.sample_rate));
  writer.set_u32("parakeet.n_fft", u32(c.n_fft));
  writer.set_u32("parakeet.win_length", u32(c.win_length));
  writer.set_u32("parakeet.hop_length", u32(c.hop_length));
  writer.set_f32("parakeet.preemphasis", c.preemphasis);

  writer.set_u32("parakeet.encoder.d_model", u32(c.d_model));
  writer.set_u32("parakeet.encoder.layers", u32(c.layers));
  writer.set_u32("parakeet.encoder.heads", u32(c.heads));
  writer.set_u32("parakeet.encoder.ffn_dim", u32(c.ffn_dim));
  writer.set_u32("parakeet.encoder.conv_kernel", u32(c.conv_kernel));
  writer.set_bool("parakeet.encoder.attention_bias", c.attention_bias);
  writer.set_bool("parakeet.encoder.conv_bias", c.conv_bias);
  writer.set_bool("parakeet.encoder.scale_input", c.scale_input);
  writer.set_f32("parakeet.encoder.layer_norm_eps", c.layer_norm_eps);
  writer.set_f32("parakeet.encoder.batch_norm_eps", c.batch_norm_eps);
  writer.set_u32("parakeet.subsampling.factor", u32(c.subsampling_factor));
  writer.set_u32("parakeet.subsampling.channels", u32(c.subsampling_channels));

  if (c.is_transducer()) {
    writer.set_u32("parakeet.predictor.hidden", u32(c.predictor_hidden));
    writer.set_u32("parakeet.predictor.layers", u32(c.predictor_layers));
    writer.set_u32("parakeet.joint.hidden", u32(c.joint_hidden));
    writer.set_u32("parakeet.max_symbols_per_step", u32(c.max_symbols_per_step));
  }
  if (c.head == Head::tdt) {
    writer.set_i32s("parakeet.tdt.durations",
                    std::vector<int32_t>(c.durations.begin(), c.durations.end()));
  }
}

}  // namespace hark::parakeet
