// Numeric comparison for parity tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>

namespace hark::testing {

// max |actual - expected| / max |expected|: the error relative to the reference's scale, so a
// value near zero in the reference does not blow the ratio up.
inline double relative_error(std::span<const float> actual, std::span<const float> expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(actual.size(), expected.size()); ++i) {
    diff = std::max(diff, std::abs(double(actual[i]) - expected[i]));
    scale = std::max(scale, std::abs(double(expected[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

}  // namespace hark::testing
