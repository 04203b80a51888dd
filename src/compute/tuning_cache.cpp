#include "compute/tuning_cache.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>

#include "base/error.h"
#include "base/log.h"

namespace hark::compute {
namespace {

constexpr char kHex[] = "0123456789abcdef";

std::string to_hex(std::span<const uint8_t> bytes) {
  std::string text;
  text.reserve(2 * bytes.size());
  for (uint8_t byte : bytes) {
    text.push_back(kHex[byte >> 4]);
    text.push_back(kHex[byte & 15]);
  }
  return text;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::optional<std::vector<uint8_t>> from_hex(const std::string& text) {
  if (text.empty() || text.size() % 2 != 0) return std::nullopt;
  std::vector<uint8_t> bytes(text.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int high = hex_digit(text[2 * i]), low = hex_digit(text[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return bytes;
}

}  // namespace

TuningCache::TuningCache(std::filesystem::path file) : file_(std::move(file)) {
  std::ifstream in(file_);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, hex, extra;
    if (!(fields >> key >> hex) || (fields >> extra)) continue;
    if (auto value = from_hex(hex)) values_[key] = std::move(*value);
  }
}

std::optional<std::vector<uint8_t>> TuningCache::find(const std::string& key) const {
  std::lock_guard lock(mutex_);
  if (auto found = values_.find(key); found != values_.end()) return found->second;
  return std::nullopt;
}

void TuningCache::store(const std::string& key, std::span<const uint8_t> value) {
  if (key.empty()) fail("tuning cache: an empty key");
  // The reader splits lines where std::isspace does.
  for (char c : key) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      fail("tuning cache: the key '", key, "' holds whitespace");
    }
  }
  if (value.empty()) fail("tuning cache: an empty value for '", key, "'");
  std::lock_guard lock(mutex_);
  values_[key].assign(value.begin(), value.end());
  // One line, written at once in append mode: processes sharing the file add whole lines.
  const std::string line = key + " " + to_hex(value) + "\n";
  std::error_code error;
  if (file_.has_parent_path()) std::filesystem::create_directories(file_.parent_path(), error);
  std::ofstream out(file_, std::ios::app | std::ios::binary);
  if (out) out.write(line.data(), static_cast<std::streamsize>(line.size()));
  if (!out && !warned_) {
    warned_ = true;
    log::warn("cannot write the tuning cache ", file_.string(),
              ": tuned choices will be timed again by the next process");
  }
}

std::optional<std::filesystem::path> TuningCache::location(const char* variable,
                                                           const std::string& name) {
  if (const char* set = std::getenv(variable); set != nullptr && *set != '\0') {
    const std::string value = set;
    if (value == "off" || value == "0") return std::nullopt;
    return std::filesystem::path(value);
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    return std::filesystem::path(xdg) / "hark" / name;
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    return std::filesystem::path(home) / ".cache" / "hark" / name;
  }
  return std::nullopt;
}

}  // namespace hark::compute
