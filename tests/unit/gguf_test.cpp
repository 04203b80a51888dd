#include "format/gguf.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/error.h"
#include "support/scratch_dir.h"

namespace hark::gguf {
namespace {

namespace fs = std::filesystem;

using test::ScratchDir;

// Rewrites the file in place (no O_TRUNC): the truncation and mutation tests write thousands of
// small files, and freeing and reallocating their blocks each time is what would make them slow.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  EXPECT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes.size())), 0);
  ::close(fd);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Builds GGUF bytes by hand, field by field, for inputs the Writer would never produce.
class Bytes {
 public:
  Bytes& u8(uint8_t value) { return raw(&value, 1); }
  Bytes& u32(uint32_t value) { return raw(&value, 4); }
  Bytes& u64(uint64_t value) { return raw(&value, 8); }
  Bytes& f32(float value) { return raw(&value, 4); }
  Bytes& str(std::string_view text) {
    u64(text.size());
    return raw(text.data(), text.size());
  }
  Bytes& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return u32(0x46554747).u32(version).u64(tensors).u64(kvs);
  }
  Bytes& kv_u32(std::string_view key, uint32_t value) {
    return str(key).u32(static_cast<uint32_t>(ValueType::U32)).u32(value);
  }
  // dims innermost-first, as GGUF stores them.
  Bytes& tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t dim : dims) u64(dim);
    return u32(type).u64(offset);
  }
  Bytes& pad_to(size_t alignment) {
    while (data.size() % alignment != 0) data.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t count) {
    data.resize(data.size() + count, 0);
    return *this;
  }
  Bytes& raw(const void* bytes, size_t count) {
    const auto* begin = static_cast<const uint8_t*>(bytes);
    data.insert(data.end(), begin, begin + count);
    return *this;
  }

  std::vector<uint8_t> data;
};

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

