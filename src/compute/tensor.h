// Tensors and weight views: the two kinds of data the op set works on.
//
// A Tensor owns F32 activations (on the CPU today; a device tag is there so that a CUDA backend
// can add device memory without changing any op's signature). A Weight is a read-only view of a
// stored tensor in its stored type (F32/F16/BF16/Q8_0), usually pointing into the mmap'd GGUF, so
// loading a model copies nothing. Both are row-major with up to four dimensions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "format/dtype.h"

namespace hark::compute {

enum class Device { cpu };

class Shape {
 public:
  static constexpr int max_rank = 4;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  static Shape of(std::span<const int64_t> dims);  // throws hark::Error on rank > 4 or dim < 0

  int rank() const { return rank_; }
  int64_t operator[](int axis) const { return dims_[axis]; }
  int64_t back() const { return rank_ == 0 ? 1 : dims_[rank_ - 1]; }
  int64_t elements() const;
  // Every dimension but the last, multiplied: the number of rows of the matrix view.
  int64_t rows() const { return back() == 0 ? 0 : elements() / back(); }
  // The same shape with the last dimension replaced (the shape of a linear layer's output).
  Shape with_back(int64_t last) const;
  std::string str() const;  // "[1500, 512]"

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  std::array<int64_t, max_rank> dims_{};
  int rank_ = 0;
};

// 64-byte aligned storage so that SIMD loads of whole rows never straddle cache lines. Growing
// a buffer leaves the new values uninitialised (construct() default-initialises): every op
// writes its whole output, and zero-filling tens of MB per window would cost as much as a norm.
template <class T>
struct AlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t alignment{64};
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), alignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, alignment); }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
};

class Tensor {
 public:
  Tensor() = default;                   // empty: shape [0]
  explicit Tensor(const Shape& shape);  // zero-filled
  Tensor(const Shape& shape, std::span<const float> values);

  Device device() const { return Device::cpu; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int axis) const { return shape_[axis]; }
  int64_t elements() const { return shape_.elements(); }
  int64_t rows() const { return shape_.rows(); }
  int64_t cols() const { return shape_.back(); }

  float* data() { return storage_.data(); }
  const float* data() const { return storage_.data(); }
  float* row(int64_t i) { return data() + i * cols(); }
  const float* row(int64_t i) const { return data() + i * cols(); }
  std::span<float> values() { return {data(), static_cast<size_t>(elements())}; }
  std::span<const float> values() const { return {data(), static_cast<size_t>(elements())}; }

  // Gives the tensor a new shape. Storage only ever grows, so a buffer reused across decode steps
  // allocates once; the contents after a resize are unspecified.
  void resize(const Shape& shape);
  // Reinterprets the same values under another shape with the same number of elements.
  void reshape(const Shape& shape);

 private:
  Shape shape_{0};
  std::vector<float, AlignedAllocator<float>> storage_;
};

// A read-only view of a stored matrix (or vector, or conv kernel) in its stored type.
struct Weight {
  DType type = DType::F32;
  Shape shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t rows() const { return shape.rows(); }
  int64_t cols() const { return shape.back(); }
  size_t row_bytes() const;
  const uint8_t* row(int64_t i) const { return data + static_cast<size_t>(i) * row_bytes(); }
  // Checks that nbytes matches type and shape (and that rows are whole Q8_0 blocks); throws
  // hark::Error naming `what` otherwise.
  void validate(const std::string& what) const;

  // A view of F32 values owned by someone else (tests, small tables built at load time).
  static Weight f32(const float* values, const Shape& shape);
};

}  // namespace hark::compute
