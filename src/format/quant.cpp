#include "format/quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "base/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

// F16 expansion uses the F16C instruction VCVTPH2PS. When the whole build targets F16C it is used
// directly; otherwise (the portable default) GCC and Clang compile one function for it and pick
// it at run time, so that a default build is fast on every machine that has the instruction.
#if defined(__F16C__) && defined(__AVX__)
#define HARK_F16C_ALWAYS 1
#elif (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define HARK_F16C_DISPATCH 1
#endif

namespace hark::quant {

namespace {

uint16_t load_u16(const uint8_t* bytes) {
  uint16_t value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

void f16_to_f32_scalar(const uint8_t* src, float* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(load_u16(src + 2 * i));
}

#if defined(HARK_F16C_ALWAYS) || defined(HARK_F16C_DISPATCH)
#if defined(HARK_F16C_DISPATCH)
__attribute__((target("avx,f16c")))
#endif
void f16_to_f32_f16c(const uint8_t* src, float* dst, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(halves));
  }
  f16_to_f32_scalar(src + 2 * i, dst + i, count - i);
}
#endif

void f16_to_f32_array(const uint8_t* src, float* dst, size_t count) {
#if defined(HARK_F16C_ALWAYS)
  f16_to_f32_f16c(src, dst, count);
#elif defined(HARK_F16C_DISPATCH)
  static const bool has_f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  if (has_f16c) {
    f16_to_f32_f16c(src, dst, count);
  } else {
    f16_to_f32_scalar(src, dst, count);
  }
#else
  f16_to_f32_scalar(src, dst, count);
#endif
}

void bf16_to_f32_array(const uint8_t* src, float* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
}

void f64_to_f32_array(const uint8_t* src, float* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    double value;
    std::memcpy(&value, src + 8 * i, sizeof value);
    dst[i] = static_cast<float>(value);
  }
}

void q8_0_to_f32_array(const uint8_t* src, float* dst, size_t count) {
  for (size_t block = 0; block < count / kQ8BlockValues; ++block) {
    const uint8_t* packed = src + block * kQ8BlockBytes;
    const float scale = f16_to_f32(load_u16(packed));
    const auto* quants = reinterpret_cast<const int8_t*>(packed + 2);
    float* out = dst + block * kQ8BlockValues;
    for (size_t j = 0; j < kQ8BlockValues; ++j) out[j] = scale * static_cast<float>(quants[j]);
  }
}

void check_whole_blocks(DType type, size_t count) {
  size_t block_values = dtype_block_values(type);
  if (count % block_values != 0) {
    fail(count, " ", dtype_name(type), " values are not a whole number of ", block_values,
         "-value blocks");
  }
}

// One Q8_0 block: the scale is rounded UP to an F16 so that max|x| / d <= 127 holds after the
// scale is stored, and every q = round(x / d) lands within d/2 of x.
void quantize_q8_0_block(const float* values, uint8_t* packed) {
  float max_abs = 0.0f;
  for (size_t j = 0; j < kQ8BlockValues; ++j) {
    if (!std::isfinite(values[j])) fail("cannot quantize ", values[j], " to q8_0");
    max_abs = std::max(max_abs, std::fabs(values[j]));
  }
  const float wanted_scale = max_abs / 127.0f;
  uint16_t half_scale = f32_to_f16(wanted_scale);
  if (f16_to_f32(half_scale) < wanted_scale) ++half_scale;  // next F16 up (positive values)
  if (half_scale >= 0x7c00) fail("cannot quantize ", max_abs, " to q8_0: beyond F16's range");
  const float scale = f16_to_f32(half_scale);
  std::memcpy(packed, &half_scale, sizeof half_scale);
  auto* quants = reinterpret_cast<int8_t*>(packed + 2);
  for (size_t j = 0; j < kQ8BlockValues; ++j) {
    float q = scale == 0.0f ? 0.0f : std::round(values[j] / scale);
    quants[j] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
  }
}

}  // namespace