// Writes `bytes`, opens them, and expects a hark::Error whose message names the file and
// contains `expected`.
void expect_rejected(const ScratchDir& dir, const std::vector<uint8_t>& bytes,
                     const std::string& expected) {
  const std::string path = dir.file("bad.gguf");
  write_file(path, bytes);
  try {
    File::open(path);
    ADD_FAILURE() << "accepted a file that should fail with: " << expected;
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

std::vector<uint8_t> pattern_bytes(size_t count, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<uint8_t> bytes(count);
  for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(random());
  return bytes;
}

Value scalar(ValueType type, std::variant<int64_t, uint64_t, double, bool, std::string> data) {
  Value value;
  value.type = type;
  std::visit([&](auto&& held) { value.data = held; }, data);
  return value;
}

Value array(ValueType element_type, Array elements) {
  Value value;
  value.type = ValueType::ARRAY;
  value.element_type = element_type;
  value.data = std::move(elements);
  return value;
}

// A small file with every kind of metadata and a few tensors, used by the truncation and
// mutation tests. Every tensor is a multiple of 32 bytes so that no padding follows the last one:
// each strict prefix of the file then cuts into something the reader needs.
void write_sample(const std::string& path) {
  Writer writer;
  writer.set_string("general.architecture", "whisper");
  writer.set_u32("whisper.n_mels", 80);
  writer.set_f32("whisper.eps", 1e-5f);
  writer.set_bool("whisper.multilingual", true);
  writer.set_strings("tokenizer.tokens", {"a", "", "hello"});
  writer.set_i32s("tokenizer.ids", {1, -2, 3});
  writer.set("nested",
             array(ValueType::ARRAY, {array(ValueType::U8, {scalar(ValueType::U8, uint64_t{7})})}));
  writer.add_tensor("weight", DType::F32, {2, 8}, [] { return pattern_bytes(64, 1); });
  writer.add_tensor("quant", DType::Q8_0, {1, 64}, [] {
    auto bytes = pattern_bytes(68, 2);
    for (size_t block : {0, 34}) {  // F16 scales of 1.0
      bytes[block] = 0x00;
      bytes[block + 1] = 0x3c;
    }
    return bytes;
  });
  writer.add_tensor("half", DType::F16, {16}, [] { return pattern_bytes(32, 3); });
  writer.write(path);
}

TEST(Gguf, RoundTripsEveryMetadataType) {
  ScratchDir dir;
  std::vector<std::pair<std::string, Value>> expected = {
      {"u8", scalar(ValueType::U8, uint64_t{255})},
      {"i8", scalar(ValueType::I8, int64_t{-128})},
      {"u16", scalar(ValueType::U16, uint64_t{65535})},
      {"i16", scalar(ValueType::I16, int64_t{-32768})},
      {"u32", scalar(ValueType::U32, uint64_t{4294967295u})},
      {"i32", scalar(ValueType::I32, int64_t{-2147483647 - 1})},
      {"u64", scalar(ValueType::U64, uint64_t{18446744073709551615u})},
      {"i64", scalar(ValueType::I64, int64_t{-9223372036854775807 - 1})},
      {"f32", scalar(ValueType::F32, double{-0.15625})},
      {"f64", scalar(ValueType::F64, double{3.141592653589793})},
      {"bool.true", scalar(ValueType::BOOL, true)},
      {"bool.false", scalar(ValueType::BOOL, false)},
      {"string", scalar(ValueType::STRING, std::string("héllo \0 world", 14))},
      {"string.empty", scalar(ValueType::STRING, std::string())},
      {"array.empty", array(ValueType::F32, {})},
      {"array.i16", array(ValueType::I16, {scalar(ValueType::I16, int64_t{-5}),
                                           scalar(ValueType::I16, int64_t{7})})},
      {"array.u64", array(ValueType::U64, {scalar(ValueType::U64, uint64_t{1} << 63)})},
      {"array.f64", array(ValueType::F64, {scalar(ValueType::F64, 0.1)})},
      {"array.bool",
       array(ValueType::BOOL, {scalar(ValueType::BOOL, true), scalar(ValueType::BOOL, false)})},
      {"array.strings", array(ValueType::STRING, {scalar(ValueType::STRING, std::string()),
                                                  scalar(ValueType::STRING, std::string("x"))})},
      {"array.nested",
       array(ValueType::ARRAY,
             {array(ValueType::STRING, {scalar(ValueType::STRING, std::string("a"))}),
              array(ValueType::I32, {}),
              array(ValueType::ARRAY,
                    {array(ValueType::I8, {scalar(ValueType::I8, int64_t{-1})})})})},
  };
  Writer writer;
  for (const auto& [key, value] : expected) writer.set(key, value);
  writer.write(dir.file("all.gguf"));

  auto file = File::open(dir.file("all.gguf"));
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->metadata().size(), expected.size());
  for (const auto& [key, value] : expected) {
    const Value* read = file->find(key);
    ASSERT_NE(read, nullptr) << key;
    EXPECT_TRUE(*read == value) << key;
  }
  EXPECT_TRUE(file->tensors().empty());
}

TEST(Gguf, RoundTripsEveryTensorTypeWithRowMajorShapes) {
  ScratchDir dir;
  const std::vector<std::pair<DType, std::vector<int64_t>>> cases = {
      {DType::F32, {3, 5}},       {DType::F16, {7}},      {DType::BF16, {2, 3, 4}},
      {DType::Q8_0, {3, 64}},     {DType::I8, {1, 1, 9}}, {DType::I16, {4, 1}},
      {DType::I32, {2, 2, 2, 2}}, {DType::I64, {5}},      {DType::F64, {1, 2, 3, 4, 5, 6}},
  };
  Writer writer;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [type, shape] = cases[i];
    int64_t elements = 1;
    for (int64_t dim : shape) elements *= dim;
    size_t bytes = dtype_bytes(type, static_cast<uint64_t>(elements));
    writer.add_tensor("t" + std::to_string(i), type, shape,
                      [bytes, i] { return pattern_bytes(bytes, static_cast<uint32_t>(i)); });
  }
  writer.write(dir.file("tensors.gguf"));

  auto file = File::open(dir.file("tensors.gguf"));
  ASSERT_EQ(file->tensors().size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [type, shape] = cases[i];
    const TensorInfo& info = file->tensor("t" + std::to_string(i));
    EXPECT_EQ(info.type, type);
    EXPECT_EQ(info.shape, shape);
    EXPECT_EQ(file->tensors()[i].name, info.name);  // file order is kept
    auto expected = pattern_bytes(info.nbytes, static_cast<uint32_t>(i));
    EXPECT_EQ(info.nbytes, expected.size());
    EXPECT_EQ(std::memcmp(info.data, expected.data(), expected.size()), 0) << info.name;
    EXPECT_EQ(info.offset % 32, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(info.data) % 32, 0u);
  }
  EXPECT_EQ(file->find_tensor("missing"), nullptr);
  EXPECT_THROW(file->tensor("missing"), Error);
}

