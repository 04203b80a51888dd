// Decoding one 30-s window: the prompt, language detection, and greedy, sampled or beam search
// under the logit rules.
//
// Greedy decoding and sampling follow openai-whisper's GreedyDecoder (which transformers' greedy
// generate() reproduces token for token); beam search follows transformers' generate(num_beams=n),
// which the parity tests compare against. See search.cpp for where openai's beam search differs.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/whisper/logit_rules.h"
#include "models/whisper/model.h"

namespace hark::whisper {

// The decoder's input for a window:
//   [<|startofprev|> previous...] <|startoftranscript|> [<|lang|> <|task|>] [<|notimestamps|>]
struct Prompt {
  std::vector<int32_t> tokens;
  int sot_index = 0;  // position of <|startoftranscript|>, whose logits give no_speech_prob
};

// `previous`: text (and timestamp) tokens of earlier windows or of an initial prompt; only the
// last max_target_positions / 2 - 1 are kept, and none means no <|startofprev|>. `language` is a
// language token id, or -1 for English-only models, which have no language or task tokens;
// `task` is vocabulary.transcribe or vocabulary.translate (ignored without a language).
Prompt make_prompt(const Vocabulary& vocabulary, int max_target_positions,
                   std::span<const int32_t> previous, int32_t language, int32_t task,
                   bool timestamps);

struct LanguageDetection {
  std::string code;                  // "en"
  int32_t token = -1;                // <|en|>
  std::vector<float> probabilities;  // over vocabulary.languages, in its order
};

// openai's detect_language: one decoder step on <|startoftranscript|>, only the language tokens
// kept, argmax (the first of equal maxima) and softmax. Throws for a model without languages.
LanguageDetection detect_language(const Model& model,
                                  const std::shared_ptr<const EncodedWindow>& window);

struct SearchOptions {
  float temperature = 0;              // 0: greedy (or beam search); > 0: sampling
  int beam_size = 1;                  // > 1 at temperature 0: beam search with this many beams
  int best_of = 1;                    // at temperature > 0: samples drawn, the likeliest is kept
  int max_tokens = 224;               // sampled tokens at most (also capped by the decoder context)
  std::mt19937_64* random = nullptr;  // required at temperature > 0
};

struct WindowResult {
  std::vector<int32_t> tokens;  // sampled tokens, without the final <|endoftext|>
  bool ended = false;           // true: the search ended with <|endoftext|>
  double sum_logprob = 0;       // of the sampled tokens, <|endoftext|> included
  float avg_logprob = 0;        // sum_logprob / (tokens + 1), as openai-whisper
  float no_speech_prob = 0;     // P(<|nospeech|>) at <|startoftranscript|>
  float temperature = 0;
};

// Decodes `window` from `prompt` under `rules`. Throws hark::Error on invalid options or a prompt
// that does not fit the decoder context.
WindowResult decode_window(const Model& model, const std::shared_ptr<const EncodedWindow>& window,
                           const Prompt& prompt, const LogitRules& rules,
                           const SearchOptions& options);

// Greedy decoding (temperature 0, no beams) of windows from one Model::encode_batch() call, all
// of them in order, each from its own prompt: one batch on the device when the model
// decodes_batches(), else decode_window() for each. Gives what decode_window() gives.
std::vector<WindowResult> decode_windows_greedy(
    const Model& model, std::span<const std::shared_ptr<const EncodedWindow>> windows,
    std::span<const Prompt> prompts, const LogitRules& rules, int max_tokens);

// openai's compression_ratio: UTF-8 bytes of `text` over the bytes zlib (level 6) makes of them.
// Repetitive text compresses well; a ratio above 2.4 means the decoder is stuck in a loop.
float compression_ratio(std::string_view text);

}  // namespace hark::whisper
