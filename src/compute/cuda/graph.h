// A piece of stream work captured once into a CUDA Graph and replayed: a decode step, whose
// dozens of launches then cost one. Included only by code built with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

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

  // Records what body() queues on `stream` (nothing runs) and makes it launchable. Run it once
  // eagerly first: cuBLASLt picks its kernels and buffers are allocated outside the capture. A
  // graph captured again with the same launches (other pointers or sizes: the next batch's) only
  // updates the launchable one, which costs a fraction of instantiating it.
  template <class Body>
  void capture(cudaStream_t stream, Body body) {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    cudaGraph_t captured = nullptr;
    try {
      body();
    } catch (...) {
      cudaStreamEndCapture(stream, &captured);
      if (captured) cudaGraphDestroy(captured);
      throw;
    }
    check(cudaStreamEndCapture(stream, &captured), "end capture");
    if (graph_) cudaGraphDestroy(graph_);
    graph_ = captured;
    if (exec_) {
      cudaGraphExecUpdateResultInfo result{};
      if (cudaGraphExecUpdate(exec_, graph_, &result) == cudaSuccess) return;
      cudaGetLastError();  // the update's refusal is not an error of later calls
      cudaGraphExecDestroy(exec_);
      exec_ = nullptr;
    }
    check(cudaGraphInstantiate(&exec_, graph_, 0), "instantiate a captured graph");
  }
  void launch(cudaStream_t stream) { check(cudaGraphLaunch(exec_, stream), "graph launch"); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Work that repeats with the same shapes and buffers (an encoder over clips of one length) and
// costs more to launch than to run: the first time a key is seen it runs eagerly (sizing its
// buffers and cuBLASLt's plans), the second time it is captured, and from then on it is replayed.
// The key must name everything the work's launches depend on: sizes and device pointers. A
// one-off call so costs nothing more than running eagerly.
class ReplayedGraph {
 public:
  template <class Body>
  void run(std::vector<int64_t> key, cudaStream_t stream, Body body) {
    if (key != key_) {
      key_ = std::move(key);
      graph_.reset();
      body();
      return;
    }
    if (!graph_) {
      auto graph = std::make_unique<Graph>();
      graph->capture(stream, body);
      graph_ = std::move(graph);
    }
    graph_->launch(stream);
  }

 private:
  std::vector<int64_t> key_;
  std::unique_ptr<Graph> graph_;
};

}  // namespace hark::compute::cuda
