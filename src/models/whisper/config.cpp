#include "models/whisper/config.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "base/error.h"
#include "format/gguf.h"

namespace hark::whisper {

namespace {

// Bounds far above any real Whisper (large-v3: d 1280, 32 layers, vocab 51866) that keep a
// corrupt file from asking for absurd buffers.
constexpr int64_t kMaxWidth = 1 << 16;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxPositions = 1 << 20;

int read_size(const gguf::File& file, const std::string& key, int64_t max) {
  if (!file.has(key)) fail(file.path(), ": key '", key, "' is missing");
  const int64_t value = file.get_int(key);
  if (value < 1 || value > max) {
    fail(file.path(), ": key '", key, "' is ", value, ", expected 1 to ", max);
  }
  return static_cast<int>(value);
}

int32_t read_token(const gguf::File& file, const std::string& key, int vocab_size) {
  if (!file.has(key)) fail(file.path(), ": key '", key, "' is missing");
  const int64_t id = file.get_int(key);
  if (id < 0 || id >= vocab_size) {
    fail(file.path(), ": key '", key, "' is token ", id, ", outside the vocabulary of ",
         vocab_size);
  }
  return static_cast<int32_t>(id);
}

std::vector<int32_t> read_token_list(const gguf::File& file, const std::string& key,
                                     int vocab_size) {
  std::vector<int32_t> ids;
  if (!file.has(key)) return ids;
  for (int64_t id : file.get_ints(key)) {
    if (id < 0 || id >= vocab_size) {
      fail(file.path(), ": key '", key, "' holds token ", id, ", outside the vocabulary of ",
           vocab_size);
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

Config read_config(const gguf::File& file) {
  const std::string architecture = file.get_string_or("general.architecture", "");
  if (architecture != "whisper") {
    fail(file.path(), ": general.architecture is '", architecture, "', expected 'whisper'");
  }
  Config config;
  config.vocab_size = read_size(file, "whisper.vocab_size", kMaxVocab);
  config.n_mels = read_size(file, "whisper.n_mels", 4096);
  config.d_model = read_size(file, "whisper.d_model", kMaxWidth);
  config.encoder_layers = read_size(file, "whisper.encoder.layers", kMaxLayers);
  config.encoder_heads = read_size(file, "whisper.encoder.heads", kMaxWidth);
  config.encoder_ffn = read_size(file, "whisper.encoder.ffn_dim", 16 * kMaxWidth);
  config.decoder_layers = read_size(file, "whisper.decoder.layers", kMaxLayers);
  config.decoder_heads = read_size(file, "whisper.decoder.heads", kMaxWidth);
  config.decoder_ffn = read_size(file, "whisper.decoder.ffn_dim", 16 * kMaxWidth);
  config.max_source_positions = read_size(file, "whisper.max_source_positions", kMaxPositions);
  config.max_target_positions = read_size(file, "whisper.max_target_positions", kMaxPositions);
  if (config.d_model % config.encoder_heads != 0) {
    fail(file.path(), ": whisper.d_model ", config.d_model, " is not divisible by ",
         "whisper.encoder.heads ", config.encoder_heads);
  }
  if (config.d_model % config.decoder_heads != 0) {
    fail(file.path(), ": whisper.d_model ", config.d_model, " is not divisible by ",
         "whisper.decoder.heads ", config.decoder_heads);
  }
  return config;
}

Vocabulary read_vocabulary(const gguf::File& file, const Config& config) {
  const int vocab = config.vocab_size;
  Vocabulary v;
  v.eot = read_token(file, "whisper.token.eot", vocab);
  v.sot = read_token(file, "whisper.token.sot", vocab);
  v.translate = read_token(file, "whisper.token.translate", vocab);
  v.transcribe = read_token(file, "whisper.token.transcribe", vocab);
  v.sot_lm = read_token(file, "whisper.token.sot_lm", vocab);
  v.sot_prev = read_token(file, "whisper.token.sot_prev", vocab);
  v.no_speech = read_token(file, "whisper.token.no_speech", vocab);
  v.no_timestamps = read_token(file, "whisper.token.no_timestamps", vocab);
  v.timestamp_begin = read_token(file, "whisper.token.timestamp_begin", vocab);
  if (file.has("whisper.languages")) v.languages = file.get_strings("whisper.languages");
  if (!v.languages.empty()) {
    v.first_language = v.sot + 1;
    if (v.first_language + static_cast<int64_t>(v.languages.size()) > vocab) {
      fail(file.path(), ": whisper.languages lists ", v.languages.size(), " languages after token ",
           v.sot, ", beyond the vocabulary of ", vocab);
    }
  }
  v.multilingual =
      file.has("whisper.multilingual") ? file.get_bool("whisper.multilingual") : vocab >= 51865;
  if (v.multilingual && v.languages.empty()) {
    fail(file.path(), ": whisper.multilingual is set but whisper.languages is missing or empty");
  }
  v.suppress_tokens = read_token_list(file, "whisper.suppress_tokens", vocab);
  v.begin_suppress_tokens = read_token_list(file, "whisper.begin_suppress_tokens", vocab);
  const int64_t max_initial = file.get_int_or("whisper.max_initial_timestamp_index", 50);
  if (max_initial < 0 || max_initial > vocab) {
    fail(file.path(), ": whisper.max_initial_timestamp_index is ", max_initial);
  }
  v.max_initial_timestamp_index = static_cast<int>(max_initial);
  return v;
}

void write_config(gguf::Writer& writer, const Config& config) {
  const auto u32 = [](int value) { return static_cast<uint32_t>(value); };
  writer.set_u32("whisper.vocab_size", u32(config.vocab_size));
  writer.set_u32("whisper.n_mels", u32(config.n_mels));
  writer.set_u32("whisper.d_model", u32(config.d_model));
  writer.set_u32("whisper.encoder.layers", u32(config.encoder_layers));
  writer.set_u32("whisper.encoder.heads", u32(config.encoder_heads));
  writer.set_u32("whisper.encoder.ffn_dim", u32(config.encoder_ffn));
  writer.set_u32("whisper.decoder.layers", u32(config.decoder_layers));
  writer.set_u32("whisper.decoder.heads", u32(config.decoder_heads));
  writer.set_u32("whisper.decoder.ffn_dim", u32(config.decoder_ffn));
  writer.set_u32("whisper.max_source_positions", u32(config.max_source_positions));
  writer.set_u32("whisper.max_target_positions", u32(config.max_target_positions));
}

void write_vocabulary(gguf::Writer& writer, const Vocabulary& v) {
  writer.set_i32("whisper.token.eot", v.eot);
  writer.set_i32("whisper.token.sot", v.sot);
  writer.set_i32("whisper.token.translate", v.translate);
  writer.set_i32("whisper.token.transcribe", v.transcribe);
  writer.set_i32("whisper.token.sot_lm", v.sot_lm);
  writer.set_i32("whisper.token.sot_prev", v.sot_prev);
  writer.set_i32("whisper.token.no_speech", v.no_speech);
  writer.set_i32("whisper.token.no_timestamps", v.no_timestamps);
  writer.set_i32("whisper.token.timestamp_begin", v.timestamp_begin);
  writer.set_strings("whisper.languages", v.languages);
  writer.set_bool("whisper.multilingual", v.multilingual);
  writer.set_i32s("whisper.suppress_tokens", v.suppress_tokens);
  writer.set_i32s("whisper.begin_suppress_tokens", v.begin_suppress_tokens);
  writer.set_u32("whisper.max_initial_timestamp_index",
                 static_cast<uint32_t>(v.max_initial_timestamp_index));
}

int32_t Vocabulary::language_token(const std::string& code) const {
  const std::string wanted = lowercase(code);
  auto found = std::find(languages.begin(), languages.end(), wanted);
  if (found == languages.end() || first_language < 0) {
    std::string known;
    for (const std::string& language : languages) known += (known.empty() ? "" : " ") + language;
    fail("unknown language '", code, "'",
         known.empty() ? std::string(" (this model has no language tokens)")
                       : " (this model knows: " + known + ")");
  }
  return first_language + static_cast<int32_t>(found - languages.begin());
}

}  // namespace hark::whisper
