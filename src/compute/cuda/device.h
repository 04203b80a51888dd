// The CUDA backend's plumbing: errors, device memory, streams. Included only by code built with
// CUDA (files named *_cuda.cpp or *.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
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

// The current device's multiprocessor count, read once (hark runs on one device).
int multiprocessor_count();
// An attribute of the current device (hark::Error naming `what` if it cannot be read).
int device_attribute(cudaDeviceAttr attribute, const char* what);

// Whether the environment variable `name` is `value`. The backend's switches (HARK_CUDA_…) read
// it at every call, so that a test can compare both ways in one process.
bool environment_is(const char* name, const char* value);

// Device memory owned by one object. Move-only; freed in the destructor.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);  // throws hark::Error (with sizes) when the GPU is out of memory
  // Stream-ordered: from the device's memory pool in `stream`'s order, returned to the pool in
  // the destructor without waiting (cudaFree waits for the whole device, which would stall
  // whatever another stream overlaps). The owner must make sure that no work still uses it by
  // then and that `stream` outlives it.
  Buffer(size_t bytes, cudaStream_t stream);
  ~Buffer();
  Buffer(Buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)),
        stream_(std::exchange(other.stream_, nullptr)) {}
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
  void adopt(cudaError_t status, size_t bytes, const char* what);

  void* data_ = nullptr;
  size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;  // stream-ordered when set
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
//
// A fill may go up in parts, each queued as soon as it is written, so that the copies run while
// the rest is still being filled: upload_part() from any thread, then finish_uploads() once all
// of them are queued. One event, recorded then after the last, is what prepare() waits for.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  // At least `bytes` of host memory to fill (contents lost when it grows), once every upload
  // queued from it has finished.
  void* prepare(size_t bytes);
  // Queues a copy of its first `bytes` to `device` on `stream`, and finishes the fill's uploads.
  void upload(size_t bytes, void* device, cudaStream_t stream);
  // Copies `bytes` of host memory to `device` on `stream` by way of this buffer: parallel threads
  // copy it in, a piece at a time, each piece queued for upload as soon as it is in. Returns once
  // `host` has been read; the copies to the GPU may still run.
  void upload_from(const void* host, size_t bytes, void* device, cudaStream_t stream);
  // Queues a copy of `bytes` from `offset` to `device` on `stream`. Safe to call from several
  // threads at once, each for a part it has finished writing; every part of a fill goes on the
  // same stream (throws hark::Error otherwise).
  void upload_part(size_t offset, size_t bytes, void* device, cudaStream_t stream);
  // Marks the parts queued so far as the fill's last: call it after every upload_part() call has
  // returned (the threads that made them joined), also when the fill is abandoned. prepare() and
  // the destructor call it too, but there the event would wait for all the stream's later work.
  void finish_uploads();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  cudaEvent_t uploaded_ = nullptr;  // recorded after the last upload of the last finished fill
  // The stream of the parts queued since the last finish_uploads(); null when there are none.
  std::atomic<cudaStream_t> unfinished_{nullptr};
};

// A non-blocking stream, destroyed with the object.
class Stream {
 public:
  enum class Priority { normal, high };
  // High: its kernels are scheduled ahead of those of normal streams when both wait for the GPU
  // (a decoder's short steps beside another batch's encoder).
  explicit Stream(Priority priority = Priority::normal);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// A point in a stream's work, for another stream or the host to wait for. Destroyed with the
// object.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream);
  void synchronize() const;                  // the host waits for it
  void make_wait(cudaStream_t other) const;  // `other`'s later work waits for it

 private:
  cudaEvent_t event_ = nullptr;
};

// Makes device 0 current on the calling thread; throws hark::Error when there is no usable GPU.
void require_device();

}  // namespace hark::compute::cuda
