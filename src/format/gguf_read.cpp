// GGUF reading: gguf::File.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <span>
#include <utility>

#include "base/error.h"
#include "base/mapped_file.h"
#include "format/gguf.h"
#include "format/gguf_internal.h"

namespace hark::gguf {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian; reading it on a big-endian host needs byte swaps");

using namespace detail;  // the format's shared pieces, from gguf_internal.h

namespace {

// Metadata values are held as Value objects (~48 bytes each), so a 1 GB array of u8 would need
// ~50 GB of memory. Real files hold a few vocabularies of at most a few hundred thousand entries.
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 24;
// The smallest encodings, used to bound counts by the bytes that remain before trusting them:
// a key/value pair is a string length, a type id and at least one byte of value; a tensor info is
// a name length, a dimension count, one dimension, a type id and an offset.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// Bytes of a fixed-size value; 0 for strings and arrays.
size_t scalar_bytes(ValueType type) {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    case ValueType::STRING:
    case ValueType::ARRAY:
      return 0;
  }
  return 0;
}

uint64_t min_encoded_bytes(ValueType type) {
  if (type == ValueType::STRING) return 8;     // the length
  if (type == ValueType::ARRAY) return 4 + 8;  // element type and count
  return scalar_bytes(type);
}

// Names of ggml's tensor types, so that a file using one hark does not support says which.
std::string_view ggml_type_name(uint32_t id) {
  static constexpr std::string_view kNames[] = {
      "f32",   "f16",        "q4_0",       "q4_1",       "q4_2",     "q4_3",     "q5_0",
      "q5_1",  "q8_0",       "q8_1",       "q2_K",       "q3_K",     "q4_K",     "q5_K",
      "q6_K",  "q8_K",       "iq2_xxs",    "iq2_xs",     "iq3_xxs",  "iq1_s",    "iq4_nl",
      "iq3_s", "iq2_s",      "iq4_xs",     "i8",         "i16",      "i32",      "i64",
      "f64",   "iq1_m",      "bf16",       "q4_0_4_4",   "q4_0_4_8", "q4_0_8_8", "tq1_0",
      "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8", "iq4_nl_8_8", "mxfp4",
  };
  return id < std::size(kNames) ? kNames[id] : "unknown";
}

// Names from a file may hold anything; keep messages one readable line.
std::string printable(std::string_view text) {
  constexpr size_t kMaxShown = 120;
  std::string shown;
  for (char c : text.substr(0, kMaxShown)) {
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      shown += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      shown += "\\x";
      shown += kHex[byte >> 4];
      shown += kHex[byte & 15];
    }
  }
  if (text.size() > kMaxShown) shown += "...";
  return shown;
}

// ---------------------------------------------------------------------------------------------
// Reading

struct Parsed {
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  std::map<std::string, Value, std::less<>> metadata;
  std::vector<TensorInfo> tensors;
};

