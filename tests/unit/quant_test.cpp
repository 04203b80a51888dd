#include "format/quant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "base/error.h"

namespace hark::quant {
namespace {

uint32_t bits_of(float value) {
  return std::bit_cast<uint32_t>(value);
}

TEST(Quant, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto half = static_cast<uint16_t>(h);
    const float value = f16_to_f32(half);
    if ((half & 0x7c00) == 0x7c00 && (half & 0x3ff) != 0) {
      EXPECT_TRUE(std::isnan(value)) << h;
      EXPECT_EQ(f32_to_f16(value) & 0x7c00, 0x7c00);  // still NaN after the way back
      EXPECT_NE(f32_to_f16(value) & 0x3ff, 0);
    } else {
      EXPECT_EQ(f32_to_f16(value), half) << h;
    }
  }
}

TEST(Quant, F16KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits_of(f16_to_f32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST(Quant, F16RoundsToNearestEven) {
  const float ulp_at_one = std::ldexp(1.0f, -10);
  EXPECT_EQ(f32_to_f16(1.0f + ulp_at_one / 2), 0x3c00);      // tie, even stays down
  EXPECT_EQ(f32_to_f16(1.0f + 3 * ulp_at_one / 2), 0x3c02);  // tie, odd goes up
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + ulp_at_one / 2, 2.0f)), 0x3c01);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);  // below the tie: largest finite
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // the tie rounds to even: infinity
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  // Subnormals: steps of 2^-24.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even zero
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 steps: tie to even 2
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);  // rounds into the normals
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-10f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

#ifdef __FLT16_MAX__
// The compiler's own float -> _Float16 conversion is an independent reference.
TEST(Quant, F16MatchesCompilerConversionOnRandomFloats) {
  std::mt19937 random(7);
  for (int i = 0; i < 1'000'000; ++i) {
    uint32_t bits = random();
    // Concentrate on the range F16 can hold, where the rounding matters.
    if (i % 2 == 0) bits = (bits & 0x807fffff) | ((100 + random() % 45) << 23);
    float value = std::bit_cast<float>(bits);
    if (std::isnan(value)) continue;
    auto expected = std::bit_cast<uint16_t>(static_cast<_Float16>(value));
    ASSERT_EQ(f32_to_f16(value), expected) << std::hex << bits;
  }
}
#endif

TEST(Quant, ToF32FromF16MatchesScalarForEveryHalfAndAlignment) {
  // 65536 halves + 1 so that the vector path's tail runs too; start at an odd address.
  std::vector<uint8_t> storage(2 * 65537 + 1);
  uint8_t* src = storage.data() + 1;
  for (uint32_t h = 0; h < 65537; ++h) {
    auto half = static_cast<uint16_t>(h & 0xffff);
    std::memcpy(src + 2 * h, &half, 2);
  }
  std::vector<float> out(65537);
  to_f32(DType::F16, src, out.data(), out.size());
  for (uint32_t h = 0; h < 65537; ++h) {
    float expected = f16_to_f32(static_cast<uint16_t>(h & 0xffff));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(out[h])) << h;
    } else {
      EXPECT_EQ(bits_of(out[h]), bits_of(expected)) << h;
    }
  }
}

TEST(Quant, Bf16ExactAndRounding) {
  for (float value : {0.0f, -0.0f, 1.0f, -2.5f, 3.140625f, 1e30f, -1e-30f}) {
    uint32_t truncated = bits_of(value) & 0xffff0000u;
    float representable = std::bit_cast<float>(truncated);
    EXPECT_EQ(f32_to_bf16(representable), truncated >> 16);
    EXPECT_EQ(bits_of(bf16_to_f32(f32_to_bf16(representable))), truncated);
  }
  auto bf16_of = [](uint32_t bits) { return f32_to_bf16(std::bit_cast<float>(bits)); };
  EXPECT_EQ(bf16_of(0x3f808000), 0x3f80);  // tie, even stays down
  EXPECT_EQ(bf16_of(0x3f818000), 0x3f82);  // tie, odd goes up
  EXPECT_EQ(bf16_of(0x3f808001), 0x3f81);  // above the tie
  EXPECT_EQ(bf16_of(0x3f807fff), 0x3f80);  // below the tie
  EXPECT_EQ(bf16_of(0x7f7fffff), 0x7f80);  // largest float rounds to infinity, as torch does
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(std::nanf("")), 0x7fc0);
  EXPECT_EQ(f32_to_bf16(-std::nanf("")), 0x7fc0);

  std::vector<float> values = {1.0f, -3.5f, 0.15625f};
  auto packed = from_f32(DType::BF16, values.data(), values.size());
  ASSERT_EQ(packed.size(), 6u);
  std::vector<float> back(3);
  to_f32(DType::BF16, packed.data(), back.data(), back.size());
  EXPECT_EQ(back, values);
}

TEST(Quant, F32AndF64RoundTrip) {
  std::vector<float> values = {1.0f, -0.0f, 1e-40f, 3.4e38f, -7.25f};
  for (DType type : {DType::F32, DType::F64}) {
    auto packed = from_f32(type, values.data(), values.size());
    EXPECT_EQ(packed.size(), values.size() * (type == DType::F32 ? 4 : 8));
    std::vector<float> back(values.size());
    to_f32(type, packed.data(), back.data(), back.size());
    for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(bits_of(back[i]), bits_of(values[i]));
  }
}

float stored_scale(const uint8_t* block) {
  uint16_t half;
  std::memcpy(&half, block, 2);
  return f16_to_f32(half);
}

