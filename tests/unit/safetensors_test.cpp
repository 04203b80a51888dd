#include "format/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "support/scratch_dir.h"

namespace hark::safetensors {
namespace {

namespace fs = std::filesystem;

using test::ScratchDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A safetensors file with the given JSON header and `data_bytes` bytes of data after it.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<char>(header.size() >> (8 * i));
  bytes += header;
  bytes.append(data_bytes, '\x01');
  write_text(path, bytes);
}

std::vector<uint8_t> floats(std::vector<float> values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

void expect_rejected(const std::string& path, const std::string& expected) {
  try {
    File::open(path);
    ADD_FAILURE() << "accepted a file that should fail with: " << expected;
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST(Safetensors, WriteThenRead) {
  ScratchDir dir;
  Writer writer;
  writer.add("encoder.weight", ElementType::F32, {2, 3}, floats({1, 2, 3, 4, 5, 6}));
  writer.add("half", ElementType::F16, {2}, {0x00, 0x3c, 0x00, 0xc0});
  writer.add("bf", ElementType::BF16, {1}, {0x80, 0x3f});
  writer.add("ids", ElementType::I64, {1}, std::vector<uint8_t>(8, 0xff));
  writer.add("mask", ElementType::BOOL, {3}, {1, 0, 1});
  writer.add("bytes", ElementType::U8, {1, 1, 1}, {42});
  writer.add("scalar", ElementType::F64, {}, std::vector<uint8_t>(8, 0));
  writer.add("empty", ElementType::F32, {0, 4}, {});
  writer.set_metadata("format", "pt");
  writer.write(dir.file("model.safetensors"));

  auto file = File::open(dir.file("model.safetensors"));
  EXPECT_EQ(file->tensors().size(), 8u);
  EXPECT_EQ(file->metadata().at("format"), "pt");

  const TensorView& weight = file->tensor("encoder.weight");
  EXPECT_EQ(weight.type, ElementType::F32);
  EXPECT_EQ(weight.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(weight.elements(), 6);
  ASSERT_EQ(weight.nbytes, 24u);
  float read[6];
  std::memcpy(read, weight.data, sizeof read);
  EXPECT_EQ(read[5], 6.0f);

  EXPECT_EQ(file->tensor("half").data[1], 0x3c);
  EXPECT_EQ(file->tensor("mask").type, ElementType::BOOL);
  EXPECT_EQ(file->tensor("bytes").data[0], 42);
  EXPECT_TRUE(file->tensor("scalar").shape.empty());
  EXPECT_EQ(file->tensor("scalar").elements(), 1);
  EXPECT_EQ(file->tensor("empty").nbytes, 0u);
  EXPECT_EQ(file->find("missing"), nullptr);
  EXPECT_THROW(file->tensor("missing"), Error);

  // The header is padded so that the data section starts 8-byte aligned.
  std::ifstream in(dir.file("model.safetensors"), std::ios::binary);
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  EXPECT_EQ(header_size % 8, 0u);
}

TEST(Safetensors, ElementTypes) {
  EXPECT_EQ(element_type_from_name("BF16"), ElementType::BF16);
  EXPECT_EQ(element_type_name(ElementType::BOOL), "BOOL");
  EXPECT_EQ(element_size(ElementType::I16), 2u);
  EXPECT_EQ(to_dtype(ElementType::BF16), DType::BF16);
  EXPECT_EQ(to_dtype(ElementType::I64), DType::I64);
  EXPECT_THROW(to_dtype(ElementType::U8), Error);
  EXPECT_THROW(element_type_from_name("F8_E4M3"), Error);
}

TEST(Safetensors, ReadsHandWrittenHeader) {
  // Exactly the layout the Python library writes for {"a": tensor([1., 2.])}.
  ScratchDir dir;
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  bytes += header;
  float values[2] = {1.0f, 2.0f};
  bytes.append(reinterpret_cast<const char*>(values), sizeof values);
  write_text(dir.file("a.safetensors"), bytes);
  auto file = File::open(dir.file("a.safetensors"));
  float read[2];
  std::memcpy(read, file->tensor("a").data, sizeof read);
  EXPECT_EQ(read[1], 2.0f);
  EXPECT_TRUE(file->metadata().empty());
}

TEST(Safetensors, WriterRejectsBadInput) {
  Writer writer;
  EXPECT_THROW(writer.add("a", ElementType::F32, {2}, {1, 2, 3}), Error);
  EXPECT_THROW(writer.add("a", ElementType::F32, {-1}, {}), Error);
  EXPECT_THROW(writer.add("__metadata__", ElementType::U8, {1}, {1}), Error);
  writer.add("a", ElementType::U8, {1}, {1});
  EXPECT_THROW(writer.add("a", ElementType::U8, {1}, {1}), Error);
}

TEST(Safetensors, RejectsBadHeaders) {
  ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");

  write_text(path, "");
  expect_rejected(path, "not a safetensors file");
  write_text(path, std::string("\x05\0\0\0", 4));
  expect_rejected(path, "not a safetensors file");

  write_raw(path, "{not json", 0);
  expect_rejected(path, "not valid JSON");
  write_raw(path, "[1, 2]", 0);
  expect_rejected(path, "not a JSON object");

  std::string too_long(8, '\0');
  too_long[0] = 100;
  write_text(path, too_long + "{}");
  expect_rejected(path, "runs past the end");

  write_raw(path, R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1);
  expect_rejected(path, "F8_E4M3");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0);
  expect_rejected(path, "tensor 'a'");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[1]}})", 4);
  expect_rejected(path, "data_offsets");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
            4);
  expect_rejected(path, "overflows");
  write_raw(path, R"({"a":"F32"})", 0);
  expect_rejected(path, "not a JSON object");
  write_raw(path, R"({"__metadata__":{"n":1}})", 0);
  expect_rejected(path, "is not a string");
}

