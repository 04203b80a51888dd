// `hark convert HF_DIR -o model.gguf`: a Hugging Face checkpoint (Whisper or Parakeet) to GGUF.
// config.json says which model it is; each family's converter reads the rest. A file rather than
// a directory is a NeMo .nemo archive (Parakeet).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/terminal.h"
#include "format/dtype.h"
#include "models/parakeet/convert.h"
#include "models/parakeet/nemo.h"
#include "models/whisper/convert.h"

namespace hark::cli {

namespace {

const Option convert_options[] = {
    {"output", 'o', "FILE", "The GGUF file to write (required)."},
    {"type", 0, "TYPE",
     "Type of the weight matrices: f32, f16 (default), bf16 or\n"
     "q8_0. Norms, biases, position embeddings and small\n"
     "convolution kernels stay f32; under q8_0, matrices whose\n"
     "rows are not a multiple of 32 values are stored as f16."},
};

constexpr std::string_view convert_description =
    "HF_DIR is a model directory as Hugging Face's save_pretrained writes it:\n"
    "config.json, model.safetensors (or shards listed in\n"
    "model.safetensors.index.json) and the tokenizer and feature-extractor files.\n"
    "config.json's model_type (or architectures) picks the model family:\n"
    "  Whisper   WhisperForConditionalGeneration; tokenizer.json (or vocab.json +\n"
    "            merges.txt), generation_config.json and preprocessor_config.json\n"
    "            (when either of the last two is missing, openai-whisper's\n"
    "            defaults are used and a warning says so).\n"
    "  Parakeet  ParakeetForCTC, ParakeetForRNNT or ParakeetForTDT; tokenizer.json\n"
    "            and preprocessor_config.json (or processor_config.json).\n"
    "HF_DIR may also be a NeMo .nemo archive of a Parakeet model (CTC, RNN-T or\n"
    "TDT); it gives the GGUF that transformers' conversion would lead to.\n"
    "FILE is written only when the whole conversion succeeded.";

enum class Family { whisper, parakeet };

bool names_family(const nlohmann::json& value, std::string_view prefix) {
  return value.is_string() && value.get<std::string>().starts_with(prefix);
}

// The model family of a Hugging Face directory, from config.json's model_type, else its
// architectures. The family's converter checks the rest of config.json.
Family detect_family(const std::string& hf_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(hf_dir);
  if (!fs::is_directory(dir)) fail(hf_dir, ": not a directory (expected a Hugging Face model)");
  const fs::path file = dir / "config.json";
  std::ifstream stream(file, std::ios::binary);
  if (!stream) fail(hf_dir, ": no config.json (is this a Hugging Face model directory?)");
  std::ostringstream text;
  text << stream.rdbuf();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& error) {
    fail(file.string(), ": invalid JSON (", error.what(), ")");
  }
  if (!config.is_object()) fail(file.string(), ": expected a JSON object");

  const nlohmann::json model_type = config.value("model_type", nlohmann::json());
  if (model_type == "whisper") return Family::whisper;
  if (names_family(model_type, "parakeet")) return Family::parakeet;
  const nlohmann::json architectures = config.value("architectures", nlohmann::json::array());
  if (model_type.is_null() && architectures.is_array()) {
    auto any = [&](std::string_view prefix) {
      return std::any_of(architectures.begin(), architectures.end(),
                         [&](const nlohmann::json& a) { return names_family(a, prefix); });
    };
    if (any("Whisper")) return Family::whisper;
    if (any("Parakeet")) return Family::parakeet;
  }
  fail(file.string(), ": model_type ", model_type.is_null() ? "missing" : model_type.dump(),
       ", architectures ", architectures.dump(),
       ": hark converts Whisper (WhisperForConditionalGeneration) and Parakeet "
       "(ParakeetForCTC, ParakeetForRNNT, ParakeetForTDT) checkpoints");
}

DType weight_type(const ParsedArgs& args) {
  const std::string name = args.value_or("type", "f16");
  if (name != "f32" && name != "f16" && name != "bf16" && name != "q8_0") {
    usage_fail("unknown --type '", name, "' (expected f32, f16, bf16 or q8_0)");
  }
  return dtype_from_name(name);
}

int convert(const ParsedArgs& args) {
  if (args.positionals.empty()) usage_fail("missing HF_DIR (see 'hark help convert')");
  if (args.positionals.size() > 1) {
    usage_fail("expected one HF_DIR, got ", args.positionals.size(), " arguments");
  }
  const std::optional<std::string> output = args.value("output");
  if (!output || output->empty()) usage_fail("missing -o FILE: where to write the GGUF");
  const DType type = weight_type(args);

  const std::string& hf_dir = args.positionals[0];
  const bool nemo = parakeet::is_nemo_archive(hf_dir);
  const Family family = nemo ? Family::parakeet : detect_family(hf_dir);
  ProgressLine progress("hark: converting");
  const auto report = [&progress](int done, int total, std::string_view) {
    progress.update(total > 0 ? double(done) / total : 1.0);
  };
  if (nemo) {
    parakeet::convert_nemo(hf_dir, *output, type, report);
  } else if (family == Family::parakeet) {
    parakeet::convert_checkpoint(hf_dir, *output, type, report);
  } else {
    whisper::convert_checkpoint(hf_dir, *output, type, report);
  }
  progress.clear();
  if (stderr_is_terminal()) {
    std::error_code error;
    const auto size = std::filesystem::file_size(*output, error);
    std::fprintf(stderr, "hark: wrote %s (%.1f MB)\n", output->c_str(),
                 error ? 0.0 : static_cast<double>(size) / 1e6);
  }
  return 0;
}

}  // namespace

const Command convert_command{
    "convert",
    "Convert a Hugging Face Whisper or Parakeet checkpoint (or a .nemo) to GGUF.",
    "hark convert HF_DIR|MODEL.nemo -o FILE [--type f32|f16|bf16|q8_0]",
    convert_description,
    convert_options,
    convert,
};

}  // namespace hark::cli
