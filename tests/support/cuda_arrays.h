// Test values on the GPU: uploaded in an element type, with the F32 values they hold there (after
// rounding), and read back.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "compute/cuda/device.h"
#include "support/cuda_elements.h"

namespace hark::compute::cuda::testing {

// Values on the GPU as element type e, and the F32 values they hold there.
struct DeviceArray {
  Buffer buffer;
  std::vector<float> values;

  void* at(Element e, int64_t element) const {
    return static_cast<uint8_t*>(buffer.data()) + element * static_cast<int64_t>(element_size(e));
  }
};

inline DeviceArray upload_values(Element e, const std::vector<float>& values) {
  const std::vector<uint8_t> bytes = encode(e, values);
  DeviceArray array{Buffer(bytes.size()), decode(e, bytes)};
  upload(bytes.data(), bytes.size(), array.buffer.data());
  return array;
}

inline DeviceArray random_array(Element e, size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> values(n);
  for (float& x : values) x = normal(rng);
  return upload_values(e, values);
}

inline std::vector<float> read_back(Element e, const Buffer& buffer, size_t n) {
  std::vector<uint8_t> bytes(n * element_size(e));
  download(buffer.data(), bytes.size(), bytes.data());
  return decode(e, bytes);
}

}  // namespace hark::compute::cuda::testing
