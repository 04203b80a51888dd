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

// The help says "60" itself, for an Option's text is a literal.
static_assert(whisper::kInt8AutoFramesFromWindows == 60,
              "--cross-kv's help gives the windows from which int8-auto takes INT8 frames");
const Option cross_kv_option = {
    "cross-kv", 0, "STORAGE",
    "Whisper on the GPU: what the decoder's cross-attention reads\n"
    "of each window. native: each layer's K/V; int8: those\n"
    "in INT8 (half the memory); frames: the encoder's output, K/V\n"
    "folded into the attention; int8-frames: those in INT8 (H100/H200,\n"
    "F16 weights); int8-auto: int8 below 60 windows a batch, int8-frames\n"
    "from there (fastest for long audio). INT8 moves logits by up to 3e-2.\n"
    "Default: HARK_CUDA_CROSS_KV when set, else native."};

whisper::LoadOptions whisper_load_options(const ParsedArgs& args) {
  whisper::LoadOptions options;
  if (!args.has("cross-kv")) return options;
  const std::string name = args.value_or("cross-kv", "");
  options.cross_kv = whisper::cross_kv_mode_from_name(name);
  if (!options.cross_kv) {
    usage_fail("unknown --cross-kv storage '", name, "' (expected ", whisper::cross_kv_mode_names(),
               ")");
  }
  return options;
}

}  // namespace hark::cli
