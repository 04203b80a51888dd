#include "format/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "base/error.h"

namespace hark {

namespace {

struct DTypeTraits {
  DType type;
  std::string_view name;
  size_t block_values;
  size_t block_bytes;
};

constexpr std::array<DTypeTraits, 9> kDTypes = {{
    {DType::F32, "f32", 1, 4},
    {DType::F16, "f16", 1, 2},
    {DType::Q8_0, "q8_0", 32, 34},
    {DType::I8, "i8", 1, 1},
    {DType::I16, "i16", 1, 2},
    {DType::I32, "i32", 1, 4},
    {DType::I64, "i64", 1, 8},
    {DType::F64, "f64", 1, 8},
    {DType::BF16, "bf16", 1, 2},
}};

const DTypeTraits* find_traits(uint32_t id) {
  for (const DTypeTraits& traits : kDTypes) {
    if (static_cast<uint32_t>(traits.type) == id) return &traits;
  }
  return nullptr;
}

const DTypeTraits& traits_of(DType type) {
  const DTypeTraits* traits = find_traits(static_cast<uint32_t>(type));
  if (traits == nullptr) fail("unknown tensor type id ", static_cast<uint32_t>(type));
  return *traits;
}

}  // namespace

size_t dtype_block_values(DType type) {
  return traits_of(type).block_values;
}

size_t dtype_block_bytes(DType type) {
  return traits_of(type).block_bytes;
}

size_t dtype_bytes(DType type, uint64_t count) {
  const DTypeTraits& traits = traits_of(type);
  if (count % traits.block_values != 0) {
    fail(count, " values of type ", traits.name, " are not a whole number of ", traits.block_values,
         "-value blocks");
  }
  uint64_t blocks = count / traits.block_values;
  size_t bytes = 0;
  if (__builtin_mul_overflow(blocks, traits.block_bytes, &bytes)) {
    fail(count, " values of type ", traits.name, " do not fit in memory");
  }
  return bytes;
}

std::string_view dtype_name(DType type) {
  return traits_of(type).name;
}

DType dtype_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const DTypeTraits& traits : kDTypes) {
    if (traits.name == lower) return traits.type;
  }
  fail("unknown tensor type '", name, "' (expected f32, f16, bf16, q8_0, f64, i8, i16, i32, i64)");
}

bool dtype_is_known(uint32_t id) {
  return find_traits(id) != nullptr;
}

}  // namespace hark
