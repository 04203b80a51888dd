#include "compute/cuda/cuda.h"

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
void profiler_start() {}
void profiler_stop() {}

}  // namespace hark::compute::cuda
