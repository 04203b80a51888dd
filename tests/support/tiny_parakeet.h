// A tiny Parakeet checkpoint in the layout transformers' save_pretrained writes
// (docs/parakeet.md §1-2, §6), for each head (ParakeetForCTC, ParakeetForRNNT, ParakeetForTDT),
// written by the tests themselves: config.json (encoder settings nested in encoder_config),
// generation_config.json for the transducers, preprocessor_config.json, tokenizer.json (a
// SentencePiece-style BPE with Metaspace decoding, special tokens first and the blank last, as
// the HF converter lays them out), tokenizer_config.json and safetensors weights, single-file or
// sharded. The tensor list is written down here from the spec, independently of the converter's
// layout, so that the tests compare the two.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "format/safetensors.h"
#include "models/parakeet/config.h"
#include "support/tiny_whisper.h"  // TempDir, write_json, encode_values

namespace hark::testing {

struct TinyParakeetSpec {
  parakeet::Head head = parakeet::Head::tdt;
  int n_mels = 80;
  int d_model = 32;
  int heads = 2;
  int ffn = 64;
  int layers = 2;
  int conv_kernel = 9;
  int subsampling_channels = 16;  // pointwise [16, 16]: rows are not whole Q8_0 blocks
  bool attention_bias = true;
  bool conv_bias = true;
  bool convolution_bias_key = true;  // false: config.json predates `convolution_bias`
  bool scale_input = true;
  int predictor_hidden = 24;  // not a multiple of 32 either
  int predictor_layers = 2;
  int max_symbols_per_step = 3;
  std::vector<int> durations = {0, 1, 2, 3, 4};
  safetensors::ElementType storage = safetensors::ElementType::F32;
  int shards = 1;  // > 1: model-0000i-of-0000n.safetensors + model.safetensors.index.json
  bool preprocessor_config = true;
};

inline std::string tiny_parakeet_model_type(parakeet::Head head) {
  return "parakeet_" + std::string(parakeet::head_name(head));
}

inline std::string tiny_parakeet_architecture(parakeet::Head head) {
  switch (head) {
    case parakeet::Head::ctc:
      return "ParakeetForCTC";
    case parakeet::Head::rnnt:
      return "ParakeetForRNNT";
    case parakeet::Head::tdt:
      return "ParakeetForTDT";
  }
  return "";
}

// The SentencePiece control tokens at the start of the vocabulary and the token the HF converter
// appends at id V - 1, per head (as tools/oracle/parakeet.py lays them out): CTC appends <pad>,
// which is its blank; RNN-T and TDT append <blank>; TDT keeps the model's own <pad> at id 2.
inline std::vector<std::string> tiny_parakeet_special_head(parakeet::Head head) {
  if (head == parakeet::Head::tdt) {
    return {"<unk>", "<|nospeech|>", "<pad>", "<|endoftext|>", "<|en|>", "<|de|>"};
  }
  return {"<unk>"};
}

inline std::string tiny_parakeet_blank_piece(parakeet::Head head) {
  return head == parakeet::Head::ctc ? "<pad>" : "<blank>";
}

// Word pieces and the merges that build them ("▁" = U+2581 marks a word start).
inline const std::vector<std::pair<std::string, std::string>>& tiny_parakeet_merges() {
  static const std::vector<std::pair<std::string, std::string>> merges = {
      {"\u2581", "t"},   {"h", "e"}, {"\u2581t", "he"}, {"\u2581", "a"}, {"n", "d"},
      {"\u2581a", "nd"}, {"i", "n"}, {"\u2581", "in"},  {"e", "r"},      {"o", "n"}};
  return merges;
}

// Every piece in id order: specials, "▁", the letters, the merged pieces, then the blank.
inline std::vector<std::string> tiny_parakeet_pieces(parakeet::Head head) {
  std::vector<std::string> pieces = tiny_parakeet_special_head(head);
  pieces.push_back("\u2581");
  for (char letter = 'a'; letter <= 'z'; ++letter) pieces.emplace_back(1, letter);
  for (const auto& [left, right] : tiny_parakeet_merges()) pieces.push_back(left + right);
  pieces.push_back(tiny_parakeet_blank_piece(head));
  return pieces;
}

inline int tiny_parakeet_vocab_size(parakeet::Head head) {
  return static_cast<int>(tiny_parakeet_pieces(head).size());
}

// config.json's pad_token_id: CTC's blank; TDT's <pad>; RNN-T 0 (no <pad> in this vocabulary).
inline int tiny_parakeet_pad_id(parakeet::Head head) {
  switch (head) {
    case parakeet::Head::ctc:
      return tiny_parakeet_vocab_size(head) - 1;
    case parakeet::Head::rnnt:
      return 0;
    case parakeet::Head::tdt:
      return 2;
  }
  return 0;
}

inline int tiny_parakeet_subsampled_mels(int n_mels) {
  for (int stage = 0; stage < 3; ++stage) n_mels = (n_mels - 1) / 2 + 1;
  return n_mels;
}

using TensorList = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Names and shapes of every tensor save_pretrained writes (docs/parakeet.md §2), in module order,
// but for the int64 num_batches_tracked counters (tiny_parakeet_counters).
inline TensorList tiny_parakeet_tensors(const TinyParakeetSpec& spec) {
  const int64_t d = spec.d_model, f = spec.ffn, c = spec.subsampling_channels;
  const int64_t v = tiny_parakeet_vocab_size(spec.head);
  TensorList tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    tensors.emplace_back(name, std::move(shape));
  };
  auto layer = [&](const std::string& name, std::vector<int64_t> shape, bool bias) {
    add(name + ".weight", shape);
    if (bias) add(name + ".bias", {shape.front()});
  };
  const std::string s = "encoder.subsampling.";
  layer(s + "layers.0", {c, 1, 3, 3}, true);
  layer(s + "layers.2", {c, 1, 3, 3}, true);
  layer(s + "layers.3", {c, c, 1, 1}, true);
  layer(s + "layers.5", {c, 1, 3, 3}, true);
  layer(s + "layers.6", {c, c, 1, 1}, true);
  layer(s + "linear", {d, c * tiny_parakeet_subsampled_mels(spec.n_mels)}, true);
  const bool b = spec.attention_bias, cb = spec.conv_bias;
  for (int i = 0; i < spec.layers; ++i) {
    const std::string p = "encoder.layers." + std::to_string(i) + ".";
    layer(p + "norm_feed_forward1", {d}, true);
    layer(p + "feed_forward1.linear1", {f, d}, b);
    layer(p + "feed_forward1.linear2", {d, f}, b);
    layer(p + "norm_self_att", {d}, true);
    for (const char* projection : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      layer(p + "self_attn." + projection, {d, d}, b);
    }
    layer(p + "self_attn.relative_k_proj", {d, d}, false);
    add(p + "self_attn.bias_u", {spec.heads, d / spec.heads});
    add(p + "self_attn.bias_v", {spec.heads, d / spec.heads});
    layer(p + "norm_conv", {d}, true);
    layer(p + "conv.pointwise_conv1", {2 * d, d, 1}, cb);
    layer(p + "conv.depthwise_conv", {d, 1, spec.conv_kernel}, cb);
    layer(p + "conv.norm", {d}, true);
    add(p + "conv.norm.running_mean", {d});
    add(p + "conv.norm.running_var", {d});
    layer(p + "conv.pointwise_conv2", {d, d, 1}, cb);
    layer(p + "norm_feed_forward2", {d}, true);
    layer(p + "feed_forward2.linear1", {f, d}, b);
    layer(p + "feed_forward2.linear2", {d, f}, b);
    layer(p + "norm_out", {d}, true);
  }
  if (spec.head == parakeet::Head::ctc) {
    layer("ctc_head", {v, d, 1}, true);
    return tensors;
  }
  const int64_t h = spec.predictor_hidden;
  layer("encoder_projector", {h, d}, true);
  add("decoder.embedding.weight", {v, h});
  for (int l = 0; l < spec.predictor_layers; ++l) {
    add("decoder.lstm.weight_ih_l" + std::to_string(l), {4 * h, h});
    add("decoder.lstm.weight_hh_l" + std::to_string(l), {4 * h, h});
    add("decoder.lstm.bias_ih_l" + std::to_string(l), {4 * h});
    add("decoder.lstm.bias_hh_l" + std::to_string(l), {4 * h});
  }
  layer("decoder.decoder_projector", {h, h}, true);
  const int64_t outputs =
      v + (spec.head == parakeet::Head::tdt ? static_cast<int64_t>(spec.durations.size()) : 0);
  layer("joint.head", {outputs, h}, true);
  return tensors;
}