// Walks the mapped bytes front to back. Every read checks the bytes left first; every error names
// the file, the item being read (`item_`) and the byte offset.
class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  Parsed parse() {
    read_header();
    read_metadata();
    read_alignment();
    read_tensor_infos();
    place_tensor_data();
    return std::move(parsed_);
  }

 private:
  template <class... Parts>
  [[noreturn]] void fail_at(uint64_t offset, const Parts&... parts) const {
    if (item_.empty()) fail(path_, ": at byte ", offset, ": ", parts...);
    fail(path_, ": ", item_, ": at byte ", offset, ": ", parts...);
  }

  uint64_t remaining() const { return bytes_.size() - position_; }

  void need(uint64_t count, std::string_view what) const {
    if (count > remaining()) {
      fail_at(position_, "file ends inside the ", what, " (", count, " bytes needed, ", remaining(),
              " left)");
    }
  }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view what) {
    uint64_t start = position_;
    auto length = read<uint64_t>(what);
    if (length > remaining()) {
      fail_at(start, what, " length ", length, " runs past the end of the file (", remaining(),
              " bytes left)");
    }
    std::string text(reinterpret_cast<const char*>(bytes_.data() + position_), length);
    position_ += length;
    return text;
  }

  ValueType read_value_type(std::string_view what) {
    uint64_t start = position_;
    auto id = read<uint32_t>(what);
    if (!value_type_is_known(id)) fail_at(start, "unknown ", what, " ", id);
    return static_cast<ValueType>(id);
  }

  void read_header() {
    if (bytes_.empty()) fail(path_, ": empty file (expected a GGUF model)");
    if (bytes_.size() < 4) fail(path_, ": not a GGUF file (only ", bytes_.size(), " bytes)");
    if (read<uint32_t>("magic") != kMagic) fail(path_, ": not a GGUF file (bad magic)");
    uint64_t version_offset = position_;
    parsed_.version = read<uint32_t>("version");
    if (parsed_.version != 2 && parsed_.version != 3) {
      if (__builtin_bswap32(parsed_.version) == 2 || __builtin_bswap32(parsed_.version) == 3) {
        fail_at(version_offset, "big-endian GGUF files are not supported");
      }
      fail_at(version_offset, "unsupported GGUF version ", parsed_.version,
              " (hark reads versions 2 and 3)");
    }
    uint64_t counts_offset = position_;
    tensor_count_ = read<uint64_t>("tensor count");
    kv_count_ = read<uint64_t>("metadata count");
    // Bound both counts by what the rest of the file could possibly hold before allocating.
    uint64_t left = remaining();
    if (kv_count_ > left / kMinKeyValueBytes || tensor_count_ > left / kMinTensorInfoBytes ||
        kv_count_ * kMinKeyValueBytes > left - tensor_count_ * kMinTensorInfoBytes) {
      fail_at(counts_offset, tensor_count_, " tensors and ", kv_count_,
              " metadata entries cannot fit in the ", left, " bytes left");
    }
  }

  void read_metadata() {
    for (uint64_t i = 0; i < kv_count_; ++i) {
      uint64_t entry_offset = position_;
      item_ = "metadata entry " + std::to_string(i);
      std::string key = read_string("key");
      item_ = "metadata key '" + printable(key) + "'";
      ValueType type = read_value_type("value type");
      Value value = read_value(type, 0);
      if (!parsed_.metadata.emplace(std::move(key), std::move(value)).second) {
        fail_at(entry_offset, "duplicate metadata key");
      }
    }
    item_.clear();
  }

  Value read_value(ValueType type, int depth) {
    Value value;
    value.type = type;
    switch (type) {
      case ValueType::U8:
        value.data = uint64_t{read<uint8_t>("u8 value")};
        break;
      case ValueType::I8:
        value.data = int64_t{read<int8_t>("i8 value")};
        break;
      case ValueType::U16:
        value.data = uint64_t{read<uint16_t>("u16 value")};
        break;
      case ValueType::I16:
        value.data = int64_t{read<int16_t>("i16 value")};
        break;
      case ValueType::U32:
        value.data = uint64_t{read<uint32_t>("u32 value")};
        break;
      case ValueType::I32:
        value.data = int64_t{read<int32_t>("i32 value")};
        break;
      case ValueType::U64:
        value.data = read<uint64_t>("u64 value");
        break;
      case ValueType::I64:
        value.data = read<int64_t>("i64 value");
        break;
      case ValueType::F32:
        value.data = double{read<float>("f32 value")};
        break;
      case ValueType::F64:
        value.data = read<double>("f64 value");
        break;
      case ValueType::BOOL: {
        uint64_t start = position_;
        auto byte = read<uint8_t>("bool value");
        if (byte > 1) fail_at(start, "bool value is ", int{byte}, ", not 0 or 1");
        value.data = byte == 1;
        break;
      }
      case ValueType::STRING:
        value.data = read_string("string value");
        break;
      case ValueType::ARRAY:
        read_array(value, depth);
        break;
    }
    return value;
  }

  void read_array(Value& value, int depth) {
    uint64_t start = position_;
    if (depth >= kMaxArrayDepth) fail_at(start, "arrays nested deeper than ", kMaxArrayDepth);
    value.element_type = read_value_type("array element type");
    uint64_t count_offset = position_;
    auto count = read<uint64_t>("array length");
    if (count > remaining() / min_encoded_bytes(value.element_type)) {
      fail_at(count_offset, "array of ", count, " ", value_type_name(value.element_type),
              " values cannot fit in the ", remaining(), " bytes left");
    }
    metadata_values_ += count;
    if (metadata_values_ > kMaxMetadataValues) {
      fail_at(count_offset, "metadata holds more than ", kMaxMetadataValues,
              " values in all, more than any model needs");
    }
    Array elements;
    elements.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      elements.push_back(read_value(value.element_type, depth + 1));
    }
    value.data = std::move(elements);
  }

  void read_alignment() {
    auto found = parsed_.metadata.find(kAlignmentKey);
    if (found == parsed_.metadata.end()) return;
    const Value& value = found->second;
    uint64_t alignment = 0;
    if (const auto* u = std::get_if<uint64_t>(&value.data); u && is_unsigned_integer(value.type)) {
      alignment = *u;
    } else if (const auto* i = std::get_if<int64_t>(&value.data); i && *i > 0) {
      alignment = static_cast<uint64_t>(*i);
    } else {
      fail(path_, ": metadata key '", kAlignmentKey, "' must be a positive integer, not ",
           value_type_name(value.type));
    }
    if (!std::has_single_bit(alignment)) {
      fail(path_, ": metadata key '", kAlignmentKey, "' is ", alignment,
           ", which is not a power of two");
    }
    parsed_.alignment = alignment;
  }

  void read_tensor_infos() {
    parsed_.tensors.reserve(tensor_count_);
    for (uint64_t i = 0; i < tensor_count_; ++i) {
      uint64_t info_offset = position_;
      item_ = "tensor " + std::to_string(i);
      TensorInfo info;
      info.name = read_string("tensor name");
      item_ = "tensor '" + printable(info.name) + "'";
      read_shape(info);
      read_type(info);
      uint64_t offset_at = position_;
      info.offset = read<uint64_t>("tensor data offset");
      if (info.offset % parsed_.alignment != 0) {
        fail_at(offset_at, "data offset ", info.offset, " is not a multiple of the alignment ",
                parsed_.alignment);
      }
      parsed_.tensors.push_back(std::move(info));
      tensor_info_offsets_.push_back(info_offset);
    }
    item_.clear();
    // The vector was reserved above, so these views stay valid.
    std::set<std::string_view> names;
    for (size_t i = 0; i < parsed_.tensors.size(); ++i) {
      if (!names.insert(parsed_.tensors[i].name).second) {
        item_ = "tensor '" + printable(parsed_.tensors[i].name) + "'";
        fail_at(tensor_info_offsets_[i], "duplicate tensor name");
      }
    }
    item_.clear();
  }

  void read_shape(TensorInfo& info) {
    uint64_t dims_offset = position_;
    auto n_dims = read<uint32_t>("dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail_at(dims_offset, "has ", n_dims, " dimensions (1 to ", kMaxDims, " supported)");
    }
    info.shape.resize(n_dims);
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim_offset = position_;
      auto dim = read<uint64_t>("dimension");
      if (dim == 0) fail_at(dim_offset, "dimension ", d, " is 0");
      if (overflows_elements(elements, dim, &elements)) {
        fail_at(dim_offset, "element count overflows at dimension ", d, " (", dim, ")");
      }
      // GGUF lists dimensions innermost first; hark's shapes are row-major.
      info.shape[n_dims - 1 - d] = static_cast<int64_t>(dim);
    }
  }

  void read_type(TensorInfo& info) {
    uint64_t type_offset = position_;
    auto id = read<uint32_t>("tensor type");
    if (!dtype_is_known(id)) {
      fail_at(type_offset, "type ", ggml_type_name(id), " (ggml type id ", id,
              ") is not supported by hark");
    }
    info.type = static_cast<DType>(id);
    auto block_values = static_cast<int64_t>(dtype_block_values(info.type));
    if (info.shape.back() % block_values != 0) {
      fail_at(type_offset, "rows of ", info.shape.back(), " ", dtype_name(info.type),
              " values are not a whole number of ", block_values, "-value blocks");
    }
    uint64_t blocks = static_cast<uint64_t>(info.elements()) / block_values;
    if (blocks > bytes_.size() / dtype_block_bytes(info.type)) {
      fail_at(type_offset, info.elements(), " ", dtype_name(info.type),
              " values need more bytes than the whole file holds");
    }
    info.nbytes = blocks * dtype_block_bytes(info.type);
  }

  void place_tensor_data() {
    if (parsed_.tensors.empty()) return;
    uint64_t alignment = parsed_.alignment;
    uint64_t data_start = position_ + (alignment - position_ % alignment) % alignment;
    if (data_start > bytes_.size()) {
      fail(path_, ": tensor data section would start at byte ", data_start,
           ", past the end of the file (", bytes_.size(), " bytes)");
    }
    uint64_t data_size = bytes_.size() - data_start;
    for (size_t i = 0; i < parsed_.tensors.size(); ++i) {
      TensorInfo& info = parsed_.tensors[i];
      if (info.offset > data_size || info.nbytes > data_size - info.offset) {
        item_ = "tensor '" + printable(info.name) + "'";
        fail_at(tensor_info_offsets_[i], "data [", info.offset, ", ", info.offset, " + ",
                info.nbytes, ") lies outside the ", data_size,
                "-byte data section (the file is truncated or the offset is wrong)");
      }
      info.data = bytes_.data() + data_start + info.offset;
    }
    std::vector<const TensorInfo*> by_offset;
    for (const TensorInfo& info : parsed_.tensors) by_offset.push_back(&info);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const TensorInfo& before = *by_offset[i - 1];
      const TensorInfo& after = *by_offset[i];
      if (before.offset + before.nbytes > after.offset) {
        fail(path_, ": tensors '", printable(before.name), "' and '", printable(after.name),
             "' overlap (data bytes ", data_start + before.offset, " to ",
             data_start + before.offset + before.nbytes, " and from ", data_start + after.offset,
             ")");
      }
    }
  }

  std::span<const uint8_t> bytes_;
  const std::string& path_;
  uint64_t position_ = 0;
  std::string item_;  // what is being read, for messages
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
  uint64_t metadata_values_ = 0;
  std::vector<uint64_t> tensor_info_offsets_;
  Parsed parsed_;
};