float f16_to_f32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  const uint32_t exponent = (half >> 10) & 0x1f;
  const uint32_t mantissa = half & 0x3ff;
  if (exponent == 0x1f) {
    // Inf, or NaN with its payload kept and made quiet (as VCVTPH2PS does).
    uint32_t quiet = mantissa != 0 ? 0x00400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in F32.
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) {
    // NaN: keep the top payload bits and make it quiet.
    return static_cast<uint16_t>(sign | 0x7e00 | ((magnitude >> 13) & 0x3ff));
  }
  // 65520 is half-way between F16's largest finite value (65504) and the next step, and rounds
  // to even, which is infinity.
  if (magnitude >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);

  const uint32_t exponent = magnitude >> 23;
  if (exponent < 113) {
    // Below F16's smallest normal (2^-14): a subnormal m * 2^-24, rounded to nearest even.
    if (exponent < 102) return sign;  // below 2^-25: rounds to zero
    const uint32_t significand = (magnitude & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t result = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (result & 1))) ++result;
    return static_cast<uint16_t>(sign | result);  // 1024 carries into the smallest normal
  }
  // Normal: rebias the exponent, keep 10 mantissa bits, round on the 13 dropped ones. A carry out
  // of the mantissa correctly bumps the exponent.
  uint32_t result = (magnitude - (112u << 23)) >> 13;
  const uint32_t rest = magnitude & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (result & 1))) ++result;
  return static_cast<uint16_t>(sign | result);
}

float bf16_to_f32(uint16_t bf16) {
  return std::bit_cast<float>(static_cast<uint32_t>(bf16) << 16);
}

uint16_t f32_to_bf16(float value) {
  if (std::isnan(value)) return 0x7fc0;
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t round_to_even = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + round_to_even) >> 16);
}

void to_f32(DType type, const void* src, float* dst, size_t count) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::F32:
      std::memcpy(dst, bytes, count * sizeof(float));
      return;
    case DType::F16:
      f16_to_f32_array(bytes, dst, count);
      return;
    case DType::BF16:
      bf16_to_f32_array(bytes, dst, count);
      return;
    case DType::F64:
      f64_to_f32_array(bytes, dst, count);
      return;
    case DType::Q8_0:
      check_whole_blocks(type, count);
      q8_0_to_f32_array(bytes, dst, count);
      return;
    default:
      fail("cannot expand ", dtype_name(type), " values to f32");
  }
}

std::vector<uint8_t> from_f32(DType type, const float* src, size_t count) {
  check_whole_blocks(type, count);
  std::vector<uint8_t> packed(dtype_bytes(type, count));
  uint8_t* out = packed.data();
  switch (type) {
    case DType::F32:
      std::memcpy(out, src, count * sizeof(float));
      break;
    case DType::F16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t half = f32_to_f16(src[i]);
        std::memcpy(out + 2 * i, &half, sizeof half);
      }
      break;
    case DType::BF16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t bf16 = f32_to_bf16(src[i]);
        std::memcpy(out + 2 * i, &bf16, sizeof bf16);
      }
      break;
    case DType::F64:
      for (size_t i = 0; i < count; ++i) {
        double wide = src[i];
        std::memcpy(out + 8 * i, &wide, sizeof wide);
      }
      break;
    case DType::Q8_0:
      for (size_t block = 0; block < count / kQ8BlockValues; ++block) {
        quantize_q8_0_block(src + block * kQ8BlockValues, out + block * kQ8BlockBytes);
      }
      break;
    default:
      fail("cannot pack f32 values as ", dtype_name(type));
  }
  return packed;
}

void to_f32_rows(DType type, const uint8_t* data, int64_t row_elems, int64_t first_row,
                 int64_t n_rows, float* dst) {
  if (row_elems < 0 || first_row < 0 || n_rows < 0) {
    fail("to_f32_rows: negative row length ", row_elems, ", first row ", first_row, " or count ",
         n_rows);
  }
  check_whole_blocks(type, static_cast<size_t>(row_elems));
  const size_t row_bytes = dtype_bytes(type, static_cast<uint64_t>(row_elems));
  to_f32(type, data + static_cast<size_t>(first_row) * row_bytes, dst,
         static_cast<size_t>(n_rows) * static_cast<size_t>(row_elems));
}

}  // namespace hark::quant
