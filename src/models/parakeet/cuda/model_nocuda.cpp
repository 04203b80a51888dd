#include "base/error.h"
#include "models/parakeet/model.h"

namespace hark::parakeet {

std::unique_ptr<Model> load_cuda(std::shared_ptr<const gguf::File>) {
  fail("Parakeet: this hark was built without CUDA; use --device cpu");
}

}  // namespace hark::parakeet
