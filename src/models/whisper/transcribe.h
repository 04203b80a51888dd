// Whisper's decoding, as openai-whisper does it: per 30-s window a prompt (previous text, start of
// transcript, language, task), then greedy or beam search under the suppression and timestamp
// rules, temperature fallback on repetitive or unlikely output, no-speech detection, and long
// audio by seeking from window to window on the last timestamp.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "models/whisper/model.h"
#include "pipeline/transcript.h"

namespace hark::text {
class BpeTokenizer;
}

namespace hark::whisper {

enum class Task { transcribe, translate };

struct Options {
  std::string language;  // empty: detect from the first window
  Task task = Task::transcribe;
  bool timestamps = true;  // false: decode with <|notimestamps|>, one segment per window
  int beam_size = 0;       // 0 or 1: greedy; n > 1: beam search with n beams
  int best_of = 5;         // samples drawn at temperature > 0
  std::vector<float> temperatures = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f};  // fallback ladder
  bool fallback = true;    // false: only temperatures[0]
  float compression_ratio_threshold = 2.4f;
  float logprob_threshold = -1.0f;
  float no_speech_threshold = 0.6f;
  bool condition_on_previous_text = true;
  std::string initial_prompt;  // text placed after <|startofprev|> for the first window
  int max_tokens = 0;          // per window; 0: max_target_positions / 2 (224)
  uint64_t seed = 0;           // sampling at temperature > 0
  // Called after each window with the fraction of the audio done (for progress bars).
  std::function<void(double)> on_progress;
};

// Transcribes 16-kHz mono samples.
Transcript transcribe(const Model& model, const text::BpeTokenizer& tokenizer,
                      std::span<const float> samples, const Options& options);

}  // namespace hark::whisper
