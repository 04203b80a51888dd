// A piece of stream work captured once into a CUDA Graph and replayed: a decode step, whose
// dozens of launches then cost one. Included only by code built with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include "compute/cuda/device.h"

namespace hark::compute::cuda {

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }

  // Records what body() queues on `stream` (nothing runs) and instantiates it. Run it once
  // eagerly first: cuBLASLt picks its kernels and buffers are allocated outside the capture.
  template <class Body>
  void capture(cudaStream_t stream, Body body) {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    try {
      body();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream, &broken);
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph_), "end capture");
    check(cudaGraphInstantiate(&exec_, graph_, 0), "instantiate a captured graph");
  }
  void launch(cudaStream_t stream) { check(cudaGraphLaunch(exec_, stream), "graph launch"); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace hark::compute::cuda
