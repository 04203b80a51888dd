// A tiny Whisper checkpoint in Hugging Face's layout, written by the tests themselves: config.json,
// generation_config.json, preprocessor_config.json, tokenizer.json (256 byte tokens, no merges,
// then Whisper's special tokens for 99 languages and 1501 timestamps) and safetensors weights,
// single-file or sharded. Small enough to convert and run in milliseconds, real enough that the
// converter, the model loader and `hark run` treat it like any English-only Whisper.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "format/quant.h"
#include "format/safetensors.h"
#include "models/whisper/tokens.h"

namespace hark::testing {

// A directory under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("hark-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

struct TinyWhisperSpec {
  int n_mels = 80;
  int d_model = 32;
  int heads = 2;
  int encoder_ffn = 64;
  int decoder_ffn = 48;  // not a multiple of 32: fc2 of the decoder cannot be Q8_0
  int encoder_layers = 1;
  int decoder_layers = 1;
  int max_source_positions = 1500;
  int max_target_positions = 64;
  safetensors::ElementType storage = safetensors::ElementType::F32;
  int shards = 1;  // > 1: model-0000i-of-0000n.safetensors + model.safetensors.index.json
  bool generation_config = true;
  bool multilingual = true;  // generation_config's is_multilingual
  bool preprocessor_config = true;
};

constexpr int kTinyLanguages = 99;
// 256 byte tokens + <|endoftext|> + <|startoftranscript|> + 99 languages + 6 task/control tokens
// + 1501 timestamps.
constexpr int kTinyVocabSize = 256 + 2 + kTinyLanguages + 6 + 1501;
constexpr int kTinyEot = 256;
constexpr int kTinySot = 257;

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream stream(path, std::ios::binary);
  stream << text;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

inline void write_json(const std::filesystem::path& path, const nlohmann::json& json) {
  write_text(path, json.dump(2));
}

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others for U+0100 + n.
inline std::string byte_level_token(int byte) {
  const bool printable =
      (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
  int code_point = byte;
  if (!printable) {
    int n = 0;
    for (int b = 0; b < byte; ++b) {
      if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) ++n;
    }
    code_point = 256 + n;
  }
  std::string utf8;
  if (code_point < 0x80) {
    utf8 += static_cast<char>(code_point);
  } else {
    utf8 += static_cast<char>(0xC0 | (code_point >> 6));
    utf8 += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return utf8;
}

// HF names ("model.encoder.conv1.weight") and shapes of every tensor save_pretrained writes.
inline std::vector<std::pair<std::string, std::vector<int64_t>>> tiny_whisper_tensors(
    const TinyWhisperSpec& spec) {
  const int64_t d = spec.d_model;
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    tensors.emplace_back("model." + name, std::move(shape));
  };
  auto attention = [&](const std::string& prefix) {
    for (const std::string projection : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(prefix + "." + projection + ".weight", {d, d});
      if (projection != "k_proj") add(prefix + "." + projection + ".bias", {d});
    }
  };
  auto norm = [&](const std::string& prefix) {
    add(prefix + ".weight", {d});
    add(prefix + ".bias", {d});
  };
  auto layer_tail = [&](const std::string& prefix, int64_t ffn) {
    add(prefix + ".fc1.weight", {ffn, d});
    add(prefix + ".fc1.bias", {ffn});
    add(prefix + ".fc2.weight", {d, ffn});
    add(prefix + ".fc2.bias", {d});
    norm(prefix + ".final_layer_norm");
  };
  add("encoder.conv1.weight", {d, spec.n_mels, 3});
  add("encoder.conv1.bias", {d});
  add("encoder.conv2.weight", {d, d, 3});
  add("encoder.conv2.bias", {d});
  add("encoder.embed_positions.weight", {spec.max_source_positions, d});
  for (int layer = 0; layer < spec.encoder_layers; ++layer) {
    const std::string prefix = "encoder.layers." + std::to_string(layer);
    attention(prefix + ".self_attn");
    norm(prefix + ".self_attn_layer_norm");
    layer_tail(prefix, spec.encoder_ffn);
  }
  norm("encoder.layer_norm");
  add("decoder.embed_tokens.weight", {kTinyVocabSize, d});
  add("decoder.embed_positions.weight", {spec.max_target_positions, d});
  for (int layer = 0; layer < spec.decoder_layers; ++layer) {
    const std::string prefix = "decoder.layers." + std::to_string(layer);
    attention(prefix + ".self_attn");
    norm(prefix + ".self_attn_layer_norm");
    attention(prefix + ".encoder_attn");
    norm(prefix + ".encoder_attn_layer_norm");
    layer_tail(prefix, spec.decoder_ffn);
  }
  norm("decoder.layer_norm");
  return tensors;
}

// splitmix64: the next value of `state`, as a float in [-1, 1).
inline float splitmix_uniform(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) / 4503599627370496.0 - 1.0);
}

// Deterministic pseudo-random weights, scaled so that activations stay in a sane range.
inline std::vector<float> tiny_weight_values(const std::string& name,
                                             const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  uint64_t state = std::hash<std::string>{}(name) | 1;
  auto uniform = [&state] { return splitmix_uniform(state); };
  const bool is_norm = name.find("layer_norm") != std::string::npos;
  const bool is_bias = name.ends_with(".bias");
  const float fan_in = static_cast<float>(count / shape.front());
  std::vector<float> values(count);
  for (float& value : values) {
    if (is_norm && !is_bias) {
      value = 1.0f + 0.1f * uniform();
    } else if (is_bias || is_norm) {
      value = 0.05f * uniform();
    } else if (shape.size() == 1 || name.find("embed") != std::string::npos) {
      value = 0.5f * uniform();
    } else {
      value = std::sqrt(3.0f / fan_in) * uniform();
    }
  }
  return values;
}

