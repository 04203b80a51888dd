#include "base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/log.h"
#include "support/scratch_dir.h"

namespace hark {
namespace {

namespace fs = std::filesystem;

using test::ScratchDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string error_of(const std::string& path) {
  try {
    MappedFile file(path);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(MappedFile, MapsContents) {
  ScratchDir dir;
  write_text(dir.file("a.bin"), "hello");
  MappedFile file(dir.file("a.bin"));
  EXPECT_EQ(file.path(), dir.file("a.bin"));
  ASSERT_EQ(file.size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.data()), file.size()), "hello");
  EXPECT_EQ(file.bytes().size(), 5u);
  EXPECT_EQ(file.bytes()[4], 'o');
}

TEST(MappedFile, EmptyFileHasSizeZero) {
  ScratchDir dir;
  write_text(dir.file("empty"), "");
  MappedFile file(dir.file("empty"));
  EXPECT_EQ(file.size(), 0u);
  EXPECT_TRUE(file.bytes().empty());
}

TEST(MappedFile, ErrorsNameThePath) {
  ScratchDir dir;
  std::string missing = error_of(dir.file("missing.bin"));
  EXPECT_NE(missing.find("missing.bin"), std::string::npos) << missing;
  EXPECT_NE(missing.find("cannot open"), std::string::npos) << missing;
  std::string folder = error_of(dir.file(""));
  EXPECT_NE(folder.find("not a regular file"), std::string::npos) << folder;
}

TEST(MappedFile, MovesOwnership) {
  ScratchDir dir;
  write_text(dir.file("a.bin"), "abc");
  MappedFile first(dir.file("a.bin"));
  MappedFile second(std::move(first));
  EXPECT_EQ(first.size(), 0u);  // NOLINT(bugprone-use-after-move): the moved-from state is defined
  EXPECT_EQ(first.data(), nullptr);
  ASSERT_EQ(second.size(), 3u);
  EXPECT_EQ(second.data()[2], 'c');
  write_text(dir.file("b.bin"), "de");
  second = MappedFile(dir.file("b.bin"));
  EXPECT_EQ(second.size(), 2u);
  EXPECT_EQ(second.data()[0], 'd');
}

TEST(AtomicFileWriter, CommitReplacesTheDestination) {
  ScratchDir dir;
  const std::string path = dir.file("out.bin");
  write_text(path, "old");
  {
    AtomicFileWriter writer(path);
    writer.write("new", 3);
    writer.write_zeros(5000);
    EXPECT_EQ(writer.position(), 5003u);
    EXPECT_EQ(read_text(path), "old");  // untouched until commit
    writer.commit();
  }
  std::string text = read_text(path);
  ASSERT_EQ(text.size(), 5003u);
  EXPECT_EQ(text.substr(0, 3), "new");
  EXPECT_EQ(text[5002], '\0');
  EXPECT_EQ(dir.entries(), 1u);
}

TEST(AtomicFileWriter, AbandonedWriteLeavesNothing) {
  ScratchDir dir;
  const std::string path = dir.file("out.bin");
  write_text(path, "old");
  {
    AtomicFileWriter writer(path);
    writer.write("partial", 7);
  }
  EXPECT_EQ(read_text(path), "old");
  EXPECT_EQ(dir.entries(), 1u);
  EXPECT_THROW(AtomicFileWriter(dir.file("no/such/dir/x")), Error);
}

TEST(Log, LevelsAndParsing) {
  const log::Level saved = log::level();
  log::set_level(log::Level::info);
  EXPECT_TRUE(log::enabled(log::Level::warn));
  EXPECT_TRUE(log::enabled(log::Level::info));
  EXPECT_FALSE(log::enabled(log::Level::debug));
  EXPECT_EQ(log::parse_level("debug"), log::Level::debug);
  EXPECT_EQ(log::parse_level("warning"), log::Level::warn);
  EXPECT_THROW(log::parse_level("loud"), Error);
  testing::internal::CaptureStderr();
  log::info("loaded ", 3, " tensors");
  log::debug("hidden");
  std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed, "hark: info: loaded 3 tensors\n");
  log::set_level(saved);
}

}  // namespace
}  // namespace hark
