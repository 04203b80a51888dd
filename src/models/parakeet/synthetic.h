// Parakeet models with random weights of the real architectures, for `hark bench`: speed does not
// depend on weight values once the decoder's emissions are fixed (EmissionPattern, model.h), and
// no checkpoint can be downloaded where the benchmarks run.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "format/dtype.h"
#include "models/parakeet/config.h"

namespace hark::parakeet {

struct NamedConfig {
  std::string_view name;  // "parakeet-tdt-0.6b-v2", ...
  Config config;
  bool listed = true;  // false: a small model for tests, left out of the help's list
};

// parakeet-tdt-0.6b-v2, parakeet-tdt-0.6b-v3, parakeet-ctc-1.1b, parakeet-rnnt-1.1b,
// parakeet-ctc-0.6b (the hyper-parameters of docs/parakeet.md §1), and parakeet-tiny-test, a
// TDT model small enough for a test to run in a blink.
std::span<const NamedConfig> reference_configs();
// Throws hark::Error listing the known names.
const Config& reference_config(std::string_view name);
// "parakeet-tdt-0.6b-v2, parakeet-tdt-0.6b-v3, ...": the listed names.
std::string reference_config_names();

// Writes a GGUF of `config` with seeded random weights, matrices stored as `type` (f32, f16,
// bf16 or q8_0), scaled so that activations stay O(1) through the layers, and a placeholder
// vocabulary (such a model decodes ids, not text). Tensors are generated one at a time while the
// file is written, so memory holds one tensor, not the model.
void write_random_model(const Config& config, DType type, const std::string& path, uint64_t seed);

}  // namespace hark::parakeet
