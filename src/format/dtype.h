// Element types of stored tensors. The numeric values are GGUF's (ggml's) type ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hark {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q8_0 = 8,  // blocks of 32 int8 with one F16 scale: 34 bytes per 32 values
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

// Values per storage block (32 for Q8_0, 1 otherwise) and bytes per block.
size_t dtype_block_values(DType type);
size_t dtype_block_bytes(DType type);
// Bytes that `count` values take; throws hark::Error when count is not a whole number of blocks.
size_t dtype_bytes(DType type, uint64_t count);
std::string_view dtype_name(DType type);
// Parses "f32", "f16", "bf16", "q8_0" (case-insensitive); throws hark::Error otherwise.
DType dtype_from_name(std::string_view name);
// True for the ids hark knows; a GGUF naming another type is rejected with a clear message.
bool dtype_is_known(uint32_t id);

}  // namespace hark
