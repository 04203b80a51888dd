#include "compute/cuda/device.h"

#include <atomic>
#include <cstdio>

#include "base/error.h"
#include "compute/cuda/cuda.h"

namespace hark::compute::cuda {

namespace {

std::atomic<size_t> in_use{0}, peak{0};

void count_allocation(size_t bytes) {
  const size_t now = in_use.fetch_add(bytes) + bytes;
  size_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

}  // namespace

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // reset the last-error state, so that later calls do not report it again
  fail("CUDA: ", what, ": ", cudaGetErrorString(status));
}

void check_launch(const char* what) {
  check(cudaGetLastError(), what);
}

Buffer::Buffer(size_t bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw OutOfMemory("out of GPU memory: " + gib(bytes) + " asked for, " + gib(free_bytes) +
                      " of " + gib(total_bytes) +
                      " free (try a smaller --batch-size or a quantized model)");
  }
  check(status, "cudaMalloc");
  bytes_ = bytes;
  count_allocation(bytes);
}

Buffer::~Buffer() {
  if (data_ != nullptr) {
    cudaFree(data_);
    in_use.fetch_sub(bytes_);
  }
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Buffer dying(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void Buffer::reserve(size_t bytes) {
  if (bytes > bytes_) *this = Buffer(bytes);
}

StagingBuffer::~StagingBuffer() {
  if (uploaded_ != nullptr) {
    cudaEventSynchronize(uploaded_);
    cudaEventDestroy(uploaded_);
  }
  if (data_ != nullptr) cudaFreeHost(data_);
}

void* StagingBuffer::prepare(size_t bytes) {
  if (uploaded_ != nullptr) check(cudaEventSynchronize(uploaded_), "wait for an upload");
  if (bytes > bytes_) {
    if (data_ != nullptr) check(cudaFreeHost(data_), "free page-locked memory");
    data_ = nullptr;
    bytes_ = 0;
    check(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault), "allocate page-locked memory");
    bytes_ = bytes;
  }
  return data_;
}

void StagingBuffer::upload(size_t bytes, void* device, cudaStream_t stream) {
  if (bytes == 0) return;
  if (bytes > bytes_) fail("staging buffer: ", bytes, " bytes to upload from ", bytes_);
  check(cudaMemcpyAsync(device, data_, bytes, cudaMemcpyHostToDevice, stream), "copy to the GPU");
  if (uploaded_ == nullptr) {
    check(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming), "staging event");
  }
  check(cudaEventRecord(uploaded_, stream), "staging event");
}

void upload(const void* host, size_t bytes, void* device, cudaStream_t stream) {
  if (bytes == 0) return;
  if (stream == nullptr) {
    check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "copy to the GPU");
  } else {
    check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream), "copy to the GPU");
  }
}

void download(const void* device, size_t bytes, void* host, cudaStream_t stream) {
  if (bytes == 0) return;
  if (stream == nullptr) {
    check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "copy from the GPU");
  } else {
    check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream),
          "copy from the GPU");
  }
}

Stream::Stream() {
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
}
Stream::~Stream() {
  cudaStreamDestroy(stream_);
}
void Stream::synchronize() const {
  check(cudaStreamSynchronize(stream_), "synchronize");
}

void require_device() {
  if (!available()) fail("no usable GPU: ", describe());
  check(cudaSetDevice(0), "select GPU 0");
}

size_t allocated_bytes() {
  return in_use.load();
}
size_t peak_allocated_bytes() {
  return peak.load();
}
void reset_peak_allocated_bytes() {
  peak.store(in_use.load());
}

bool available() {
  static const bool usable = [] {
    int count = 0;
    const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    cudaGetLastError();
    return ok;
  }();
  return usable;
}

std::string describe() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorInsufficientDriver) {
    cudaGetLastError();
    // Also what a machine without any NVIDIA driver reports.
    return "no usable GPU: no NVIDIA driver, or one older than the CUDA " +
           std::to_string(CUDART_VERSION / 1000) + "." +
           std::to_string(CUDART_VERSION % 1000 / 10) + " runtime hark was built with";
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable GPU (") + cudaGetErrorString(status) + ")";
  }
  if (count == 0) return "no GPU";
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, 0) != cudaSuccess) return "GPU 0 unreadable";
  return std::string(properties.name) + ", " + gib(properties.totalGlobalMem) + ", sm_" +
         std::to_string(properties.major) + std::to_string(properties.minor);
}

}  // namespace hark::compute::cuda