inline std::vector<uint8_t> encode_values(const std::vector<float>& values,
                                          safetensors::ElementType type) {
  switch (type) {
    case safetensors::ElementType::F16:
      return quant::from_f32(DType::F16, values.data(), values.size());
    case safetensors::ElementType::BF16:
      return quant::from_f32(DType::BF16, values.data(), values.size());
    default: {
      std::vector<uint8_t> bytes(values.size() * 4);
      std::memcpy(bytes.data(), values.data(), bytes.size());
      return bytes;
    }
  }
}

inline void write_tiny_tokenizer(const std::filesystem::path& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) vocab[byte_level_token(byte)] = byte;
  nlohmann::json added = nlohmann::json::array();
  int id = 256;
  for (const std::string& token : whisper::special_tokens(kTinyLanguages)) {
    vocab[token] = id;
    added.push_back({{"id", id},
                     {"content", token},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
    ++id;
  }
  write_json(dir / "tokenizer.json", {{"version", "1.0"},
                                      {"truncation", nullptr},
                                      {"padding", nullptr},
                                      {"added_tokens", added},
                                      {"normalizer", nullptr},
                                      {"pre_tokenizer",
                                       {{"type", "ByteLevel"},
                                        {"add_prefix_space", false},
                                        {"trim_offsets", true},
                                        {"use_regex", true}}},
                                      {"post_processor", nullptr},
                                      {"decoder", {{"type", "ByteLevel"}}},
                                      {"model",
                                       {{"type", "BPE"},
                                        {"dropout", nullptr},
                                        {"unk_token", nullptr},
                                        {"continuing_subword_prefix", ""},
                                        {"end_of_word_suffix", ""},
                                        {"fuse_unk", false},
                                        {"byte_fallback", false},
                                        {"vocab", vocab},
                                        {"merges", nlohmann::json::array()}}}});
}

inline nlohmann::json tiny_config_json(const TinyWhisperSpec& spec) {
  return {{"architectures", {"WhisperForConditionalGeneration"}},
          {"model_type", "whisper"},
          {"activation_function", "gelu"},
          {"vocab_size", kTinyVocabSize},
          {"num_mel_bins", spec.n_mels},
          {"d_model", spec.d_model},
          {"encoder_layers", spec.encoder_layers},
          {"encoder_attention_heads", spec.heads},
          {"encoder_ffn_dim", spec.encoder_ffn},
          {"decoder_layers", spec.decoder_layers},
          {"decoder_attention_heads", spec.heads},
          {"decoder_ffn_dim", spec.decoder_ffn},
          {"max_source_positions", spec.max_source_positions},
          {"max_target_positions", spec.max_target_positions},
          {"decoder_start_token_id", kTinySot},
          {"bos_token_id", kTinyEot},
          {"eos_token_id", kTinyEot},
          {"pad_token_id", kTinyEot},
          {"scale_embedding", false},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"}};
}

inline void write_tiny_whisper(const std::filesystem::path& dir, const TinyWhisperSpec& spec = {}) {
  std::filesystem::create_directories(dir);
  write_json(dir / "config.json", tiny_config_json(spec));
  if (spec.generation_config) {
    write_json(dir / "generation_config.json",
               {{"decoder_start_token_id", kTinySot},
                {"eos_token_id", kTinyEot},
                {"pad_token_id", kTinyEot},
                {"is_multilingual", spec.multilingual},
                {"max_initial_timestamp_index", 50},
                {"no_timestamps_token_id", 256 + 2 + kTinyLanguages + 5},
                {"suppress_tokens", {1, 2, 7, kTinySot}},
                {"begin_suppress_tokens", {220, kTinyEot}},
                {"max_length", spec.max_target_positions}});
  }
  if (spec.preprocessor_config) {
    write_json(dir / "preprocessor_config.json",
               {{"feature_extractor_type", "WhisperFeatureExtractor"},
                {"feature_size", spec.n_mels},
                {"sampling_rate", 16000},
                {"hop_length", 160},
                {"chunk_length", spec.max_source_positions * 2 * 160 / 16000},
                {"n_fft", 400},
                {"n_samples", spec.max_source_positions * 2 * 160},
                {"nb_max_frames", spec.max_source_positions * 2},
                {"padding_side", "right"},
                {"padding_value", 0.0},
                {"return_attention_mask", false}});
  }
  write_tiny_tokenizer(dir);

  const auto tensors = tiny_whisper_tensors(spec);
  std::vector<safetensors::Writer> shards(std::max(spec.shards, 1));
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, shape] = tensors[i];
    const size_t shard = i % shards.size();
    shards[shard].add(name, spec.storage, shape,
                      encode_values(tiny_weight_values(name, shape), spec.storage));
    char shard_name[64];
    std::snprintf(shard_name, sizeof shard_name, "model-%05zu-of-%05zu.safetensors", shard + 1,
                  shards.size());
    weight_map[name] = shard_name;
  }
  if (shards.size() == 1) {
    shards[0].set_metadata("format", "pt");
    shards[0].write((dir / "model.safetensors").string());
    return;
  }
  for (size_t shard = 0; shard < shards.size(); ++shard) {
    char shard_name[64];
    std::snprintf(shard_name, sizeof shard_name, "model-%05zu-of-%05zu.safetensors", shard + 1,
                  shards.size());
    shards[shard].write((dir / shard_name).string());
  }
  write_json(dir / "model.safetensors.index.json",
             {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}});
}

}  // namespace hark::testing
