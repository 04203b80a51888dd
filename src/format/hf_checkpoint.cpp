#include "format/hf_checkpoint.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "format/quant.h"

namespace hark::hf {

namespace fs = std::filesystem;

Json read_json(const fs::path& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) fail(path.string(), ": cannot open");
  std::ostringstream text;
  text << stream.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const Json::parse_error& error) {
    fail(path.string(), ": invalid JSON (", error.what(), ")");
  }
}

std::optional<Json> read_json_if_present(const fs::path& path) {
  if (!fs::exists(path)) return std::nullopt;
  return read_json(path);
}

const Json* member(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto found = object.find(key);
  return found == object.end() || found->is_null() ? nullptr : &*found;
}

const safetensors::TensorView& find_tensor(const safetensors::Checkpoint& checkpoint,
                                           const std::string& dir,
                                           std::initializer_list<std::string> names,
                                           const std::vector<int64_t>& shape) {
  const safetensors::TensorView* source = nullptr;
  for (const std::string& name : names) {
    if (source == nullptr) source = checkpoint.find(name);
  }
  if (source == nullptr) {
    fail(dir, ": the checkpoint has no tensor ", *names.begin(), " ", shape_text(shape));
  }
  if (source->shape != shape) {
    fail(dir, ": tensor ", source->name, " has shape ", shape_text(source->shape),
         ", config.json implies ", shape_text(shape));
  }
  switch (source->type) {
    case safetensors::ElementType::F32:
    case safetensors::ElementType::F16:
    case safetensors::ElementType::BF16:
    case safetensors::ElementType::F64:
      return *source;
    default:
      fail(dir, ": tensor ", source->name, " is ", safetensors::element_type_name(source->type),
           "; expected F32, F16 or BF16");
  }
}

std::vector<uint8_t> convert_tensor(const safetensors::TensorView& source, DType target,
                                    const std::string& name) {
  const DType source_type = safetensors::to_dtype(source.type);
  const auto count = static_cast<size_t>(source.elements());
  std::vector<float> values(count);
  quant::to_f32(source_type, source.data, values.data(), count);
  const bool variance = name.ends_with(".running_var");
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) fail("tensor ", name, " holds ", values[i], " at element ", i);
    if (variance && values[i] < 0.0f) {
      fail("tensor ", name, " holds the negative variance ", values[i], " at element ", i);
    }
    if (target == DType::F16 && std::fabs(values[i]) > 65504.0f) {
      fail("tensor ", name, " holds ", values[i], " at element ", i,
           ", beyond F16's range; convert with --type f32 or bf16");
    }
  }
  if (source_type == target) return std::vector<uint8_t>(source.data, source.data + source.nbytes);
  return quant::from_f32(target, values.data(), count);
}

void write_gguf(gguf::Writer& writer, std::shared_ptr<const void> owner,
                std::vector<PlannedTensor> plan, const std::string& out_path,
                const ConvertProgress& progress) {
  auto shared_plan = std::make_shared<std::vector<PlannedTensor>>(std::move(plan));
  const int total = static_cast<int>(shared_plan->size());
  for (int index = 0; index < total; ++index) {
    const PlannedTensor& tensor = (*shared_plan)[index];
    // The producer runs while the file is written; the sources' bytes live until then.
    writer.add_tensor(tensor.name, tensor.type, tensor.shape,
                      [owner, shared_plan, index, total, progress] {
                        const PlannedTensor& t = (*shared_plan)[index];
                        if (progress) progress(index, total, t.name);
                        return convert_tensor(*t.source, t.type, t.name);
                      });
  }
  writer.write(out_path);
  if (progress) progress(total, total, "");
}

std::string directory_name(const fs::path& dir, const std::string& fallback) {
  fs::path normal = dir.lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();
  std::string name = normal.filename().string();
  if (name.empty() || name == ".") name = fs::absolute(dir).lexically_normal().filename().string();
  return name.empty() ? fallback : name;
}

DType stored_type(bool matrix, int64_t row_length, DType requested) {
  if (!matrix) return DType::F32;
  if (requested == DType::Q8_0 && row_length % 32 != 0) return DType::F16;
  return requested;
}

uint32_t gguf_file_type(DType type) {
  switch (type) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q8_0:
      return 7;
    case DType::BF16:
      return 32;
    default:
      fail("weight type ", dtype_name(type), " is not supported (f32, f16, bf16, q8_0)");
  }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace hark::hf
