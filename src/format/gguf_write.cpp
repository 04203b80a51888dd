// GGUF writing: gguf::Writer.
#include <bit>
#include <limits>
#include <utility>

#include "base/atomic_file.h"
#include "base/error.h"
#include "format/gguf.h"
#include "format/gguf_internal.h"

namespace hark::gguf {

using namespace detail;  // the format's shared pieces, from gguf_internal.h

namespace {

constexpr uint32_t kWriteVersion = 3;

// The range of each integer type, for range checks on write.
std::pair<__int128, __int128> integer_range(ValueType type) {
  switch (type) {
    case ValueType::U8:
      return {0, std::numeric_limits<uint8_t>::max()};
    case ValueType::I8:
      return {std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()};
    case ValueType::U16:
      return {0, std::numeric_limits<uint16_t>::max()};
    case ValueType::I16:
      return {std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()};
    case ValueType::U32:
      return {0, std::numeric_limits<uint32_t>::max()};
    case ValueType::I32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case ValueType::U64:
      return {0, std::numeric_limits<uint64_t>::max()};
    case ValueType::I64:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
    default:
      return {0, -1};
  }
}

template <class... Parts>
[[noreturn]] void writer_fail(std::string_view what, std::string_view name, const Parts&... parts) {
  fail("gguf writer: ", what, " '", name, "': ", parts...);
}

void check_value(const Value& value, std::string_view key, int depth) {
  auto bad = [&](const auto&... parts) { writer_fail("metadata key", key, parts...); };
  if (!value_type_is_known(static_cast<uint32_t>(value.type))) {
    bad("unknown value type ", static_cast<uint32_t>(value.type));
  }
  if (is_integer(value.type)) {
    __int128 number = 0;
    if (const auto* i = std::get_if<int64_t>(&value.data)) {
      number = *i;
    } else if (const auto* u = std::get_if<uint64_t>(&value.data)) {
      number = *u;
    } else {
      bad(value_type_name(value.type), " value does not hold an integer");
    }
    auto [low, high] = integer_range(value.type);
    if (number < low || number > high) bad("value out of range for ", value_type_name(value.type));
    return;
  }
  switch (value.type) {
    case ValueType::F32:
    case ValueType::F64:
      if (!std::holds_alternative<double>(value.data)) bad("float value does not hold a double");
      return;
    case ValueType::BOOL:
      if (!std::holds_alternative<bool>(value.data)) bad("bool value does not hold a bool");
      return;
    case ValueType::STRING:
      if (!std::holds_alternative<std::string>(value.data)) bad("string value holds no string");
      return;
    case ValueType::ARRAY: {
      if (depth >= kMaxArrayDepth) bad("arrays nested deeper than ", kMaxArrayDepth);
      const auto* elements = std::get_if<Array>(&value.data);
      if (elements == nullptr) writer_fail("metadata key", key, "array holds no array");
      for (const Value& element : *elements) {
        if (element.type != value.element_type) {
          bad("array of ", value_type_name(value.element_type), " holds a ",
              value_type_name(element.type));
        }
        check_value(element, key, depth + 1);
      }
      return;
    }
    default:
      return;
  }
}

// Serializes little-endian GGUF fields into the output file.
class Encoder {
 public:
  explicit Encoder(AtomicFileWriter& out) : out_(out) {}

  template <class T>
  void scalar(T value) {
    out_.write(&value, sizeof value);
  }

  void string(std::string_view text) {
    scalar<uint64_t>(text.size());
    out_.write(text.data(), text.size());
  }

  void value(const Value& value) {
    auto integer = [&]() -> uint64_t {
      if (const auto* i = std::get_if<int64_t>(&value.data)) return static_cast<uint64_t>(*i);
      return std::get<uint64_t>(value.data);
    };
    switch (value.type) {
      case ValueType::U8:
      case ValueType::I8:
        scalar(static_cast<uint8_t>(integer()));
        break;
      case ValueType::U16:
      case ValueType::I16:
        scalar(static_cast<uint16_t>(integer()));
        break;
      case ValueType::U32:
      case ValueType::I32:
        scalar(static_cast<uint32_t>(integer()));
        break;
      case ValueType::U64:
      case ValueType::I64:
        scalar(integer());
        break;
      case ValueType::F32:
        scalar(static_cast<float>(std::get<double>(value.data)));
        break;
      case ValueType::F64:
        scalar(std::get<double>(value.data));
        break;
      case ValueType::BOOL:
        scalar<uint8_t>(std::get<bool>(value.data) ? 1 : 0);
        break;
      case ValueType::STRING:
        string(std::get<std::string>(value.data));
        break;
      case ValueType::ARRAY: {
        const Array& elements = std::get<Array>(value.data);
        scalar(static_cast<uint32_t>(value.element_type));
        scalar<uint64_t>(elements.size());
        for (const Value& element : elements) this->value(element);
        break;
      }
    }
  }

  void pad_to(uint64_t alignment) {
    out_.write_zeros((alignment - out_.position() % alignment) % alignment);
  }

