// Whisper models with random weights of the real architectures, for benchmarks: speed does not
// depend on weight values once the number of decoded tokens is fixed, and no checkpoint can be
// downloaded where the benchmarks run.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "format/dtype.h"
#include "models/whisper/model.h"

namespace hark::whisper {

struct NamedConfig {
  std::string_view name;  // "large-v3", "base.en", ...
  Config config;
};

// tiny, tiny.en, base, base.en, small, small.en, medium, medium.en, large-v2, large-v3,
// large-v3-turbo: the published configurations of openai's checkpoints.
std::span<const NamedConfig> reference_configs();
// Throws hark::Error listing the known names.
const Config& reference_config(std::string_view name);

// Writes a GGUF of `config` with weights drawn uniformly at random (seeded), matrices stored as
// `type`, and the real vocabulary's special-token ids (no tokenizer: such a model decodes ids,
// not text).
void write_random_model(const Config& config, DType type, const std::string& path, uint64_t seed);

}  // namespace hark::whisper
