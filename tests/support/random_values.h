// Seeded random test values: std::mt19937 gives the same numbers on every run of one build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace hark::testing {

// n values uniform in [low, high).
inline std::vector<float> uniform_values(size_t n, uint32_t seed, float low = -1.0f,
                                         float high = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(n);
  for (float& value : values) value = uniform(rng);
  return values;
}

}  // namespace hark::testing
