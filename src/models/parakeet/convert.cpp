#include "models/parakeet/convert.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "format/gguf.h"
#include "format/hf_checkpoint.h"
#include "format/quant.h"
#include "format/safetensors.h"
#include "models/parakeet/config.h"
#include "models/parakeet/layout.h"

namespace hark::parakeet {

namespace {

namespace fs = std::filesystem;
using hf::Json;
using hf::member;
using hf::read_json;
// The keys of one JSON object of a file. `prefix` names the object in messages
// ("encoder_config."). A missing key takes `fallback` when one is given, as transformers fills a
// config class's defaults; otherwise it is an error naming the key.
class Keys {
 public:
  Keys(const Json& object, fs::path file, std::string prefix = "")
      : object_(object), file_(std::move(file)), prefix_(std::move(prefix)) {}

  const Json* find(std::string_view key) const { return member(object_, key); }

  int64_t integer(std::string_view key, int64_t min, int64_t max,
                  std::optional<int64_t> fallback = std::nullopt) const {
    const Json* value = find(key);
    if (value == nullptr) {
      if (fallback) return *fallback;
      missing(key);
    }
    if (!value->is_number_integer()) {
      fail(file_.string(), ": '", prefix_, key, "' should be an integer, found ", value->dump());
    }
    const int64_t number = value->get<int64_t>();
    if (number < min || number > max) {
      fail(file_.string(), ": '", prefix_, key, "' is ", number, ", expected ", min, " to ", max);
    }
    return number;
  }

  // A positive size no larger than `max` (every Parakeet size fits GGUF's u32 comfortably).
  int size(std::string_view key, std::optional<int64_t> fallback = std::nullopt,
           int64_t max = 1 << 24) const {
    return static_cast<int>(integer(key, 1, max, fallback));
  }

  std::optional<bool> flag(std::string_view key) const {
    const Json* value = find(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_boolean()) {
      fail(file_.string(), ": '", prefix_, key, "' should be true or false, found ", value->dump());
    }
    return value->get<bool>();
  }

  double number(std::string_view key) const {
    const Json* value = find(key);
    if (value == nullptr) missing(key);
    if (!value->is_number()) {
      fail(file_.string(), ": '", prefix_, key, "' should be a number, found ", value->dump());
    }
    return value->get<double>();
  }

  // A string key that, when present, must be `expected`: settings hark implements one way only.
  void require_value(std::string_view key, const Json& expected, std::string_view why) const {
    const Json* value = find(key);
    if (value != nullptr && *value != expected) {
      fail(file_.string(), ": '", prefix_, key, "' is ", value->dump(), "; hark implements ",
           expected.dump(), " only (", why, ")");
    }
  }

  std::vector<int> integer_list(std::string_view key, int64_t min, int64_t max) const {
    const Json* value = find(key);
    if (value == nullptr) missing(key);
    if (!value->is_array() || value->empty()) {
      fail(file_.string(), ": '", prefix_, key, "' should be a non-empty list of integers, found ",
           value->dump());
    }
    std::vector<int> numbers;
    for (const Json& element : *value) {
      if (!element.is_number_integer() || element.get<int64_t>() < min ||
          element.get<int64_t>() > max) {
        fail(file_.string(), ": '", prefix_, key, "' holds ", element.dump(), ", expected ", min,
             " to ", max);
      }
      numbers.push_back(element.get<int>());
    }
    return numbers;
  }

  [[noreturn]] void missing(std::string_view key) const {
    fail(file_.string(), ": missing '", prefix_, key, "'");
  }

