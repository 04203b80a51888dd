// Hugging Face safetensors (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}},
// then the raw tensor bytes. `hark convert` reads checkpoints through this; tests and tools write
// small ones with Writer.
//
// Every offset and size is validated against the file before use. Tensor data is NOT necessarily
// aligned (the header length is arbitrary): read it with memcpy or quant::to_f32, never through a
// cast pointer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/dtype.h"

namespace hark::safetensors {

// The element types hark reads; other safetensors dtypes (F8_*, U16, ...) are rejected by name.
enum class ElementType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

std::string_view element_type_name(ElementType type);  // as spelled in the header: "BF16"
size_t element_size(ElementType type);
ElementType element_type_from_name(std::string_view name);  // throws hark::Error when unknown
// The matching hark::DType; throws hark::Error for U8 and BOOL, which have none.
DType to_dtype(ElementType type);

struct TensorView {
  std::string name;
  ElementType type = ElementType::F32;
  std::vector<int64_t> shape;     // row-major (PyTorch order); empty for a scalar
  const uint8_t* data = nullptr;  // into the mapping, valid while its File lives; unaligned
  uint64_t nbytes = 0;

  int64_t elements() const;
};

using Metadata = std::map<std::string, std::string, std::less<>>;

// One .safetensors file, mapped read-only.
class File {
 public:
  // Maps and validates `path`; throws hark::Error naming the file, tensor and problem.
  static std::shared_ptr<const File> open(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }  // sorted by name
  const TensorView* find(std::string_view name) const;
  const TensorView& tensor(std::string_view name) const;  // throws when missing
  const Metadata& metadata() const { return metadata_; }  // the header's "__metadata__"

 private:
  File() = default;
  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  std::string path_;
  std::vector<TensorView> tensors_;
  Metadata metadata_;
};

// A Hugging Face checkpoint: a model directory with `model.safetensors`, or one sharded through
// `model.safetensors.index.json` (its "weight_map" names each tensor's shard), or a single
// .safetensors file given directly. Tensors are looked up by name across shards.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<std::string>& names() const { return names_; }  // sorted
  const TensorView* find(std::string_view name) const;
  const TensorView& tensor(std::string_view name) const;  // throws when missing
  // The "__metadata__" of every shard merged (the first shard wins on a conflict).
  const Metadata& metadata() const { return metadata_; }
  const std::vector<std::shared_ptr<const File>>& shards() const { return shards_; }

 private:
  std::string path_;
  std::vector<std::shared_ptr<const File>> shards_;
  std::map<std::string, const TensorView*, std::less<>> tensors_;
  std::vector<std::string> names_;
  Metadata metadata_;
};

// Writes a .safetensors file (tensors in name order, header padded to 8 bytes as the Python
// library does), through a temporary file renamed into place when complete.
class Writer {
 public:
  // `bytes` must hold exactly element_size(type) * product(shape) bytes, little-endian.
  void add(std::string name, ElementType type, std::vector<int64_t> shape,
           std::vector<uint8_t> bytes);
  void set_metadata(std::string key, std::string value);
  void write(const std::string& path) const;

 private:
  struct Pending {
    ElementType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Pending> tensors_;
  Metadata metadata_;
};

}  // namespace hark::safetensors
