#include "models/whisper/search.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/error.h"

// Where openai-whisper and transformers differ in the search itself (decoding.py vs generate()):
// - Beam search. openai (BeamSearchDecoder) masks the logits, takes log-softmax of what is left,
//   extends each beam by its beam_size + 1 best tokens, keeps the beam_size best unfinished
//   sequences, collects finished ones until beam_size * patience are there, and ranks them by
//   sum_logprob / (text tokens). transformers takes log-softmax of the raw logits and then masks
//   them (the kept log-probabilities are not renormalised), keeps the 2 * num_beams best
//   extensions over all beams, lets only those among the num_beams best finish, ranks finished
//   ones by sum_logprob / (sampled tokens, <|endoftext|> included), and stops once no running
//   beam can beat the worst of num_beams finished ones. hark implements transformers' search
//   (early_stopping=False, length_penalty=1), which its parity tests check token for token.
// - Sampling. openai samples from softmax(logits / T) over all allowed tokens; transformers also
//   applies its default top-k (50) filter. hark follows openai. Sampled tokens are not expected
//   to match either reference (different random generators).
// - avg_logprob. openai divides the summed log-probabilities (<|endoftext|>'s included) by the
//   number of text tokens + 1; transformers by the number of sampled tokens (the same when the
//   window ended with <|endoftext|>, one fewer when it was cut at max_tokens). hark follows
//   openai.

namespace hark::whisper {
namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();
// transformers' stand-in for "impossible" in beam scores (a float, so sums stay finite).
constexpr float kBeamPenalty = -1.0e9f;

double log_sum_exp(std::span<const float> scores) {
  const float max = *std::max_element(scores.begin(), scores.end());
  if (max == kNegativeInfinity) return kNegativeInfinity;
  double sum = 0;
  for (float score : scores) sum += std::exp(static_cast<double>(score) - max);
  return max + std::log(sum);
}

// The first of the highest scores, as torch.argmax. Every token banned means the rules and the
// model disagree so badly that no answer is right.
int32_t argmax(std::span<const float> scores) {
  const auto best = std::max_element(scores.begin(), scores.end());
  if (*best == kNegativeInfinity) fail("Whisper search: the logit rules banned every token");
  return static_cast<int32_t>(best - scores.begin());
}

// Draws from softmax(scores / temperature); banned tokens have probability 0.
int32_t sample(std::span<const float> scores, float temperature, std::mt19937_64& random) {
  const float max = *std::max_element(scores.begin(), scores.end());
  if (max == kNegativeInfinity) fail("Whisper search: the logit rules banned every token");
  std::vector<double> cumulative(scores.size());
  double total = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (scores[i] != kNegativeInfinity) total += std::exp((scores[i] - max) / temperature);
    cumulative[i] = total;
  }
  const double target = std::uniform_real_distribution<double>(0, total)(random);
  const auto pick = std::upper_bound(cumulative.begin(), cumulative.end(), target);
  // target < total, so a token with positive probability is always found; guard rounding anyway.
  return static_cast<int32_t>(std::min<size_t>(pick - cumulative.begin(), scores.size() - 1));
}

// How many tokens a search may sample after `prompt`: each sampled token but the last is fed back,
// so prompt + sampled - 1 positions must fit the decoder (openai stops at the same point).
int sample_limit(const Model& model, const Prompt& prompt, int max_tokens) {
  const int context = model.config().max_target_positions;
  const int prompt_length = static_cast<int>(prompt.tokens.size());
  if (prompt_length == 0 || prompt.sot_index < 0 || prompt.sot_index >= prompt_length) {
    fail("Whisper search: invalid prompt (", prompt_length, " tokens, <|startoftranscript|> at ",
         prompt.sot_index, ")");
  }
  if (prompt_length > context) {
    fail("Whisper search: the prompt has ", prompt_length, " tokens, the decoder context only ",
         context);
  }
  if (max_tokens < 1) fail("Whisper search: max_tokens is ", max_tokens, ", must be at least 1");
  return std::min(max_tokens, context - prompt_length + 1);
}

