#include "format/safetensors.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/mapped_file.h"

namespace hark::safetensors {

namespace {

using Json = nlohmann::json;

// The Python and Rust libraries refuse headers above 100 MB; so does hark, before parsing.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kSingleFileName = "model.safetensors";
constexpr std::string_view kIndexFileName = "model.safetensors.index.json";

struct ElementTraits {
  ElementType type;
  std::string_view name;
  size_t size;
};

constexpr std::array<ElementTraits, 10> kElementTypes = {{
    {ElementType::F64, "F64", 8},
    {ElementType::F32, "F32", 4},
    {ElementType::F16, "F16", 2},
    {ElementType::BF16, "BF16", 2},
    {ElementType::I64, "I64", 8},
    {ElementType::I32, "I32", 4},
    {ElementType::I16, "I16", 2},
    {ElementType::I8, "I8", 1},
    {ElementType::U8, "U8", 1},
    {ElementType::BOOL, "BOOL", 1},
}};

const ElementTraits& traits_of(ElementType type) {
  for (const ElementTraits& traits : kElementTypes) {
    if (traits.type == type) return traits;
  }
  fail("unknown safetensors element type ", static_cast<int>(type));
}

// Product of the dimensions and the byte size, or false when either overflows.
bool tensor_size(const std::vector<int64_t>& shape, size_t element_bytes, int64_t* elements,
                 uint64_t* bytes) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (__builtin_mul_overflow(count, dim, &count)) return false;
  }
  *elements = count;
  return !__builtin_mul_overflow(static_cast<uint64_t>(count), element_bytes, bytes);
}

// A JSON value for a message. Only numbers are printed: dumping an arbitrary value from a file
// could recurse as deep as its nesting, which an attacker controls.
std::string describe(const Json& value) {
  return value.is_number() ? value.dump() : std::string("of type ") + value.type_name();
}

uint64_t read_u64_le(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

// One header entry, checked against the data section [data_start, data_start + data_size).
TensorView parse_tensor_entry(const std::string& path, const std::string& name, const Json& entry,
                              const uint8_t* data_start, uint64_t data_size) {
  auto bad = [&](const auto&... parts) { fail(path, ": tensor '", name, "': ", parts...); };
  if (!entry.is_object()) bad("header entry is not a JSON object");
  auto dtype = entry.find("dtype");
  auto shape = entry.find("shape");
  auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || !dtype->is_string()) bad("missing or non-string \"dtype\"");
  if (shape == entry.end() || !shape->is_array()) bad("missing or non-array \"shape\"");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    bad("\"data_offsets\" must be an array [begin, end]");
  }

  TensorView view;
  view.name = name;
  try {
    view.type = element_type_from_name(dtype->get<std::string>());
  } catch (const Error& error) {
    bad(error.what());
  }
  for (const Json& dim : *shape) {
    if (!dim.is_number_unsigned() ||
        dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      bad("shape entry ", describe(dim), " is not a non-negative integer");
    }
    view.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
  }
  int64_t elements = 0;
  if (!tensor_size(view.shape, element_size(view.type), &elements, &view.nbytes)) {
    bad("element count overflows");
  }
  for (const Json& offset : *offsets) {
    if (!offset.is_number_unsigned())
      bad("data offset ", describe(offset), " is not a non-negative integer");
  }
  uint64_t begin = (*offsets)[0].get<uint64_t>();
  uint64_t end = (*offsets)[1].get<uint64_t>();
  if (begin > end || end > data_size) {
    bad("data_offsets [", begin, ", ", end, "] lie outside the ", data_size, "-byte data section");
  }
  if (end - begin != view.nbytes) {
    bad("data_offsets [", begin, ", ", end, "] hold ", end - begin, " bytes, but ",
        element_type_name(view.type), " shape needs ", view.nbytes);
  }
  view.data = data_start + begin;
  return view;
}

void check_no_overlap(const std::string& path, const std::vector<TensorView>& tensors,
                      const uint8_t* data_start) {
  std::vector<const TensorView*> by_offset;
  for (const TensorView& view : tensors) {
    if (view.nbytes > 0) by_offset.push_back(&view);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorView& before = *by_offset[i - 1];
    const TensorView& after = *by_offset[i];
    if (before.data + before.nbytes > after.data) {
      fail(path, ": tensors '", before.name, "' and '", after.name, "' overlap (data offsets ",
           before.data - data_start, " and ", after.data - data_start, ")");
    }
  }
}

