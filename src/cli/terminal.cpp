#include "cli/terminal.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hark::cli {

bool stderr_is_terminal() {
  return isatty(STDERR_FILENO) == 1;
}

ProgressLine::ProgressLine(std::string label)
    : label_(std::move(label)), enabled_(stderr_is_terminal()) {}

ProgressLine::~ProgressLine() {
  clear();
}

void ProgressLine::update(double fraction) {
  if (!enabled_) return;
  if (!std::isfinite(fraction)) return;
  const int percent = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 100.0);
  if (percent == shown_percent_) return;
  shown_percent_ = percent;
  std::fprintf(stderr, "\r\033[K%s %3d%%", label_.c_str(), percent);
  std::fflush(stderr);
}

void ProgressLine::clear() {
  if (!enabled_ || shown_percent_ < 0) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  shown_percent_ = -1;
}

}  // namespace hark::cli
