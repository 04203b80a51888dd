// `hark bench`: the speed of a real Whisper or Parakeet configuration with random weights,
// generated on the fly (no download). Whisper decodes a fixed number of tokens per window;
// Parakeet's decoder takes its decisions from a fixed emission pattern.
#include <sys/resource.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/random.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "compute/cuda/cuda.h"
#include "compute/ops.h"
#include "format/dtype.h"
#include "format/gguf.h"
#include "models/parakeet/model.h"
#include "models/parakeet/synthetic.h"
#include "models/parakeet/transcribe.h"
#include "models/whisper/model.h"
#include "models/whisper/synthetic.h"

namespace hark::cli {

namespace {

const Option bench_options[] = {
    {"model", 'm', "NAME",
     "Whisper configuration: tiny, base, small, medium, large-v2,\n"
     "large-v3, large-v3-turbo (and the .en ones); or Parakeet:\n"
     "parakeet-tdt-0.6b-v2, parakeet-tdt-0.6b-v3, parakeet-ctc-1.1b,\n"
     "parakeet-rnnt-1.1b, parakeet-ctc-0.6b. Default: base."},
    {"type", 0, "TYPE", "Weight type: f32, f16 (default), bf16 or q8_0."},
    {"tokens", 0, "N", "Whisper: decoder steps timed per window (default 120)."},
    {"windows", 0, "N", "Whisper: encoder windows timed (default 3)."},
    {"spread", 0, "",
     "Whisper (GPU): after each batch's row, a row that decodes the batch\n"
     "with the windows' lengths spread uniformly over N/4 to 7N/4 tokens\n"
     "(N = --tokens, seeded), as real windows end at different lengths."},
    {"threads", 't', "N", "CPU threads (default: all cores)."},
    device_option,
    cross_kv_option,
    {"batches", 0, "LIST",
     "Batch sizes to time, comma-separated. Whisper (GPU): default\n"
     "1,16,64; each encodes that many windows at once and decodes\n"
     "them together. Parakeet: B utterances of --seconds each;\n"
     "default none (only the 10-s clip)."},
    {"seconds", 0, "S", "Parakeet: utterance length of the --batches (default 20)."},
    {"repeats", 0, "N", "Parakeet: timed runs per row, median shown (default 1)."},
    {"pipeline", 0, "N",
     "Parakeet: after each --batches row, N such batches through\n"
     "the encode/decode pipeline of hark run (default 3; 1: none)."},
    {"mixed", 0, "S",
     "Parakeet: at the end, S seconds of audio (3600: an hour) made of\n"
     "utterances of 10 to 30 s, batched longest first by each --batches\n"
     "size and run through the pipeline, as hark run batches many files."},
    {"products", 0, "",
     "GPU, instead of a model: the first feed-forward product of the\n"
     "benchmark models with its activation (Parakeet: SiLU, Whisper:\n"
     "GELU), timed as cuBLASLt's product, that product and the activation\n"
     "kernel, and one Hopper kernel with the activation in its epilogue."},
};

constexpr std::string_view whisper_only_options[] = {"tokens", "windows", "spread", "cross-kv"};
constexpr std::string_view parakeet_only_options[] = {"seconds", "repeats", "pipeline", "mixed"};

constexpr std::string_view bench_description =
    "Writes a GGUF with random weights of the configuration to a temporary file\n"
    "and loads it. Whisper: times the encoder per 30-s window and the decoder\n"
    "per token after a 4-token prompt, with a fixed number of decoder steps per\n"
    "window.\n"
    "Prints the medians and the real-time factor (RTFx) of the standard\n"
    "workload: 1 hour of audio = 120 windows of 30 s, 120 tokens each.\n"
    "\n"
    "CPU: batch 1, token ids forced. GPU: for each batch size B, B windows are\n"
    "encoded as one batch (after two untimed encodes: buffers, tuned products,\n"
    "the graph a small batch's encoder replays) and decoded together by the\n"
    "batched greedy search (CUDA Graph step, logit rules and argmax on the GPU),\n"
    "each window sampling exactly --tokens tokens whatever the random weights\n"
    "choose (<|endoftext|> ends none); the step's cost does not depend on the\n"
    "tokens. RTFx at batch B = 3600 s /\n"
    "(120 x (encoder + prompt per window) + 120 x 120 x step / B).\n"
    "--spread adds a row per batch whose windows end after different numbers\n"
    "of tokens: the batch steps until its longest window is done, the finished\n"
    "ones costing the steps little; its RTFx counts everything the decode took.\n"
    "The encoder's windows come from the host (uploaded at each call); the\n"
    "last column times the same batch cut from a log-mel already on the GPU,\n"
    "as hark run encodes. Before the table: the front end, 1 h of noise to its\n"
    "long-form log-mel on the GPU (what hark run does there) and on the CPU.\n"
    "\n"
    "Parakeet: times one 10-s clip at batch 1 (latency), then each --batches\n"
    "size B with B utterances of --seconds (throughput): features + encoder,\n"
    "and decoding, after a warm-up run of a 1-s clip and, on a GPU, untimed\n"
    "runs of the row's own input for at least 0.5 s (buffers, tuned products,\n"
    "the graph a small batch's encoder replays, clocks: the rows show a\n"
    "repeated shape). The input is noise at\n"
    "speech level (the cost does not depend on the content). Random weights\n"
    "emit arbitrarily, so the decoder takes its decisions from a fixed\n"
    "pattern while doing all its usual work (joint network for every\n"
    "utterance, prediction network for those that emit, in lockstep): a token\n"
    "on every 4th encoder frame (one per 320 ms), TDT duration 2, blanks\n"
    "elsewhere. RTFx = audio seconds / (features + encoder + decoding).\n"
    "A 'pipelined' row follows each batch size: --pipeline batches of it\n"
    "through the pipeline hark run uses (on a GPU a batch decodes while the\n"
    "next one encodes), timed as a whole. --mixed adds one 'mixed' row per\n"
    "batch size: an offline workload of utterances of seeded lengths, uniform\n"
    "in 10-30 s, grouped into batches of similar lengths as hark run groups\n"
    "pieces (transcribe_pieces), the first run untimed.\n"
    "CPU or GPU (--device). On the CPU the defaults take about 20 s for a 0.6b\n"
    "model on 2 cores, writing the weights included.";

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// Removes the temporary model however the benchmark ends.
struct TemporaryFile {
  std::string path;
  ~TemporaryFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

// Noise at speech level (RMS 0.1, -20 dBFS), seeded.
std::vector<float> noise_clip(double seconds, uint64_t seed) {
  std::vector<float> samples(static_cast<size_t>(seconds * 16000));
  SplitMix64 random(seed);
  for (float& sample : samples) sample = 0.17f * random.uniform();
  return samples;
}

std::vector<float> random_mel(const whisper::Config& config, int windows) {
  std::mt19937 random(7);
  std::uniform_real_distribution<float> level(-1.0f, 1.0f);
  std::vector<float> mel(static_cast<size_t>(config.n_mels) * config.window_frames() * windows);
  for (float& value : mel) value = level(random);
  return mel;
}

std::vector<int32_t> bench_prompt(const whisper::Vocabulary& vocab) {
  return {vocab.sot, vocab.first_language >= 0 ? vocab.first_language : vocab.sot, vocab.transcribe,
          vocab.no_timestamps};
}

double workload_rtfx(double encoder_ms, double prompt_ms, double step_ms, int batch) {
  const double seconds = (120 * (encoder_ms + prompt_ms) + 120.0 * 120.0 * step_ms / batch) / 1000;
  return 3600.0 / seconds;
}

// Batch 1 through a DecoderSession, one forced token per step.
void bench_cpu(const whisper::Model& model, int tokens, int windows) {
  const whisper::Config& config = model.config();
  const std::vector<float> mel = random_mel(config, 1);
  model.encode(mel);  // warm-up: first-touch of the weights' pages, buffers
  std::vector<double> encoder_ms;
  std::shared_ptr<const whisper::EncodedWindow> window;
  for (int i = 0; i < windows; ++i) {
    const auto start = Clock::now();
    window = model.encode(mel);
    encoder_ms.push_back(elapsed_ms(start));
  }
  auto session = model.start(window, 1);
  const auto prefill_start = Clock::now();
  session->advance({bench_prompt(model.vocabulary())});
  const double prefill_ms = elapsed_ms(prefill_start);
  std::vector<double> step_ms;
  for (int i = 0; i < tokens; ++i) {
    const int32_t forced = 400 + (i * 37) % 20000;  // ordinary text tokens
    const auto start = Clock::now();
    session->advance({{forced}});
    step_ms.push_back(elapsed_ms(start));
  }
  const double encoder = median(encoder_ms), step = median(step_ms);
  std::printf("threads          %d\n", compute::threads());
  std::printf("encoder          %.1f ms per 30-s window (median of %d)\n", encoder, windows);
  std::printf("decoder prompt   %.1f ms (4 tokens)\n", prefill_ms);
  std::printf("decoder step     %.2f ms per token, batch 1 (median of %d)\n", step, tokens);
  std::printf("1 h workload     RTFx %.1f (120 windows x 120 tokens)\n",
              workload_rtfx(encoder, prefill_ms, step, 1));
}

std::vector<int> batch_list(const std::string& text) {
  std::vector<int> batches;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    int value = 0;
    try {
      value = std::stoi(item);
    } catch (const std::exception&) {
      usage_fail("--batches: '", item, "' is not a number");
    }
    if (value < 1 || value > 1024) usage_fail("--batches: ", value, " is not in 1..1024");
    batches.push_back(value);
    at = comma + 1;
  }
  return batches;
}

// The stage times HARK_CUDA_PROFILE collected since the last reset (Parakeet: the last run of the
// last row; Whisper: the last batch size's encoder runs, from host and from GPU log-mels, and its
// two decodes).
void print_gpu_profile() {
  const std::string report = compute::cuda::profile_report();
  if (!report.empty()) std::printf("%s", report.c_str());
}

// The long-form log-mel of an hour of noise as transcribe() computes it on this model's device
// (the GPU front end, the features left there), against the CPU's front end; returns the GPU's.
std::unique_ptr<whisper::LongMel> bench_front_end(const whisper::Model& model) {
  const std::vector<float> hour = noise_clip(3600, 11);
  model.long_mel(std::span(hour).first(16000));  // warm-up: the front end's set-up
  std::vector<double> gpu_ms;
  std::unique_ptr<whisper::LongMel> mel;
  for (int i = 0; i < 3; ++i) {
    mel.reset();
    if (i == 2) compute::cuda::reset_profile();  // HARK_CUDA_PROFILE: the last run's stages
    const auto start = Clock::now();
    mel = model.long_mel(hour);
    gpu_ms.push_back(elapsed_ms(start));
  }
  const auto start = Clock::now();
  const whisper::HostLongMel on_cpu(hour, model.config().n_mels);
  const double cpu_ms = elapsed_ms(start);
  std::printf(
      "front end        1 h of audio to its log-mel: %.1f ms on the GPU (median of 3), "
      "%.1f ms on the CPU (%d threads)\n",
      median(gpu_ms), cpu_ms, compute::threads());
  print_gpu_profile();
  return mel;
}

// Per batch size: windows encoded as one batch, then decoded together for exactly `tokens` steps.
// The encoder is timed from windows on the host (uploaded at each call), then from windows of a
// log-mel on the GPU (as transcribe() encodes them there).
void bench_gpu(const whisper::Model& model, int tokens, int repeats, bool spread,
               const std::vector<int>& batches) {
  const whisper::Config& config = model.config();
  const std::vector<int32_t> prompt = bench_prompt(model.vocabulary());
  std::printf("gpu              %s\n", compute::cuda::describe().c_str());
  std::printf("weights on GPU   %.2f GiB\n",
              static_cast<double>(compute::cuda::allocated_bytes()) / (1 << 30));
  const std::unique_ptr<whisper::LongMel> hour = bench_front_end(model);
  std::printf("%6s %14s %14s %14s %12s %10s %16s\n", "batch", "encoder ms/win", "prompt ms/win",
              "step ms", "peak GiB", "RTFx", "enc. GPU mel");
  for (int batch : batches) {
    const std::vector<float> mel = random_mel(config, batch);
    compute::cuda::reset_peak_allocated_bytes();
    // Warm-up: the first call sizes buffers and tunes cuBLASLt's plans, the second captures the
    // graph that a small batch's encoder layers replay.
    model.encode_batch(mel, batch);
    model.encode_batch(mel, batch);
    compute::cuda::reset_profile();  // (the decode's warm-up stays in the profile)
    std::vector<double> encoder_ms;
    std::vector<std::shared_ptr<const whisper::EncodedWindow>> windows;
    for (int i = 0; i < repeats; ++i) {
      windows.clear();
      // An external profiler (compute/cuda/cuda.h) sees the last encode and the timed decode.
      if (i == repeats - 1) compute::cuda::profiler_start();
      const auto start = Clock::now();
      windows = model.encode_batch(mel, batch);
      encoder_ms.push_back(elapsed_ms(start) / batch);
    }
    std::vector<whisper::GreedyJob> jobs;
    for (const auto& window : windows) jobs.push_back({window, prompt, 0, tokens});
    whisper::GreedyTiming timing;
    compute::cuda::profiler_stop();
    model.decode_greedy(jobs, /*timestamps=*/false, /*exact_lengths=*/true, &timing);  // warm-up
    compute::cuda::profiler_start();
    model.decode_greedy(jobs, /*timestamps=*/false, /*exact_lengths=*/true, &timing);
    compute::cuda::profiler_stop();
    // The same windows, each ending after its own number of tokens (the same ones every run).
    whisper::GreedyTiming spread_timing;
    if (spread) {
      std::mt19937 random(static_cast<unsigned>(batch));
      std::uniform_int_distribution<int> length(std::max(1, tokens / 4), tokens * 7 / 4);
      for (whisper::GreedyJob& job : jobs) job.limit = length(random);
      model.decode_greedy(jobs, /*timestamps=*/false, /*exact_lengths=*/true, &spread_timing);
      model.decode_greedy(jobs, /*timestamps=*/false, /*exact_lengths=*/true, &spread_timing);
    }
    const double encoder = median(encoder_ms);
    const double prompt_ms = timing.prompt_ms / batch;
    const double step = timing.steps > 0 ? timing.steps_ms / timing.steps : 0;
    const double peak = static_cast<double>(compute::cuda::peak_allocated_bytes()) / (1 << 30);
    windows.clear();
    jobs.clear();
    // The same batch cut from the hour's log-mel on the GPU (windows wrap around past its end).
    std::vector<whisper::MelWindow> cuts;
    const int64_t window_frames = config.window_frames();
    const int64_t hour_windows = hour->content_frames() / window_frames;
    for (int i = 0; i < batch; ++i) {
      cuts.push_back({hour.get(), (i % hour_windows) * window_frames, window_frames});
    }
    model.encode_windows(cuts);
    std::vector<double> device_mel_ms;
    for (int i = 0; i < repeats; ++i) {
      const auto start = Clock::now();
      model.encode_windows(cuts);
      device_mel_ms.push_back(elapsed_ms(start) / batch);
    }
    std::printf("%6d %14.2f %14.2f %14.3f %12.2f %10.0f %16.2f\n", batch, encoder, prompt_ms, step,
                peak, workload_rtfx(encoder, prompt_ms, step, batch), median(device_mel_ms));
    if (spread) {
      // The hour as 120 windows of this spread, decoded in batches like this one.
      const double decode_ms =
          spread_timing.prompt_ms + spread_timing.setup_ms + spread_timing.steps_ms;
      const double seconds = 120 * (encoder + decode_ms / batch) / 1000;
      std::printf("%6s %d..%d tokens (the longest %d): decode %.2f ms a window, RTFx %.0f\n",
                  "spread", std::max(1, tokens / 4), tokens * 7 / 4, spread_timing.steps + 2,
                  decode_ms / batch, 3600 / seconds);
    }
    std::fflush(stdout);
  }
  print_gpu_profile();
}

// --- Parakeet ---

struct ParakeetTimes {
  double features_ms = 0, encode_ms = 0, decode_ms = 0;
  size_t tokens = 0;
};

// One run: on the CPU the front end alone (to show its share; the GPU model computes its
// features inside encode(), and HARK_CUDA_PROFILE shows their share there), then features +
// encoder and the patterned decode of the whole batch.
ParakeetTimes time_parakeet(const parakeet::Model& model,
                            std::span<const std::span<const float>> batch,
                            const parakeet::EmissionPattern& pattern) {
  ParakeetTimes times;
  auto start = Clock::now();
  if (model.device() == parakeet::Device::cpu) {
    model.batch_features(batch);
    times.features_ms = elapsed_ms(start);
  }
  start = Clock::now();
  const auto encoded = model.encode(batch);
  encoded->wait();  // a GPU encode returns once its work is queued
  times.encode_ms = elapsed_ms(start);
  start = Clock::now();
  for (const auto& emissions : model.decode_pattern(*encoded, pattern)) {
    times.tokens += emissions.size();
  }
  times.decode_ms = elapsed_ms(start);
  return times;
}

void bench_parakeet_row(const parakeet::Model& model, const char* label, int batch, double seconds,
                        int repeats, const parakeet::EmissionPattern& pattern) {
  std::vector<std::vector<float>> clips;
  for (int b = 0; b < batch; ++b) clips.push_back(noise_clip(seconds, 1000 + b));
  const std::vector<std::span<const float>> spans(clips.begin(), clips.end());
  std::vector<double> features_ms, encode_ms, decode_ms, total_ms;
  size_t tokens = 0;
  // Untimed runs of this very input: the first sizes buffers and tunes the products, the second
  // captures the graph that a small batch's encoder replays (on the GPU), and more for at least
  // half a second, until the GPU's clocks have risen from idle, so that the timed runs show the
  // steady state of a repeated shape.
  // (The CPU model has none of these: it starts timing at once.)
  if (model.device() == parakeet::Device::cuda) {
    const auto warm_up = Clock::now();
    for (int i = 0; i < 2 || elapsed_ms(warm_up) < 500; ++i) time_parakeet(model, spans, pattern);
  }
  for (int i = 0; i < repeats; ++i) {
    // HARK_CUDA_PROFILE's table shows the last run alone (earlier ones set buffers up), and an
    // external profiler (compute/cuda/cuda.h) sees it too.
    if (i == repeats - 1) {
      compute::cuda::reset_profile();
      compute::cuda::profiler_start();
    }
    const ParakeetTimes times = time_parakeet(model, spans, pattern);
    if (i == repeats - 1) compute::cuda::profiler_stop();
    features_ms.push_back(times.features_ms);
    encode_ms.push_back(times.encode_ms);
    decode_ms.push_back(times.decode_ms);
    total_ms.push_back(times.encode_ms + times.decode_ms);
    tokens = times.tokens;
  }
  const double total = median(total_ms);
  char features[32] = "in encoder";  // the GPU model's
  if (model.device() == parakeet::Device::cpu) {
    std::snprintf(features, sizeof features, "%.1f", median(features_ms));
  }
  std::printf("%-10s %6d %8.1f %12s %12.1f %11.1f %10.1f %7zu %9.1f\n", label, batch,
              batch * seconds, features, median(encode_ms), median(decode_ms), total, tokens,
              batch * seconds / (total / 1000));
  std::fflush(stdout);
}

// The median time of `repeats` runs of the batches through parakeet::encode_and_decode, after
// one untimed run (each batch's shape met once); `tokens` gets the emissions of a run.
double time_pipeline(const parakeet::Model& model,
                     std::span<const std::vector<std::span<const float>>> batches, int repeats,
                     const parakeet::EmissionPattern& pattern, size_t& tokens) {
  std::vector<double> total_ms;
  for (int i = 0; i <= repeats; ++i) {
    tokens = 0;
    const auto start = Clock::now();
    parakeet::encode_and_decode(model, batches, &pattern,
                                [&](size_t, std::vector<std::vector<parakeet::Emission>> done) {
                                  for (const auto& emissions : done) tokens += emissions.size();
                                });
    if (i > 0) total_ms.push_back(elapsed_ms(start));
  }
  return median(total_ms);
}

// `count` batches of `batch` utterances through parakeet::encode_and_decode, the way hark run
// transcribes a long recording's pieces: on a GPU each batch's decode overlaps the next one's
// encoder. The row shows the whole run (its total and RTFx); encoder and decoder overlap, so they
// have no columns of their own.
void bench_parakeet_pipeline(const parakeet::Model& model, int count, int batch, double seconds,
                             int repeats, const parakeet::EmissionPattern& pattern) {
  std::vector<std::vector<float>> clips;
  for (int i = 0; i < count * batch; ++i) clips.push_back(noise_clip(seconds, 5000 + i));
  std::vector<std::vector<std::span<const float>>> batches(count);
  for (int i = 0; i < count * batch; ++i) batches[i / batch].push_back(clips[i]);
  size_t tokens = 0;
  const double total = time_pipeline(model, batches, repeats, pattern, tokens);
  const std::string batches_label = std::to_string(count) + "x" + std::to_string(batch);
  std::printf("%-10s %6s %8.1f %12s %12s %11s %10.1f %7zu %9.1f\n", "pipelined",
              batches_label.c_str(), count * batch * seconds, "-", "overlapped", "overlapped",
              total, tokens, count * batch * seconds / (total / 1000));
  std::fflush(stdout);
}

// Utterances of 10 to 30 s (seeded uniform lengths) until `total_seconds` of audio (the last one
// shorter, at least a second), batched as hark run batches pieces: longest first, by `batch`.
void bench_parakeet_mixed(const parakeet::Model& model, double total_seconds, int batch,
                          int repeats, const parakeet::EmissionPattern& pattern) {
  constexpr int kRate = 16000;
  SplitMix64 random(77);
  std::vector<std::vector<float>> clips;
  std::vector<size_t> lengths;
  for (double left = total_seconds; left >= 1.0;) {
    const double seconds = std::min(left, 20.0 + 10.0 * random.uniform());
    clips.push_back(noise_clip(seconds, 9000 + clips.size()));
    lengths.push_back(clips.back().size());
    left -= static_cast<double>(clips.back().size()) / kRate;
  }
  std::vector<std::vector<std::span<const float>>> batches;
  double audio_seconds = 0;
  for (const std::vector<size_t>& members :
       parakeet::batches_longest_first(lengths, static_cast<size_t>(batch))) {
    batches.emplace_back();
    for (size_t i : members) {
      batches.back().push_back(clips[i]);
      audio_seconds += static_cast<double>(clips[i].size()) / kRate;
    }
  }
  size_t tokens = 0;
  const double total = time_pipeline(model, batches, repeats, pattern, tokens);
  const std::string label = std::to_string(clips.size()) + "/" + std::to_string(batch);
  std::printf("%-10s %6s %8.1f %12s %12s %11s %10.1f %7zu %9.1f\n", "mixed", label.c_str(),
              audio_seconds, "-", "overlapped", "overlapped", total, tokens,
              audio_seconds / (total / 1000));
  std::fflush(stdout);
}

double peak_rss_gib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / (1 << 20);  // kilobytes on Linux
}

int bench_parakeet(const ParsedArgs& args, const std::string& name, const std::string& path) {
  for (std::string_view option : whisper_only_options) {
    if (args.has(option)) usage_fail("--", option, " is an option of Whisper configurations");
  }
  const parakeet::Config& config = parakeet::reference_config(name);
  const DType type = dtype_from_name(args.value_or("type", "f16"));
  const double seconds = args.float_or("seconds", 20, 0.1, 400);
  const int repeats = args.int_or("repeats", 1, 1, 1000);
  const int pipelined = args.int_or("pipeline", 3, 1, 1000);
  const double mixed_seconds = args.has("mixed") ? args.float_or("mixed", 3600, 1, 36000) : 0;
  if (mixed_seconds > 0 && !args.has("batches")) usage_fail("--mixed needs --batches");
  if (args.has("threads")) compute::set_threads(args.int_or("threads", 1, 1, 1024));
  const parakeet::Device device = parakeet_device(device_from_args(args));
  const std::vector<int> batches =
      args.has("batches") ? batch_list(args.value_or("batches", "")) : std::vector<int>{};

  std::fprintf(stderr, "hark: writing random %s weights (%s)...\n", name.c_str(),
               std::string(dtype_name(type)).c_str());
  parakeet::write_random_model(config, type, path, 1234);
  const auto model = parakeet::Model::load(gguf::File::open(path), device);
  const parakeet::EmissionPattern pattern;
  const bool on_gpu = device == parakeet::Device::cuda;
  std::printf("model            %s (%s weights, random) on %s\n", name.c_str(),
              std::string(dtype_name(type)).c_str(),
              on_gpu ? ("cuda (" + compute::cuda::describe() + ")").c_str() : "cpu");
  std::printf("threads          %d\n", compute::threads());
  std::printf("decoder pattern  a token every %d encoder frames (%.0f ms)%s, blanks elsewhere\n",
              pattern.frames_per_token, 1000 * pattern.frames_per_token * model->frame_seconds(),
              config.head == parakeet::Head::tdt
                  ? (", TDT duration " + std::to_string(pattern.duration)).c_str()
                  : "");
  // Warm-up: first touch of the weights' pages, buffers, the BLAS threads.
  const std::vector<float> warm_up = noise_clip(1.0, 999);
  const std::span<const float> warm_up_batch[] = {warm_up};
  time_parakeet(*model, warm_up_batch, pattern);

  std::printf("%-10s %6s %8s %12s %12s %11s %10s %7s %9s\n", "", "batch", "audio s", "features ms",
              "feat+enc ms", "decode ms", "total ms", "tokens", "RTFx");
  bench_parakeet_row(*model, "latency", 1, 10.0, repeats, pattern);
  for (int batch : batches) {
    bench_parakeet_row(*model, "throughput", batch, seconds, repeats, pattern);
    if (pipelined > 1) bench_parakeet_pipeline(*model, pipelined, batch, seconds, repeats, pattern);
  }
  for (int batch : mixed_seconds > 0 ? batches : std::vector<int>{}) {
    bench_parakeet_mixed(*model, mixed_seconds, batch, repeats, pattern);
  }
  std::printf("peak RSS         %.2f GiB (the mapped weights included)\n", peak_rss_gib());
  if (on_gpu) {
    std::printf("peak GPU         %.2f GiB (hark's buffers: weights, activations, workspace)\n",
                static_cast<double>(compute::cuda::peak_allocated_bytes()) / (1 << 30));
    print_gpu_profile();
  }
  return 0;
}

// --- Whisper ---

int bench_whisper(const ParsedArgs& args, const std::string& name, const std::string& path) {
  for (std::string_view option : parakeet_only_options) {
    if (args.has(option)) usage_fail("--", option, " is an option of Parakeet configurations");
  }
  const whisper::Config& config = whisper::reference_config(name);
  const DType type = dtype_from_name(args.value_or("type", "f16"));
  const int tokens = args.int_or("tokens", 120, 2, config.max_target_positions - 8);
  const int windows = args.int_or("windows", 3, 1, 1000);
  const bool spread = args.has("spread");
  // A spread window's prompt (4 tokens) and its sampled tokens but the last fit the context.
  if (spread && tokens * 7 / 4 + 3 > config.max_target_positions) {
    usage_fail("--spread: --tokens ", tokens, " spreads up to ", tokens * 7 / 4,
               " tokens a window, more than ", name, "'s decoder context of ",
               config.max_target_positions, " takes after the prompt");
  }
  if (args.has("threads")) compute::set_threads(args.int_or("threads", 1, 1, 1024));
  const whisper::Device device = device_from_args(args);
  const whisper::LoadOptions load_options = whisper_load_options(args);
  const std::vector<int> batches = batch_list(args.value_or("batches", "1,16,64"));
  if (spread && device != whisper::Device::cuda) {
    usage_fail("--spread times the batched decode, which runs on the GPU (--device cuda)");
  }

  std::fprintf(stderr, "hark: writing random %s weights (%s)...\n", name.data(),
               std::string(dtype_name(type)).c_str());
  whisper::write_random_model(config, type, path, 1234);
  // The file was just written, so its pages are in memory: the load is the device's start
  // (on the GPU, its context) and the weights' conversion and upload, not a disk read.
  const Clock::time_point load_started = Clock::now();
  const auto model = whisper::Model::load(gguf::File::open(path), device, load_options);
  std::printf("model            %s (%s weights, random) on %s, loaded in %.2f s\n", name.data(),
              std::string(dtype_name(type)).c_str(), device_name(device),
              std::chrono::duration<double>(Clock::now() - load_started).count());
  if (device == whisper::Device::cuda) {
    bench_gpu(*model, tokens, windows, spread, batches);
  } else {
    bench_cpu(*model, tokens, windows);
  }
  return 0;
}

int bench(const ParsedArgs& args) {
  if (!args.positionals.empty()) usage_fail("unexpected argument '", args.positionals[0], "'");
  if (args.has("products")) {
    std::fputs(compute::cuda::time_activation_products().c_str(), stdout);
    return 0;
  }
  const std::string name = args.value_or("model", "base");
  const TemporaryFile model_file{(std::filesystem::temp_directory_path() /
                                  ("hark-bench-" + std::to_string(getpid()) + ".gguf"))
                                     .string()};
  return name.starts_with("parakeet") ? bench_parakeet(args, name, model_file.path)
                                      : bench_whisper(args, name, model_file.path);
}

}  // namespace

const Command bench_command{
    "bench",
    "Time a Whisper or Parakeet configuration with random weights (no download).",
    "hark bench [--model NAME] [--type TYPE] [--device D] [--batches LIST] [--tokens N | "
    "--seconds S] [--products]",
    bench_description,
    bench_options,
    bench,
};

}  // namespace hark::cli
