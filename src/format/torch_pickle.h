// Reading PyTorch checkpoints (torch.save of a state dict) without Python: the ZIP archive
// (format/zip.h) holds `<prefix>/data.pkl`, a pickle of {name: tensor}, and one entry
// `<prefix>/data/<key>` per storage. Only the part of the pickle machine that state dicts use is
// implemented, and nothing named in the pickle is ever run: the few globals a state dict refers to
// (collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch.*Storage, ...) are recognised
// by name, and any other is refused.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "format/safetensors.h"

namespace hark::torch {

// A tensor of the state dict as the pickle describes it; its bytes are
// `element_size(type) * product(shape)` bytes from element `storage_offset` of storage
// `storage_key`.
struct TensorRecord {
  std::string name;
  safetensors::ElementType type = safetensors::ElementType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::string storage_key;
  int64_t storage_offset = 0;  // in elements
};

// The tensors of a pickled state dict, in pickle order. Entries that are not tensors are left out
// when their name ends in "_extra_state" and refused otherwise; so are tensors that are not
// contiguous (they would need a copy torch.save never requires of a state dict). Throws hark::Error
// naming `where` and the byte offset on an unknown opcode, an unknown global, or a malformed
// stream.
std::vector<TensorRecord> read_state_dict_pickle(std::span<const uint8_t> pickle,
                                                 const std::string& where);

// The tensors of a torch.save checkpoint held in `checkpoint` (the ZIP archive's bytes), as views
// into those bytes: every storage entry must be stored uncompressed and hold the tensor's range.
// Little-endian checkpoints only.
std::vector<safetensors::TensorView> read_checkpoint(std::span<const uint8_t> checkpoint,
                                                     const std::string& where);

}  // namespace hark::torch
