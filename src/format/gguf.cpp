// What the GGUF reader and writer share; reading is in gguf_read.cpp, writing in gguf_write.cpp.
#include <iterator>
#include <limits>

#include "base/error.h"
#include "format/gguf.h"
#include "format/gguf_internal.h"

namespace hark::gguf {

std::string_view value_type_name(ValueType type) {
  // Indexed by the GGUF type id.
  static constexpr std::string_view kNames[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                "i32", "f32", "bool", "string", "array",
                                                "u64", "i64", "f64"};
  const auto id = static_cast<uint32_t>(type);
  return id < std::size(kNames) ? kNames[id] : "unknown";
}

int64_t TensorInfo::elements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

namespace detail {

int64_t integer_of(const Value& value, const std::string& path, std::string_view key) {
  if (const auto* i = std::get_if<int64_t>(&value.data); i && is_integer(value.type)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&value.data); u && is_integer(value.type)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(path, ": metadata key '", key, "' value ", *u, " is too large");
    }
    return static_cast<int64_t>(*u);
  }
  fail(path, ": metadata key '", key, "' is ", value_type_name(value.type),
       ", expected an integer");
}

}  // namespace detail

}  // namespace hark::gguf
