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
};

constexpr std::string_view bench_description =
    "Writes a GGUF with random weights of the configuration to a temporary file,\n"
    "loads it, and times the encoder per 30-s window and the decoder per token\n"
    "(batch 1, after a 4-token prompt, forcing token ids so the decode length is\n"
    "fixed). Prints the medians and the real-time factor of the standard\n"
    "workload: 1 hour of audio = 120 windows of 30 s, 120 tokens each.";

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

int bench(const ParsedArgs& args) {
  if (!args.positionals.empty()) usage_fail("unexpected argument '", args.positionals[0], "'");
  const std::string name = args.value_or("model", "base");
  const whisper::Config& config = whisper::reference_config(name);
  const DType type = dtype_from_name(args.value_or("type", "f16"));
  const int tokens = args.int_or("tokens", 120, 1, config.max_target_positions - 8);
  const int windows = args.int_or("windows", 3, 1, 1000);
  if (args.has("threads")) compute::set_threads(args.int_or("threads", 1, 1, 1024));

  TemporaryFile model_file{(std::filesystem::temp_directory_path() /
                            ("hark-bench-" + std::to_string(getpid()) + ".gguf"))
                               .string()};
  std::fprintf(stderr, "hark: writing random %s weights (%s)...\n", name.data(),
               std::string(dtype_name(type)).c_str());
  whisper::write_random_model(config, type, model_file.path, 1234);
  const auto model = whisper::Model::load(gguf::File::open(model_file.path));
  const whisper::Vocabulary& vocab = model->vocabulary();

  std::mt19937 random(7);
  std::uniform_real_distribution<float> level(-1.0f, 1.0f);
  std::vector<float> mel(static_cast<size_t>(config.n_mels) * config.window_frames());
  for (float& value : mel) value = level(random);

  model->encode(mel);  // warm-up: first-touch of the weights' pages, buffers
  std::vector<double> encoder_ms;
  std::shared_ptr<const whisper::EncodedWindow> window;
  for (int i = 0; i < windows; ++i) {
    const auto start = Clock::now();
    window = model->encode(mel);
    encoder_ms.push_back(elapsed_ms(start));
  }

  const std::vector<int32_t> prompt = {vocab.sot,
                                       vocab.first_language >= 0 ? vocab.first_language : vocab.sot,
                                       vocab.transcribe, vocab.no_timestamps};
  auto session = model->start(window, 1);
  const auto prefill_start = Clock::now();
  session->advance({prompt});
  const double prefill_ms = elapsed_ms(prefill_start);
  std::vector<double> step_ms;
  for (int i = 0; i < tokens; ++i) {
    const int32_t forced = 400 + (i * 37) % 20000;  // ordinary text tokens
    const auto start = Clock::now();
    session->advance({{forced}});
    step_ms.push_back(elapsed_ms(start));
  }

  const double encoder = median(encoder_ms);
  const double step = median(step_ms);
  const double workload_s = 120 * (encoder + prefill_ms + 120 * step) / 1000.0;
  std::printf("model            %s (%s weights, random)\n", name.data(),
              std::string(dtype_name(type)).c_str());
  std::printf("threads          %d\n", compute::threads());
  std::printf("encoder          %.1f ms per 30-s window (median of %d)\n", encoder, windows);
  std::printf("decoder prompt   %.1f ms (4 tokens)\n", prefill_ms);
  std::printf("decoder step     %.2f ms per token, batch 1 (median of %d)\n", step, tokens);
  std::printf("1 h workload     %.1f s (120 windows x 120 tokens) -> RTFx %.1f\n", workload_s,
              3600.0 / workload_s);
  return 0;
}

}  // namespace

const Command bench_command{
    "bench",
    "Time a Whisper configuration with random weights (no download).",
    "hark bench [--model NAME] [--type TYPE] [--tokens N] [--windows N]",
    bench_description,
    bench_options,
    bench,
};

}  // namespace hark::cli
