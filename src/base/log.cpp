#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "base/error.h"

namespace hark::log {

namespace {

std::atomic<Level> current_level{Level::warn};
std::mutex output_mutex;

std::string_view level_name(Level level) {
  switch (level) {
    case Level::error:
      return "error";
    case Level::warn:
      return "warning";
    case Level::info:
      return "info";
    case Level::debug:
      return "debug";
  }
  return "log";
}

}  // namespace

void set_level(Level level) {
  current_level.store(level, std::memory_order_relaxed);
}

Level level() {
  return current_level.load(std::memory_order_relaxed);
}

bool enabled(Level at) {
  return static_cast<int>(at) <= static_cast<int>(level());
}

Level parse_level(std::string_view name) {
  if (name == "error") return Level::error;
  if (name == "warn" || name == "warning") return Level::warn;
  if (name == "info") return Level::info;
  if (name == "debug") return Level::debug;
  fail("unknown log level '", name, "' (expected error, warn, info or debug)");
}

void write(Level at, std::string_view message) {
  std::string line = "hark: ";
  line += level_name(at);
  line += ": ";
  line += message;
  line += '\n';
  std::lock_guard lock(output_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace hark::log
