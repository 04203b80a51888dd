// Leveled logging to stderr. Messages at or below the current level are printed, one line each,
// prefixed with "hark: <level>: ". The default level is warn; the CLI's --verbose raises it.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace hark::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

void set_level(Level level);
Level level();
bool enabled(Level level);
// Parses "error", "warn", "info", "debug"; throws hark::Error otherwise.
Level parse_level(std::string_view name);
// Writes one whole line; lines from different threads never interleave.
void write(Level level, std::string_view message);

// info("loaded ", n, " tensors") joins its parts like hark::fail, and only when the level is on.
template <class... Parts>
void message(Level at, const Parts&... parts) {
  if (!enabled(at)) return;
  std::ostringstream text;
  (text << ... << parts);
  write(at, text.str());
}
template <class... Parts>
void error(const Parts&... parts) {
  message(Level::error, parts...);
}
template <class... Parts>
void warn(const Parts&... parts) {
  message(Level::warn, parts...);
}
template <class... Parts>
void info(const Parts&... parts) {
  message(Level::info, parts...);
}
template <class... Parts>
void debug(const Parts&... parts) {
  message(Level::debug, parts...);
}

}  // namespace hark::log