Json parse_json(const std::string& path, const char* begin, const char* end, const char* what) {
  try {
    return Json::parse(begin, end);
  } catch (const Json::exception& error) {
    fail(path, ": ", what, " is not valid JSON: ", error.what());
  }
}

// A shard path from an index must stay inside the model directory.
void check_shard_name(const std::string& index_path, const std::string& shard) {
  std::filesystem::path relative(shard);
  bool escapes = shard.empty() || relative.is_absolute();
  for (const auto& part : relative) escapes = escapes || part == "..";
  if (escapes) fail(index_path, ": shard file name '", shard, "' is not inside the model folder");
}

}  // namespace

std::string_view element_type_name(ElementType type) {
  return traits_of(type).name;
}

size_t element_size(ElementType type) {
  return traits_of(type).size;
}

ElementType element_type_from_name(std::string_view name) {
  for (const ElementTraits& traits : kElementTypes) {
    if (traits.name == name) return traits.type;
  }
  fail("unsupported safetensors dtype '", name, "'");
}

DType to_dtype(ElementType type) {
  switch (type) {
    case ElementType::F64:
      return DType::F64;
    case ElementType::F32:
      return DType::F32;
    case ElementType::F16:
      return DType::F16;
    case ElementType::BF16:
      return DType::BF16;
    case ElementType::I64:
      return DType::I64;
    case ElementType::I32:
      return DType::I32;
    case ElementType::I16:
      return DType::I16;
    case ElementType::I8:
      return DType::I8;
    default:
      fail("safetensors dtype ", element_type_name(type), " has no hark tensor type");
  }
}

int64_t TensorView::elements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

// ---------------------------------------------------------------------------------------------
// File

struct File::Mapping {
  explicit Mapping(const std::string& path) : file(path) {}
  MappedFile file;
};

std::shared_ptr<const File> File::open(const std::string& path) {
  std::shared_ptr<File> file(new File());
  file->path_ = path;
  file->mapping_ = std::make_unique<Mapping>(path);
  const uint8_t* bytes = file->mapping_->file.data();
  const uint64_t size = file->mapping_->file.size();

  if (size < 8) fail(path, ": not a safetensors file (only ", size, " bytes)");
  const uint64_t header_size = read_u64_le(bytes);
  if (header_size > size - 8) {
    fail(path, ": header length ", header_size, " runs past the end of the file (", size,
         " bytes)");
  }
  if (header_size > kMaxHeaderBytes) {
    fail(path, ": header length ", header_size, " exceeds the ", kMaxHeaderBytes, "-byte limit");
  }
  const auto* header_text = reinterpret_cast<const char*>(bytes + 8);
  Json header = parse_json(path, header_text, header_text + header_size, "header");
  if (!header.is_object()) fail(path, ": header is not a JSON object");

  const uint8_t* data_start = bytes + 8 + header_size;
  const uint64_t data_size = size - 8 - header_size;
  for (const auto& [key, entry] : header.items()) {
    if (key == kMetadataKey) {
      if (!entry.is_object()) fail(path, ": \"__metadata__\" is not a JSON object");
      for (const auto& [meta_key, meta_value] : entry.items()) {
        if (!meta_value.is_string()) {
          fail(path, ": \"__metadata__\" value of '", meta_key, "' is not a string");
        }
        file->metadata_.emplace(meta_key, meta_value.get<std::string>());
      }
      continue;
    }
    file->tensors_.push_back(parse_tensor_entry(path, key, entry, data_start, data_size));
  }
  // JSON objects hold each key once, and nlohmann keeps them sorted, so tensors_ is sorted by
  // name and free of duplicates.
  check_no_overlap(path, file->tensors_, data_start);
  return file;
}

File::~File() = default;

const TensorView* File::find(std::string_view name) const {
  auto found = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const TensorView& view, std::string_view key) { return view.name < key; });
  return found != tensors_.end() && found->name == name ? &*found : nullptr;
}

