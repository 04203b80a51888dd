#include "base/error.h"
#include "models/whisper/model.h"

namespace hark::whisper {

std::unique_ptr<Model> load_cuda(std::shared_ptr<const gguf::File>, const LoadOptions&) {
  fail("this hark was built without CUDA; use --device cpu");
}

}  // namespace hark::whisper
