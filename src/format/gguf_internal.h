// Pieces of the GGUF format shared by its reader (gguf_read.cpp) and writer (gguf_write.cpp).
// Not part of hark's interface: include format/gguf.h instead.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "format/gguf.h"

namespace hark::gguf::detail {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr std::string_view kAlignmentKey = "general.alignment";
constexpr int kMaxArrayDepth = 8;  // nesting deeper than this is never meaningful
constexpr uint32_t kMaxDims = 8;   // ggml itself stops at 4

inline bool value_type_is_known(uint32_t id) {
  return id <= static_cast<uint32_t>(ValueType::F64);
}

inline bool is_signed_integer(ValueType type) {
  return type == ValueType::I8 || type == ValueType::I16 || type == ValueType::I32 ||
         type == ValueType::I64;
}

inline bool is_unsigned_integer(ValueType type) {
  return type == ValueType::U8 || type == ValueType::U16 || type == ValueType::U32 ||
         type == ValueType::U64;
}

inline bool is_integer(ValueType type) {
  return is_signed_integer(type) || is_unsigned_integer(type);
}

inline bool is_float(ValueType type) {
  return type == ValueType::F32 || type == ValueType::F64;
}

// Multiplies *product by dim; true when the result would leave int64's range.
inline bool overflows_elements(int64_t count, uint64_t dim, int64_t* product) {
  if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return true;
  return __builtin_mul_overflow(count, static_cast<int64_t>(dim), product);
}

// The value of an integer-typed Value; throws hark::Error naming `path` and `key` for any other
// type, or for a u64 beyond int64's range.
int64_t integer_of(const Value& value, const std::string& path, std::string_view key);

}  // namespace hark::gguf::detail