const TensorView& File::tensor(std::string_view name) const {
  const TensorView* view = find(name);
  if (view == nullptr) fail(path_, ": tensor '", name, "' is missing");
  return *view;
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

Checkpoint Checkpoint::open(const std::string& path) {
  namespace fs = std::filesystem;
  Checkpoint checkpoint;
  checkpoint.path_ = path;
  std::error_code error;

  auto add_all_from = [&](std::shared_ptr<const File> file) {
    for (const TensorView& view : file->tensors()) checkpoint.tensors_.emplace(view.name, &view);
    checkpoint.shards_.push_back(std::move(file));
  };

  const fs::path directory(path);
  const fs::path index_path = directory / kIndexFileName;
  if (!fs::is_directory(directory, error)) {
    add_all_from(File::open(path));  // a single .safetensors file named directly
  } else if (fs::exists(index_path, error)) {
    const std::string index_name = index_path.string();
    MappedFile index_file(index_name);
    const auto* text = reinterpret_cast<const char*>(index_file.data());
    Json index = parse_json(index_name, text, text + index_file.size(), "index");
    auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
    if (weight_map == index.end() || !weight_map->is_object()) {
      fail(index_name, ": no \"weight_map\" object");
    }
    std::map<std::string, std::shared_ptr<const File>> shards;
    for (const auto& [name, shard_json] : weight_map->items()) {
      if (!shard_json.is_string()) fail(index_name, ": shard of '", name, "' is not a string");
      const std::string shard_name = shard_json.get<std::string>();
      auto& shard = shards[shard_name];
      if (shard == nullptr) {
        check_shard_name(index_name, shard_name);
        shard = File::open((directory / shard_name).string());
        checkpoint.shards_.push_back(shard);
      }
      const TensorView* view = shard->find(name);
      if (view == nullptr) {
        fail(index_name, ": tensor '", name, "' is not in its shard ", shard->path());
      }
      checkpoint.tensors_.emplace(name, view);
    }
  } else if (fs::exists(directory / kSingleFileName, error)) {
    add_all_from(File::open((directory / kSingleFileName).string()));
  } else {
    fail(path, ": no ", kSingleFileName, " or ", kIndexFileName, " in this folder");
  }

  for (const auto& shard : checkpoint.shards_)
    checkpoint.metadata_.insert(shard->metadata().begin(), shard->metadata().end());
  for (const auto& entry : checkpoint.tensors_) checkpoint.names_.push_back(entry.first);
  return checkpoint;
}

const TensorView* Checkpoint::find(std::string_view name) const {
  auto found = tensors_.find(name);
  return found == tensors_.end() ? nullptr : found->second;
}

const TensorView& Checkpoint::tensor(std::string_view name) const {
  const TensorView* view = find(name);
  if (view == nullptr) fail(path_, ": tensor '", name, "' is not in the checkpoint");
  return *view;
}

// ---------------------------------------------------------------------------------------------
// Writer

void Writer::add(std::string name, ElementType type, std::vector<int64_t> shape,
                 std::vector<uint8_t> bytes) {
  auto bad = [&](const auto&... parts) {
    fail("safetensors writer: tensor '", name, "': ", parts...);
  };
  if (name == kMetadataKey) bad("the name is reserved");
  if (tensors_.count(name) != 0) bad("added twice");
  for (int64_t dim : shape) {
    if (dim < 0) bad("negative dimension ", dim);
  }
  int64_t elements = 0;
  uint64_t expected = 0;
  if (!tensor_size(shape, element_size(type), &elements, &expected)) bad("size overflows");
  if (bytes.size() != expected) bad(bytes.size(), " bytes given, shape needs ", expected);
  tensors_.emplace(std::move(name), Pending{type, std::move(shape), std::move(bytes)});
}

void Writer::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

void Writer::write(const std::string& path) const {
  Json header = Json::object();
  if (!metadata_.empty()) {
    Json metadata = Json::object();
    for (const auto& [key, value] : metadata_) metadata[key] = value;
    header[std::string(kMetadataKey)] = std::move(metadata);
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors_) {
    header[name] = {{"dtype", element_type_name(tensor.type)},
                    {"shape", tensor.shape},
                    {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& error) {
    fail("safetensors writer: ", path, ": ", error.what());
  }
  // Pad with spaces so the data starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFileWriter out(path);
  std::array<uint8_t, 8> length{};
  for (size_t i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  out.write(length.data(), length.size());
  out.write(text.data(), text.size());
  for (const auto& [name, tensor] : tensors_) out.write(tensor.bytes.data(), tensor.bytes.size());
  out.commit();
}

}  // namespace hark::safetensors