 private:
  AtomicFileWriter& out_;
};

uint64_t align_up(uint64_t offset, uint64_t alignment) {
  return (offset + alignment - 1) / alignment * alignment;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writer

Writer::Writer(uint64_t alignment) : alignment_(alignment) {
  if (!std::has_single_bit(alignment)) {
    fail("gguf writer: alignment ", alignment, " is not a power of two");
  }
}

void Writer::set(std::string key, Value value) {
  if (key.empty()) fail("gguf writer: empty metadata key");
  check_value(value, key, 0);
  for (auto& [existing_key, existing_value] : metadata_) {
    if (existing_key == key) {
      existing_value = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void Writer::set_string(std::string key, std::string value) {
  set(std::move(key), Value{ValueType::STRING, std::move(value)});
}

void Writer::set_u32(std::string key, uint32_t value) {
  set(std::move(key), Value{ValueType::U32, uint64_t{value}});
}

void Writer::set_i32(std::string key, int32_t value) {
  set(std::move(key), Value{ValueType::I32, int64_t{value}});
}

void Writer::set_u64(std::string key, uint64_t value) {
  set(std::move(key), Value{ValueType::U64, value});
}

void Writer::set_f32(std::string key, float value) {
  set(std::move(key), Value{ValueType::F32, double{value}});
}

void Writer::set_bool(std::string key, bool value) {
  set(std::move(key), Value{ValueType::BOOL, value});
}

namespace {

// An array Value of `type` elements, each made from one input by `convert`.
template <class Input, class Convert>
Value make_array(ValueType type, const std::vector<Input>& inputs, Convert convert) {
  Value array;
  array.type = ValueType::ARRAY;
  array.element_type = type;
  Array& elements = array.data.emplace<Array>();
  elements.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    elements[i].type = type;
    elements[i].data = convert(inputs[i]);
  }
  return array;
}

}  // namespace

void Writer::set_strings(std::string key, const std::vector<std::string>& values) {
  set(std::move(key),
      make_array(ValueType::STRING, values, [](const std::string& text) { return text; }));
}

void Writer::set_i32s(std::string key, const std::vector<int32_t>& values) {
  set(std::move(key),
      make_array(ValueType::I32, values, [](int32_t number) { return int64_t{number}; }));
}

void Writer::set_f32s(std::string key, const std::vector<float>& values) {
  set(std::move(key),
      make_array(ValueType::F32, values, [](float number) { return double{number}; }));
}

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> shape,
                        Producer produce) {
  auto bad = [&](const auto&... parts) { writer_fail("tensor", name, parts...); };
  if (!dtype_is_known(static_cast<uint32_t>(type))) {
    bad("unknown type id ", static_cast<uint32_t>(type));
  }
  if (shape.empty() || shape.size() > kMaxDims) {
    bad(shape.size(), " dimensions (1 to ", kMaxDims, " supported)");
  }
  int64_t elements = 1;
  for (int64_t dim : shape) {
    if (dim <= 0) bad("dimension ", dim, " is not positive");
    if (overflows_elements(elements, static_cast<uint64_t>(dim), &elements)) {
      bad("element count overflows");
    }
  }
  auto block_values = static_cast<int64_t>(dtype_block_values(type));
  if (shape.back() % block_values != 0) {
    bad("rows of ", shape.back(), " values are not a whole number of ", block_values,
        "-value blocks of ", dtype_name(type));
  }
  for (const PendingTensor& tensor : tensors_) {
    if (tensor.name == name) bad("added twice");
  }
  if (!produce) bad("no producer");
  tensors_.push_back({std::move(name), type, std::move(shape), std::move(produce)});
}

void Writer::write(const std::string& path) const {
  // The alignment is part of the format only through this key; write it whenever it differs from
  // the default, and refuse a caller-set value that disagrees with the layout being written.
  bool has_alignment_key = false;
  for (const auto& [key, value] : metadata_) {
    if (key != kAlignmentKey) continue;
    has_alignment_key = true;
    if (!is_integer(value.type) ||
        integer_of(value, path, key) != static_cast<int64_t>(alignment_)) {
      fail("gguf writer: ", path, ": metadata key '", kAlignmentKey,
           "' disagrees with the writer's alignment ", alignment_);
    }
  }
  bool add_alignment_key = !has_alignment_key && alignment_ != kDefaultAlignment;

  std::vector<uint64_t> offsets;
  std::vector<uint64_t> sizes;
  uint64_t data_size = 0;
  for (const PendingTensor& tensor : tensors_) {
    int64_t elements = 1;
    for (int64_t dim : tensor.shape) elements *= dim;
    offsets.push_back(data_size);
    sizes.push_back(dtype_bytes(tensor.type, static_cast<uint64_t>(elements)));
    data_size = align_up(data_size + sizes.back(), alignment_);
  }

  AtomicFileWriter out(path);
  Encoder encode(out);
  encode.scalar(kMagic);
  encode.scalar(kWriteVersion);
  encode.scalar<uint64_t>(tensors_.size());
  encode.scalar<uint64_t>(metadata_.size() + (add_alignment_key ? 1 : 0));
  if (add_alignment_key) {
    encode.string(kAlignmentKey);
    encode.scalar(static_cast<uint32_t>(ValueType::U32));
    encode.scalar(static_cast<uint32_t>(alignment_));
  }
  for (const auto& [key, value] : metadata_) {
    encode.string(key);
    encode.scalar(static_cast<uint32_t>(value.type));
    encode.value(value);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const PendingTensor& tensor = tensors_[i];
    encode.string(tensor.name);
    encode.scalar(static_cast<uint32_t>(tensor.shape.size()));
    for (auto dim = tensor.shape.rbegin(); dim != tensor.shape.rend(); ++dim) {
      encode.scalar(static_cast<uint64_t>(*dim));
    }
    encode.scalar(static_cast<uint32_t>(tensor.type));
    encode.scalar(offsets[i]);
  }
  encode.pad_to(alignment_);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    std::vector<uint8_t> bytes = tensors_[i].produce();
    if (bytes.size() != sizes[i]) {
      fail("gguf writer: ", path, ": tensor '", tensors_[i].name, "' produced ", bytes.size(),
           " bytes, expected ", sizes[i]);
    }
    out.write(bytes.data(), bytes.size());
    encode.pad_to(alignment_);
  }
  out.commit();
}

}  // namespace hark::gguf
