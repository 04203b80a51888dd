#include "compute/cuda/device.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

#include "base/error.h"
#include "base/log.h"
#include "compute/cuda/cuda.h"

namespace hark::compute::cuda {

namespace {

// upload_from's pieces: large enough that a copy's fixed cost is small, small enough that the
// first copies start while most of the memory is still being copied in.
constexpr size_t kUploadPieceBytes = size_t{1} << 20;
// Uploads up to this size (a window or two of Whisper's mel) go in smaller pieces on the calling
// thread, each copy queued as soon as its piece is in: for them, waking a team of threads costs
// more than it saves.
constexpr size_t kSerialUploadBytes = size_t{8} << 20;
constexpr size_t kSerialPieceBytes = size_t{256} << 10;

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

[[noreturn]] void throw_out_of_memory(size_t bytes) {
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  throw OutOfMemory("out of GPU memory: " + gib(bytes) + " asked for, " + gib(free_bytes) + " of " +
                    gib(total_bytes) + " free (try a smaller --batch-size or a quantized model)");
}

// The device's pool keeps what stream-ordered buffers return (by default it gives memory back to
// the system at every synchronisation, and the next allocation maps it again).
void keep_pool_memory() {
  static const bool kept = [] {
    int device = 0;
    cudaMemPool_t pool = nullptr;
    check(cudaGetDevice(&device), "current device");
    check(cudaDeviceGetDefaultMemPool(&pool, device), "memory pool");
    uint64_t threshold = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
          "memory pool");
    return true;
  }();
  (void)kept;
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

int device_attribute(cudaDeviceAttr attribute, const char* what) {
  int device = 0, value = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&value, attribute, device), what);
  return value;
}

int multiprocessor_count() {
  static const int count = device_attribute(cudaDevAttrMultiProcessorCount, "multiprocessor count");
  return count;
}

bool environment_is(const char* name, const char* value) {
  const char* setting = std::getenv(name);
  return setting != nullptr && std::strcmp(setting, value) == 0;
}

// What both constructors do after asking for the memory: out of memory gets its own error.
void Buffer::adopt(cudaError_t status, size_t bytes, const char* what) {
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw_out_of_memory(bytes);
  }
  check(status, what);
  bytes_ = bytes;
  count_allocation(bytes);
}

Buffer::Buffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
  if (bytes == 0) return;
  keep_pool_memory();
  adopt(cudaMallocAsync(&data_, bytes, stream), bytes, "cudaMallocAsync");
}

Buffer::Buffer(size_t bytes) {
  if (bytes == 0) return;
  adopt(cudaMalloc(&data_, bytes), bytes, "cudaMalloc");
}

Buffer::~Buffer() {
  if (data_ != nullptr) {
    if (stream_ != nullptr) {
      cudaFreeAsync(data_, stream_);
    } else {
      cudaFree(data_);
    }
    in_use.fetch_sub(bytes_);
  }
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Buffer dying(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Buffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return;
  *this = stream_ != nullptr ? Buffer(bytes, stream_) : Buffer(bytes);
}

StagingBuffer::~StagingBuffer() {
  // Raw calls, as a destructor must not throw; copies still queued end before their memory goes.
  if (const cudaStream_t stream = unfinished_.exchange(nullptr); stream != nullptr) {
    cudaStreamSynchronize(stream);
  }
  if (uploaded_ != nullptr) {
    cudaEventSynchronize(uploaded_);
    cudaEventDestroy(uploaded_);
  }
  if (data_ != nullptr) cudaFreeHost(data_);
}

void* StagingBuffer::prepare(size_t bytes) {
  finish_uploads();
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
  upload_part(0, bytes, device, stream);
  finish_uploads();
}

void StagingBuffer::upload_from(const void* host, size_t bytes, void* device, cudaStream_t stream) {
  auto* staged = static_cast<uint8_t*>(prepare(bytes));
  const auto* source = static_cast<const uint8_t*>(host);
  auto* target = static_cast<uint8_t*>(device);
  const bool serial = bytes <= kSerialUploadBytes;
  const size_t piece_bytes = serial ? kSerialPieceBytes : kUploadPieceBytes;
  const auto pieces = static_cast<int64_t>((bytes + piece_bytes - 1) / piece_bytes);
  std::exception_ptr failure;  // exceptions cannot leave the parallel loop
#pragma omp parallel for schedule(dynamic, 1) if (!serial && pieces > 1)
  for (int64_t piece = 0; piece < pieces; ++piece) {
    const size_t begin = static_cast<size_t>(piece) * piece_bytes;
    const size_t size = std::min(piece_bytes, bytes - begin);
    std::memcpy(staged + begin, source + begin, size);
    try {
      upload_part(begin, size, target + begin, stream);
    } catch (...) {
#pragma omp critical(hark_staging_upload_error)
      if (!failure) failure = std::current_exception();
    }
  }
  finish_uploads();
  if (failure) std::rethrow_exception(failure);
}

void StagingBuffer::upload_part(size_t offset, size_t bytes, void* device, cudaStream_t stream) {
  if (bytes == 0) return;
  if (offset > bytes_ || bytes > bytes_ - offset) {
    fail("staging buffer: ", bytes, " bytes at ", offset, " to upload from ", bytes_);
  }
  // The default stream by its own handle, as null means that no part is unfinished.
  if (stream == nullptr) stream = cudaStreamLegacy;
  // The stream is noted before the copy is queued, so that finish_uploads() cannot miss it.
  cudaStream_t expected = nullptr;
  if (!unfinished_.compare_exchange_strong(expected, stream) && expected != stream) {
    fail("staging buffer: the parts of one fill must go up on one stream");
  }
  check(cudaMemcpyAsync(device, static_cast<char*>(data_) + offset, bytes, cudaMemcpyHostToDevice,
                        stream),
        "copy to the GPU");
}

void StagingBuffer::finish_uploads() {
  const cudaStream_t stream = unfinished_.load();
  if (stream == nullptr) return;
  if (uploaded_ == nullptr) {
    check(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming), "staging event");
  }
  // Stream order is the order of the calls that queued the work, so the event follows every part
  // queued before this call, from whichever thread. Should the record fail, the parts stay
  // unfinished, and the destructor still waits for them.
  check(cudaEventRecord(uploaded_, stream), "staging event");
  unfinished_.store(nullptr);
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

Stream::Stream(Priority priority) {
  int lowest = 0, highest = 0;  // numerically, the greatest priority is the lowest number
  check(cudaDeviceGetStreamPriorityRange(&lowest, &highest), "stream priorities");
  check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking,
                                     priority == Priority::high ? highest : lowest),
        "stream");
}
Stream::~Stream() {
  cudaStreamDestroy(stream_);
}
Event::Event() {
  check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "event");
}
Event::~Event() {
  cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) {
  check(cudaEventRecord(event_, stream), "record an event");
}
void Event::synchronize() const {
  check(cudaEventSynchronize(event_), "wait for an event");
}
void Event::make_wait(cudaStream_t other) const {
  check(cudaStreamWaitEvent(other, event_, 0), "wait for an event");
}

void Stream::synchronize() const {
  check(cudaStreamSynchronize(stream_), "synchronize");
}

void require_device() {
  if (!available()) fail(describe());  // which says that no GPU is usable, and why
  // The first call creates the CUDA context: a fixed cost of every process that uses the GPU.
  static std::once_flag logged;
  const auto started = std::chrono::steady_clock::now();
  check(cudaSetDevice(0), "select GPU 0");
  std::call_once(logged, [&] {
    log::info("CUDA context ready in ",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
              " s");
  });
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
