#include "compute/tensor.h"

#include <algorithm>
#include <sstream>

#include "base/error.h"

namespace hark::compute {

Shape::Shape(std::initializer_list<int64_t> dims) {
  *this = of(std::span<const int64_t>(dims.begin(), dims.size()));
}

Shape Shape::of(std::span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(max_rank)) {
    fail("tensor of rank ", dims.size(), " (at most ", max_rank, " dimensions are supported)");
  }
  Shape shape;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) fail("negative dimension ", dims[i], " in a tensor shape");
    shape.dims_[i] = dims[i];
  }
  shape.rank_ = static_cast<int>(dims.size());
  return shape;
}

int64_t Shape::elements() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

Shape Shape::with_back(int64_t last) const {
  Shape shape = *this;
  if (shape.rank_ == 0) shape.rank_ = 1;
  shape.dims_[shape.rank_ - 1] = last;
  return shape;
}

std::string Shape::str() const {
  std::ostringstream text;
  text << '[';
  for (int i = 0; i < rank_; ++i) text << (i ? ", " : "") << dims_[i];
  text << ']';
  return text.str();
}

bool Shape::operator==(const Shape& other) const {
  return rank_ == other.rank_ &&
         std::equal(dims_.begin(), dims_.begin() + rank_, other.dims_.begin());
}

Tensor::Tensor(const Shape& shape) : shape_(shape) {
  storage_.assign(static_cast<size_t>(shape.elements()), 0.0f);
}

Tensor::Tensor(const Shape& shape, std::span<const float> values) : shape_(shape) {
  if (static_cast<int64_t>(values.size()) != shape.elements()) {
    fail("tensor of shape ", shape.str(), " needs ", shape.elements(), " values, got ",
         values.size());
  }
  storage_.assign(values.begin(), values.end());
}

void Tensor::resize(const Shape& shape) {
  size_t needed = static_cast<size_t>(shape.elements());
  if (needed > storage_.size()) storage_.resize(needed);
  shape_ = shape;
}

void Tensor::reshape(const Shape& shape) {
  if (shape.elements() != shape_.elements()) {
    fail("cannot reshape a tensor of shape ", shape_.str(), " to ", shape.str());
  }
  shape_ = shape;
}

size_t Weight::row_bytes() const {
  return dtype_bytes(type, static_cast<uint64_t>(cols()));
}

void Weight::validate(const std::string& what) const {
  if (type != DType::F32 && type != DType::F16 && type != DType::BF16 && type != DType::Q8_0) {
    fail(what, ": weights of type ", dtype_name(type), " are not supported (f32, f16, bf16, q8_0)");
  }
  if (shape.rank() == 0) fail(what, ": a weight needs at least one dimension");
  if (type == DType::Q8_0 && cols() % 32 != 0) {
    fail(what, ": q8_0 rows must be a multiple of 32 values, the shape is ", shape.str());
  }
  size_t expected = dtype_bytes(type, static_cast<uint64_t>(shape.elements()));
  if (expected != nbytes) {
    fail(what, ": ", dtype_name(type), " ", shape.str(), " needs ", expected, " bytes, has ",
         nbytes);
  }
  if (data == nullptr && nbytes != 0) fail(what, ": no data");
}

Weight Weight::f32(const float* values, const Shape& shape) {
  Weight weight;
  weight.type = DType::F32;
  weight.shape = shape;
  weight.data = reinterpret_cast<const uint8_t*>(values);
  weight.nbytes = static_cast<size_t>(shape.elements()) * sizeof(float);
  return weight;
}

}  // namespace hark::compute