 private:
  const Json& object_;
  fs::path file_;
  std::string prefix_;
};

// ---------------------------------------------------------------------------------------------
// config.json

constexpr std::pair<std::string_view, Head> kModelTypes[] = {
    {"parakeet_ctc", Head::ctc}, {"parakeet_rnnt", Head::rnnt}, {"parakeet_tdt", Head::tdt}};
constexpr std::pair<std::string_view, Head> kArchitectures[] = {
    {"ParakeetForCTC", Head::ctc}, {"ParakeetForRNNT", Head::rnnt}, {"ParakeetForTDT", Head::tdt}};

template <size_t N>
std::optional<Head> lookup(const std::pair<std::string_view, Head> (&table)[N], const Json& name) {
  if (!name.is_string()) return std::nullopt;
  for (const auto& [known, head] : table) {
    if (known == name.get<std::string>()) return head;
  }
  return std::nullopt;
}

// The head from model_type and architectures; either may be missing, not both, and they must
// agree.
Head read_head(const Json& config, const fs::path& file) {
  std::optional<Head> by_type, by_architecture;
  if (const Json* model_type = member(config, "model_type")) {
    by_type = lookup(kModelTypes, *model_type);
    if (!by_type) {
      fail(file.string(), ": model_type is ", model_type->dump(),
           "; hark converts Parakeet models with a head: parakeet_ctc, parakeet_rnnt or "
           "parakeet_tdt (ParakeetForCTC, ParakeetForRNNT, ParakeetForTDT)");
    }
  }
  if (const Json* architectures = member(config, "architectures")) {
    if (!architectures->is_array()) fail(file.string(), ": 'architectures' should be a list");
    for (const Json& architecture : *architectures) {
      if ((by_architecture = lookup(kArchitectures, architecture))) break;
    }
    if (!by_architecture && !architectures->empty()) {
      fail(file.string(), ": architectures is ", architectures->dump(),
           "; hark converts ParakeetForCTC, ParakeetForRNNT and ParakeetForTDT checkpoints");
    }
  }
  if (by_type && by_architecture && *by_type != *by_architecture) {
    fail(file.string(), ": model_type says ", head_name(*by_type), " but architectures says ",
         head_name(*by_architecture));
  }
  if (!by_type && !by_architecture) {
    fail(file.string(), ": neither model_type nor architectures names a Parakeet model");
  }
  return by_type ? *by_type : *by_architecture;
}

struct ModelSettings {
  Config config;
  // Configs written before transformers had `convolution_bias` lack it; the checkpoint's tensors
  // then say whether the conv module has biases.
  std::optional<bool> conv_bias;
};

// The encoder's keys. A missing key takes transformers' ParakeetEncoderConfig default, as
// transformers does when it loads the file; shapes are checked against the tensors anyway.
void read_encoder(const Json& config, const fs::path& file, ModelSettings& settings) {
  const Json* object = member(config, "encoder_config");
  if (object == nullptr || !object->is_object()) {
    fail(file.string(), ": missing 'encoder_config' (the FastConformer encoder's settings)");
  }
  const Keys encoder(*object, file, "encoder_config.");
  encoder.require_value("hidden_act", "silu", "feed-forward and conv-module activation");
  encoder.require_value("subsampling_conv_kernel_size", 3, "subsampling kernel");
  encoder.require_value("subsampling_conv_stride", 2, "subsampling stride");
  encoder.require_value("attention_type", "rel_pos",
                        "full relative-position attention; local attention is not implemented");

  Config& c = settings.config;
  c.d_model = encoder.size("hidden_size", 1024, 1 << 16);
  c.layers = encoder.size("num_hidden_layers", 24, 1024);
  c.heads = encoder.size("num_attention_heads", 8, 1024);
  c.ffn_dim = encoder.size("intermediate_size", 4096);
  c.conv_kernel = encoder.size("conv_kernel_size", 9, 1023);
  c.subsampling_factor = encoder.size("subsampling_factor", 8, 64);
  c.subsampling_channels = encoder.size("subsampling_conv_channels", 256, 1 << 16);
  c.n_mels = encoder.size("num_mel_bins", 80, 4096);
  c.attention_bias = encoder.flag("attention_bias").value_or(true);
  c.scale_input = encoder.flag("scale_input").value_or(true);
  settings.conv_bias = encoder.flag("convolution_bias");

  if (c.d_model % c.heads != 0) {
    fail(file.string(), ": encoder_config.hidden_size ", c.d_model,
         " is not a multiple of num_attention_heads ", c.heads);
  }
  if (c.d_model % 2 != 0) {
    fail(file.string(), ": encoder_config.hidden_size ", c.d_model,
         " is odd; the relative positions are sin/cos pairs");
  }
  if (c.conv_kernel % 2 == 0) {
    fail(file.string(), ": encoder_config.conv_kernel_size ", c.conv_kernel,
         " is even; the conv module pads (k - 1) / 2 on each side");
  }
  if (c.subsampling_factor < 2 || (c.subsampling_factor & (c.subsampling_factor - 1)) != 0) {
    fail(file.string(), ": encoder_config.subsampling_factor ", c.subsampling_factor,
         " is not a power of two of at least 2");
  }
}

void read_transducer(const Keys& keys, const fs::path& file, Config& c) {
  c.blank_id = static_cast<int>(keys.integer("blank_token_id", 0, c.vocab_size - 1));
  c.predictor_hidden = keys.size("decoder_hidden_size", std::nullopt, 1 << 16);
  c.predictor_layers = keys.size("num_decoder_layers", std::nullopt, 1024);
  keys.require_value("hidden_act", "relu", "joint network activation");
  // transformers' main has no joint_hidden_size: its joint network is decoder_hidden_size wide.
  // One fork adds the key, which must then equal decoder_hidden_size.
  c.joint_hidden = c.predictor_hidden;
  if (keys.find("joint_hidden_size") != nullptr &&
      keys.size("joint_hidden_size") != c.predictor_hidden) {
    fail(file.string(), ": joint_hidden_size ", keys.size("joint_hidden_size"),
         " differs from decoder_hidden_size ", c.predictor_hidden);
  }
  if (c.head == Head::rnnt) {
    c.max_symbols_per_step = keys.size("max_symbols_per_step", std::nullopt, 1024);
    return;
  }
  // TDT decoding as transformers does it never looks at max_symbols_per_step (docs/parakeet.md
  // §5.3); it is kept for the record.
  c.max_symbols_per_step = keys.size("max_symbols_per_step", 10, 1024);
  c.durations = keys.integer_list("durations", 0, 1024);
  for (size_t i = 0; i < c.durations.size(); ++i) {
    if (c.durations[i] != static_cast<int>(i)) {
      log::warn(file.string(), ": durations ", keys.find("durations")->dump(),
                " are not [0, 1, 2, ...]; transformers (and hark) advance by the duration's index, "
                "NeMo by its value");
      break;
    }
  }
}

ModelSettings read_model_settings(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  if (!fs::exists(file)) {
    fail(dir.string(), ": no config.json (is this a Hugging Face model directory?)");
  }
  const Json config = read_json(file);
  if (!config.is_object()) fail(file.string(), ": expected a JSON object");

  ModelSettings settings;
  Config& c = settings.config;
  c.head = read_head(config, file);
  read_encoder(config, file, settings);

  const Keys keys(config, file);
  c.vocab_size = keys.size("vocab_size", std::nullopt, 1 << 22);
  if (c.head == Head::ctc) {
    // transformers' CTC decoding uses pad_token_id as the blank.
    c.blank_id = static_cast<int>(keys.integer("pad_token_id", 0, c.vocab_size - 1));
  } else {
    read_transducer(keys, file, c);
  }
  return settings;
}

// ---------------------------------------------------------------------------------------------
// The feature extractor's settings

// hark's front end (features/nemo_mel.h) implements ParakeetFeatureExtractor with these values
// (Config's defaults) and any number of mel bins; a checkpoint asking for others is refused
// rather than transcribed from the wrong features.
void read_front_end(const fs::path& dir, Config& config) {
  fs::path file = dir / "preprocessor_config.json";
  std::optional<Json> settings;
  if (fs::exists(file)) {
    settings = read_json(file);
  } else if (fs::exists(dir / "processor_config.json")) {
    // Newer transformers save the whole processor in one file.
    file = dir / "processor_config.json";
    const Json processor = read_json(file);
    if (const Json* extractor = member(processor, "feature_extractor")) settings = *extractor;
  }
  if (!settings) {
    log::warn(dir.string(), ": no preprocessor_config.json; using ParakeetFeatureExtractor's ",
              "settings (16000 Hz, n_fft 512, window 400, hop 160, pre-emphasis 0.97)");
    return;
  }
  const Keys keys(*settings, file);
  keys.require_value("feature_extractor_type", "ParakeetFeatureExtractor", "NeMo's mel features");
  const int feature_size = keys.size("feature_size", std::nullopt, 4096);
  if (feature_size != config.n_mels) {
    fail(file.string(), ": feature_size ", feature_size,
         " differs from config.json encoder_config.num_mel_bins ", config.n_mels);
  }
  const Config implemented;
  const std::pair<std::string_view, int> sizes[] = {{"sampling_rate", implemented.sample_rate},
                                                    {"n_fft", implemented.n_fft},
                                                    {"win_length", implemented.win_length},
                                                    {"hop_length", implemented.hop_length}};
  for (const auto& [key, expected] : sizes) {
    const int value = keys.size(key, std::nullopt, 1 << 20);
    if (value != expected) {
      fail(file.string(), ": ", key, " is ", value, "; hark's Parakeet front end implements ",
           expected);
    }
  }
  const double preemphasis = keys.number("preemphasis");
  if (static_cast<float>(preemphasis) != implemented.preemphasis) {
    fail(file.string(), ": preemphasis is ", preemphasis, "; hark's Parakeet front end implements ",
         implemented.preemphasis);
  }
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json

// Whether the decoder turns U+2581 into spaces, which is how hark joins pieces.
bool decodes_word_marks(const Json& decoder) {
  const std::string type = decoder.value("type", std::string());
  if (type == "Metaspace") return true;
  if (type == "Replace") {
    const Json* pattern = member(decoder, "pattern");
    return pattern != nullptr && pattern->value("String", std::string()) == "\u2581";
  }
  if (type == "Sequence") {
    const Json* steps = member(decoder, "decoders");
    if (steps == nullptr || !steps->is_array()) return false;
    for (const Json& step : *steps) {
      if (decodes_word_marks(step)) return true;
    }
  }
  return false;
}

// Every piece by id, from the tokenizer model's vocabulary and the added tokens (the SentencePiece
// control tokens and the <pad> or <blank> the HF converter appends). The ids must be exactly
// 0 .. vocab_size - 1. (unverified: NVIDIA's own tokenizer.json; see docs/parakeet.md §6.)
Vocabulary read_tokenizer(const fs::path& dir, int vocab_size) {
  const fs::path file = dir / "tokenizer.json";
  if (!fs::exists(file)) {
    fail(dir.string(), ": no tokenizer.json (Parakeet's vocabulary, as transformers saves it)");
  }
  const Json root = read_json(file);
  const Json* model = member(root, "model");
  if (model == nullptr || !model->is_object()) fail(file.string(), ": no 'model' object");

  std::map<int64_t, std::pair<std::string, int32_t>> by_id;
  auto assign = [&](const Json& id_value, const std::string& piece, int32_t type) {
    if (!id_value.is_number_integer()) {
      fail(file.string(), ": token '", piece, "' has id ", id_value.dump());
    }
    const int64_t id = id_value.get<int64_t>();
    if (id < 0 || id >= vocab_size) {
      fail(file.string(), ": token '", piece, "' has id ", id,
           ", outside config.json's vocab_size ", vocab_size);
    }
    const auto [entry, inserted] = by_id.try_emplace(id, piece, type);
    if (!inserted && entry->second.first != piece) {
      fail(file.string(), ": id ", id, " is both '", entry->second.first, "' and '", piece, "'");
    }
    entry->second.second = type;  // an added token's kind wins over the model's
  };

  const bool byte_fallback = model->value("byte_fallback", false);
  auto piece_type = [&](const std::string& piece) {
    return byte_fallback && is_byte_piece(piece) ? kTokenByte : kTokenNormal;
  };
  const std::string type = model->value("type", std::string());
  const Json* vocab = member(*model, "vocab");
  if (type == "BPE" && vocab != nullptr && vocab->is_object()) {
    for (const auto& [piece, id] : vocab->items()) assign(id, piece, piece_type(piece));
  } else if (type == "Unigram" && vocab != nullptr && vocab->is_array()) {
    // [[piece, score], ...] in id order.
    for (size_t id = 0; id < vocab->size(); ++id) {
      const Json& entry = (*vocab)[id];
      if (!entry.is_array() || entry.empty() || !entry[0].is_string()) {
        fail(file.string(), ": model.vocab entry ", id, " is not [piece, score]");
      }
      const std::string piece = entry[0].get<std::string>();
      assign(Json(id), piece, piece_type(piece));
    }
  } else {
    fail(file.string(), ": model.type is \"", type,
         "\"; hark reads BPE or Unigram tokenizers with a model.vocab");
  }
  if (const Json* added = member(root, "added_tokens")) {
    if (!added->is_array()) fail(file.string(), ": 'added_tokens' should be a list");
    for (const Json& token : *added) {
      const Json* id = member(token, "id");
      const Json* content = member(token, "content");
      if (id == nullptr || content == nullptr || !content->is_string()) {
        fail(file.string(), ": added token ", token.dump(), " lacks an id or content");
      }
      const bool special = token.value("special", false);
      assign(*id, content->get<std::string>(), special ? kTokenControl : kTokenUserDefined);
    }
  }

  Vocabulary result;
  for (const auto& [id, entry] : by_id) {
    if (id != static_cast<int64_t>(result.pieces.size())) break;
    result.pieces.push_back(entry.first);
    result.types.push_back(entry.second);
  }
  if (static_cast<int>(result.pieces.size()) != vocab_size) {
    fail(file.string(), ": no token has id ", result.pieces.size(), "; config.json's vocab_size ",
         vocab_size, " needs one piece for each id 0 to ", vocab_size - 1);
  }

  const Json* decoder = member(root, "decoder");
  if (decoder == nullptr || !decodes_word_marks(*decoder)) {
    log::warn(file.string(), ": the decoder is ",
              decoder ? decoder->value("type", std::string("?")) : std::string("missing"),
              ", not Metaspace; hark reads U+2581 in a piece as a space all the same");
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Tensors

// Buffers that save_pretrained may write and that hark derives or does not need.
bool is_unused_buffer(const std::string& name) {
  return name.ends_with(".num_batches_tracked") || name == "encoder.encode_positions.inv_freq";
}

}  // namespace

bool is_byte_piece(const std::string& piece) {
  return piece.size() == 6 && piece.starts_with("<0x") && piece.back() == '>' &&
         std::isxdigit(static_cast<unsigned char>(piece[3])) &&
         std::isxdigit(static_cast<unsigned char>(piece[4]));
}

void check_weight_type(DType type) {
  if (type != DType::F32 && type != DType::F16 && type != DType::BF16 && type != DType::Q8_0) {
    fail("hark convert: --type ", dtype_name(type), " is not supported (f32, f16, bf16, q8_0)");
  }
}

void write_header(gguf::Writer& writer, const Config& config, const std::string& name,
                  const Vocabulary& vocabulary, DType type) {
  if (static_cast<int>(vocabulary.pieces.size()) != config.vocab_size ||
      vocabulary.types.size() != vocabulary.pieces.size()) {
    fail("Parakeet GGUF: ", vocabulary.pieces.size(), " pieces for a vocabulary of ",
         config.vocab_size);
  }
  write_config(writer, config);
  writer.set_string("general.name", name);
  writer.set_u32("general.file_type", hf::gguf_file_type(type));
  writer.set_u32("general.alignment", 32);
  // SentencePiece-style pieces ("▁" starts a word); llama.cpp calls such vocabularies "llama".
  writer.set_string("tokenizer.ggml.model", "llama");
  writer.set_strings("tokenizer.ggml.tokens", vocabulary.pieces);
  writer.set_i32s("tokenizer.ggml.token_type", vocabulary.types);
}

void write_model(const Config& config, const std::string& name, const Vocabulary& vocabulary,
                 const std::vector<const safetensors::TensorView*>& sources,
                 std::shared_ptr<const void> owner, DType type, const std::string& out_path,
                 const ConvertProgress& progress) {
  const std::vector<TensorSpec> plan = tensor_layout(config);
  if (sources.size() != plan.size()) {
    fail("Parakeet GGUF: ", sources.size(), " tensors for a layout of ", plan.size());
  }
  gguf::Writer writer;
  write_header(writer, config, name, vocabulary, type);

  std::vector<hf::PlannedTensor> planned_tensors;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (sources[i]->shape != plan[i].checkpoint_shape) {
      fail("Parakeet GGUF: tensor ", plan[i].name, " has shape ", hf::shape_text(sources[i]->shape),
           ", expected ", hf::shape_text(plan[i].checkpoint_shape));
    }
    planned_tensors.push_back(
        {plan[i].name, plan[i].shape, stored_type(plan[i], type), sources[i]});
  }
  hf::write_gguf(writer, std::move(owner), std::move(planned_tensors), out_path, progress);
}

void convert_checkpoint(const std::string& hf_dir, const std::string& out_path, DType type,
                        const ConvertProgress& progress) {
  const fs::path dir(hf_dir);
  if (!fs::is_directory(dir)) fail(hf_dir, ": not a directory (expected a Hugging Face model)");
  check_weight_type(type);

  ModelSettings settings = read_model_settings(dir);
  Config& config = settings.config;
  read_front_end(dir, config);
  const Vocabulary vocabulary = read_tokenizer(dir, config.vocab_size);

  const auto checkpoint =
      std::make_shared<safetensors::Checkpoint>(safetensors::Checkpoint::open(hf_dir));
  config.conv_bias = settings.conv_bias.value_or(
      checkpoint->find("encoder.layers.0.conv.pointwise_conv1.bias") != nullptr);
  validate(config, hf_dir + "/config.json");
  const std::vector<TensorSpec> plan = tensor_layout(config);

  // Find every tensor and check its shape before writing anything.
  std::vector<const safetensors::TensorView*> sources;
  std::set<std::string, std::less<>> planned;
  for (const TensorSpec& tensor : plan) {
    const safetensors::TensorView* source =
        &hf::find_tensor(*checkpoint, hf_dir, {tensor.name}, tensor.checkpoint_shape);
    planned.insert(tensor.name);
    sources.push_back(source);
  }
  // A tensor the config does not account for means config and weights disagree (more layers, a
  // bias the config turned off), and the model would run without it: refuse.
  for (const std::string& name : checkpoint->names()) {
    if (planned.count(name) != 0 || is_unused_buffer(name)) continue;
    if (name.ends_with(".bias") &&
        planned.count(name.substr(0, name.size() - 5) + ".weight") != 0) {
      fail(hf_dir, ": the checkpoint has ", name, ", but config.json turns that bias off ",
           "(encoder_config.attention_bias ", config.attention_bias ? "true" : "false",
           ", convolution_bias ", config.conv_bias ? "true" : "false", ")");
    }
    fail(hf_dir, ": the checkpoint has tensor ", name, ", which a ", head_name(config.head),
         " model as config.json describes it does not have");
  }

  write_model(config, hf::directory_name(dir, "parakeet"), vocabulary, sources, checkpoint, type,
              out_path, progress);
}

}  // namespace hark::parakeet