// The first decoder step of `n` sequences: the whole prompt, with the logits at
// <|startoftranscript|> (for no_speech_prob) and at the prompt's last token (the first step's).
struct FirstStep {
  std::vector<float> logits;  // [n][vocab] at the last prompt token
  float no_speech_prob = 0;
};

FirstStep start_prompt(DecoderSession& session, const Model& model, const Prompt& prompt, int n) {
  const int vocab = model.config().vocab_size;
  const int last = static_cast<int>(prompt.tokens.size()) - 1;
  std::vector<int> positions = {last};
  if (prompt.sot_index != last) positions = {prompt.sot_index, last};
  const std::vector<float> logits =
      session.advance(std::vector<std::vector<int32_t>>(n, prompt.tokens), positions);
  const size_t per_sequence = positions.size() * static_cast<size_t>(vocab);
  if (logits.size() != n * per_sequence) {
    fail("Whisper search: the decoder returned ", logits.size(), " logits, expected ",
         n * per_sequence);
  }
  FirstStep step;
  step.logits.resize(static_cast<size_t>(n) * vocab);
  for (int s = 0; s < n; ++s) {
    const float* last_row = logits.data() + s * per_sequence + (positions.size() - 1) * vocab;
    std::copy(last_row, last_row + vocab, step.logits.begin() + static_cast<size_t>(s) * vocab);
  }
  const Vocabulary& vocabulary = model.vocabulary();
  if (vocabulary.no_speech >= 0 && vocabulary.no_speech < vocab) {
    const std::span<const float> at_sot(logits.data(), vocab);  // sequence 0, first position
    step.no_speech_prob =
        static_cast<float>(std::exp(at_sot[vocabulary.no_speech] - log_sum_exp(at_sot)));
  }
  return step;
}

std::vector<float> next_logits(DecoderSession& session, const Model& model,
                               const std::vector<std::vector<int32_t>>& tokens) {
  std::vector<float> logits = session.advance(tokens);
  const size_t expected = tokens.size() * static_cast<size_t>(model.config().vocab_size);
  if (logits.size() != expected) {
    fail("Whisper search: the decoder returned ", logits.size(), " logits, expected ", expected);
  }
  return logits;
}

WindowResult finish(std::vector<int32_t> tokens, double sum_logprob, int32_t eot) {
  WindowResult result;
  result.ended = !tokens.empty() && tokens.back() == eot;
  if (result.ended) tokens.pop_back();
  result.sum_logprob = sum_logprob;
  result.avg_logprob = static_cast<float>(sum_logprob / (static_cast<double>(tokens.size()) + 1));
  result.tokens = std::move(tokens);
  return result;
}

// openai's GreedyDecoder over `n` independent sequences (n > 1 only when sampling), then its
// MaximumLikelihoodRanker (sum_logprob / text tokens) to keep one.
WindowResult greedy_or_sample(const Model& model,
                              const std::shared_ptr<const EncodedWindow>& window,
                              const Prompt& prompt, const LogitRules& rules,
                              const SearchOptions& options, int limit) {
  const int n = options.temperature > 0 ? options.best_of : 1;
  const int vocab = model.config().vocab_size;
  const int32_t eot = model.vocabulary().eot;
  const std::unique_ptr<DecoderSession> session = model.start(window, n);
  FirstStep first = start_prompt(*session, model, prompt, n);
  std::vector<float> logits = std::move(first.logits);

  struct Sequence {
    std::vector<int32_t> tokens;
    double sum_logprob = 0;
    bool done = false;
  };
  std::vector<Sequence> sequences(n);
  for (int step = 0; step < limit; ++step) {
    std::vector<std::vector<int32_t>> next(n);
    for (int s = 0; s < n; ++s) {
      Sequence& sequence = sequences[s];
      if (sequence.done) {
        next[s] = {eot};  // a finished sequence idles on <|endoftext|> while the others go on
        continue;
      }
      const std::span<float> scores(logits.data() + static_cast<size_t>(s) * vocab, vocab);
      rules.apply(scores, sequence.tokens);
      const int32_t token = options.temperature > 0
                                ? sample(scores, options.temperature, *options.random)
                                : argmax(scores);
      sequence.sum_logprob += scores[token] - log_sum_exp(scores);
      sequence.tokens.push_back(token);
      sequence.done = token == eot;
      next[s] = {token};
    }
    const bool all_done =
        std::all_of(sequences.begin(), sequences.end(), [](const Sequence& s) { return s.done; });
    if (all_done || step + 1 == limit) break;
    logits = next_logits(*session, model, next);
  }

  auto score = [eot](const Sequence& sequence) {
    const size_t text = sequence.tokens.size() - (sequence.done ? 1 : 0);
    // numpy's x / 0 for the empty text: -inf (never chosen unless every sample is empty).
    return text == 0 ? -std::numeric_limits<double>::infinity()
                     : sequence.sum_logprob / static_cast<double>(text);
  };
  size_t best = 0;
  for (size_t s = 1; s < sequences.size(); ++s) {
    if (score(sequences[s]) > score(sequences[best])) best = s;
  }
  WindowResult result = finish(std::move(sequences[best].tokens), sequences[best].sum_logprob, eot);
  result.no_speech_prob = first.no_speech_prob;
  result.temperature = options.temperature;
  return result;
}

