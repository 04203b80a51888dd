#include "pipeline/output.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/error.h"

namespace hark::output {

namespace {

std::string_view strip(std::string_view text) {
  constexpr std::string_view whitespace = " \t\r\n\f\v";
  const size_t first = text.find_first_not_of(whitespace);
  if (first == std::string_view::npos) return {};
  const size_t last = text.find_last_not_of(whitespace);
  return text.substr(first, last - first + 1);
}

// Text decoded from a model can hold any byte, and ESC or other control characters written to a
// terminal would be interpreted, not shown. Tabs and line breaks are kept.
std::string without_control_characters(std::string_view text) {
  std::string kept;
  kept.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && c != '\n' && c != '\t' && c != '\r') || byte == 0x7F) continue;
    kept += c;
  }
  return kept;
}

// A subtitle cue is ended by a blank line, so its text must not contain line breaks.
std::string one_line(std::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

std::string escape_vtt(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        escaped += "&amp;";
        break;
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

// A float widened to double prints as 0.10000000149011612; going through the float's shortest
// decimal form keeps the JSON as readable as the value is precise.
double shortest(float value) {
  if (!std::isfinite(value)) return value;
  char digits[32];
  const auto [end, error] = std::to_chars(digits, digits + sizeof digits, value);
  if (error != std::errc()) return value;
  *end = '\0';
  return std::strtod(digits, nullptr);
}

double to_milliseconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return 0;
  return std::round(seconds * 1000.0) / 1000.0;
}

// openai-whisper's word_timestamps layout, less the probability hark does not have.
nlohmann::ordered_json words_json(const std::vector<TimedText>& words) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const TimedText& word : words) {
    list.push_back({
        {"word", word.text},
        {"start", to_milliseconds(word.start)},
        {"end", to_milliseconds(word.end)},
    });
  }
  return list;
}

nlohmann::ordered_json token_times_json(const Segment& segment) {
  if (segment.token_times.size() != segment.tokens.size()) {
    fail("segment at ", segment.start, " s has ", segment.tokens.size(), " tokens but ",
         segment.token_times.size(), " token times");
  }
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t i = 0; i < segment.tokens.size(); ++i) {
    const TimedText& timed = segment.token_times[i];
    list.push_back({
        {"token", segment.tokens[i]},
        {"text", timed.text},
        {"start", to_milliseconds(timed.start)},
        {"end", to_milliseconds(timed.end)},
    });
  }
  return list;
}

template <class WriteCue>
void for_each_cue(const Transcript& transcript, WriteCue write_cue) {
  int index = 0;
  for (const Segment& segment : transcript.segments) {
    const std::string printable = without_control_characters(segment.text);
    const std::string_view text = strip(printable);
    if (text.empty()) continue;
    write_cue(++index, segment, one_line(text));
  }
}

}  // namespace

Format format_from_name(std::string_view name) {
  if (name == "txt") return Format::txt;
  if (name == "json") return Format::json;
  if (name == "srt") return Format::srt;
  if (name == "vtt") return Format::vtt;
  fail("unknown output format '", name, "' (expected txt, json, srt or vtt)");
}

std::string_view format_name(Format format) {
  switch (format) {
    case Format::txt:
      return "txt";
    case Format::json:
      return "json";
    case Format::srt:
      return "srt";
    case Format::vtt:
      return "vtt";
  }
  return "txt";
}

std::string timestamp(double seconds, char decimal_marker) {
  double rounded = 0;
  if (std::isfinite(seconds) && seconds > 0) rounded = std::round(seconds * 1000.0);
  // Beyond this no audio is long enough; clamping keeps the integer conversion defined.
  rounded = std::min(rounded, 1e15);
  const auto total_ms = static_cast<uint64_t>(rounded);
  const uint64_t hours = total_ms / 3'600'000;
  const uint64_t minutes = total_ms / 60'000 % 60;
  const uint64_t secs = total_ms / 1000 % 60;
  const uint64_t millis = total_ms % 1000;
  char text[64];
  std::snprintf(text, sizeof text, "%02llu:%02llu:%02llu%c%03llu",
                static_cast<unsigned long long>(hours), static_cast<unsigned long long>(minutes),
                static_cast<unsigned long long>(secs), decimal_marker,
                static_cast<unsigned long long>(millis));
  return text;
}

std::string to_txt(const Transcript& transcript) {
  std::string text;
  for (const Segment& segment : transcript.segments) {
    const std::string printable = without_control_characters(segment.text);
    const std::string_view line = strip(printable);
    if (line.empty()) continue;
    text += line;
    text += '\n';
  }
  return text;
}

nlohmann::ordered_json to_json_value(const Transcript& transcript) {
  nlohmann::ordered_json segments = nlohmann::ordered_json::array();
  int id = 0;
  for (const Segment& segment : transcript.segments) {
    nlohmann::ordered_json entry = {
        {"id", id++},
        {"start", to_milliseconds(segment.start)},
        {"end", to_milliseconds(segment.end)},
        {"text", segment.text},
        {"tokens", segment.tokens},
        {"avg_logprob", shortest(segment.avg_logprob)},
        {"no_speech_prob", shortest(segment.no_speech_prob)},
        {"temperature", shortest(segment.temperature)},
        {"compression_ratio", shortest(segment.compression_ratio)},
    };
    // Only models that time their tokens fill these; Whisper's JSON stays as openai-whisper's.
    if (!segment.words.empty()) entry["words"] = words_json(segment.words);
    if (!segment.token_times.empty()) entry["token_times"] = token_times_json(segment);
    segments.push_back(std::move(entry));
  }
  return {
      {"language", transcript.language},
      {"duration", to_milliseconds(transcript.duration)},
      {"text", transcript.text()},
      {"segments", std::move(segments)},
  };
}

std::string to_json(const Transcript& transcript, int indent) {
  // Decoded text is valid UTF-8 by contract; replacing rather than throwing keeps one bad byte
  // from costing the whole transcript.
  return to_json_value(transcript)
             .dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
         "\n";
}

std::string to_srt(const Transcript& transcript) {
  std::string srt;
  for_each_cue(transcript, [&](int index, const Segment& segment, const std::string& text) {
    srt += std::to_string(index) + "\n";
    srt += timestamp(segment.start, ',') + " --> " + timestamp(segment.end, ',') + "\n";
    srt += replace_all(text, "-->", "->") + "\n\n";
  });
  return srt;
}

std::string to_vtt(const Transcript& transcript) {
  std::string vtt = "WEBVTT\n\n";
  for_each_cue(transcript, [&](int, const Segment& segment, const std::string& text) {
    vtt += timestamp(segment.start, '.') + " --> " + timestamp(segment.end, '.') + "\n";
    vtt += escape_vtt(text) + "\n\n";
  });
  return vtt;
}

std::string render(const Transcript& transcript, Format format) {
  switch (format) {
    case Format::txt:
      return to_txt(transcript);
    case Format::json:
      return to_json(transcript);
    case Format::srt:
      return to_srt(transcript);
    case Format::vtt:
      return to_vtt(transcript);
  }
  return to_txt(transcript);
}

}  // namespace hark::output
