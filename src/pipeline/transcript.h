// What a transcription produces, independent of the model family.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hark {

// A piece of text with its time span: a word, or one token of a model that times its tokens.
struct TimedText {
  double start = 0;  // seconds from the start of the audio
  double end = 0;
  std::string text;
};

struct Segment {
  double start = 0;  // seconds from the start of the audio
  double end = 0;
  std::string text;
  std::vector<int32_t> tokens;  // text and timestamp tokens of the segment, no prompt tokens
  float avg_logprob = 0;        // mean log-probability of the window's sampled tokens
  float no_speech_prob = 0;     // probability of <|nospeech|> at the start of the window
  float temperature = 0;        // the temperature the window was finally decoded at
  float compression_ratio = 0;  // gzip-style compression ratio of the window's text
  // Word and token timings, where the model gives them (Parakeet); empty otherwise.
  std::vector<TimedText> words;
  std::vector<TimedText> token_times;  // one per entry of `tokens`
};

struct Transcript {
  std::string language;  // language code, e.g. "en"
  double duration = 0;   // seconds of audio
  std::vector<Segment> segments;

  std::string text() const;  // the segments' text joined
};

}  // namespace hark
