#include "compute/cuda/profile.h"

#include <cuda_profiler_api.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "compute/cuda/cuda.h"
#include "compute/cuda/device.h"

namespace hark::compute::cuda {

namespace {

struct StageTotal {
  std::string stage;
  double milliseconds = 0;
  int64_t calls = 0;
};

std::mutex table_mutex;
std::vector<StageTotal> table;  // in order of first appearance

void add(const char* stage, double milliseconds) {
  std::lock_guard lock(table_mutex);
  for (StageTotal& total : table) {
    if (total.stage == stage) {
      total.milliseconds += milliseconds;
      ++total.calls;
      return;
    }
  }
  table.push_back({stage, milliseconds, 1});
}

}  // namespace

bool profiling() {
  static const bool on = [] {
    const char* value = std::getenv("HARK_CUDA_PROFILE");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  return on;
}

bool profiling_on_host() {
  static const bool on = [] {
    const char* value = std::getenv("HARK_CUDA_PROFILE");
    return value != nullptr && std::strcmp(value, "host") == 0;
  }();
  return on;
}

StageClock::StageClock(cudaStream_t stream)
    : enabled_(profiling()), on_host_(profiling_on_host()), stream_(stream) {}

StageClock::~StageClock() {
  if (marks_.empty()) return;
  try {
    finish();
  } catch (...) {  // a destructor may not throw; the stream's error surfaces elsewhere
  }
}

void StageClock::record(const char* stage) {
  // A stream being captured into a graph runs nothing now: there is nothing to time.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream_, &capturing), "profile");
  if (capturing != cudaStreamCaptureStatusNone) return;
  if (on_host_) {
    check(cudaStreamSynchronize(stream_), "profile");
    marks_.push_back({stage, nullptr, std::chrono::steady_clock::now()});
    return;
  }
  cudaEvent_t event = nullptr;
  check(cudaEventCreate(&event), "profile event");
  check(cudaEventRecord(event, stream_), "profile event");
  marks_.push_back({stage, event, {}});
}

void StageClock::finish() {
  if (marks_.empty()) return;
  record(nullptr);  // the end of the last stage
  if (!on_host_) check(cudaEventSynchronize(marks_.back().event), "profile");
  for (size_t i = 0; i + 1 < marks_.size(); ++i) {
    float milliseconds = 0;
    if (on_host_) {
      milliseconds =
          std::chrono::duration<float, std::milli>(marks_[i + 1].host - marks_[i].host).count();
    } else {
      check(cudaEventElapsedTime(&milliseconds, marks_[i].event, marks_[i + 1].event), "profile");
    }
    add(marks_[i].stage, milliseconds);
  }
  for (const Mark& mark : marks_) {
    if (mark.event != nullptr) cudaEventDestroy(mark.event);
  }
  marks_.clear();
}

void reset_profile() {
  std::lock_guard lock(table_mutex);
  table.clear();
}

std::string profile_report() {
  std::lock_guard lock(table_mutex);
  if (table.empty()) return "";
  double all = 0;
  for (const StageTotal& total : table) all += total.milliseconds;
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(3);
  out << (profiling_on_host()
              ? "Host time by stage (HARK_CUDA_PROFILE=host: each mark waits for the GPU):\n"
              : "GPU time by stage (HARK_CUDA_PROFILE; marks add a little time of their own):\n");
  for (const StageTotal& total : table) {
    out << "  " << total.stage << ": " << total.milliseconds << " ms over " << total.calls
        << " calls, " << (all > 0 ? 100.0 * total.milliseconds / all : 0.0) << "%\n";
  }
  return out.str();
}

// The calls fail only when no profiler is attached to take them, which is not an error here.
void profiler_start() {
  cudaProfilerStart();
}
void profiler_stop() {
  cudaProfilerStop();
}

}  // namespace hark::compute::cuda
