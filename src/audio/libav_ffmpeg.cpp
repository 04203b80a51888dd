#include "audio/libav.h"

extern "C" {
#include <libavutil/error.h>
#include <libavutil/log.h>
}

#include <cstdarg>
#include <mutex>

#include "base/log.h"

namespace hark::audio::libav {
namespace {

thread_local std::string last_error;

void log_callback(void* context, int level, const char* format, va_list arguments) {
  if (level > AV_LOG_ERROR && !log::enabled(log::Level::debug)) return;
  char line[1024];
  int print_prefix = 0;  // FFmpeg's own prefix carries a pointer; name the component instead
  av_log_format_line2(context, level, format, arguments, line, sizeof line, &print_prefix);
  std::string text;
  const AVClass* component = context ? *static_cast<const AVClass* const*>(context) : nullptr;
  if (component && component->item_name) text = std::string(component->item_name(context)) + ": ";
  text += line;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (level <= AV_LOG_ERROR) last_error = text;
  log::debug("ffmpeg: ", text);
}

}  // namespace

void quiet_logs() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(log_callback); });
}

std::string last_log_error() {
  return last_error;
}
void forget_log_error() {
  last_error.clear();
}

std::string error_text(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof text);
  std::string message = text;
  if (!last_error.empty()) message += " (" + last_error + ")";
  return message;
}

}  // namespace hark::audio::libav
