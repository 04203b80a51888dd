// Where the GPU time of a forward pass goes, stage by stage, without an external profiler (the
// GPU machine has none). Off unless HARK_CUDA_PROFILE is set; then a model marks where each stage
// of its work begins on its stream (clock.mark("attention")), CUDA events recorded at the marks
// time the stages, and the times are summed per stage name across calls into one table for the
// process, which `hark bench` prints (profile_report() in cuda.h). Marks on a stream that is
// being captured into a CUDA Graph are skipped: a model that wants its graph's stages timed runs
// them eagerly while profiling. A stage's time is the GPU's, from its mark to the next, idle
// time included: stages of small kernels, which the GPU runs faster than the host queues them,
// read long (a Whisper decode step's stages add up to more than its replayed graph takes).
// HARK_CUDA_PROFILE=host times the stages on the host's clock instead, each mark first waiting
// for the stream: a stage then also counts what the host spent on it (allocations, a library's
// first use, capturing a graph), at the price of the overlap between the host and the GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <vector>

namespace hark::compute::cuda {

// Whether HARK_CUDA_PROFILE is set (to anything but "0").
bool profiling();
// Whether it is "host".
bool profiling_on_host();

class StageClock {
 public:
  explicit StageClock(cudaStream_t stream);
  ~StageClock();  // finish()es when the stages were not finished
  StageClock(const StageClock&) = delete;
  StageClock& operator=(const StageClock&) = delete;

  bool enabled() const { return enabled_; }
  // Ends the running stage, if any, and starts `stage` (a string literal: it is kept).
  void mark(const char* stage) {
    if (enabled_) record(stage);
  }
  // Ends the last stage, waits for the stream and adds every stage's time to the table.
  void finish();

 private:
  void record(const char* stage);

  struct Mark {
    const char* stage = nullptr;
    cudaEvent_t event = nullptr;  // null when timed on the host
    std::chrono::steady_clock::time_point host;
  };
  bool enabled_;
  bool on_host_;
  cudaStream_t stream_;
  std::vector<Mark> marks_;
};

}  // namespace hark::compute::cuda
