// --device for the commands that run a model: cpu, cuda, or auto (CUDA when a GPU is usable);
// --cross-kv for a Whisper model on the GPU.
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

// --cross-kv: a Whisper model's cross-attention storage on the GPU (whisper::CrossKvMode).
extern const Option cross_kv_option;
// The load options of a Whisper model; a usage error for an unknown storage (one other than
// native on the CPU is whisper::Model::load's error).
whisper::LoadOptions whisper_load_options(const ParsedArgs& args);

}  // namespace hark::cli
