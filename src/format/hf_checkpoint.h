// What every converter of a Hugging Face checkpoint (config.json + safetensors) into GGUF needs,
// whatever the model family: reading its JSON files, turning tensors into a stored type with
// every value checked, and the GGUF file-type and weight-type rules shared by all families.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/dtype.h"
#include "format/gguf.h"
#include "format/safetensors.h"

namespace hark::hf {

using Json = nlohmann::json;

// The parsed file; hark::Error naming it when it cannot be read or is not JSON.
Json read_json(const std::filesystem::path& path);
std::optional<Json> read_json_if_present(const std::filesystem::path& path);
// object[key] when `object` is an object holding a non-null `key`, else null.
const Json* member(const Json& object, std::string_view key);

// The first of `names` the checkpoint holds, checked to have `shape` and a float type (F32, F16,
// BF16 or F64); otherwise hark::Error naming `dir`, the tensor and what config.json implies.
const safetensors::TensorView& find_tensor(const safetensors::Checkpoint& checkpoint,
                                           const std::string& dir,
                                           std::initializer_list<std::string> names,
                                           const std::vector<int64_t>& shape);

// The checkpoint's bytes of one tensor in `target` type. Every value is checked, even when the
// bytes are copied as they are: a NaN or infinite weight fails nowhere later, it just makes every
// transcript garbage; so is F16's range when converting to F16, and the sign of BatchNorm
// variances (`*.running_var`: a negative one makes the folded scale NaN).
std::vector<uint8_t> convert_tensor(const safetensors::TensorView& source, DType target,
                                    const std::string& name);

// The directory's own name ("whisper-large-v3"), or `fallback` when it has none.
std::string directory_name(const std::filesystem::path& dir, const std::string& fallback);

// Progress of a conversion: `done` of `total` tensors, `tensor` being written.
using ConvertProgress = std::function<void(int done, int total, std::string_view tensor)>;

// One tensor to write: from `source`, converted to `type` (convert_tensor), under `name` with
// `shape` (the checkpoint's, or the same bytes under another shape).
struct PlannedTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType type;
  const safetensors::TensorView* source;
};

// Adds the tensors to `writer` and writes the file to `out_path` (atomically: see gguf::Writer);
// each tensor is converted while the file is written, `owner` (what holds the sources' bytes: a
// mapped checkpoint) kept alive until then.
void write_gguf(gguf::Writer& writer, std::shared_ptr<const void> owner,
                std::vector<PlannedTensor> plan, const std::string& out_path,
                const ConvertProgress& progress);

// Matrices take `requested`; everything else stays F32 (small, and precision there matters more
// than size). Q8_0 blocks run along rows, so a matrix whose rows (`row_length` values) are not a
// multiple of 32 falls back to F16.
DType stored_type(bool matrix, int64_t row_length, DType requested);

// general.file_type for a main weight type, in llama.cpp's numbering.
uint32_t gguf_file_type(DType type);

std::string shape_text(const std::vector<int64_t>& shape);  // "[1280, 128, 3]"

}  // namespace hark::hf