TEST(Gguf, StoresDimensionsInnermostFirst) {
  ScratchDir dir;
  Writer writer;
  writer.add_tensor("m", DType::F32, {2, 3}, [] { return std::vector<uint8_t>(24); });
  writer.write(dir.file("m.gguf"));
  auto bytes = read_file(dir.file("m.gguf"));
  // magic, version, counts (24 bytes), name (8 + 1), n_dims (4), then dims.
  uint64_t first_dim = 0;
  std::memcpy(&first_dim, bytes.data() + 24 + 9 + 4, 8);
  EXPECT_EQ(first_dim, 3u);

  // And a hand-made file with dims [4, 2] reads as shape {2, 4}.
  Bytes raw;
  raw.header(1, 0).tensor("x", {4, 2}, kF32, 0).pad_to(32).zeros(32);
  write_file(dir.file("raw.gguf"), raw.data);
  EXPECT_EQ(File::open(dir.file("raw.gguf"))->tensor("x").shape, (std::vector<int64_t>{2, 4}));
}

TEST(Gguf, WritesAndReadsCustomAlignment) {
  ScratchDir dir;
  Writer writer(64);
  writer.add_tensor("a", DType::F32, {3}, [] { return std::vector<uint8_t>(12, 1); });
  writer.add_tensor("b", DType::F32, {3}, [] { return std::vector<uint8_t>(12, 2); });
  writer.write(dir.file("a.gguf"));
  auto file = File::open(dir.file("a.gguf"));
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->get_int("general.alignment"), 64);
  EXPECT_EQ(file->tensor("b").offset, 64u);
  EXPECT_EQ(file->tensor("b").data[0], 2);
  EXPECT_THROW(Writer(48), Error);
}

TEST(Gguf, ReadsVersion2) {
  ScratchDir dir;
  Bytes raw;
  raw.header(1, 1, 2).kv_u32("k", 9).tensor("x", {8}, kF32, 0).pad_to(32).zeros(32);
  write_file(dir.file("v2.gguf"), raw.data);
  auto file = File::open(dir.file("v2.gguf"));
  EXPECT_EQ(file->version(), 2u);
  EXPECT_EQ(file->get_int("k"), 9);
}

