// Helpers shared by the FFmpeg-backed files (*_ffmpeg.cpp): FFmpeg's log output is kept off the
// terminal and its last error line is kept for our error messages instead.
#pragma once

#include <string>

namespace hark::audio::libav {

// Routes FFmpeg's log through hark: error lines are remembered for last_log_error(), everything
// goes to hark's debug log, nothing straight to stderr. Safe to call repeatedly, from any thread.
void quiet_logs();
// The last error-level line FFmpeg logged on this thread since forget_log_error(), or "".
std::string last_log_error();
void forget_log_error();

// The text for an AVERROR code, with FFmpeg's last logged error line when there is one.
std::string error_text(int code);

}  // namespace hark::audio::libav