// BatchNorm's int64 step counters, which save_pretrained writes and nothing reads.
inline std::vector<std::string> tiny_parakeet_counters(const TinyParakeetSpec& spec) {
  std::vector<std::string> names;
  for (int i = 0; i < spec.layers; ++i) {
    names.push_back("encoder.layers." + std::to_string(i) + ".conv.norm.num_batches_tracked");
  }
  return names;
}

// Deterministic pseudo-random values in ranges that keep a forward pass sane: norm scales near 1,
// small biases, positive variances, matrices scaled by their fan-in.
inline std::vector<float> tiny_parakeet_values(const std::string& name,
                                               const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  uint64_t state = std::hash<std::string>{}(name) | 1;
  auto uniform = [&state] { return splitmix_uniform(state); };
  const bool is_norm = name.find("norm") != std::string::npos;
  const float fan_in = static_cast<float>(count / shape.front());
  std::vector<float> values(count);
  for (float& value : values) {
    if (name.ends_with("running_var")) {
      value = 0.75f + 0.5f * uniform();
    } else if (is_norm && name.ends_with(".weight")) {
      value = 1.0f + 0.1f * uniform();
    } else if (shape.size() == 1 || name.ends_with("bias_u") || name.ends_with("bias_v")) {
      value = 0.05f * uniform();
    } else if (name.find("embedding") != std::string::npos) {
      value = 0.5f * uniform();
    } else {
      value = std::sqrt(3.0f / fan_in) * uniform();
    }
  }
  return values;
}