TEST(Safetensors, RejectsBadOffsets) {
  ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");

  write_raw(path, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4);
  expect_rejected(path, "outside the 4-byte data section");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8);
  expect_rejected(path, "outside");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 12);
  expect_rejected(path, "needs 8");
  write_raw(path,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            12);
  expect_rejected(path, "overlap");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4);
  expect_rejected(path, "data offset -4 is not a non-negative integer");
}

void write_sharded(const ScratchDir& dir, const std::string& index) {
  Writer first, second;
  first.add("layer.0.weight", ElementType::F32, {2}, floats({1, 2}));
  first.add("layer.0.bias", ElementType::F32, {1}, floats({3}));
  second.add("layer.1.weight", ElementType::F32, {2}, floats({4, 5}));
  second.set_metadata("format", "pt");
  first.write(dir.file("model-00001-of-00002.safetensors"));
  second.write(dir.file("model-00002-of-00002.safetensors"));
  write_text(dir.file("model.safetensors.index.json"), index);
}

const char* kIndex = R"({
  "metadata": {"total_size": 20},
  "weight_map": {
    "layer.0.weight": "model-00001-of-00002.safetensors",
    "layer.0.bias": "model-00001-of-00002.safetensors",
    "layer.1.weight": "model-00002-of-00002.safetensors"
  }
})";

TEST(Safetensors, CheckpointAcrossShards) {
  ScratchDir dir;
  write_sharded(dir, kIndex);
  Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_EQ(checkpoint.names(),
            (std::vector<std::string>{"layer.0.bias", "layer.0.weight", "layer.1.weight"}));
  EXPECT_EQ(checkpoint.shards().size(), 2u);
  float value;
  std::memcpy(&value, checkpoint.tensor("layer.1.weight").data + 4, 4);
  EXPECT_EQ(value, 5.0f);
  std::memcpy(&value, checkpoint.tensor("layer.0.bias").data, 4);
  EXPECT_EQ(value, 3.0f);
  EXPECT_EQ(checkpoint.metadata().at("format"), "pt");
  EXPECT_EQ(checkpoint.find("nope"), nullptr);
  EXPECT_THROW(checkpoint.tensor("nope"), Error);
}

TEST(Safetensors, CheckpointSingleFileAndDirectPath) {
  ScratchDir dir;
  Writer writer;
  writer.add("w", ElementType::BF16, {2}, {0, 0, 0, 0});
  writer.write(dir.file("model.safetensors"));
  EXPECT_EQ(Checkpoint::open(dir.path()).names(), (std::vector<std::string>{"w"}));
  EXPECT_EQ(Checkpoint::open(dir.file("model.safetensors")).tensor("w").type, ElementType::BF16);
}

TEST(Safetensors, CheckpointRejectsBadIndexes) {
  {
    ScratchDir dir;
    EXPECT_THROW(Checkpoint::open(dir.path()), Error);  // neither file present
    EXPECT_THROW(Checkpoint::open(dir.file("absent")), Error);
  }
  {
    ScratchDir dir;
    write_sharded(dir, R"({"weight_map": {"layer.9.weight": "model-00001-of-00002.safetensors"}})");
    EXPECT_THROW(Checkpoint::open(dir.path()), Error);  // tensor not in its shard
  }
  {
    ScratchDir dir;
    write_sharded(dir, R"({"weight_map": {"x": "../elsewhere.safetensors"}})");
    try {
      Checkpoint::open(dir.path());
      ADD_FAILURE();
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("not inside the model folder"), std::string::npos);
    }
  }
  {
    ScratchDir dir;
    write_sharded(dir, R"({"metadata": {}})");
    EXPECT_THROW(Checkpoint::open(dir.path()), Error);  // no weight_map
  }
  {
    ScratchDir dir;
    write_sharded(dir, R"({"weight_map": {"x": "missing.safetensors"}})");
    EXPECT_THROW(Checkpoint::open(dir.path()), Error);
  }
  {
    ScratchDir dir;
    write_sharded(dir, "{");
    EXPECT_THROW(Checkpoint::open(dir.path()), Error);
  }
}

}  // namespace
}  // namespace hark::safetensors