TEST(Gguf, TypedGetters) {
  ScratchDir dir;
  Writer writer;
  writer.set_string("s", "text");
  writer.set_u32("u", 7);
  writer.set_i32("i", -3);
  writer.set_u64("big", uint64_t{1} << 63);
  writer.set_f32("f", 0.5f);
  writer.set_bool("b", true);
  writer.set_strings("ss", {"x", "y"});
  writer.set_i32s("is", {4, 5});
  writer.set_f32s("fs", {0.25f});
  writer.write(dir.file("g.gguf"));
  auto file = File::open(dir.file("g.gguf"));

  EXPECT_EQ(file->get_string("s"), "text");
  EXPECT_EQ(file->get_int("u"), 7);
  EXPECT_EQ(file->get_int("i"), -3);
  EXPECT_THROW(file->get_int("big"), Error);  // does not fit int64
  EXPECT_EQ(file->get_float("f"), 0.5);
  EXPECT_EQ(file->get_float("u"), 7.0);  // integers read as floats
  EXPECT_TRUE(file->get_bool("b"));
  EXPECT_EQ(file->get_strings("ss"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(file->get_ints("is"), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(file->get_floats("fs"), (std::vector<double>{0.25}));
  EXPECT_EQ(file->get_floats("is"), (std::vector<double>{4.0, 5.0}));
  EXPECT_EQ(file->get_int_or("missing", 11), 11);
  EXPECT_EQ(file->get_float_or("missing", 1.5), 1.5);
  EXPECT_EQ(file->get_string_or("missing", "d"), "d");
  EXPECT_TRUE(file->has("s"));
  EXPECT_FALSE(file->has("missing"));

  // Present but of another kind: an error, never the fallback.
  EXPECT_THROW(file->get_int_or("s", 1), Error);
  EXPECT_THROW(file->get_int("f"), Error);
  EXPECT_THROW(file->get_string("u"), Error);
  EXPECT_THROW(file->get_bool("u"), Error);
  EXPECT_THROW(file->get_strings("is"), Error);
  EXPECT_THROW(file->get_ints("ss"), Error);
  EXPECT_THROW(file->get_ints("s"), Error);
  try {
    file->get_int("missing.key");
    ADD_FAILURE();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("missing.key"), std::string::npos);
  }
}

TEST(Gguf, WriterRejectsBadInput) {
  Writer writer;
  EXPECT_THROW(writer.set("k", scalar(ValueType::U8, uint64_t{256})), Error);
  EXPECT_THROW(writer.set("k", scalar(ValueType::I8, int64_t{-129})), Error);
  EXPECT_THROW(writer.set("k", scalar(ValueType::U32, int64_t{-1})), Error);
  EXPECT_THROW(writer.set("k", scalar(ValueType::STRING, int64_t{1})), Error);
  EXPECT_THROW(writer.set("k", array(ValueType::I32, {scalar(ValueType::U32, uint64_t{1})})),
               Error);
  EXPECT_THROW(writer.set("", scalar(ValueType::U8, uint64_t{1})), Error);
  auto none = [] { return std::vector<uint8_t>(); };
  EXPECT_THROW(writer.add_tensor("t", DType::F32, {}, none), Error);
  EXPECT_THROW(writer.add_tensor("t", DType::F32, {0, 3}, none), Error);
  EXPECT_THROW(writer.add_tensor("t", DType::Q8_0, {2, 16}, none), Error);
  EXPECT_THROW(writer.add_tensor("t", DType::F32, {int64_t{1} << 40, int64_t{1} << 40}, none),
               Error);
  writer.add_tensor("t", DType::F32, {1}, none);
  EXPECT_THROW(writer.add_tensor("t", DType::F32, {1}, none), Error);
}

TEST(Gguf, FailedWriteLeavesNoFile) {
  ScratchDir dir;
  const std::string path = dir.file("out.gguf");
  write_file(path, {1, 2, 3});  // an older file at the destination must survive a failed write

  Writer wrong_size;
  wrong_size.add_tensor("t", DType::F32, {4}, [] { return std::vector<uint8_t>(12); });
  EXPECT_THROW(wrong_size.write(path), Error);

  Writer throwing;
  throwing.add_tensor("t", DType::F32, {4}, []() -> std::vector<uint8_t> {
    throw std::runtime_error("producer failed");
  });
  EXPECT_THROW(throwing.write(path), std::runtime_error);

  EXPECT_EQ(read_file(path), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(dir.entries(), 1u);  // no temporary file left behind

  EXPECT_THROW(Writer().write(dir.file("no/such/folder/x.gguf")), Error);
}

TEST(Gguf, RejectsEmptyFile) {
  ScratchDir dir;
  expect_rejected(dir, {}, "empty file");
}

TEST(Gguf, RejectsWrongMagic) {
  ScratchDir dir;
  Bytes raw;
  raw.u32(0x46554746).u32(3).u64(0).u64(0);
  expect_rejected(dir, raw.data, "not a GGUF file");
  expect_rejected(dir, {'G', 'G'}, "not a GGUF file");
}

TEST(Gguf, RejectsUnsupportedVersions) {
  ScratchDir dir;
  Bytes v1, v4, big_endian;
  v1.header(0, 0, 1);
  v4.header(0, 0, 4);
  big_endian.header(0, 0, 0x03000000);
  expect_rejected(dir, v1.data, "unsupported GGUF version 1");
  expect_rejected(dir, v4.data, "unsupported GGUF version 4");
  expect_rejected(dir, big_endian.data, "big-endian");
}

TEST(Gguf, RejectsEveryTruncation) {
  ScratchDir dir;
  write_sample(dir.file("sample.gguf"));
  const auto bytes = read_file(dir.file("sample.gguf"));
  ASSERT_NO_THROW(File::open(dir.file("sample.gguf")));
  const std::string path = dir.file("cut.gguf");
  for (size_t length = 0; length < bytes.size(); ++length) {
    write_file(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + length));
    EXPECT_THROW(File::open(path), Error) << "prefix of " << length << " bytes";
  }
}

TEST(Gguf, RejectsStringLengthPastEnd) {
  ScratchDir dir;
  Bytes key, value;
  key.header(0, 1).u64(1000).raw("abc", 3).zeros(20);
  expect_rejected(dir, key.data, "key length 1000 runs past the end");
  value.header(0, 1).str("name").u32(static_cast<uint32_t>(ValueType::STRING)).u64(~uint64_t{0});
  expect_rejected(dir, value.data, "metadata key 'name'");
}

TEST(Gguf, RejectsAbsurdCounts) {
  ScratchDir dir;
  Bytes kvs, tensors, both;
  kvs.header(0, uint64_t{1} << 60).zeros(64);
  tensors.header(~uint64_t{0}, 0).zeros(64);
  both.header(2, 5).zeros(100);  // each count alone would fit in 100 bytes; together they do not
  expect_rejected(dir, kvs.data, "cannot fit");
  expect_rejected(dir, tensors.data, "cannot fit");
  expect_rejected(dir, both.data, "cannot fit");
}

TEST(Gguf, RejectsArrayLengthOverflow) {
  ScratchDir dir;
  Bytes raw;
  // 2^61 u64 values: the byte count (2^64) wraps to zero if computed naively.
  raw.header(0, 1).str("a").u32(static_cast<uint32_t>(ValueType::ARRAY));
  raw.u32(static_cast<uint32_t>(ValueType::U64)).u64(uint64_t{1} << 61).zeros(16);
  expect_rejected(dir, raw.data, "metadata key 'a'");

  Bytes nested;
  // An array of one array of one array ... 20 levels down.
  nested.header(0, 1).str("deep").u32(static_cast<uint32_t>(ValueType::ARRAY));
  for (int i = 0; i < 20; ++i) nested.u32(static_cast<uint32_t>(ValueType::ARRAY)).u64(1);
  nested.u32(static_cast<uint32_t>(ValueType::U8)).u64(0);
  expect_rejected(dir, nested.data, "nested deeper");
}

TEST(Gguf, RejectsUnknownValueType) {
  ScratchDir dir;
  Bytes scalar_type, element_type;
  scalar_type.header(0, 1).str("k").u32(13).u32(0);
  element_type.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::ARRAY)).u32(99).u64(0);
  expect_rejected(dir, scalar_type.data, "unknown value type 13");
  expect_rejected(dir, element_type.data, "unknown array element type 99");
}