inline nlohmann::json tiny_parakeet_config_json(const TinyParakeetSpec& spec) {
  using parakeet::Head;
  nlohmann::json encoder = {{"model_type", "parakeet_encoder"},
                            {"hidden_size", spec.d_model},
                            {"num_hidden_layers", spec.layers},
                            {"num_attention_heads", spec.heads},
                            {"intermediate_size", spec.ffn},
                            {"hidden_act", "silu"},
                            {"attention_bias", spec.attention_bias},
                            {"conv_kernel_size", spec.conv_kernel},
                            {"subsampling_factor", 8},
                            {"subsampling_conv_channels", spec.subsampling_channels},
                            {"num_mel_bins", spec.n_mels},
                            {"subsampling_conv_kernel_size", 3},
                            {"subsampling_conv_stride", 2},
                            {"dropout", 0.1},
                            {"dropout_positions", 0.0},
                            {"layerdrop", 0.1},
                            {"activation_dropout", 0.1},
                            {"attention_dropout", 0.1},
                            {"max_position_embeddings", 5000},
                            {"scale_input", spec.scale_input},
                            {"initializer_range", 0.02}};
  if (spec.convolution_bias_key) encoder["convolution_bias"] = spec.conv_bias;
  const int vocab = tiny_parakeet_vocab_size(spec.head);
  nlohmann::json config = {{"architectures", {tiny_parakeet_architecture(spec.head)}},
                           {"model_type", tiny_parakeet_model_type(spec.head)},
                           {"encoder_config", encoder},
                           {"vocab_size", vocab},
                           {"pad_token_id", tiny_parakeet_pad_id(spec.head)},
                           {"initializer_range", 0.02},
                           {"dtype", "float32"},
                           {"transformers_version", "5.0.0"}};
  if (spec.head == Head::ctc) {
    config["ctc_loss_reduction"] = "mean";
    config["ctc_zero_infinity"] = true;
    return config;
  }
  config["blank_token_id"] = vocab - 1;
  config["decoder_hidden_size"] = spec.predictor_hidden;
  config["num_decoder_layers"] = spec.predictor_layers;
  config["hidden_act"] = "relu";
  config["max_symbols_per_step"] = spec.max_symbols_per_step;
  config["is_encoder_decoder"] = true;
  if (spec.head == Head::tdt) config["durations"] = spec.durations;
  return config;
}