// ---------------------------------------------------------------------------------------------
// Typed access to metadata

double float_of(const Value& value, const std::string& path, std::string_view key) {
  if (const auto* d = std::get_if<double>(&value.data); d && is_float(value.type)) return *d;
  if (is_integer(value.type)) {
    if (const auto* i = std::get_if<int64_t>(&value.data)) return static_cast<double>(*i);
    if (const auto* u = std::get_if<uint64_t>(&value.data)) return static_cast<double>(*u);
  }
  fail(path, ": metadata key '", key, "' is ", value_type_name(value.type), ", expected a number");
}

const Array& array_of(const Value& value, const std::string& path, std::string_view key) {
  const auto* elements = std::get_if<Array>(&value.data);
  if (value.type != ValueType::ARRAY || elements == nullptr) {
    fail(path, ": metadata key '", key, "' is ", value_type_name(value.type),
         ", expected an array");
  }
  return *elements;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// File

struct File::Mapping {
  explicit Mapping(const std::string& path) : file(path) {}
  MappedFile file;
};

std::shared_ptr<const File> File::open(const std::string& path) {
  std::shared_ptr<File> file(new File());
  file->path_ = path;
  file->mapping_ = std::make_unique<Mapping>(path);
  Parsed parsed = Parser(file->mapping_->file.bytes(), file->path_).parse();
  file->version_ = parsed.version;
  file->alignment_ = parsed.alignment;
  file->metadata_ = std::move(parsed.metadata);
  file->tensors_ = std::move(parsed.tensors);
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    file->tensor_index_.emplace(file->tensors_[i].name, i);
  }
  return file;
}

