// --device for the commands that run a model: cpu, cuda, or auto (CUDA when a GPU is usable).
#pragma once

#include <string>

#include "cli/args.h"
#include "models/parakeet/model.h"
#include "models/whisper/model.h"

namespace hark::cli {

extern const Option device_option;
// Throws a usage error for an unknown name, hark::Error for cuda without a usable GPU.
whisper::Device device_from_args(const ParsedArgs& args);
const char* device_name(whisper::Device device);
// The same choice for a Parakeet model.
parakeet::Device parakeet_device(whisper::Device device);

}  // namespace hark::cli
