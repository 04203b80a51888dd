#include "compute/cuda/cuda.h"

#include "base/error.h"

namespace hark::compute::cuda {

bool available() {
  return false;
}
std::string describe() {
  return "hark was built without CUDA";
}
size_t allocated_bytes() {
  return 0;
}
size_t peak_allocated_bytes() {
  return 0;
}
void reset_peak_allocated_bytes() {}
std::string profile_report() {
  return "";
}
void reset_profile() {}
std::string time_activation_products() {
  fail("hark was built without CUDA: no products to time");
}
void profiler_start() {}
void profiler_stop() {}

}  // namespace hark::compute::cuda