// transformers' beam search (GenerationMixin._beam_search, batch of one, early_stopping=False,
// length_penalty=1.0), with DecoderSession::reorder moving the K/V caches along with the beams.
WindowResult beam_search(const Model& model, const std::shared_ptr<const EncodedWindow>& window,
                         const Prompt& prompt, const LogitRules& rules,
                         const SearchOptions& options, int limit) {
  const int n = options.beam_size;
  const int vocab = model.config().vocab_size;
  // Candidates kept per step, so that n unfinished ones remain even if n of them end.
  const int keep = static_cast<int>(std::min<int64_t>(2 * int64_t{n}, int64_t{n} * vocab));
  const int32_t eot = model.vocabulary().eot;
  const std::unique_ptr<DecoderSession> session = model.start(window, n);
  FirstStep first = start_prompt(*session, model, prompt, n);
  std::vector<float> logits = std::move(first.logits);

  struct Beam {
    std::vector<int32_t> tokens;  // sampled tokens
    float score = kBeamPenalty;   // summed log-probabilities (running) or normalised (finished)
    float sum_logprob = 0;
    bool finished = false;
  };
  // All beams start from the same prompt; only the first one is extended at the first step.
  std::vector<Beam> running(n);
  running[0].score = 0;
  std::vector<Beam> finished(n);  // the n best finished, best first; unused slots not finished
  bool improvable = true;

  struct Candidate {
    float score;
    int beam;
    int32_t token;
  };
  std::vector<Candidate> candidates;
  candidates.reserve(static_cast<size_t>(n) * vocab);
  for (int step = 0;; ++step) {
    candidates.clear();
    for (int b = 0; b < n; ++b) {
      const std::span<float> scores(logits.data() + static_cast<size_t>(b) * vocab, vocab);
      const auto log_normaliser = static_cast<float>(log_sum_exp(scores));
      for (float& score : scores) score -= log_normaliser;
      rules.apply(scores, running[b].tokens);
      for (int32_t token = 0; token < vocab; ++token) {
        candidates.push_back({scores[token] + running[b].score, b, token});
      }
    }
    // torch.topk over the flattened [beam, token] scores; equal scores keep their order.
    std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(),
                      [](const Candidate& a, const Candidate& b) {
                        if (a.score != b.score) return a.score > b.score;
                        return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
                      });
    candidates.resize(keep);
    const bool at_limit = step + 1 >= limit;
    auto stops = [&](const Candidate& c) { return at_limit || c.token == eot; };
    auto extend = [&](const Candidate& c) {
      std::vector<int32_t> tokens = running[c.beam].tokens;
      tokens.push_back(c.token);
      return tokens;
    };

    // Of the num_beams best candidates, those that end become finished hypotheses.
    std::vector<Beam> merged = finished;
    for (int c = 0; c < n; ++c) {
      if (!stops(candidates[c])) continue;
      const float length = static_cast<float>(step + 1);  // sampled tokens, <|endoftext|> included
      merged.push_back(
          {extend(candidates[c]), candidates[c].score / length, candidates[c].score, true});
    }
    std::stable_sort(merged.begin(), merged.end(),
                     [](const Beam& a, const Beam& b) { return a.score > b.score; });
    merged.resize(n);
    finished = std::move(merged);

    // The n best candidates that go on (ended ones sink by the penalty) are the next beams.
    std::vector<int> order(keep);
    std::iota(order.begin(), order.end(), 0);
    auto penalised = [&](int c) {
      return candidates[c].score + (stops(candidates[c]) ? kBeamPenalty : 0.0f);
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return penalised(a) > penalised(b); });
    std::vector<Beam> next_running(n);
    std::vector<int> sources(n);
    std::vector<std::vector<int32_t>> next_tokens(n);
    for (int b = 0; b < n; ++b) {
      const Candidate& c = candidates[order[b]];
      next_running[b].tokens = extend(c);
      next_running[b].score = penalised(order[b]);
      sources[b] = c.beam;
      next_tokens[b] = {c.token};
    }
    running = std::move(next_running);

    // transformers' stopping heuristic: go on while the best running beam, normalised by its
    // current length, could still beat the worst finished one (or fewer than n have finished).
    const float best_possible = running[0].score / static_cast<float>(step + 1);
    float worst_finished = std::numeric_limits<float>::infinity();
    for (const Beam& beam : finished) worst_finished = std::min(worst_finished, beam.score);
    bool can_improve = false;
    for (const Beam& beam : finished) {
      can_improve |= best_possible > (beam.finished ? worst_finished : kBeamPenalty);
    }
    improvable = improvable && can_improve;
    const bool all_stop = std::all_of(candidates.begin(), candidates.end(), stops);
    if (!improvable || all_stop) break;

    session->reorder(sources);
    logits = next_logits(*session, model, next_tokens);
  }

  const Beam& best = finished[0].finished ? finished[0] : running[0];
  WindowResult result = finish(best.tokens, best.finished ? best.sum_logprob : best.score, eot);
  result.no_speech_prob = first.no_speech_prob;
  result.temperature = options.temperature;
  return result;
}

