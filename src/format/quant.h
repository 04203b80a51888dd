// Conversions between F32 and the stored weight types: F16 (IEEE half), BF16 and Q8_0.
//
// Q8_0 is ggml's layout: blocks of 32 values, each an F16 scale d followed by 32 int8 q, with
// value = q * d. Expanding stored weights to F32 (to_f32) is on the hot path of every matrix
// product over F16/BF16/Q8_0 weights, so it uses F16C instructions where the CPU has them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "format/dtype.h"

namespace hark::quant {

// Scalar conversions; round to nearest, ties to even. NaN stays NaN (quiet), overflow gives inf,
// and F16 subnormals are produced and read exactly.
float f16_to_f32(uint16_t half);
uint16_t f32_to_f16(float value);
float bf16_to_f32(uint16_t bf16);
uint16_t f32_to_bf16(float value);  // as torch rounds; NaN becomes 0x7fc0

constexpr size_t kQ8BlockValues = 32;
constexpr size_t kQ8BlockBytes = 2 + kQ8BlockValues;

// Expands `count` values of `type` (F32, F16, BF16, F64 or Q8_0; count a multiple of 32 for Q8_0)
// at `src` into `dst`. `src` need not be aligned. Throws hark::Error for other types.
void to_f32(DType type, const void* src, float* dst, size_t count);

// Packs `count` floats as `type` (F32, F16, BF16, F64 or Q8_0; count a multiple of 32 for Q8_0).
// Q8_0 picks d as the smallest F16 at or above max|x|/127 and q = round(x/d), so every value is
// within d/2 of its original; it throws hark::Error on non-finite input or |x| beyond F16's range.
std::vector<uint8_t> from_f32(DType type, const float* src, size_t count);

// Expands rows [first_row, first_row + n_rows) of a row-major matrix stored as `type` whose rows
// hold `row_elems` values each (a whole number of blocks) into dst [n_rows x row_elems].
void to_f32_rows(DType type, const uint8_t* data, int64_t row_elems, int64_t first_row,
                 int64_t n_rows, float* dst);

}  // namespace hark::quant
