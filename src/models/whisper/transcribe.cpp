#include "models/whisper/transcribe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <string_view>

#include "base/error.h"
#include "base/log.h"
#include "features/whisper_mel.h"
#include "models/whisper/logit_rules.h"
#include "models/whisper/search.h"
#include "models/whisper/tokens.h"
#include "text/bpe.h"

// Long-form decoding follows openai's transcribe.py. transformers' long-form generate() decodes
// the same windows and seeks the same way (split_window), with these differences:
// - condition_on_prev_tokens is off unless asked for, and a window decoded at a temperature of
//   0.5 or more leaves only the next window unconditioned, where openai drops the earlier text
//   for good;
// - segments without text or of zero length still feed the next prompt (openai clears them);
// - compression ratios are computed on the token ids (2 bytes each), not on the text;
// - max_new_tokens defaults to what fits the decoder context (openai: half the context);
// - short audio (one window) is decoded from transformers' 30-s padded log-mel instead of the
//   long-form one, so its frames past the audio hold the log-mel of silence, not zeros.
// And hark drops the segments openai clears (no text, or zero length) from the result.

namespace hark::whisper {
namespace {

constexpr int kHopLength = features::kWhisperHopLength;
constexpr int kSampleRate = features::kWhisperSampleRate;

bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

std::string_view strip(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

void validate(const Options& options) {
  if (options.temperatures.empty()) fail("Whisper options: no temperature given");
  for (float t : options.temperatures) {
    if (!std::isfinite(t) || t < 0) {
      fail("Whisper options: temperature ", t, " (must be 0 or more)");
    }
  }
  if (options.beam_size < 0) fail("Whisper options: beam_size ", options.beam_size);
  if (options.best_of < 1) fail("Whisper options: best_of ", options.best_of, " (at least 1)");
  if (options.max_tokens < 0) fail("Whisper options: max_tokens ", options.max_tokens);
  if (options.batch_size < 1) fail("Whisper options: batch_size ", options.batch_size);
  for (float threshold : {options.compression_ratio_threshold, options.logprob_threshold,
                          options.no_speech_threshold}) {
    if (std::isnan(threshold)) fail("Whisper options: a threshold is NaN");
  }
}

// The language token to decode with (-1 for English-only models) and its code.
struct LanguageChoice {
  int32_t token = -1;
  std::string code;
};

// `first_window`: encodes the first window, only when the language must be detected.
template <class EncodeFirst>
LanguageChoice choose_language(const Model& model, const Options& options,
                               EncodeFirst&& first_window) {
  const Vocabulary& vocabulary = model.vocabulary();
  std::string code;
  if (!options.language.empty()) {
    // A code ("de") or a name ("German"), as openai's --language accepts.
    const std::optional<std::string_view> known = language_code(options.language);
    code = known ? std::string(*known) : options.language;
  }
  if (!vocabulary.multilingual) {
    if (!code.empty() && code != "en") {
      fail("this Whisper model is English-only; it cannot transcribe language '", options.language,
           "'");
    }
    if (options.task == Task::translate) {
      fail("this Whisper model is English-only; it cannot translate");
    }
    return {-1, "en"};
  }
  if (!code.empty()) return {vocabulary.language_token(code), code};
  LanguageDetection detection = detect_language(model, first_window());
  return {detection.token, detection.code};
}

// One window of a long mel, encoded alone.
std::shared_ptr<const EncodedWindow> encode_window(const Model& model, const LongMel& mel,
                                                   int64_t seek, int64_t frames) {
  const MelWindow window{&mel, seek, frames};
  return model.encode_windows(std::span(&window, 1))[0];
}

// The text tokens of tokens[first, last): everything before <|endoftext|> (openai's segments).
std::vector<int32_t> text_tokens(std::span<const int32_t> tokens, int32_t eot) {
  std::vector<int32_t> text;
  for (int32_t token : tokens) {
    if (token < eot) text.push_back(token);
  }
  return text;
}

struct Decoded {
  WindowResult result;
  float compression_ratio = 0;
};

// A window's result with openai's DecodingResult.text compression ratio: every token but the
// timestamps, specials as their names.
Decoded judge(const text::BpeTokenizer& tokenizer, const Vocabulary& vocabulary,
              WindowResult result) {
  std::vector<int32_t> non_timestamps;
  for (int32_t token : result.tokens) {
    if (token < vocabulary.timestamp_begin) non_timestamps.push_back(token);
  }
  Decoded decoded;
  decoded.compression_ratio = compression_ratio(strip(tokenizer.decode(non_timestamps)));
  decoded.result = std::move(result);
  return decoded;
}

// Repetitive or unlikely text, unless the window is silent (where a higher temperature would
// only invent words).
bool needs_fallback(const Decoded& decoded, const Options& options) {
  const WindowResult& result = decoded.result;
  const bool silent = result.no_speech_prob > options.no_speech_threshold &&
                      result.avg_logprob < options.logprob_threshold;
  return !silent && (decoded.compression_ratio > options.compression_ratio_threshold ||
                     result.avg_logprob < options.logprob_threshold);
}

// openai's decode_with_fallback: up the temperature ladder from `first_attempt` until the text
// is neither repetitive nor unlikely (or is judged silent).
Decoded decode_with_fallback(const Model& model, const text::BpeTokenizer& tokenizer,
                             const std::shared_ptr<const EncodedWindow>& window,
                             const Prompt& prompt, const LogitRules& rules, const Options& options,
                             int max_tokens, std::mt19937_64& random, size_t first_attempt = 0) {
  const size_t attempts = options.fallback ? options.temperatures.size() : 1;
  Decoded decoded;
  for (size_t attempt = first_attempt; attempt < attempts; ++attempt) {
    SearchOptions search;
    search.temperature = options.temperatures[attempt];
    search.beam_size = std::max(options.beam_size, 1);
    search.best_of = options.best_of;
    search.max_tokens = max_tokens;
    search.random = &random;
    decoded =
        judge(tokenizer, model.vocabulary(), decode_window(model, window, prompt, rules, search));
    if (!needs_fallback(decoded, options)) break;
  }
  return decoded;
}

}  // namespace

WindowSplit split_window(std::span<const int32_t> tokens, int32_t timestamp_begin,
                         int64_t segment_frames, int input_stride) {
  const double time_precision = static_cast<double>(input_stride) * kHopLength / kSampleRate;
  auto is_timestamp = [&](size_t i) { return tokens[i] >= timestamp_begin; };
  auto position = [&](size_t i) { return is_timestamp(i) ? tokens[i] - timestamp_begin : 0; };
  const size_t n = tokens.size();

  WindowSplit split;
  std::vector<size_t> slices;  // where a pair's second timestamp starts a new segment
  for (size_t i = 1; i < n; ++i) {
    if (is_timestamp(i - 1) && is_timestamp(i)) slices.push_back(i);
  }
  const bool single_timestamp_ending = n >= 2 && !is_timestamp(n - 2) && is_timestamp(n - 1);

  if (!slices.empty()) {
    if (single_timestamp_ending) slices.push_back(n);
    size_t first = 0;
    for (size_t last : slices) {
      split.segments.push_back(
          {first, last, position(first) * time_precision, position(last - 1) * time_precision});
      first = last;
    }
    if (single_timestamp_ending) {
      split.advance = segment_frames;  // no speech after the last timestamp
      split.kept = n;
    } else {
      // Cut mid-speech: seek to the last pair and decode what follows again.
      split.advance = static_cast<int64_t>(position(first - 1)) * input_stride;
      split.kept = first + 1;
    }
  } else {
    double end = static_cast<double>(segment_frames) * kHopLength / kSampleRate;
    for (size_t i = n; i-- > 0;) {
      if (!is_timestamp(i)) continue;
      if (position(i) > 0) end = position(i) * time_precision;  // speech ends at the last one
      break;
    }
    split.segments.push_back({0, n, 0.0, end});
    split.advance = segment_frames;
    split.kept = n;
  }
  // <|0.00|><|0.00|> as the last pair would decode the same window again, forever.
  if (split.advance <= 0) split.advance = segment_frames;
  return split;
}

namespace {

// The segments of a decoded window that openai keeps, appended to the transcript (their tokens
// to all_tokens); returns how the window splits (split_window).
// `whole_window`: the next window does not start at this one's last timestamp pair (batched
// mode), so text after that pair is a segment of its own, up to the window's end, instead of
// being decoded again.
WindowSplit add_segments(const Vocabulary& vocabulary, const text::BpeTokenizer& tokenizer,
                         const Decoded& decoded, int64_t seek, int64_t segment_frames,
                         int input_stride, bool whole_window, Transcript& transcript,
                         std::vector<int32_t>& all_tokens) {
  const WindowResult& result = decoded.result;
  const double time_offset = static_cast<double>(seek) * kHopLength / kSampleRate;
  WindowSplit split =
      split_window(result.tokens, vocabulary.timestamp_begin, segment_frames, input_stride);
  if (whole_window && split.kept < result.tokens.size()) {
    const size_t tail = split.kept - 1;  // the pair's second timestamp opens the tail
    const double step = static_cast<double>(input_stride) * kHopLength / kSampleRate;
    const double start = (result.tokens[tail] - vocabulary.timestamp_begin) * step;
    const double end = static_cast<double>(segment_frames) * kHopLength / kSampleRate;
    // A tail that starts past the audio has nothing to say (the sequential loop would stop too).
    if (start < end) split.segments.push_back({tail, result.tokens.size(), start, end});
    split.kept = result.tokens.size();
  }
  for (const WindowSegment& piece : split.segments) {
    const std::span<const int32_t> tokens =
        std::span<const int32_t>(result.tokens).subspan(piece.first, piece.last - piece.first);
    Segment segment;
    segment.start = time_offset + piece.start;
    segment.end = time_offset + piece.end;
    segment.text = tokenizer.decode(text_tokens(tokens, vocabulary.eot));
    // openai clears a segment without text or duration (its tokens leave the prompt too).
    if (segment.start == segment.end || strip(segment.text).empty()) continue;
    segment.tokens.assign(tokens.begin(), tokens.end());
    segment.avg_logprob = result.avg_logprob;
    segment.no_speech_prob = result.no_speech_prob;
    segment.temperature = result.temperature;
    segment.compression_ratio = decoded.compression_ratio;
    all_tokens.insert(all_tokens.end(), tokens.begin(), tokens.end());
    transcript.segments.push_back(std::move(segment));
  }
  return split;
}

// What a decoded window tells about itself (Options::on_window), before its segments are known.
WindowReport report_of(const Prompt& prompt, const Decoded& decoded, int64_t seek,
                       int64_t segment_frames, const Options& options) {
  const WindowResult& result = decoded.result;
  WindowReport report;
  report.seek = seek;
  report.frames = segment_frames;
  report.prompt = prompt.tokens;
  report.tokens = result.tokens;
  report.temperature = result.temperature;
  report.avg_logprob = result.avg_logprob;
  report.no_speech_prob = result.no_speech_prob;
  report.compression_ratio = decoded.compression_ratio;
  // Silence: a likely <|nospeech|> and no confident text.
  report.skipped = result.no_speech_prob > options.no_speech_threshold &&
                   !(result.avg_logprob > options.logprob_threshold);
  return report;
}

// A recording to transcribe in batched mode: its long-form log-mel, and what its windows are
// decoded with.
struct Recording {
  const LongMel* mel = nullptr;
  Prompt prompt;
  Transcript* transcript = nullptr;
};

// Options::batch_size > 1: every recording cut into fixed 30-s windows, decoded independently,
// batch_size windows at a time, the windows of one recording after another in one queue (so a
// batch may hold the end of one file and the start of the next).
void transcribe_batched(const Model& model, const text::BpeTokenizer& tokenizer,
                        std::span<Recording> recordings, const Options& options,
                        const LogitRules& rules, int max_tokens) {
  const Config& config = model.config();
  const Vocabulary& vocabulary = model.vocabulary();
  const int window_frames = config.window_frames();
  const int input_stride = window_frames / config.max_source_positions;
  const bool greedy = options.temperatures[0] == 0 && options.beam_size <= 1;
  std::mt19937_64 random(options.seed);

  struct Window {
    size_t recording;
    int64_t seek, frames;
  };
  std::vector<Window> queue;
  for (size_t r = 0; r < recordings.size(); ++r) {
    const int64_t content_frames = recordings[r].mel->content_frames();
    for (int64_t seek = 0; seek < content_frames; seek += window_frames) {
      queue.push_back({r, seek, std::min<int64_t>(window_frames, content_frames - seek)});
    }
  }
  std::vector<std::vector<int32_t>> all_tokens(recordings.size());

  // Decodes a batch of windows (nothing else changes, so a batch that runs out of device memory
  // can be tried again in halves).
  auto decode_batch = [&](std::span<const Window> batch, std::vector<Prompt>& prompts) {
    const int count = static_cast<int>(batch.size());
    std::vector<MelWindow> cuts;
    prompts.clear();
    for (const Window& w : batch) {
      const Recording& recording = recordings[w.recording];
      cuts.push_back({recording.mel, w.seek, w.frames});
      prompts.push_back(recording.prompt);
    }
    const auto windows = model.encode_windows(cuts);
    std::vector<Decoded> decoded(count);
    if (greedy) {
      std::vector<WindowResult> results =
          decode_windows_greedy(model, windows, prompts, rules, max_tokens);
      for (int i = 0; i < count; ++i) {
        decoded[i] = judge(tokenizer, vocabulary, std::move(results[i]));
        if (options.fallback && needs_fallback(decoded[i], options)) {
          decoded[i] = decode_with_fallback(model, tokenizer, windows[i], prompts[i], rules,
                                            options, max_tokens, random, /*first_attempt=*/1);
        }
      }
    } else {
      for (int i = 0; i < count; ++i) {
        decoded[i] = decode_with_fallback(model, tokenizer, windows[i], prompts[i], rules, options,
                                          max_tokens, random);
      }
    }
    return decoded;
  };

  size_t batch_size = static_cast<size_t>(options.batch_size);
  for (size_t first = 0; first < queue.size();) {
    const std::span<const Window> batch =
        std::span(queue).subspan(first, std::min(batch_size, queue.size() - first));
    const int count = static_cast<int>(batch.size());
    std::vector<Prompt> prompts;
    std::vector<Decoded> decoded;
    const auto started = std::chrono::steady_clock::now();
    try {
      decoded = decode_batch(batch, prompts);
    } catch (const OutOfMemory& error) {
      if (count == 1) throw;
      batch_size = static_cast<size_t>(count) / 2;
      log::warn(error.what(), "; going on with batches of ", batch_size, " windows");
      continue;
    }
    log::info("windows ", first + 1, "-", first + count, " of ", queue.size(),
              ": encoded and decoded in ",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
              " s");
    for (int i = 0; i < count; ++i) {
      const Window& w = batch[i];
      WindowReport report = report_of(prompts[i], decoded[i], w.seek, w.frames, options);
      if (!report.skipped) {
        report.kept = add_segments(vocabulary, tokenizer, decoded[i], w.seek, w.frames,
                                   input_stride, /*whole_window=*/true,
                                   *recordings[w.recording].transcript, all_tokens[w.recording])
                          .kept;
      }
      if (options.on_window) options.on_window(report);
    }
    first += count;
    if (options.on_progress) {
      options.on_progress(static_cast<double>(first) / static_cast<double>(queue.size()));
    }
  }
}

}  // namespace

namespace {

// Throws hark::Error unless the model's config cuts windows that make sense.
void check_config(const Model& model) {
  const Config& config = model.config();
  if (config.n_mels <= 0 || config.window_frames() <= 0 || config.max_source_positions <= 0) {
    fail("Whisper transcribe: invalid model config (", config.n_mels, " mels, ",
         config.window_frames(), " frames per window)");
  }
}

// The language of a recording: given, or detected on its first window.
LanguageChoice language_of(const Model& model, const Options& options, const LongMel& mel) {
  return choose_language(model, options, [&] {
    return encode_window(model, mel, 0,
                         std::min<int64_t>(mel.total_frames(), model.config().window_frames()));
  });
}

// openai encodes " " + the stripped initial prompt.
std::vector<int32_t> initial_prompt_tokens(const text::BpeTokenizer& tokenizer,
                                           const Options& options) {
  if (options.initial_prompt.empty()) return {};
  std::string text = " ";
  text += strip(options.initial_prompt);
  return tokenizer.encode(text);
}

int max_tokens_of(const Model& model, const Options& options) {
  return options.max_tokens > 0 ? options.max_tokens : model.config().max_target_positions / 2;
}

// Batched mode over recordings given as their long-form log-mels.
std::vector<Transcript> transcribe_mels_batched(const Model& model,
                                                const text::BpeTokenizer& tokenizer,
                                                std::span<const LongMel* const> mels,
                                                const Options& options) {
  const Config& config = model.config();
  const Vocabulary& vocabulary = model.vocabulary();
  const std::vector<int32_t> initial_prompt = initial_prompt_tokens(tokenizer, options);
  const int32_t task =
      options.task == Task::translate ? vocabulary.translate : vocabulary.transcribe;
  std::vector<Transcript> transcripts(mels.size());
  std::vector<Recording> recordings;
  for (size_t i = 0; i < mels.size(); ++i) {
    const LongMel& mel = *mels[i];
    const LanguageChoice language = language_of(model, options, mel);
    transcripts[i].language = language.code;
    transcripts[i].duration = static_cast<double>(mel.content_frames()) * kHopLength / kSampleRate;
    recordings.push_back({&mel,
                          make_prompt(vocabulary, config.max_target_positions, initial_prompt,
                                      language.token, task, options.timestamps),
                          &transcripts[i]});
  }
  const LogitRules rules(vocabulary, config.vocab_size, options.timestamps);
  transcribe_batched(model, tokenizer, recordings, options, rules, max_tokens_of(model, options));
  return transcripts;
}

// transcribe_mel over a long mel wherever it is (options validated).
Transcript transcribe_long_mel(const Model& model, const text::BpeTokenizer& tokenizer,
                               const LongMel& mel, const Options& options) {
  if (options.batch_size > 1) {
    const LongMel* const one[] = {&mel};
    return std::move(transcribe_mels_batched(model, tokenizer, one, options)[0]);
  }
  const Config& config = model.config();
  const Vocabulary& vocabulary = model.vocabulary();
  const int window_frames = config.window_frames();
  const int64_t content_frames = mel.content_frames();
  const int input_stride = window_frames / config.max_source_positions;

  Transcript transcript;
  transcript.duration = static_cast<double>(content_frames) * kHopLength / kSampleRate;
  const LanguageChoice language = language_of(model, options, mel);
  transcript.language = language.code;
  const int32_t task =
      options.task == Task::translate ? vocabulary.translate : vocabulary.transcribe;

  const LogitRules rules(vocabulary, config.vocab_size, options.timestamps);
  const int max_tokens = max_tokens_of(model, options);
  std::mt19937_64 random(options.seed);

  // The initial prompt's tokens, then every kept segment's; a window's prompt is all_tokens from
  // prompt_reset_since on (or, carrying the initial prompt, that prompt and the newest of them).
  const std::vector<int32_t> initial_prompt = initial_prompt_tokens(tokenizer, options);
  std::vector<int32_t> all_tokens = initial_prompt;
  size_t prompt_reset_since = 0;
  const size_t carried_text = static_cast<size_t>(
      std::max<int64_t>(config.max_target_positions / 2 - 1 - int64_t(initial_prompt.size()), 0));

  int64_t seek = 0;
  while (seek < content_frames) {
    const int64_t segment_frames = std::min<int64_t>(window_frames, content_frames - seek);
    const auto started = std::chrono::steady_clock::now();
    const std::shared_ptr<const EncodedWindow> window =
        encode_window(model, mel, seek, segment_frames);
    const auto encoded = std::chrono::steady_clock::now();
    std::vector<int32_t> previous;
    if (options.carry_initial_prompt) {
      const size_t since = std::max(initial_prompt.size(), prompt_reset_since);
      const size_t from =
          std::max(since, all_tokens.size() - std::min(all_tokens.size(), carried_text));
      previous = initial_prompt;
      previous.insert(previous.end(), all_tokens.begin() + from, all_tokens.end());
    } else {
      previous.assign(all_tokens.begin() + prompt_reset_since, all_tokens.end());
    }
    const Prompt prompt = make_prompt(vocabulary, config.max_target_positions, previous,
                                      language.token, task, options.timestamps);
    const Decoded decoded =
        decode_with_fallback(model, tokenizer, window, prompt, rules, options, max_tokens, random);
    const WindowResult& result = decoded.result;
    log::info("window at ", static_cast<double>(seek) * kHopLength / kSampleRate, " s: encoded in ",
              std::chrono::duration<double>(encoded - started).count(), " s, ",
              result.tokens.size(), " tokens decoded in ",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - encoded).count(),
              " s");

    WindowReport report = report_of(prompt, decoded, seek, segment_frames, options);
    if (report.skipped) {
      seek += segment_frames;
    } else {
      const WindowSplit split =
          add_segments(vocabulary, tokenizer, decoded, seek, segment_frames, input_stride,
                       /*whole_window=*/false, transcript, all_tokens);
      report.kept = split.kept;
      seek += split.advance;
      if (!options.condition_on_previous_text || result.temperature > 0.5f) {
        prompt_reset_since = all_tokens.size();  // text sampled that hot misleads the next window
      }
    }
    if (options.on_window) options.on_window(report);
    if (options.on_progress) {
      options.on_progress(static_cast<double>(std::min(seek, content_frames)) /
                          static_cast<double>(content_frames));
    }
  }
  return transcript;
}

}  // namespace

Transcript transcribe_mel(const Model& model, const text::BpeTokenizer& tokenizer,
                          std::span<const float> mel, int64_t content_frames,
                          const Options& options) {
  validate(options);
  check_config(model);
  return transcribe_long_mel(model, tokenizer,
                             HostLongMel(mel, model.config().n_mels, content_frames), options);
}

Transcript transcribe(const Model& model, const text::BpeTokenizer& tokenizer,
                      std::span<const float> samples, const Options& options) {
  validate(options);
  check_config(model);
  const std::unique_ptr<LongMel> mel = model.long_mel(samples);
  Transcript transcript = transcribe_long_mel(model, tokenizer, *mel, options);
  transcript.duration = static_cast<double>(samples.size()) / kSampleRate;
  return transcript;
}

std::vector<Transcript> transcribe_many(const Model& model, const text::BpeTokenizer& tokenizer,
                                        std::span<const std::span<const float>> recordings,
                                        const Options& options) {
  validate(options);
  std::vector<Transcript> transcripts;
  if (options.batch_size <= 1) {
    for (std::span<const float> samples : recordings) {
      transcripts.push_back(transcribe(model, tokenizer, samples, options));
    }
    return transcripts;
  }
  check_config(model);
  std::vector<std::unique_ptr<LongMel>> mels;
  std::vector<const LongMel*> views;
  for (std::span<const float> samples : recordings) {
    mels.push_back(model.long_mel(samples));
    views.push_back(mels.back().get());
  }
  transcripts = transcribe_mels_batched(model, tokenizer, views, options);
  for (size_t i = 0; i < recordings.size(); ++i) {
    transcripts[i].duration = static_cast<double>(recordings[i].size()) / kSampleRate;
  }
  return transcripts;
}

}  // namespace hark::whisper