TEST(Quant, Q8ErrorIsWithinHalfAScalePerBlock) {
  std::mt19937 random(3);
  const std::vector<float> magnitudes = {1e-7f, 1e-3f, 0.02f, 1.0f, 300.0f, 60000.0f};
  const size_t blocks_per_magnitude = 64;
  std::vector<float> values;
  for (float magnitude : magnitudes) {
    std::normal_distribution<float> normal(0.0f, magnitude);
    for (size_t i = 0; i < blocks_per_magnitude * kQ8BlockValues; ++i) {
      values.push_back(normal(random));
    }
  }
  // A block of zeros and a block with one outlier.
  values.insert(values.end(), kQ8BlockValues, 0.0f);
  for (size_t i = 0; i < kQ8BlockValues; ++i) values.push_back(i == 5 ? -1000.0f : 0.001f * i);

  auto packed = from_f32(DType::Q8_0, values.data(), values.size());
  ASSERT_EQ(packed.size(), values.size() / kQ8BlockValues * kQ8BlockBytes);
  std::vector<float> back(values.size());
  to_f32(DType::Q8_0, packed.data(), back.data(), back.size());

  for (size_t block = 0; block < values.size() / kQ8BlockValues; ++block) {
    const uint8_t* packed_block = packed.data() + block * kQ8BlockBytes;
    const float scale = stored_scale(packed_block);
    float max_abs = 0.0f;
    for (size_t j = 0; j < kQ8BlockValues; ++j) {
      max_abs = std::max(max_abs, std::fabs(values[block * kQ8BlockValues + j]));
    }
    EXPECT_GE(scale, max_abs / 127.0f) << block;
    for (size_t j = 0; j < kQ8BlockValues; ++j) {
      size_t i = block * kQ8BlockValues + j;
      EXPECT_LE(std::fabs(back[i] - values[i]), scale / 2 * (1 + 1e-6f)) << block << " " << j;
      auto q = static_cast<int8_t>(packed_block[2 + j]);
      EXPECT_GE(q, -127);
      EXPECT_EQ(back[i], scale * q);
    }
  }
  // The zero block stores a zero scale and decodes to exact zeros.
  const size_t zero_block = magnitudes.size() * blocks_per_magnitude;
  EXPECT_EQ(stored_scale(packed.data() + zero_block * kQ8BlockBytes), 0.0f);
  for (size_t j = 0; j < kQ8BlockValues; ++j) EXPECT_EQ(back[zero_block * kQ8BlockValues + j], 0);
}

TEST(Quant, Q8LayoutIsScaleThenQuants) {
  std::vector<float> values(kQ8BlockValues);
  for (size_t j = 0; j < kQ8BlockValues; ++j) values[j] = static_cast<float>(j) - 16.0f;
  auto packed = from_f32(DType::Q8_0, values.data(), values.size());
  ASSERT_EQ(packed.size(), kQ8BlockBytes);
  const float scale = stored_scale(packed.data());
  EXPECT_NEAR(scale, 16.0f / 127.0f, 16.0f / 127.0f / 1024);
  EXPECT_EQ(static_cast<int8_t>(packed[2]), -127);    // x = -16, the largest magnitude
  EXPECT_EQ(static_cast<int8_t>(packed[2 + 16]), 0);  // x = 0
  EXPECT_EQ(static_cast<int8_t>(packed[2 + 17]), static_cast<int8_t>(std::round(1.0f / scale)));
}

TEST(Quant, Q8RejectsWhatItCannotStore) {
  std::vector<float> values(kQ8BlockValues, 1.0f);
  EXPECT_THROW(from_f32(DType::Q8_0, values.data(), 31), Error);
  values[3] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(from_f32(DType::Q8_0, values.data(), values.size()), Error);
  values[3] = std::nanf("");
  EXPECT_THROW(from_f32(DType::Q8_0, values.data(), values.size()), Error);
  values[3] = 1e10f;  // needs a scale beyond F16's range
  EXPECT_THROW(from_f32(DType::Q8_0, values.data(), values.size()), Error);
  std::vector<float> out(kQ8BlockValues);
  std::vector<uint8_t> packed(kQ8BlockBytes);
  EXPECT_THROW(to_f32(DType::Q8_0, packed.data(), out.data(), 16), Error);
}

TEST(Quant, RejectsUnsupportedTypes) {
  std::vector<float> values(4);
  std::vector<uint8_t> bytes(16);
  EXPECT_THROW(to_f32(DType::I32, bytes.data(), values.data(), 4), Error);
  EXPECT_THROW(from_f32(DType::I8, values.data(), 4), Error);
}

TEST(Quant, RowsMatchWholeConversion) {
  const int64_t rows = 5, row_elems = 64;
  std::mt19937 random(9);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> values(rows * row_elems);
  for (float& value : values) value = uniform(random);
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    auto packed = from_f32(type, values.data(), values.size());
    std::vector<float> all(values.size());
    to_f32(type, packed.data(), all.data(), all.size());
    std::vector<float> some(2 * row_elems);
    to_f32_rows(type, packed.data(), row_elems, 2, 2, some.data());
    EXPECT_TRUE(std::equal(some.begin(), some.end(), all.begin() + 2 * row_elems))
        << dtype_name(type);
  }
  std::vector<float> out(64);
  std::vector<uint8_t> packed(68);
  EXPECT_THROW(to_f32_rows(DType::Q8_0, packed.data(), 48, 0, 1, out.data()), Error);
  EXPECT_THROW(to_f32_rows(DType::F32, packed.data(), 4, -1, 1, out.data()), Error);
}

}  // namespace
}  // namespace hark::quant