TEST(Gguf, RejectsBadBoolAndAlignment) {
  ScratchDir dir;
  Bytes bad_bool, odd_alignment, string_alignment;
  bad_bool.header(0, 1).str("b").u32(static_cast<uint32_t>(ValueType::BOOL)).u8(2);
  odd_alignment.header(0, 1).kv_u32("general.alignment", 24);
  string_alignment.header(0, 1).str("general.alignment");
  string_alignment.u32(static_cast<uint32_t>(ValueType::STRING)).str("32");
  expect_rejected(dir, bad_bool.data, "bool value is 2");
  expect_rejected(dir, odd_alignment.data, "not a power of two");
  expect_rejected(dir, string_alignment.data, "general.alignment");
}

TEST(Gguf, RejectsUnknownTensorType) {
  ScratchDir dir;
  Bytes raw;
  raw.header(1, 0).tensor("w", {256}, 12, 0).pad_to(32).zeros(256);
  expect_rejected(dir, raw.data, "tensor 'w'");
  expect_rejected(dir, raw.data, "q4_K");
}

TEST(Gguf, RejectsTensorOutsideData) {
  ScratchDir dir;
  Bytes past_end, huge_offset, no_data;
  past_end.header(1, 0).tensor("w", {8}, kF32, 32).pad_to(32).zeros(32);
  huge_offset.header(1, 0).tensor("w", {8}, kF32, ~uint64_t{0} - 31).pad_to(32).zeros(32);
  no_data.header(1, 0).tensor("w", {8}, kF32, 0);
  expect_rejected(dir, past_end.data, "outside");
  expect_rejected(dir, huge_offset.data, "tensor 'w'");
  expect_rejected(dir, no_data.data, "past the end");
}

