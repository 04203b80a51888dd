// `hark convert`: a Hugging Face Whisper checkpoint (as save_pretrained writes it) to hark's GGUF.
//
// Reads config.json, generation_config.json, preprocessor_config.json, the tokenizer files and
// the safetensors weights (single file or sharded), validates every shape against the config, and
// writes the keys and tensors docs/formats.md lists. Tensors are converted one at a time while the
// GGUF is written, so converting large-v3 never holds more than one tensor in memory.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "format/dtype.h"
#include "format/hf_checkpoint.h"

namespace hark::whisper {

// Called before each tensor is converted: `done` tensors of `total` are written so far.
using ConvertProgress = hf::ConvertProgress;

// `type` (F32, F16, BF16 or Q8_0) applies to the weight matrices; norms, biases and position
// embeddings stay F32, and under Q8_0 a matrix whose rows are not a multiple of 32 values is
// stored as F16. Throws hark::Error naming the file, key or tensor on anything missing or wrong;
// `out_path` is written only when the whole conversion succeeds.
void convert_checkpoint(const std::string& hf_dir, const std::string& out_path, DType type,
                        const ConvertProgress& progress = {});

}  // namespace hark::whisper
