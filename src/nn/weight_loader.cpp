#include "nn/weight_loader.h"

#include "base/error.h"
#include "format/gguf.h"

namespace hark::nn {

bool WeightLoader::has(std::string_view name) const {
  return file_.find_tensor(name) != nullptr;
}

Weight WeightLoader::get(std::string_view name, const Shape& shape) const {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (info == nullptr) fail(file_.path(), ": tensor '", name, "' is missing");
  if (info->shape.size() > static_cast<size_t>(Shape::max_rank)) {
    fail(file_.path(), ": tensor '", name, "' has ", info->shape.size(),
         " dimensions, expected shape ", shape.str());
  }
  const Shape actual = Shape::of(info->shape);
  if (actual != shape) {
    fail(file_.path(), ": tensor '", name, "' has shape ", actual.str(), ", expected ",
         shape.str());
  }
  Weight weight{info->type, actual, info->data, static_cast<size_t>(info->nbytes)};
  weight.validate(file_.path() + ": tensor '" + std::string(name) + "'");
  return weight;
}

Linear WeightLoader::linear(const std::string& prefix, int64_t out, int64_t in, bool bias) const {
  Linear layer;
  layer.weight = get(prefix + ".weight", Shape{out, in});
  if (bias) layer.bias = get(prefix + ".bias", Shape{out});
  return layer;
}

LayerNorm WeightLoader::layer_norm(const std::string& prefix, int64_t width, float eps) const {
  return LayerNorm{get(prefix + ".weight", Shape{width}), get(prefix + ".bias", Shape{width}), eps};
}

}  // namespace hark::nn
