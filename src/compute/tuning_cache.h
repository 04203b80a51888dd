// Choices that took time to find (which cuBLASLt algorithm runs a product fastest), kept in a
// file so that the next process finds them instead of timing again: one line a choice, "KEY
// HEX-BYTES", appended as it is made. Keys are the caller's (a shape, say); the file's name says
// what they are valid for (the GPU, the library's version).
//
// The file is a cache, never a source of errors: a missing or unreadable file is an empty cache,
// lines that do not parse are skipped, a later line for a key overrides an earlier one, and a
// failed write is reported once as a warning and otherwise ignored. A value read back is only a
// candidate: the caller checks that it still applies.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hark::compute {

class TuningCache {
 public:
  // Reads what `file` holds (nothing when it does not exist yet).
  explicit TuningCache(std::filesystem::path file);

  std::optional<std::vector<uint8_t>> find(const std::string& key) const;
  // Keeps `value` for `key` and appends it to the file (creating the file and its folders).
  // Keys must be non-empty and free of whitespace (throws hark::Error otherwise).
  void store(const std::string& key, std::span<const uint8_t> value);

  // Where a cache named `name` lives unless the environment's `variable` says otherwise:
  // $variable when set ("off" or "0": nowhere), else $XDG_CACHE_HOME/hark/NAME, else
  // $HOME/.cache/hark/NAME; nullopt when there is nowhere to keep it.
  static std::optional<std::filesystem::path> location(const char* variable,
                                                       const std::string& name);

 private:
  std::filesystem::path file_;
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<uint8_t>> values_;
  bool warned_ = false;
};

}  // namespace hark::compute
