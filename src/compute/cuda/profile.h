// Where the GPU time of a forward pass goes, stage by stage, without an external profiler (the
// GPU machine has none). Off unless HARK_CUDA_PROFILE is set; then a model marks where each stage
// of its work begins on its stream (clock.mark("attention")), CUDA events recorded at the marks
// time the stages, and the times are summed per stage name across calls into one table for the
// process, which `hark bench` prints (profile_report() in cuda.h). Marks on a stream that is
// being captured into a CUDA Graph are skipped: a model that wants its graph's stages timed runs
// them eagerly while profiling. A stage's time is the GPU's, from its mark to the next, idle
// time included: stages of small kernels, which the GPU runs faster than the host queues them,
// read long (a Whisper decode step's stages add up to more than its replayed graph takes).
#pragma once

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

namespace hark::compute::cuda {

// Whether HARK_CUDA_PROFILE is set (to anything but "0").
bool profiling();

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

  bool enabled_;
  cudaStream_t stream_;
  std::vector<std::pair<const char*, cudaEvent_t>> marks_;
};

}  // namespace hark::compute::cuda