File::~File() = default;

const Value* File::find(std::string_view key) const {
  auto found = metadata_.find(key);
  return found == metadata_.end() ? nullptr : &found->second;
}

namespace {

const Value& require(const File& file, std::string_view key) {
  const Value* value = file.find(key);
  if (value == nullptr) fail(file.path(), ": metadata key '", key, "' is missing");
  return *value;
}

}  // namespace

std::string File::get_string(std::string_view key) const {
  const Value& value = require(*this, key);
  const auto* text = std::get_if<std::string>(&value.data);
  if (value.type != ValueType::STRING || text == nullptr) {
    fail(path_, ": metadata key '", key, "' is ", value_type_name(value.type),
         ", expected a string");
  }
  return *text;
}

int64_t File::get_int(std::string_view key) const {
  return integer_of(require(*this, key), path_, key);
}

double File::get_float(std::string_view key) const {
  return float_of(require(*this, key), path_, key);
}

bool File::get_bool(std::string_view key) const {
  const Value& value = require(*this, key);
  const auto* flag = std::get_if<bool>(&value.data);
  if (value.type != ValueType::BOOL || flag == nullptr) {
    fail(path_, ": metadata key '", key, "' is ", value_type_name(value.type), ", expected a bool");
  }
  return *flag;
}

std::vector<std::string> File::get_strings(std::string_view key) const {
  const Value& value = require(*this, key);
  const Array& elements = array_of(value, path_, key);
  if (value.element_type != ValueType::STRING) {
    fail(path_, ": metadata key '", key, "' is an array of ", value_type_name(value.element_type),
         ", expected strings");
  }
  std::vector<std::string> result;
  result.reserve(elements.size());
  for (const Value& element : elements) result.push_back(std::get<std::string>(element.data));
  return result;
}

