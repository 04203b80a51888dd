#include "models/whisper/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "format/gguf.h"
#include "format/hf_checkpoint.h"
#include "format/quant.h"
#include "format/safetensors.h"
#include "models/whisper/config.h"
#include "models/whisper/layout.h"
#include "models/whisper/tokens.h"
#include "text/bpe.h"

namespace hark::whisper {

namespace {

namespace fs = std::filesystem;
using hf::Json;
using hf::member;
using hf::read_json;
using hf::read_json_if_present;
int64_t integer(const Json& value, const fs::path& file, std::string_view key) {
  if (!value.is_number_integer()) {
    fail(file.string(), ": '", key, "' should be an integer, found ", value.dump());
  }
  return value.get<int64_t>();
}

// A positive integer no larger than `max` (all of Whisper's sizes fit GGUF's u32 comfortably).
int64_t require_size(const Json& object, std::string_view key, const fs::path& file,
                     int64_t max = 1 << 24) {
  const Json* value = member(object, key);
  if (value == nullptr) fail(file.string(), ": missing '", key, "'");
  const int64_t number = integer(*value, file, key);
  if (number < 1 || number > max) {
    fail(file.string(), ": '", key, "' is ", number, ", expected 1 to ", max);
  }
  return number;
}

std::vector<int32_t> integer_list(const Json& value, const fs::path& file, std::string_view key) {
  if (!value.is_array()) fail(file.string(), ": '", key, "' should be a list of token ids");
  std::vector<int32_t> ids;
  for (const Json& element : value) {
    const int64_t id = integer(element, file, key);
    if (id < 0 || id > INT32_MAX) fail(file.string(), ": '", key, "' holds token id ", id);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// ---------------------------------------------------------------------------------------------
// config.json

struct Architecture {
  int64_t vocab_size, n_mels, d_model;
  int64_t encoder_layers, encoder_heads, encoder_ffn;
  int64_t decoder_layers, decoder_heads, decoder_ffn;
  int64_t max_source_positions, max_target_positions;
  std::optional<int64_t> decoder_start_token_id, eos_token_id;
  bool tied_output = true;
};

Architecture read_architecture(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  if (!fs::exists(file)) {
    fail(dir.string(), ": no config.json (is this a Hugging Face model directory?)");
  }
  const Json config = read_json(file);
  if (!config.is_object()) fail(file.string(), ": expected a JSON object");

  const Json* model_type = member(config, "model_type");
  if (model_type == nullptr || !model_type->is_string() || *model_type != "whisper") {
    fail(file.string(), ": model_type is ", model_type ? model_type->dump() : "missing",
         ", not \"whisper\"; hark convert reads Whisper checkpoints "
         "(WhisperForConditionalGeneration)");
  }
  if (const Json* architectures = member(config, "architectures")) {
    const bool listed =
        architectures->is_array() &&
        std::any_of(architectures->begin(), architectures->end(),
                    [](const Json& a) { return a == "WhisperForConditionalGeneration"; });
    if (!listed) {
      fail(file.string(), ": architectures is ", architectures->dump(),
           "; hark convert reads WhisperForConditionalGeneration checkpoints");
    }
  }
  // Variants hark's Whisper does not implement would convert "fine" and then transcribe wrongly.
  if (const Json* activation = member(config, "activation_function");
      activation != nullptr && *activation != "gelu") {
    fail(file.string(), ": activation_function ", activation->dump(), " is not supported (gelu)");
  }
  if (const Json* scale = member(config, "scale_embedding"); scale != nullptr && *scale != false) {
    fail(file.string(), ": scale_embedding = true is not supported");
  }

  Architecture arch{};
  arch.vocab_size = require_size(config, "vocab_size", file);
  arch.n_mels = require_size(config, "num_mel_bins", file);
  arch.d_model = require_size(config, "d_model", file);
  arch.encoder_layers = require_size(config, "encoder_layers", file, 1024);
  arch.encoder_heads = require_size(config, "encoder_attention_heads", file, 1024);
  arch.encoder_ffn = require_size(config, "encoder_ffn_dim", file);
  arch.decoder_layers = require_size(config, "decoder_layers", file, 1024);
  arch.decoder_heads = require_size(config, "decoder_attention_heads", file, 1024);
  arch.decoder_ffn = require_size(config, "decoder_ffn_dim", file);
  arch.max_source_positions = require_size(config, "max_source_positions", file);
  arch.max_target_positions = require_size(config, "max_target_positions", file);
  for (const auto& [heads, key] : {std::pair{arch.encoder_heads, "encoder_attention_heads"},
                                   std::pair{arch.decoder_heads, "decoder_attention_heads"}}) {
    if (arch.d_model % heads != 0) {
      fail(file.string(), ": d_model ", arch.d_model, " is not a multiple of ", key, " ", heads);
    }
  }
  if (const Json* id = member(config, "decoder_start_token_id")) {
    arch.decoder_start_token_id = integer(*id, file, "decoder_start_token_id");
  }
  if (const Json* id = member(config, "eos_token_id"); id != nullptr && id->is_number_integer()) {
    arch.eos_token_id = id->get<int64_t>();
  }
  if (const Json* tie = member(config, "tie_word_embeddings")) {
    if (!tie->is_boolean()) fail(file.string(), ": 'tie_word_embeddings' should be true or false");
    arch.tied_output = tie->get<bool>();
  }
  if (!arch.tied_output) {
    fail(file.string(), ": tie_word_embeddings = false (a separate proj_out) is not supported");
  }
  return arch;
}

Config to_config(const Architecture& arch) {
  Config config;
  config.vocab_size = static_cast<int>(arch.vocab_size);
  config.n_mels = static_cast<int>(arch.n_mels);
  config.d_model = static_cast<int>(arch.d_model);
  config.encoder_layers = static_cast<int>(arch.encoder_layers);
  config.encoder_heads = static_cast<int>(arch.encoder_heads);
  config.encoder_ffn = static_cast<int>(arch.encoder_ffn);
  config.decoder_layers = static_cast<int>(arch.decoder_layers);
  config.decoder_heads = static_cast<int>(arch.decoder_heads);
  config.decoder_ffn = static_cast<int>(arch.decoder_ffn);
  config.max_source_positions = static_cast<int>(arch.max_source_positions);
  config.max_target_positions = static_cast<int>(arch.max_target_positions);
  return config;
}

// ---------------------------------------------------------------------------------------------
// preprocessor_config.json

struct AudioFrontEnd {
  int64_t sample_rate = 16000, n_fft = 400, hop_length = 160, chunk_length = 30;
};

AudioFrontEnd read_front_end(const fs::path& dir, const Architecture& arch) {
  const fs::path file = dir / "preprocessor_config.json";
  AudioFrontEnd front_end;
  if (const std::optional<Json> config = read_json_if_present(file)) {
    front_end.sample_rate = require_size(*config, "sampling_rate", file);
    front_end.n_fft = require_size(*config, "n_fft", file);
    front_end.hop_length = require_size(*config, "hop_length", file);
    front_end.chunk_length = require_size(*config, "chunk_length", file, 3600);
    const int64_t feature_size = require_size(*config, "feature_size", file);
    if (feature_size != arch.n_mels) {
      fail(file.string(), ": feature_size ", feature_size,
           " differs from config.json num_mel_bins ", arch.n_mels);
    }
  } else {
    log::warn(dir.string(), ": no preprocessor_config.json; using Whisper's front end (16000 Hz, ",
              "n_fft 400, hop 160, 30-s chunks)");
  }
  // The encoder sees exactly one chunk: its mel frames are twice its positions (conv2 strides 2).
  const int64_t frames = front_end.chunk_length * front_end.sample_rate / front_end.hop_length;
  if (frames != 2 * arch.max_source_positions) {
    fail(file.string(), ": ", front_end.chunk_length, " s at ", front_end.sample_rate, " Hz, hop ",
         front_end.hop_length, " gives ", frames, " mel frames, but the encoder takes 2 x ",
         arch.max_source_positions, " (config.json max_source_positions)");
  }
  return front_end;
}

// ---------------------------------------------------------------------------------------------
// Tokenizer and generation_config.json

text::BpeTokenizer read_tokenizer(const fs::path& dir) {
  if (fs::exists(dir / "tokenizer.json")) {
    return text::BpeTokenizer::from_tokenizer_json((dir / "tokenizer.json").string());
  }
  if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
    const fs::path added = dir / "added_tokens.json";
    return text::BpeTokenizer::from_vocab_merges((dir / "vocab.json").string(),
                                                 (dir / "merges.txt").string(),
                                                 fs::exists(added) ? added.string() : "");
  }
  fail(dir.string(), ": no tokenizer (expected tokenizer.json, or vocab.json and merges.txt)");
}

// openai-whisper's suppress_tokens "-1": symbols that are not speech (speaker tags, music notes,
// brackets), as single tokens with and without a leading space, plus the special tokens that may
// never be sampled. Hugging Face's generation configs hold exactly this list.
std::vector<int32_t> default_suppress_tokens(const text::BpeTokenizer& tokenizer,
                                             const Vocabulary& vocab) {
  std::vector<std::string> symbols;
  for (char c : std::string_view("\"#()*+/:;<=>@[\\]^_`{|}~")) symbols.emplace_back(1, c);
  for (const char* symbol :
       {"「", "」",  "『", "』", "<<",  ">>",  "<<<", ">>>", "--", "---", "-(", "-[",
        "('", "(\"", "((", "))", "(((", ")))", "[[",  "]]",  "{{", "}}",  "♪♪", "♪♪♪"}) {
    symbols.emplace_back(symbol);
  }
  // Musical symbols (U+2640..U+267F) may take several tokens; their first token (the shared
  // leading UTF-8 bytes) is safe to suppress.
  const std::vector<std::string> music = {"♩", "♪", "♫", "♬", "♭", "♮", "♯"};

  std::set<int32_t> ids;
  // "-" and "'" are allowed inside words, not at their start.
  for (const char* text : {" -", " '"}) {
    const std::vector<int32_t> tokens = tokenizer.encode(text);
    if (!tokens.empty()) ids.insert(tokens[0]);
  }
  auto suppress = [&](const std::string& symbol, bool first_token_is_enough) {
    for (const std::string& text : {symbol, " " + symbol}) {
      const std::vector<int32_t> tokens = tokenizer.encode(text);
      if (tokens.size() == 1 || (first_token_is_enough && !tokens.empty())) ids.insert(tokens[0]);
    }
  };
  for (const std::string& symbol : symbols) suppress(symbol, false);
  for (const std::string& symbol : music) suppress(symbol, true);
  for (int32_t special : {vocab.translate, vocab.transcribe, vocab.sot, vocab.sot_prev,
                          vocab.sot_lm, vocab.no_speech}) {
    if (special >= 0) ids.insert(special);
  }
  return {ids.begin(), ids.end()};
}

// A window may not begin with a space or end at once.
std::vector<int32_t> default_begin_suppress_tokens(const text::BpeTokenizer& tokenizer,
                                                   const Vocabulary& vocab) {
  const std::vector<int32_t> space = tokenizer.encode(" ");
  std::vector<int32_t> ids;
  if (!space.empty()) ids.push_back(space.front());
  ids.push_back(vocab.eot);
  return ids;
}

// openai and transformers infer the number of languages from the vocabulary size, which only
// works for the real vocabularies; for any other size (small test models) the language tokens are
// the ones between <|startoftranscript|> and <|translate|>, as tokens.h lays them out.
void find_languages_between_specials(const text::BpeTokenizer& tokenizer, Vocabulary& vocab) {
  if (!vocab.languages.empty()) return;
  for (int32_t id = vocab.sot + 1; id < vocab.translate; ++id) {
    const std::string& token = tokenizer.token_bytes(id);
    const bool bracketed = token.size() > 4 && token.starts_with("<|") && token.ends_with("|>");
    const std::string code = bracketed ? token.substr(2, token.size() - 4) : "";
    if (language_code(code) != code) {
      fail("Whisper tokenizer: token ", id, " (", token,
           ") between <|startoftranscript|> and <|translate|> is not a language");
    }
    if (vocab.languages.empty()) vocab.first_language = id;
    vocab.languages.push_back(code);
  }
}

struct Generation {
  std::vector<int32_t> suppress_tokens;
  std::vector<int32_t> begin_suppress_tokens;
  int64_t max_initial_timestamp_index = 50;
  bool multilingual = true;
};

Generation read_generation(const fs::path& dir, const Architecture& arch,
                           const text::BpeTokenizer& tokenizer, const Vocabulary& vocab) {
  const fs::path file = dir / "generation_config.json";
  Generation generation;
  const std::optional<Json> config = read_json_if_present(file);
  if (!config) {
    log::warn(dir.string(), ": no generation_config.json; using openai-whisper's defaults ",
              "(suppress non-speech symbols, begin-suppress ' ' and <|endoftext|>, first ",
              "timestamp at most 1.0 s)");
    generation.suppress_tokens = default_suppress_tokens(tokenizer, vocab);
    generation.begin_suppress_tokens = default_begin_suppress_tokens(tokenizer, vocab);
    generation.multilingual = arch.vocab_size >= 51865;
    return generation;
  }
  if (!config->is_object()) fail(file.string(), ": expected a JSON object");

  auto ids_or = [&](std::string_view key, std::vector<int32_t> fallback) {
    const Json* value = member(*config, key);
    return value != nullptr ? integer_list(*value, file, key) : std::move(fallback);
  };
  generation.suppress_tokens = ids_or("suppress_tokens", default_suppress_tokens(tokenizer, vocab));
  generation.begin_suppress_tokens =
      ids_or("begin_suppress_tokens", default_begin_suppress_tokens(tokenizer, vocab));
  for (const auto* list : {&generation.suppress_tokens, &generation.begin_suppress_tokens}) {
    for (int32_t id : *list) {
      if (id >= arch.vocab_size) {
        fail(file.string(), ": suppressed token id ", id, " is beyond vocab_size ",
             arch.vocab_size);
      }
    }
  }
  if (const Json* index = member(*config, "max_initial_timestamp_index")) {
    generation.max_initial_timestamp_index = integer(*index, file, "max_initial_timestamp_index");
    if (generation.max_initial_timestamp_index < 0 ||
        generation.max_initial_timestamp_index > 100000) {
      fail(file.string(), ": max_initial_timestamp_index ", generation.max_initial_timestamp_index,
           " is out of range");
    }
  }
  if (const Json* multilingual = member(*config, "is_multilingual")) {
    if (!multilingual->is_boolean()) fail(file.string(), ": 'is_multilingual' should be a boolean");
    generation.multilingual = multilingual->get<bool>();
  } else {
    generation.multilingual = arch.vocab_size >= 51865;
  }

  // The language list comes from the tokenizer; lang_to_id, when present, must agree with it.
  if (const Json* lang_to_id = member(*config, "lang_to_id")) {
    if (!lang_to_id->is_object()) fail(file.string(), ": 'lang_to_id' should be an object");
    for (const auto& [token, id] : lang_to_id->items()) {
      const int64_t number = integer(id, file, "lang_to_id");
      const std::optional<int32_t> in_tokenizer = tokenizer.find(token);
      if (!in_tokenizer || *in_tokenizer != number) {
        fail(file.string(), ": lang_to_id maps ", token, " to ", number, " but the tokenizer ",
             in_tokenizer ? "has it at " + std::to_string(*in_tokenizer) : std::string("lacks it"));
      }
      const int64_t index = number - vocab.first_language;
      if (index < 0 || index >= static_cast<int64_t>(vocab.languages.size()) ||
          "<|" + vocab.languages[index] + "|>" != token) {
        fail(file.string(), ": lang_to_id entry ", token, " (", number,
             ") is not among the language tokens between <|startoftranscript|> and <|translate|>");
      }
    }
  }
  return generation;
}
}  // namespace

void convert_checkpoint(const std::string& hf_dir, const std::string& out_path, DType type,
                        const ConvertProgress& progress) {
  const fs::path dir(hf_dir);
  if (!fs::is_directory(dir)) fail(hf_dir, ": not a directory (expected a Hugging Face model)");
  if (type != DType::F32 && type != DType::F16 && type != DType::BF16 && type != DType::Q8_0) {
    fail("hark convert: --type ", dtype_name(type), " is not supported (f32, f16, bf16, q8_0)");
  }

  const Architecture arch = read_architecture(dir);
  const AudioFrontEnd front_end = read_front_end(dir, arch);
  const text::BpeTokenizer tokenizer = read_tokenizer(dir);
  if (tokenizer.vocab_size() > arch.vocab_size) {
    fail(hf_dir, ": the tokenizer has ", tokenizer.vocab_size(), " tokens, more than config.json ",
         "vocab_size ", arch.vocab_size);
  }
  Vocabulary vocab = find_vocabulary(tokenizer, static_cast<int32_t>(arch.vocab_size));
  find_languages_between_specials(tokenizer, vocab);
  if (vocab.timestamp_begin >= arch.vocab_size) {
    fail(hf_dir, ": <|notimestamps|> is the last of config.json's ", arch.vocab_size,
         " tokens; there is no room for timestamp tokens");
  }
  if (arch.decoder_start_token_id && *arch.decoder_start_token_id != vocab.sot) {
    fail(hf_dir, "/config.json: decoder_start_token_id ", *arch.decoder_start_token_id,
         " is not the tokenizer's <|startoftranscript|> (", vocab.sot, ")");
  }
  if (arch.eos_token_id && *arch.eos_token_id != vocab.eot) {
    fail(hf_dir, "/config.json: eos_token_id ", *arch.eos_token_id,
         " is not the tokenizer's <|endoftext|> (", vocab.eot, ")");
  }
  const Generation generation = read_generation(dir, arch, tokenizer, vocab);

  const auto checkpoint =
      std::make_shared<safetensors::Checkpoint>(safetensors::Checkpoint::open(hf_dir));
  const std::vector<TensorSpec> plan = tensor_layout(to_config(arch));

  // Find every tensor and check its shape before writing anything.
  std::vector<const safetensors::TensorView*> sources;
  std::set<std::string, std::less<>> used;
  for (const TensorSpec& tensor : plan) {
    const safetensors::TensorView* source =
        &hf::find_tensor(*checkpoint, hf_dir, {"model." + tensor.name, tensor.name}, tensor.shape);
    used.insert(source->name);
    sources.push_back(source);
  }
  for (const std::string& name : checkpoint->names()) {
    // proj_out is the token embedding (tie_word_embeddings was checked above).
    if (used.count(name) == 0 && name != "proj_out.weight") {
      log::warn(hf_dir, ": ignoring tensor ", name, ", which Whisper does not use");
    }
  }

  gguf::Writer writer;
  writer.set_string("general.architecture", "whisper");
  writer.set_string("general.name", hf::directory_name(dir, "whisper"));
  writer.set_u32("general.file_type", hf::gguf_file_type(type));
  writer.set_u32("general.alignment", 32);
  tokenizer.write_gguf(writer);

  write_config(writer, to_config(arch));
  vocab.multilingual = generation.multilingual;
  vocab.suppress_tokens = generation.suppress_tokens;
  vocab.begin_suppress_tokens = generation.begin_suppress_tokens;
  vocab.max_initial_timestamp_index = static_cast<int>(generation.max_initial_timestamp_index);
  write_vocabulary(writer, vocab);
  const auto u32 = [](int64_t value) { return static_cast<uint32_t>(value); };
  writer.set_u32("whisper.sample_rate", u32(front_end.sample_rate));
  writer.set_u32("whisper.n_fft", u32(front_end.n_fft));
  writer.set_u32("whisper.hop_length", u32(front_end.hop_length));
  writer.set_u32("whisper.chunk_length", u32(front_end.chunk_length));

  std::vector<hf::PlannedTensor> planned_tensors;
  for (size_t i = 0; i < plan.size(); ++i) {
    planned_tensors.push_back(
        {plan[i].name, plan[i].shape, stored_type(plan[i], type), sources[i]});
  }
  hf::write_gguf(writer, checkpoint, std::move(planned_tensors), out_path, progress);
}

}  // namespace hark::whisper
