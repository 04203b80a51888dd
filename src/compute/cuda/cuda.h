// What the rest of hark may ask about the CUDA backend without including any CUDA header: whether
// it is there. Builds without CUDA link cuda_nocuda.cpp, where nothing is available.
#pragma once

#include <cstddef>
#include <string>

namespace hark::compute::cuda {

// True when hark was built with CUDA and a usable GPU is present (driver loaded, device 0).
bool available();
// "NVIDIA H200, 139.8 GiB, sm_90", or why no GPU can be used ("built without CUDA", "no CUDA
// driver", ...).
std::string describe();

// Bytes of GPU memory hark has allocated (its buffers: weights, caches, activations, cuBLASLt's
// workspace; not the CUDA context) now and at most since the last reset. 0 without CUDA.
size_t allocated_bytes();
size_t peak_allocated_bytes();
void reset_peak_allocated_bytes();

// The GPU time by stage that HARK_CUDA_PROFILE collected (profile.h): one line per stage with its
// total milliseconds, calls and share. Empty when nothing was profiled (and without CUDA).
std::string profile_report();
// Empties that table (after a warm-up, whose first calls set things up).
void reset_profile();

// `hark bench --products`: the first feed-forward product of the benchmark models (Parakeet's,
// with SiLU; Whisper large-v3's encoder, with GELU) over a benchmark batch's rows, timed as
// cuBLASLt's product alone, followed by the activation kernel, and as the one Hopper kernel with
// the activation in its epilogue (compute/cuda/gemm_sm90.h): a table, one line per product.
// Throws without a usable GPU.
std::string time_activation_products();

// Bracket the work that an external profiler started with collection off measures (Nsight
// Compute's --profile-from-start off): `hark bench` brackets its last timed runs. Without such a
// profiler, or without CUDA, they do nothing.
void profiler_start();
void profiler_stop();

}  // namespace hark::compute::cuda
