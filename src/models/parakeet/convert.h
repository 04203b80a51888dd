// `hark convert` for NVIDIA Parakeet: a Hugging Face checkpoint as transformers' save_pretrained
// writes it (ParakeetForCTC, ParakeetForRNNT or ParakeetForTDT) to hark's GGUF.
//
// Reads config.json, the feature extractor's settings (preprocessor_config.json or
// processor_config.json), tokenizer.json and the safetensors weights (single file or sharded),
// checks every tensor against the config, and writes the keys and tensors docs/formats.md lists.
// Tensors are converted one at a time while the GGUF is written. NeMo `.nemo` archives are not
// read here.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "format/dtype.h"
#include "format/hf_checkpoint.h"

namespace hark::parakeet {

// Called before each tensor is converted: `done` tensors of `total` are written so far.
using ConvertProgress = hf::ConvertProgress;

// `type` (F32, F16, BF16 or Q8_0) applies to the weight matrices (layout.h's stored_type); the
// rest stays F32. Throws hark::Error naming the file, key or tensor on anything missing or wrong;
// `out_path` is written only when the whole conversion succeeds.
void convert_checkpoint(const std::string& hf_dir, const std::string& out_path, DType type,
                        const ConvertProgress& progress = {});

}  // namespace hark::parakeet
