// GGUF: the runtime weight format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
//
// gguf::File maps a file read-only and validates every count, length, offset and size against the
// file before anything uses it. Tensor shapes are given in row-major (PyTorch) order: GGUF stores
// dimensions innermost-first, the reader reverses them, the writer reverses them back.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "format/dtype.h"

namespace hark::gguf {

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

// "u8", "string", "array", ... for messages.
std::string_view value_type_name(ValueType type);

struct Value;
using Array = std::vector<Value>;

// One metadata value. Integers of every width are kept as int64/uint64 with their GGUF type: the
// reader gives int64_t for I8..I64 and uint64_t for U8..U64 (the writer takes either,
// range-checked), double for F32/F64, bool, std::string, and Array (every element of type
// element_type).
struct Value {
  ValueType type = ValueType::U32;
  std::variant<int64_t, uint64_t, double, bool, std::string, Array> data;
  ValueType element_type = ValueType::U32;  // for arrays

  bool operator==(const Value&) const = default;
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // row-major: shape.back() is the fastest-varying dimension
  uint64_t offset = 0;         // from the start of the tensor data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; valid while the File lives

  int64_t elements() const;
};

class File {
 public:
  // Maps and validates `path`; throws hark::Error naming the file and the problem. Accepts GGUF
  // v2 and v3, 1 to 8 dimensions per tensor, arrays nested up to 8 deep and 2^24 metadata values
  // in all; rejects tensor types hark has no DType for (k-quants, ...) by their ggml name.
  static std::shared_ptr<const File> open(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters throw hark::Error when the key is missing or of another kind.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;   // any integer type, range-checked
  double get_float(std::string_view key) const;  // F32/F64 (and integers)
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_strings(std::string_view key) const;
  std::vector<int64_t> get_ints(std::string_view key) const;
  std::vector<double> get_floats(std::string_view key) const;
  int64_t get_int_or(std::string_view key, int64_t fallback) const;
  double get_float_or(std::string_view key, double fallback) const;
  std::string get_string_or(std::string_view key, std::string fallback) const;
  const std::map<std::string, Value, std::less<>>& metadata() const { return metadata_; }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws when missing

 private:
  File() = default;
  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, Value, std::less<>> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Writes a GGUF v3 file. Tensor data is produced on demand while writing, so a converter never
// holds more than one tensor in memory.
class Writer {
 public:
  explicit Writer(uint64_t alignment = 32);

  void set(std::string key, Value value);
  void set_string(std::string key, std::string value);
  void set_u32(std::string key, uint32_t value);
  void set_i32(std::string key, int32_t value);
  void set_u64(std::string key, uint64_t value);
  void set_f32(std::string key, float value);
  void set_bool(std::string key, bool value);
  void set_strings(std::string key, const std::vector<std::string>& values);
  void set_i32s(std::string key, const std::vector<int32_t>& values);
  void set_f32s(std::string key, const std::vector<float>& values);

  using Producer = std::function<std::vector<uint8_t>()>;
  // `produce` must return exactly dtype_bytes(type, product of shape) bytes.
  void add_tensor(std::string name, DType type, std::vector<int64_t> shape, Producer produce);

  // Writes to `path` through a temporary file that is renamed into place only when complete.
  void write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    Producer produce;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace hark::gguf