inline void write_tiny_parakeet_tokenizer(const std::filesystem::path& dir, parakeet::Head head) {
  const std::vector<std::string> pieces = tiny_parakeet_pieces(head);
  const size_t specials = tiny_parakeet_special_head(head).size();
  // The tokenizer model holds the SentencePiece pieces (specials included); the blank exists only
  // as an added token, as the HF converter appends it.
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t id = 0; id + 1 < pieces.size(); ++id) vocab[pieces[id]] = id;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [left, right] : tiny_parakeet_merges()) merges.push_back({left, right});
  nlohmann::json added = nlohmann::json::array();
  auto add_special = [&](size_t id) {
    added.push_back({{"id", id},
                     {"content", pieces[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  };
  for (size_t id = 0; id < specials; ++id) add_special(id);
  add_special(pieces.size() - 1);
  const nlohmann::json metaspace = {{"type", "Metaspace"},
                                    {"replacement", "\u2581"},
                                    {"prepend_scheme", "always"},
                                    {"split", true}};
  write_json(dir / "tokenizer.json", {{"version", "1.0"},
                                      {"truncation", nullptr},
                                      {"padding", nullptr},
                                      {"added_tokens", added},
                                      {"normalizer", nullptr},
                                      {"pre_tokenizer", metaspace},
                                      {"post_processor", nullptr},
                                      {"decoder", metaspace},
                                      {"model",
                                       {{"type", "BPE"},
                                        {"dropout", nullptr},
                                        {"unk_token", "<unk>"},
                                        {"continuing_subword_prefix", nullptr},
                                        {"end_of_word_suffix", nullptr},
                                        {"fuse_unk", true},
                                        {"byte_fallback", false},
                                        {"ignore_merges", false},
                                        {"vocab", vocab},
                                        {"merges", merges}}}});
  const std::string pad =
      head == parakeet::Head::tdt ? std::string("<pad>") : tiny_parakeet_blank_piece(head);
  write_json(dir / "tokenizer_config.json", {{"tokenizer_class", "ParakeetTokenizer"},
                                             {"unk_token", "<unk>"},
                                             {"pad_token", pad},
                                             {"clean_up_tokenization_spaces", false},
                                             {"processor_class", "ParakeetProcessor"}});
}

inline void write_tiny_parakeet(const std::filesystem::path& dir,
                                const TinyParakeetSpec& spec = {}) {
  std::filesystem::create_directories(dir);
  write_json(dir / "config.json", tiny_parakeet_config_json(spec));
  const int vocab = tiny_parakeet_vocab_size(spec.head);
  if (spec.head != parakeet::Head::ctc) {
    nlohmann::json generation = {{"decoder_start_token_id", vocab - 1},
                                 {"pad_token_id", tiny_parakeet_pad_id(spec.head)},
                                 {"transformers_version", "5.0.0"}};
    if (spec.head == parakeet::Head::tdt) {
      std::vector<int> suppress;
      for (size_t i = 0; i < spec.durations.size(); ++i) suppress.push_back(vocab + int(i));
      generation["suppress_tokens"] = suppress;
    }
    write_json(dir / "generation_config.json", generation);
  }
  if (spec.preprocessor_config) {
    write_json(dir / "preprocessor_config.json",
               {{"feature_extractor_type", "ParakeetFeatureExtractor"},
                {"feature_size", spec.n_mels},
                {"sampling_rate", 16000},
                {"hop_length", 160},
                {"win_length", 400},
                {"n_fft", 512},
                {"preemphasis", 0.97},
                {"padding_value", 0.0},
                {"padding_side", "right"},
                {"return_attention_mask", true},
                {"processor_class", "ParakeetProcessor"}});
  }
  write_tiny_parakeet_tokenizer(dir, spec.head);

  const TensorList tensors = tiny_parakeet_tensors(spec);
  std::vector<safetensors::Writer> shards(std::max(spec.shards, 1));
  nlohmann::json weight_map = nlohmann::json::object();
  auto shard_name = [&](size_t shard) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", shard + 1, shards.size());
    return std::string(name);
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, shape] = tensors[i];
    const size_t shard = i % shards.size();
    shards[shard].add(name, spec.storage, shape,
                      encode_values(tiny_parakeet_values(name, shape), spec.storage));
    weight_map[name] = shard_name(shard);
  }
  for (const std::string& name : tiny_parakeet_counters(spec)) {
    const int64_t steps = 1000;
    std::vector<uint8_t> bytes(8);
    std::memcpy(bytes.data(), &steps, 8);
    shards.back().add(name, safetensors::ElementType::I64, {}, std::move(bytes));
    weight_map[name] = shard_name(shards.size() - 1);
  }
  if (shards.size() == 1) {
    shards[0].set_metadata("format", "pt");
    shards[0].write((dir / "model.safetensors").string());
    return;
  }
  for (size_t shard = 0; shard < shards.size(); ++shard) {
    shards[shard].set_metadata("format", "pt");
    shards[shard].write((dir / shard_name(shard)).string());
  }
  write_json(dir / "model.safetensors.index.json",
             {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}});
}

}  // namespace hark::testing
