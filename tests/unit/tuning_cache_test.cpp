// The tuning cache (compute/tuning_cache.h): what one object stores, the next one reads from the
// file; later lines override earlier ones; a damaged file costs the damaged lines only; a cache
// that cannot be written still answers from memory; where the file lives.
#include "compute/tuning_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "support/scoped_env.h"
#include "support/scratch_dir.h"

namespace hark::compute {
namespace {

using hark::testing::ScopedEnv;
using test::ScratchDir;
using Bytes = std::vector<uint8_t>;

TEST(TuningCache, TheNextObjectReadsWhatOneStored) {
  ScratchDir dir;
  const std::string file = dir.file("folder/inside/cache.tune");  // folders made as needed
  const Bytes first = {0, 1, 0xab, 0xff}, second = {7};
  {
    TuningCache cache(file);
    EXPECT_FALSE(cache.find("shape-a"));
    cache.store("shape-a", first);
    cache.store("shape-b", second);
    EXPECT_EQ(cache.find("shape-a"), first);
  }
  TuningCache again(file);
  EXPECT_EQ(again.find("shape-a"), first);
  EXPECT_EQ(again.find("shape-b"), second);
  EXPECT_FALSE(again.find("shape-c"));
  // A later choice for a key wins, in this object and the next.
  again.store("shape-a", second);
  EXPECT_EQ(again.find("shape-a"), second);
  EXPECT_EQ(TuningCache(file).find("shape-a"), second);
}

TEST(TuningCache, DamagedLinesAreSkipped) {
  ScratchDir dir;
  const std::string file = dir.file("cache.tune");
  std::ofstream(file) << "good 0a0b\n"
                      << "odd-digits 0a0\n"
                      << "not-hex zz\n"
                      << "three fields 00\n"
                      << "\n"
                      << "lonely\n"
                      << "upper 0A\n"
                      << "truncated 0c";  // no newline: still a whole line
  const TuningCache cache(file);
  EXPECT_EQ(cache.find("good"), (Bytes{10, 11}));
  EXPECT_EQ(cache.find("truncated"), (Bytes{12}));
  for (const char* key : {"odd-digits", "not-hex", "three", "lonely", "upper"}) {
    EXPECT_FALSE(cache.find(key)) << key;
  }
}

TEST(TuningCache, AMissingOrUnwritableFileIsAnEmptyCache) {
  ScratchDir dir;
  // A folder where the file should be: nothing to read, nothing written, answers from memory.
  const std::string folder = dir.file("a-folder");
  std::filesystem::create_directories(folder);
  TuningCache cache(folder);
  EXPECT_FALSE(cache.find("key"));
  cache.store("key", Bytes{1});
  cache.store("other", Bytes{2});  // warned once, not again
  EXPECT_EQ(cache.find("key"), Bytes{1});
  EXPECT_TRUE(std::filesystem::is_directory(folder));
}

TEST(TuningCache, KeysAndValuesMustFitOnALine) {
  ScratchDir dir;
  TuningCache cache(dir.file("cache.tune"));
  EXPECT_THROW(cache.store("", Bytes{1}), Error);
  EXPECT_THROW(cache.store("two words", Bytes{1}), Error);
  EXPECT_THROW(cache.store("line\nbreak", Bytes{1}), Error);
  EXPECT_THROW(cache.store("empty", Bytes{}), Error);
  EXPECT_FALSE(cache.find("two words"));
}

TEST(TuningCache, Location) {
  {
    ScopedEnv variable("HARK_TEST_TUNING_CACHE", "/somewhere/file.tune");
    EXPECT_EQ(TuningCache::location("HARK_TEST_TUNING_CACHE", "name.tune"),
              std::filesystem::path("/somewhere/file.tune"));
  }
  for (const char* off : {"off", "0"}) {
    ScopedEnv variable("HARK_TEST_TUNING_CACHE", off);
    EXPECT_FALSE(TuningCache::location("HARK_TEST_TUNING_CACHE", "name.tune"));
  }
  ScopedEnv unset("HARK_TEST_TUNING_CACHE", "");
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(TuningCache::location("HARK_TEST_TUNING_CACHE", "name.tune"),
              std::filesystem::path("/xdg/hark/name.tune"));
  }
  ScopedEnv no_xdg("XDG_CACHE_HOME", "");
  {
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(TuningCache::location("HARK_TEST_TUNING_CACHE", "name.tune"),
              std::filesystem::path("/home/someone/.cache/hark/name.tune"));
  }
  ScopedEnv no_home("HOME", "");
  EXPECT_FALSE(TuningCache::location("HARK_TEST_TUNING_CACHE", "name.tune"));
}

}  // namespace
}  // namespace hark::compute