std::vector<int64_t> File::get_ints(std::string_view key) const {
  const Value& value = require(*this, key);
  const Array& elements = array_of(value, path_, key);
  if (!is_integer(value.element_type)) {
    fail(path_, ": metadata key '", key, "' is an array of ", value_type_name(value.element_type),
         ", expected integers");
  }
  std::vector<int64_t> result;
  result.reserve(elements.size());
  for (const Value& element : elements) result.push_back(integer_of(element, path_, key));
  return result;
}

std::vector<double> File::get_floats(std::string_view key) const {
  const Value& value = require(*this, key);
  const Array& elements = array_of(value, path_, key);
  if (!is_float(value.element_type) && !is_integer(value.element_type)) {
    fail(path_, ": metadata key '", key, "' is an array of ", value_type_name(value.element_type),
         ", expected numbers");
  }
  std::vector<double> result;
  result.reserve(elements.size());
  for (const Value& element : elements) result.push_back(float_of(element, path_, key));
  return result;
}

int64_t File::get_int_or(std::string_view key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double File::get_float_or(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

std::string File::get_string_or(std::string_view key, std::string fallback) const {
  return has(key) ? get_string(key) : fallback;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto found = tensor_index_.find(name);
  return found == tensor_index_.end() ? nullptr : &tensors_[found->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* info = find_tensor(name);
  if (info == nullptr) fail(path_, ": tensor '", name, "' is missing");
  return *info;
}

}  // namespace hark::gguf
