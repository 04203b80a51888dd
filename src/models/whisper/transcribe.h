// Whisper's decoding, as openai-whisper does it: per 30-s window a prompt (previous text, start of
// transcript, language, task), then greedy or beam search under the suppression and timestamp
// rules, temperature fallback on repetitive or unlikely output, no-speech detection, and long
// audio by seeking from window to window on the last timestamp.
#pragma once

#include <cstdint>
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

// One decoded window, as Options::on_window sees it.
struct WindowReport {
  int64_t seek = 0;             // the window's first mel frame
  int64_t frames = 0;           // mel frames of audio in it
  std::vector<int32_t> prompt;  // the decoder's input
  std::vector<int32_t> tokens;  // sampled tokens, without the final <|endoftext|>
  float temperature = 0;        // of the decoding that was kept
  float avg_logprob = 0, no_speech_prob = 0, compression_ratio = 0;
  bool skipped = false;  // judged silent (no_speech_threshold): no segments, the window is skipped
  size_t kept = 0;       // WindowSplit::kept (0 when skipped)
};

struct Options {
  std::string language;  // empty: detect from the first window
  Task task = Task::transcribe;
  bool timestamps = true;  // false: decode with <|notimestamps|>, one segment per window
  int beam_size = 0;       // 0 or 1: greedy; n > 1: beam search with n beams
  int best_of = 5;         // samples drawn at temperature > 0
  std::vector<float> temperatures = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f};  // fallback ladder
  bool fallback = true;  // false: only temperatures[0]
  // A window is decoded again at the next temperature when its text's compression ratio is above
  // compression_ratio_threshold (repetitive) or its avg_logprob below logprob_threshold
  // (unlikely), unless it is silent: no_speech_prob above no_speech_threshold and avg_logprob
  // below logprob_threshold. A silent window is skipped, with or without fallback.
  // Infinite thresholds (or no_speech_threshold >= 1) switch the corresponding test off.
  float compression_ratio_threshold = 2.4f;
  float logprob_threshold = -1.0f;
  float no_speech_threshold = 0.6f;
  // The text of earlier windows (back to the last one decoded at a temperature above 0.5) is the
  // next window's prompt.
  bool condition_on_previous_text = true;
  std::string initial_prompt;  // text placed after <|startofprev|> for the first window
  // true: initial_prompt leads every window's prompt, followed by as much earlier text as fits
  // (openai's carry_initial_prompt; what transformers does with prompt_ids when it does not
  // condition on previous text). false: it leads the first window's only.
  bool carry_initial_prompt = false;
  int max_tokens = 0;  // per window; 0: max_target_positions / 2 (224)
  uint64_t seed = 0;   // sampling at temperature > 0
  // > 1: faster-whisper's batched mode. The audio is cut into consecutive 30-s windows that are
  // decoded independently (no earlier text in the prompt; the initial prompt leads each), up to
  // batch_size of them at once: encoded as one batch and, greedy, decoded as one batch on the
  // GPU. A batch that does not fit in GPU memory is tried again in halves (a warning says so).
  // Windows that need fallback are decoded again one by one. Text after a window's last
  // timestamp pair ends that window as a segment of its own. 1: openai's sequential loop, where
  // each window starts at the previous one's last timestamp.
  int batch_size = 1;
  // Called after each window with the fraction of the audio done (for progress bars).
  std::function<void(double)> on_progress;
  // Called after each window with what was decoded there (for logs and tests).
  std::function<void(const WindowReport&)> on_window;
};

// Transcribes 16-kHz mono samples: openai's long-form log-mel (the samples followed by 30 s of
// zeros; Model::long_mel, on the GPU for the CUDA model), then what transcribe_mel does over it.
// Throws hark::Error on empty audio or invalid options.
Transcript transcribe(const Model& model, const text::BpeTokenizer& tokenizer,
                      std::span<const float> samples, const Options& options);

// Several recordings (16-kHz mono samples each). With options.batch_size > 1 their windows are
// decoded in one queue, so a batch may hold windows of several recordings; otherwise each is
// transcribe()d in turn. Throws hark::Error as transcribe() does (nothing is returned then).
std::vector<Transcript> transcribe_many(const Model& model, const text::BpeTokenizer& tokenizer,
                                        std::span<const std::span<const float>> recordings,
                                        const Options& options);

// The decoding loop of openai's transcribe.py over a log-mel spectrogram computed beforehand:
// `mel` is [n_mels x frames] row-major, of which the first `content_frames` are audio. Each
// window takes up to window_frames() of them from `seek` on, zero-padded (the frames past
// content_frames are never decoded); language detection reads the first window_frames() frames
// as they are, padding included.
Transcript transcribe_mel(const Model& model, const text::BpeTokenizer& tokenizer,
                          std::span<const float> mel, int64_t content_frames,
                          const Options& options);

// How a window's sampled tokens become segments, and how far the next window starts, as
// openai's transcribe.py (and transformers' long-form generate) split them:
// - at each pair of consecutive timestamps <|a|><|b|>: a segment ends with <|a|> and the next
//   starts with <|b|>;
// - a window that ends with one timestamp ends its last segment there and seeks past the whole
//   window; one that ends otherwise drops what follows its last pair (it was cut mid-speech) and
//   seeks to that pair's time;
// - without a pair, the whole window is one segment (ending at its last timestamp, if any, or at
//   the window's end) and the next window starts after it.
struct WindowSegment {
  size_t first = 0, last = 0;  // the segment's tokens are tokens[first, last)
  double start = 0, end = 0;   // seconds from the window's start
};
struct WindowSplit {
  std::vector<WindowSegment> segments;
  int64_t advance = 0;  // mel frames from this window's start to the next one's (> 0)
  // The tokens openai feeds forward as the next prompt and transformers returns: those of the
  // segments, plus (transformers only) the closing timestamp of a final pair.
  size_t kept = 0;
};
// `segment_frames`: the window's frames of audio (fewer than a window at the end of the audio);
// `input_stride`: mel frames per encoder frame (2), which is also mel frames per timestamp step.
WindowSplit split_window(std::span<const int32_t> tokens, int32_t timestamp_begin,
                         int64_t segment_frames, int input_stride);

}  // namespace hark::whisper
