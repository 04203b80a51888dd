#include "cli/device.h"

#include "base/error.h"
#include "compute/cuda/cuda.h"

namespace hark::cli {

const Option device_option = {"device", 0, "DEVICE",
                              "cpu, cuda, or auto (default: cuda when a GPU is usable)."};

whisper::Device device_from_args(const ParsedArgs& args) {
  const std::string name = args.value_or("device", "auto");
  if (name == "cpu") return whisper::Device::cpu;
  if (name == "auto") {
    return compute::cuda::available() ? whisper::Device::cuda : whisper::Device::cpu;
  }
  if (name == "cuda") {
    if (!compute::cuda::available()) fail("--device cuda: ", compute::cuda::describe());
    return whisper::Device::cuda;
  }
  usage_fail("unknown device '", name, "' (expected cpu, cuda or auto)");
}

const char* device_name(whisper::Device device) {
  return device == whisper::Device::cuda ? "cuda" : "cpu";
}

parakeet::Device parakeet_device(whisper::Device device) {
  return device == whisper::Device::cuda ? parakeet::Device::cuda : parakeet::Device::cpu;
}

}  // namespace hark::cli