// Model::decode_greedy's outcomes as the host-driven searches' results.
std::vector<WindowResult> greedy_on_device(const Model& model, std::span<const GreedyJob> jobs,
                                           const LogitRules& rules) {
  const int32_t eot = model.vocabulary().eot;
  std::vector<WindowResult> results;
  for (GreedyOutcome& outcome : model.decode_greedy(jobs, rules.timestamps())) {
    WindowResult result = finish(std::move(outcome.tokens), outcome.sum_logprob, eot);
    result.no_speech_prob = outcome.no_speech_prob;
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace

Prompt make_prompt(const Vocabulary& vocabulary, int max_target_positions,
                   std::span<const int32_t> previous, int32_t language, int32_t task,
                   bool timestamps) {
  Prompt prompt;
  const size_t keep = static_cast<size_t>(std::max(max_target_positions / 2 - 1, 0));
  if (!previous.empty() && keep > 0) {
    prompt.tokens.push_back(vocabulary.sot_prev);
    const std::span<const int32_t> tail = previous.last(std::min(keep, previous.size()));
    prompt.tokens.insert(prompt.tokens.end(), tail.begin(), tail.end());
  }
  prompt.sot_index = static_cast<int>(prompt.tokens.size());
  prompt.tokens.push_back(vocabulary.sot);
  if (language >= 0) {
    prompt.tokens.push_back(language);
    prompt.tokens.push_back(task);
  }
  if (!timestamps) prompt.tokens.push_back(vocabulary.no_timestamps);
  return prompt;
}

LanguageDetection detect_language(const Model& model,
                                  const std::shared_ptr<const EncodedWindow>& window) {
  const Vocabulary& vocabulary = model.vocabulary();
  const int vocab = model.config().vocab_size;
  const int n_languages = static_cast<int>(vocabulary.languages.size());
  if (!vocabulary.multilingual || n_languages == 0) {
    fail("Whisper: this model is English-only and has no language to detect");
  }
  if (vocabulary.first_language < 0 || vocabulary.first_language + n_languages > vocab) {
    fail("Whisper: language tokens ", vocabulary.first_language, " + ", n_languages,
         " lie outside the vocabulary of ", vocab);
  }
  const std::unique_ptr<DecoderSession> session = model.start(window, 1);
  const std::vector<float> logits = next_logits(*session, model, {{vocabulary.sot}});
  const std::span<const float> scores(logits.data() + vocabulary.first_language, n_languages);

  LanguageDetection detection;
  const int best =
      static_cast<int>(std::max_element(scores.begin(), scores.end()) - scores.begin());
  detection.code = vocabulary.languages[best];
  detection.token = vocabulary.first_language + best;
  const double normaliser = log_sum_exp(scores);
  for (float score : scores) {
    detection.probabilities.push_back(static_cast<float>(std::exp(score - normaliser)));
  }
  return detection;
}

WindowResult decode_window(const Model& model, const std::shared_ptr<const EncodedWindow>& window,
                           const Prompt& prompt, const LogitRules& rules,
                           const SearchOptions& options) {
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature)) {
    fail("Whisper search: temperature ", options.temperature, " (must be 0 or more)");
  }
  const int limit = sample_limit(model, prompt, options.max_tokens);
  if (options.temperature > 0) {
    if (options.best_of < 1) fail("Whisper search: best_of is ", options.best_of);
    if (options.random == nullptr) fail("Whisper search: sampling needs a random generator");
    return greedy_or_sample(model, window, prompt, rules, options, limit);
  }
  if (options.beam_size < 1) fail("Whisper search: beam_size is ", options.beam_size);
  if (options.beam_size > 1) return beam_search(model, window, prompt, rules, options, limit);
  // A model that decodes on the device searches greedily there, as a batch of one: its step
  // replayed as a CUDA Graph, the rules and the argmax on the GPU. The session's search would
  // bring every token's logits to the host (large-v3's 51,866 floats) and wait for them.
  if (model.decodes_batches()) {
    const GreedyJob job{window, prompt.tokens, prompt.sot_index, limit};
    return std::move(greedy_on_device(model, std::span(&job, 1), rules)[0]);
  }
  return greedy_or_sample(model, window, prompt, rules, options, limit);
}

