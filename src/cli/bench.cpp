// `hark bench`: the speed of a real Whisper configuration with random weights, generated on the
// fly (no download), decoding a fixed number of tokens per window.
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "compute/cuda/cuda.h"
#include "compute/ops.h"
#include "format/dtype.h"
#include "format/gguf.h"
#include "models/whisper/model.h"
#include "models/whisper/synthetic.h"

namespace hark::cli {

namespace {

const Option bench_options[] = {
    {"model", 'm', "NAME",
     "Whisper configuration: tiny, base, small, medium, large-v2,\n"
     "large-v3, large-v3-turbo (and the .en ones). Default: base."},
    {"type", 0, "TYPE", "Weight type: f32, f16 (default), bf16 or q8_0."},
    {"tokens", 0, "N", "Decoder steps timed per window (default 120)."},
    {"windows", 0, "N", "Encoder windows timed (default 3)."},
    {"threads", 't', "N", "CPU threads (default: all cores)."},
    device_option,
    {"batches", 0, "LIST",
     "GPU: batch sizes to time, comma-separated (default 1,16,64).\n"
     "Each encodes that many windows at once and decodes them together."},
};

constexpr std::string_view bench_description =
    "Writes a GGUF with random weights of the configuration to a temporary file,\n"
    "loads it, and times the encoder per 30-s window and the decoder per token\n"
    "after a 4-token prompt, with a fixed number of decoder steps per window.\n"
    "Prints the medians and the real-time factor (RTFx) of the standard\n"
    "workload: 1 hour of audio = 120 windows of 30 s, 120 tokens each.\n"
    "\n"
    "CPU: batch 1, token ids forced. GPU: for each batch size B, B windows are\n"
    "encoded as one batch and decoded together by the batched greedy search\n"
    "(CUDA Graph step, logit rules and argmax on the GPU), running exactly\n"
    "--tokens steps whatever the random weights choose; the step's cost does not\n"
    "depend on the tokens. RTFx at batch B = 3600 s / (120 x (encoder + prompt\n"
    "per window) + 120 x 120 x step / B).";

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

// Per batch size: windows encoded as one batch, then decoded together for exactly `tokens` steps.
void bench_gpu(const whisper::Model& model, int tokens, int repeats,
               const std::vector<int>& batches) {
  const whisper::Config& config = model.config();
  const std::vector<int32_t> prompt = bench_prompt(model.vocabulary());
  std::printf("gpu              %s\n", compute::cuda::describe().c_str());
  std::printf("weights on GPU   %.2f GiB\n",
              static_cast<double>(compute::cuda::allocated_bytes()) / (1 << 30));
  std::printf("%6s %14s %14s %14s %12s %10s\n", "batch", "encoder ms/win", "prompt ms/win",
              "step ms", "peak GiB", "RTFx");
  for (int batch : batches) {
    const std::vector<float> mel = random_mel(config, batch);
    compute::cuda::reset_peak_allocated_bytes();
    model.encode_batch(mel, batch);  // warm-up: buffers, cuBLASLt plans
    std::vector<double> encoder_ms;
    std::vector<std::shared_ptr<const whisper::EncodedWindow>> windows;
    for (int i = 0; i < repeats; ++i) {
      windows.clear();
      const auto start = Clock::now();
      windows = model.encode_batch(mel, batch);
      encoder_ms.push_back(elapsed_ms(start) / batch);
    }
    std::vector<whisper::GreedyJob> jobs;
    for (const auto& window : windows) jobs.push_back({window, prompt, 0, tokens});
    whisper::GreedyTiming timing;
    model.decode_greedy(jobs, /*timestamps=*/false, tokens, &timing);  // warm-up
    model.decode_greedy(jobs, /*timestamps=*/false, tokens, &timing);
    const double encoder = median(encoder_ms);
    const double prompt_ms = timing.prompt_ms / batch;
    const double step = timing.steps > 0 ? timing.steps_ms / timing.steps : 0;
    std::printf("%6d %14.2f %14.2f %14.3f %12.2f %10.0f\n", batch, encoder, prompt_ms, step,
                static_cast<double>(compute::cuda::peak_allocated_bytes()) / (1 << 30),
                workload_rtfx(encoder, prompt_ms, step, batch));
    std::fflush(stdout);
  }
}

int bench(const ParsedArgs& args) {
  if (!args.positionals.empty()) usage_fail("unexpected argument '", args.positionals[0], "'");
  const std::string name = args.value_or("model", "base");
  const whisper::Config& config = whisper::reference_config(name);
  const DType type = dtype_from_name(args.value_or("type", "f16"));
  const int tokens = args.int_or("tokens", 120, 2, config.max_target_positions - 8);
  const int windows = args.int_or("windows", 3, 1, 1000);
  if (args.has("threads")) compute::set_threads(args.int_or("threads", 1, 1, 1024));
  const whisper::Device device = device_from_args(args);
  const std::vector<int> batches = batch_list(args.value_or("batches", "1,16,64"));

  TemporaryFile model_file{(std::filesystem::temp_directory_path() /
                            ("hark-bench-" + std::to_string(getpid()) + ".gguf"))
                               .string()};
  std::fprintf(stderr, "hark: writing random %s weights (%s)...\n", name.data(),
               std::string(dtype_name(type)).c_str());
  whisper::write_random_model(config, type, model_file.path, 1234);
  const auto model = whisper::Model::load(gguf::File::open(model_file.path), device);
  std::printf("model            %s (%s weights, random) on %s\n", name.data(),
              std::string(dtype_name(type)).c_str(), device_name(device));
  if (device == whisper::Device::cuda) {
    bench_gpu(*model, tokens, windows, batches);
  } else {
    bench_cpu(*model, tokens, windows);
  }
  return 0;
}

}  // namespace

const Command bench_command{
    "bench",
    "Time a Whisper configuration with random weights (no download).",
    "hark bench [--model NAME] [--type TYPE] [--device D] [--batches LIST] [--tokens N]",
    bench_description,
    bench_options,
    bench,
};

}  // namespace hark::cli