TEST(Gguf, RejectsMisalignedOffset) {
  ScratchDir dir;
  Bytes raw;
  raw.header(1, 0).tensor("w", {4}, kF32, 16).pad_to(32).zeros(64);
  expect_rejected(dir, raw.data, "not a multiple of the alignment");
}

TEST(Gguf, RejectsOverlappingTensors) {
  ScratchDir dir;
  Bytes raw;
  raw.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad_to(32).zeros(128);
  expect_rejected(dir, raw.data, "overlap");
}

TEST(Gguf, RejectsPartialBlocks) {
  ScratchDir dir;
  Bytes raw;
  raw.header(1, 0).tensor("q", {48, 2}, kQ8_0, 0).pad_to(32).zeros(256);
  expect_rejected(dir, raw.data, "not a whole number of 32-value blocks");
}

TEST(Gguf, RejectsDuplicates) {
  ScratchDir dir;
  Bytes keys, names;
  keys.header(0, 2).kv_u32("k", 1).kv_u32("k", 2);
  names.header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad_to(32).zeros(64);
  expect_rejected(dir, keys.data, "duplicate metadata key");
  expect_rejected(dir, names.data, "duplicate tensor name");
}

TEST(Gguf, RejectsBadDimensions) {
  ScratchDir dir;
  Bytes zero, overflow, no_dims, many_dims;
  zero.header(1, 0).tensor("w", {8, 0}, kF32, 0).pad_to(32).zeros(32);
  overflow.header(1, 0).tensor("w", {uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0);
  overflow.pad_to(32).zeros(32);
  no_dims.header(1, 0).tensor("w", {}, kF32, 0).pad_to(32).zeros(32);
  many_dims.header(1, 0).tensor("w", std::vector<uint64_t>(9, 1), kF32, 0).pad_to(32).zeros(32);
  expect_rejected(dir, zero.data, "dimension 1 is 0");
  expect_rejected(dir, overflow.data, "element count overflows");
  expect_rejected(dir, no_dims.data, "0 dimensions");
  expect_rejected(dir, many_dims.data, "9 dimensions");
  // Fits int64, but needs more bytes than the file: rejected before any size arithmetic wraps.
  Bytes huge;
  huge.header(1, 0).tensor("w", {uint64_t{1} << 62}, 28, 0).pad_to(32).zeros(32);
  expect_rejected(dir, huge.data, "more bytes than the whole file");
}

TEST(Gguf, RejectsMissingFile) {
  ScratchDir dir;
  try {
    File::open(dir.file("absent.gguf"));
    ADD_FAILURE();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("absent.gguf"), std::string::npos);
  }
}

// Random byte flips must give either a valid file or a hark::Error: never a crash, a hang, or an
// out-of-bounds read (which the sanitizer build would catch while the data is touched below).
TEST(Gguf, SurvivesRandomByteFlips) {
  ScratchDir dir;
  write_sample(dir.file("sample.gguf"));
  const auto original = read_file(dir.file("sample.gguf"));
  const std::string path = dir.file("mutant.gguf");
  std::mt19937 random(1234);
  constexpr int kTrials = 5000;
  int opened = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    auto bytes = original;
    int flips = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < flips; ++i) {
      bytes[random() % bytes.size()] ^= static_cast<uint8_t>(1 + random() % 255);
    }
    write_file(path, bytes);
    try {
      auto file = File::open(path);
      ++opened;
      uint64_t sum = 0;
      for (const TensorInfo& info : file->tensors()) {
        for (uint64_t b = 0; b < info.nbytes; ++b) sum += info.data[b];
      }
      for (const auto& [key, value] : file->metadata()) sum += key.size() + value.data.index();
      EXPECT_GT(sum, 0u);
    } catch (const Error&) {
    }
  }
  // Flips inside tensor data leave valid files; the test must have exercised both outcomes.
  RecordProperty("opened", opened);
  EXPECT_GT(opened, 0);
  EXPECT_LT(opened, kTrials);
}

}  // namespace
}  // namespace hark::gguf