std::vector<WindowResult> decode_windows_greedy(
    const Model& model, std::span<const std::shared_ptr<const EncodedWindow>> windows,
    std::span<const Prompt> prompts, const LogitRules& rules, int max_tokens) {
  if (windows.size() != prompts.size()) {
    fail("Whisper search: ", windows.size(), " windows and ", prompts.size(), " prompts");
  }
  std::vector<WindowResult> results;
  if (!model.decodes_batches()) {
    SearchOptions options;
    options.max_tokens = max_tokens;
    for (size_t i = 0; i < windows.size(); ++i) {
      results.push_back(decode_window(model, windows[i], prompts[i], rules, options));
    }
    return results;
  }
  std::vector<GreedyJob> jobs;
  for (size_t i = 0; i < windows.size(); ++i) {
    jobs.push_back({windows[i], prompts[i].tokens, prompts[i].sot_index,
                    sample_limit(model, prompts[i], max_tokens)});
  }
  return greedy_on_device(model, jobs, rules);
}

float compression_ratio(std::string_view text) {
  if (text.empty()) return 0;  // openai: 0 bytes / 8 bytes of an empty zlib stream
  uLongf compressed_size = compressBound(static_cast<uLong>(text.size()));
  std::vector<Bytef> compressed(compressed_size);
  const int status =
      compress2(compressed.data(), &compressed_size, reinterpret_cast<const Bytef*>(text.data()),
                static_cast<uLong>(text.size()), Z_DEFAULT_COMPRESSION);
  if (status != Z_OK) fail("zlib could not compress ", text.size(), " bytes (error ", status, ")");
  return static_cast<float>(static_cast<double>(text.size()) / compressed_size);
}

}  // namespace hark::whisper
