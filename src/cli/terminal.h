// Progress on the terminal: a single line on stderr, redrawn in place, shown only when stderr is a
// terminal so that logs and pipes never fill up with carriage returns.
#pragma once

#include <string>

namespace hark::cli {

class ProgressLine {
 public:
  // `label` is shown before the percentage; nothing is drawn when stderr is not a terminal.
  explicit ProgressLine(std::string label);
  ~ProgressLine();  // clears the line
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void update(double fraction);  // 0..1; redraws only when the shown percentage changes
  void clear();

 private:
  std::string label_;
  bool enabled_;
  int shown_percent_ = -1;
};

bool stderr_is_terminal();

}  // namespace hark::cli
