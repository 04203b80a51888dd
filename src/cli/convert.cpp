// `hark convert HF_DIR -o model.gguf`: a Hugging Face Whisper checkpoint to GGUF.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/terminal.h"
#include "format/dtype.h"
#include "models/whisper/convert.h"

namespace hark::cli {

namespace {

const Option convert_options[] = {
    {"output", 'o', "FILE", "The GGUF file to write (required)."},
    {"type", 0, "TYPE",
     "Type of the weight matrices: f32, f16 (default), bf16 or\n"
     "q8_0. Norms, biases and position embeddings stay f32;\n"
     "under q8_0, matrices whose rows are not a multiple of 32\n"
     "values are stored as f16."},
};

constexpr std::string_view convert_description =
    "HF_DIR is a Whisper model directory as Hugging Face's save_pretrained writes\n"
    "it: config.json, model.safetensors (or shards listed in\n"
    "model.safetensors.index.json), tokenizer.json (or vocab.json + merges.txt),\n"
    "generation_config.json and preprocessor_config.json (when either of the last\n"
    "two is missing, openai-whisper's defaults are used and a warning says so).\n"
    "FILE is written only when the whole conversion succeeded.";

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

  ProgressLine progress("hark: converting");
  whisper::convert_checkpoint(args.positionals[0], *output, type,
                              [&progress](int done, int total, std::string_view) {
                                progress.update(total > 0 ? double(done) / total : 1.0);
                              });
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
    "Convert a Hugging Face Whisper checkpoint to GGUF.",
    "hark convert HF_DIR -o FILE [--type f32|f16|bf16|q8_0]",
    convert_description,
    convert_options,
    convert,
};

}  // namespace hark::cli
