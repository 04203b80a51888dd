// `hark convert` for NVIDIA Parakeet: a Hugging Face checkpoint as transformers' save_pretrained
// writes it (ParakeetForCTC, ParakeetForRNNT or ParakeetForTDT) to hark's GGUF.
//
// Reads config.json, the feature extractor's settings (preprocessor_config.json or
// processor_config.json), tokenizer.json and the safetensors weights (single file or sharded),
// checks every tensor against the config, and writes the keys and tensors docs/formats.md lists.
// Tensors are converted one at a time while the GGUF is written. NeMo `.nemo` archives are read by
// models/parakeet/nemo.h, which writes its GGUF through write_model below.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/dtype.h"
#include "format/hf_checkpoint.h"
#include "format/safetensors.h"
#include "models/parakeet/config.h"

namespace hark::parakeet {

// Called before each tensor is converted: `done` tensors of `total` are written so far.
using ConvertProgress = hf::ConvertProgress;

// `type` (F32, F16, BF16 or Q8_0) applies to the weight matrices (layout.h's stored_type); the
// rest stays F32. Throws hark::Error naming the file, key or tensor on anything missing or wrong;
// `out_path` is written only when the whole conversion succeeds.
void convert_checkpoint(const std::string& hf_dir, const std::string& out_path, DType type,
                        const ConvertProgress& progress = {});

// --- What every Parakeet converter shares ---

// tokenizer.ggml.token_type values, as llama.cpp numbers them.
inline constexpr int32_t kTokenNormal = 1;
inline constexpr int32_t kTokenControl = 3;
inline constexpr int32_t kTokenUserDefined = 4;
inline constexpr int32_t kTokenByte = 6;

struct Vocabulary {
  std::vector<std::string> pieces;  // id order, the blank included
  std::vector<int32_t> types;
};

// "<0x41>": SentencePiece's byte-fallback pieces.
bool is_byte_piece(const std::string& piece);

// Throws hark::Error unless `type` is one a Parakeet GGUF's matrices may take.
void check_weight_type(DType type);

// The keys of a Parakeet GGUF: the config's, `name`, the file type of `type` and the vocabulary
// (exactly config.vocab_size pieces). write_model and the random-weight models of `hark bench`
// (synthetic.h) start their files with them.
void write_header(gguf::Writer& writer, const Config& config, const std::string& name,
                  const Vocabulary& vocabulary, DType type);

// Writes the GGUF of a checked model: the config's keys, `name`, the vocabulary, and one tensor
// per entry of tensor_layout(config), converted from `sources[i]` (which must have that entry's
// checkpoint_shape). `owner` keeps the sources' bytes alive until the file is written.
void write_model(const Config& config, const std::string& name, const Vocabulary& vocabulary,
                 const std::vector<const safetensors::TensorView*>& sources,
                 std::shared_ptr<const void> owner, DType type, const std::string& out_path,
                 const ConvertProgress& progress);

}  // namespace hark::parakeet
