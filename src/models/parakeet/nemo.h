// `hark convert` for NVIDIA NeMo `.nemo` archives of Parakeet models (parakeet-ctc-*,
// parakeet-rnnt-*, parakeet-tdt-*): a tar (plain or gzip-compressed) holding model_config.yaml,
// model_weights.ckpt (torch.save of the state dict) and the SentencePiece tokenizer.model.
//
// The result is the GGUF that converting the same model with transformers' convert_nemo_to_hf.py
// and then `hark convert HF_DIR` gives: the config mapped as that script maps it, the tensors
// renamed to transformers' names, and the vocabulary laid out as its tokenizer conversion lays it
// out (the SentencePiece pieces, then the blank at V - 1). docs/formats.md lists what is read.
#pragma once

#include <string>

#include "format/dtype.h"
#include "models/parakeet/convert.h"

namespace hark::parakeet {

// Whether `path` is a file that can only be a .nemo archive here: a regular file named *.nemo,
// or one starting as a tar or gzip stream does.
bool is_nemo_archive(const std::string& path);

// `type` as for convert_checkpoint. Throws hark::Error naming the archive, member, key or tensor
// on anything missing or wrong; `out_path` is written only when the whole conversion succeeds.
void convert_nemo(const std::string& nemo_path, const std::string& out_path, DType type,
                  const ConvertProgress& progress = {});

// The transformers name of a NeMo state-dict name (the renaming convert_nemo_to_hf.py applies);
// names it does not rename are returned as they are.
std::string hf_tensor_name(const std::string& nemo_name);

}  // namespace hark::parakeet
