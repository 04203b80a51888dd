// Renders a Transcript in the formats users ask for: plain text, JSON, SubRip and WebVTT.
//
// The layouts follow openai-whisper's writers (one stripped segment per line for txt, 1-based
// numbered cues for srt, a WEBVTT header for vtt) so existing tooling reads hark's files unchanged.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "pipeline/transcript.h"

namespace hark::output {

enum class Format { txt, json, srt, vtt };

// Parses "txt", "json", "srt", "vtt"; throws hark::Error otherwise.
Format format_from_name(std::string_view name);
// The name, which is also the file extension written for the format.
std::string_view format_name(Format format);

// "HH:MM:SS,mmm" (srt) or "HH:MM:SS.mmm" (vtt). Seconds are rounded to the nearest millisecond;
// negative or non-finite times render as 0 and hours grow past two digits when they must.
std::string timestamp(double seconds, char decimal_marker);

// One segment per line, each with surrounding whitespace removed. In txt, srt and vtt, control
// characters other than tabs and line breaks are dropped (JSON escapes them instead), and
// segments left empty are skipped (an empty cue confuses subtitle players); srt cues are
// numbered among the ones written.
std::string to_txt(const Transcript& transcript);
// {language, duration, text, segments: [{id, start, end, text, tokens, avg_logprob,
// no_speech_prob, temperature, compression_ratio, words?, token_times?}]}. Segments of models
// that time their words add, only when there are any:
//   words: [{word, start, end}] as openai-whisper's word_timestamps (without probability); the
//     word has no leading space.
//   token_times: [{token, text, start, end}], one per entry of tokens, in order: the token id,
//     its text as the model gave it, and its time span.
// Times are seconds rounded to milliseconds. Throws hark::Error when a segment's token_times are
// neither empty nor one per token.
nlohmann::ordered_json to_json_value(const Transcript& transcript);
// The JSON document, indented by `indent` spaces (negative: on one line), ending in a newline.
std::string to_json(const Transcript& transcript, int indent = 2);
// Cue text is one line: line breaks become spaces. srt turns "-->" into "->" (as openai-whisper
// does) so a cue cannot fake a timing line; vtt escapes &, < and > as the WebVTT spec requires.
std::string to_srt(const Transcript& transcript);
std::string to_vtt(const Transcript& transcript);

std::string render(const Transcript& transcript, Format format);

}  // namespace hark::output
