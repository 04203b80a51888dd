// The CUDA backend's plumbing: errors, device memory, streams. Included only by code built with
// CUDA (files named *_cuda.cpp or *.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compute/cuda/cuda.h"
#include "compute/cuda/kernels.h"

namespace hark::compute::cuda {

// Throws hark::Error("CUDA: <what>: <error string>") unless status is cudaSuccess. Out of memory
// gets its own message, which says how much was asked for and how much is free.
void check(cudaError_t status, const char* what);
// After kernel launches: reports a launch failure (bad configuration) at the launch site.
void check_launch(const char* what);

// Device memory owned by one object. Move-only; freed in the destructor.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);  // throws hark::Error (with sizes) when the GPU is out of memory
  ~Buffer();
  Buffer(Buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  // Makes the buffer at least `bytes` large (contents lost when it grows).
  void reserve(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Copies between host and device on `stream` (synchronously when stream is null).
void upload(const void* host, size_t bytes, void* device, cudaStream_t stream = nullptr);
void download(const void* device, size_t bytes, void* host, cudaStream_t stream = nullptr);
template <class T>
Buffer upload_vector(const std::vector<T>& values, cudaStream_t stream = nullptr) {
  const size_t bytes = values.size() * sizeof(T);
  Buffer buffer(bytes == 0 ? 1 : bytes);
  upload(values.data(), bytes, buffer.data(), stream);
  return buffer;
}

// Page-locked host memory that uploads go through: the GPU reads it at full speed and without
// the driver's intermediate copy, asynchronously. Refilling it waits for the copies that read it.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  // At least `bytes` of host memory to fill (contents lost when it grows), once every upload
  // queued from it has finished.
  void* prepare(size_t bytes);
  // Queues a copy of its first `bytes` to `device` on `stream`.
  void upload(size_t bytes, void* device, cudaStream_t stream);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  cudaEvent_t uploaded_ = nullptr;  // recorded after the last upload
};

// A non-blocking stream, destroyed with the object.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// Makes device 0 current on the calling thread; throws hark::Error when there is no usable GPU.
void require_device();

}  // namespace hark::compute::cuda
