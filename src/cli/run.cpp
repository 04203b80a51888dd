// `hark run MODEL AUDIO...`: transcribes (or translates) audio files with a Whisper or Parakeet
// GGUF model. The model file's general.architecture picks the family; the inputs, outputs,
// progress and error handling are shared, the decoding options are the family's own.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "audio/audio.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/terminal.h"
#include "compute/cuda/cuda.h"
#include "compute/ops.h"
#include "format/gguf.h"
#include "models/parakeet/model.h"
#include "models/parakeet/transcribe.h"
#include "models/whisper/model.h"
#include "models/whisper/tokens.h"
#include "models/whisper/transcribe.h"
#include "pipeline/output.h"
#include "pipeline/pieces.h"
#include "pipeline/segmenter.h"
#include "text/bpe.h"

namespace hark::cli {

namespace {

namespace fs = std::filesystem;

const Option run_options[] = {
    {"output-format", 'o', "FORMAT", "txt (default), json, srt or vtt."},
    {"output-dir", 0, "DIR",
     "Write each result to DIR/NAME.FORMAT instead of stdout\n"
     "(NAME: the audio file's name without its extension, or\n"
     "'stdin' for -). DIR is created if needed."},
    {"language", 'l', "CODE",
     "Spoken language: a code (en, de, ...), a name (german),\n"
     "or 'auto' (default) to detect it from the first 30 s."},
    {"task", 0, "TASK", "transcribe (default) or translate (into English)."},
    {"translate", 0, "", "Same as --task translate."},
    {"beam-size", 'b', "N", "Beam search with N beams; 1 (default) is greedy."},
    {"temperature", 0, "T",
     "Sampling temperature from 0 (default) to 1. With fallback,\n"
     "a window whose text is repetitive or unlikely is decoded\n"
     "again at T+0.2, T+0.4, ... up to 1."},
    {"no-fallback", 0, "", "Decode every window once, at the given temperature."},
    {"timestamps", 0, "MODE",
     "segment (default): timed segments; none: no timestamp\n"
     "tokens, one segment per 30-s window."},
    {"max-tokens", 0, "N",
     "At most N tokens per 30-s window (default: 224, half\n"
     "the decoder context)."},
    {"prompt", 0, "TEXT", "Text that precedes the audio (names, spelling, style)."},
    {"threads", 't', "N", "CPU threads to use (default: all cores)."},
    device_option,
    cross_kv_option,
    {"batch-size", 0, "N",
     "Whisper: decode N 30-s windows of a file at once, each on its\n"
     "own (no earlier text in the prompt), as faster-whisper's batched\n"
     "mode; default 1, openai's sequential decoding. Parakeet: encode\n"
     "and decode N pieces at once, of several files together when there\n"
     "are several (default 4)."},
    {"max-piece", 0, "SECONDS",
     "Parakeet: cut audio longer than this at pauses into pieces\n"
     "transcribed as a batch (default 120, at most 400)."},
    {"verbose", 'v', "", "Log model details and timings to stderr."},
};

// The options only Whisper models take, and the one only Parakeet models take: given to the
// other family they are a usage error, not silently ignored.
constexpr std::string_view whisper_only_options[] = {
    "language",    "task",       "translate",  "beam-size", "temperature",
    "no-fallback", "timestamps", "max-tokens", "prompt",    "cross-kv"};
constexpr std::string_view parakeet_only_options[] = {"max-piece"};

constexpr std::string_view run_description =
    "MODEL is the path to a Whisper or Parakeet model in GGUF format (see\n"
    "'hark convert').\n"
    "AUDIO is a WAV file (mp3, flac, ogg, m4a, opus, ... when built with FFmpeg),\n"
    "or - to read audio from stdin. All files are transcribed, one after another.\n"
    "\n"
    "Results go to stdout unless --output-dir is given. With several files, each\n"
    "result is preceded by a line '==> FILE <==' (txt, srt, vtt), and json prints\n"
    "one object per line (JSON Lines) with an extra \"file\" field.\n"
    "\n"
    "A file that fails is reported on stderr as one line 'hark: error: ...' and the\n"
    "other files still run. Exit status: 0 when every file was transcribed, 1 when\n"
    "any failed (or the model could not be loaded), 2 for a bad command line.\n"
    "Progress is shown on stderr when it is a terminal.\n"
    "\n"
    "Parakeet models (CTC, RNN-T, TDT) decode greedily, with word and token\n"
    "times in json. Long audio is cut at pauses into pieces of at most --max-piece\n"
    "seconds, --batch-size of them encoded at once; the text comes back as\n"
    "subtitle-sized segments (cut at sentence ends and pauses, at most 6.5 s).";

std::vector<float> temperature_ladder(double start, bool fallback) {
  std::vector<float> temperatures;
  if (!fallback) return {static_cast<float>(start)};
  // openai-whisper's ladder: start, start + 0.2, ... while <= 1.0 (with a little slack).
  for (int step = 0;; ++step) {
    const double temperature = start + 0.2 * step;
    if (temperature > 1.0 + 1e-6) break;
    temperatures.push_back(static_cast<float>(temperature));
  }
  return temperatures;
}

whisper::Options decoding_options(const ParsedArgs& args) {
  whisper::Options options;
  const std::string language = args.value_or("language", "auto");
  if (language != "auto") {
    const std::optional<std::string_view> code = whisper::language_code(language);
    if (!code) usage_fail("unknown language '", language, "' (give a code such as en, or auto)");
    options.language = std::string(*code);
  }

  const std::string task =
      args.value_or("task", args.has("translate") ? "translate" : "transcribe");
  if (task == "transcribe") {
    if (args.has("translate")) usage_fail("--translate contradicts --task transcribe");
    options.task = whisper::Task::transcribe;
  } else if (task == "translate") {
    options.task = whisper::Task::translate;
  } else {
    usage_fail("unknown task '", task, "' (expected transcribe or translate)");
  }

  options.beam_size = args.int_or("beam-size", 1, 1, 64);
  options.fallback = !args.has("no-fallback");
  options.temperatures =
      temperature_ladder(args.float_or("temperature", 0.0, 0.0, 1.0), options.fallback);

  const std::string timestamps = args.value_or("timestamps", "segment");
  if (timestamps == "segment") {
    options.timestamps = true;
  } else if (timestamps == "none") {
    options.timestamps = false;
  } else {
    usage_fail("unknown --timestamps mode '", timestamps, "' (expected segment or none)");
  }

  options.max_tokens = args.int_or("max-tokens", 0, 1, 100000);
  options.initial_prompt = args.value_or("prompt", "");
  options.batch_size = args.int_or("batch-size", 1, 1, 1024);
  return options;
}

output::Format output_format(const ParsedArgs& args) {
  const std::string name = args.value_or("output-format", "txt");
  try {
    return output::format_from_name(name);
  } catch (const Error& error) {
    throw UsageError(error.what());
  }
}

// Where each input's result goes when --output-dir is given; two inputs may not share a file.
std::vector<fs::path> output_paths(const std::vector<std::string>& inputs,
                                   const fs::path& directory, output::Format format) {
  std::vector<fs::path> paths;
  std::map<fs::path, std::string> claimed;
  for (const std::string& input : inputs) {
    fs::path name = input == "-" ? fs::path("stdin") : fs::path(input).filename().stem();
    if (name.empty()) name = "audio";
    fs::path path = directory / name;
    path += ".";
    path += std::string(output::format_name(format));
    const auto [previous, inserted] = claimed.emplace(path, input);
    if (!inserted) {
      usage_fail("'", previous->second, "' and '", input, "' would both be written to ",
                 path.string());
    }
    paths.push_back(std::move(path));
  }
  return paths;
}

std::shared_ptr<const gguf::File> open_model_file(const std::string& model) {
  std::error_code error;
  const fs::file_status status = fs::status(model, error);
  if (!fs::exists(status)) {
    fail("model '", model,
         "' not found: no such file (give the path to a .gguf file; model names are not "
         "supported yet)");
  }
  if (fs::is_directory(status)) fail("model '", model, "' is a directory, not a .gguf file");
  return gguf::File::open(model);
}

// Written whole or not at all, so an interrupted run never leaves a half transcript behind.
void write_file(const fs::path& path, const std::string& text) {
  AtomicFileWriter file(path.string());
  file.write(text.data(), text.size());
  file.commit();
}

// A failure to write stdout (a full disk, a closed pipe) ends the whole run: every later file
// would fail the same way.
class OutputFailed : public Error {
 public:
  using Error::Error;
};

void write_stdout(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    throw OutputFailed("could not write the output to stdout");
  }
}

// An error message that names the input, without naming it twice.
std::string about_input(const std::string& input, const std::string& message) {
  if (input == "-") {
    if (message.find("standard input") != std::string::npos) return message;
    return "stdin: " + message;
  }
  if (message.find(input) != std::string::npos) return message;
  return input + ": " + message;
}

void report_failure(const std::string& input, const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "hark: error: %s\n", about_input(input, message).c_str());
}

// Where results go, and how a failing input is reported while the others go on.
class Outputs {
 public:
  Outputs(std::vector<std::string> inputs, output::Format format,
          std::optional<std::string> output_dir)
      : inputs_(std::move(inputs)), format_(format), output_dir_(std::move(output_dir)) {
    if (output_dir_) {
      destinations_ = output_paths(inputs_, *output_dir_, format_);
      std::error_code error;
      fs::create_directories(*output_dir_, error);
      if (error) fail("cannot create output directory ", *output_dir_, ": ", error.message());
    }
  }

  const std::vector<std::string>& inputs() const { return inputs_; }
  int failures() const { return failures_; }

  void emit(size_t i, const Transcript& transcript) {
    const std::string& input = inputs_[i];
    const bool several_on_stdout = !output_dir_ && inputs_.size() > 1;
    if (output_dir_) {
      write_file(destinations_[i], output::render(transcript, format_));
      log::info("wrote ", destinations_[i].string());
    } else if (several_on_stdout && format_ == output::Format::json) {
      nlohmann::ordered_json line = output::to_json_value(transcript);
      line["file"] = input;
      write_stdout(line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
                   "\n");
    } else if (several_on_stdout) {
      write_stdout((printed_any_ ? "\n==> " : "==> ") + input + " <==\n" +
                   output::render(transcript, format_));
      printed_any_ = true;
    } else {
      write_stdout(output::render(transcript, format_));
    }
  }

  // Runs `body` for the inputs it names; an input's own failure is reported and counted, and
  // the others go on. Usage and output errors stop everything.
  template <class Body>
  void guarded(const std::vector<size_t>& which, Body&& body) {
    try {
      body();
    } catch (const std::bad_alloc&) {
      for (size_t i : which) report_failure(inputs_[i], "out of memory");
      failures_ += static_cast<int>(which.size());
    } catch (const UsageError&) {
      throw;
    } catch (const OutputFailed&) {
      throw;
    } catch (const std::exception& error) {
      for (size_t i : which) report_failure(inputs_[i], error.what());
      failures_ += static_cast<int>(which.size());
    }
  }

 private:
  std::vector<std::string> inputs_;
  output::Format format_;
  std::optional<std::string> output_dir_;
  std::vector<fs::path> destinations_;
  bool printed_any_ = false;
  int failures_ = 0;
};

// Files whose audio is decoded together (batches across files) are read a group at a time, each
// group up to this much audio besides the file that crosses it (an hour: 230 MB of F32 samples
// at 16 kHz), so that a folder of long recordings never sits in memory whole (two groups at most:
// the one transcribed and the next one, read ahead). HARK_RUN_GROUP_SECONDS sets another size
// (tests use groups of a file each).
constexpr double kGroupSeconds = 3600;

size_t group_samples(int64_t sample_rate) {
  double seconds = kGroupSeconds;
  if (const char* text = std::getenv("HARK_RUN_GROUP_SECONDS"); text != nullptr && *text != '\0') {
    char* end = nullptr;
    seconds = std::strtod(text, &end);
    if (*end != '\0' || !(seconds > 0)) {
      fail("HARK_RUN_GROUP_SECONDS is '", text, "': expected a positive number of seconds");
    }
  }
  return static_cast<size_t>(seconds * static_cast<double>(sample_rate));
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void log_speed(const std::string& what, double audio_seconds, double seconds,
               const std::string& language) {
  log::info(what, ": ", audio_seconds, " s of audio in ", seconds, " s (",
            seconds > 0 ? audio_seconds / seconds : 0.0, "x real time)",
            language.empty() ? "" : ", language " + language);
}

// With HARK_CUDA_PROFILE set, -v ends with the GPU time of the whole run by stage (first uses
// included: cuBLASLt's tuning, graph captures).
void log_gpu_profile() {
  const std::string report = compute::cuda::profile_report();
  if (!report.empty()) log::info("GPU time by stage (HARK_CUDA_PROFILE):\n", report);
}

std::string shown_name(const std::string& input) {
  return input == "-" ? "stdin" : input;
}

// The outputs' inputs, read a group at a time by `load` (samples at `sample_rate`), each group on
// a thread of its own from the moment the one before is taken: the first while the model loads,
// the next while the group before is transcribed (an hour of 44.1-kHz WAV takes 0.6-0.8 s to read
// and resample on 16 cores). A group holds files until it holds `group_samples` (one file: 0).
class GroupReader {
 public:
  using Load = std::function<std::vector<float>(const std::string&)>;
  struct Read {
    size_t input = 0;
    std::vector<float> samples;
    double seconds = 0;        // the load's own time
    std::exception_ptr error;  // reported by the caller's thread, through Outputs
  };

  GroupReader(const std::vector<std::string>& inputs, int64_t sample_rate, size_t group_samples,
              Load load)
      : inputs_(inputs),
        sample_rate_(sample_rate),
        group_samples_(group_samples),
        load_(std::move(load)) {
    start(0);
  }

  int64_t sample_rate() const { return sample_rate_; }

  // The next group, once read (empty after the last); the one after it starts reading.
  std::vector<Read> next() {
    if (!pending_.valid()) return {};
    std::vector<Read> group = pending_.get();
    if (!group.empty()) start(group.back().input + 1);
    return group;
  }

 private:
  void start(size_t first) {
    if (first < inputs_.size())
      pending_ = std::async(std::launch::async, [this, first] { return read(first); });
  }

  std::vector<Read> read(size_t first) const {
    std::vector<Read> group;
    size_t samples = 0;
    for (size_t next = first; next < inputs_.size() && (next == first || samples < group_samples_);
         ++next) {
      Read read;
      read.input = next;
      const auto started = Clock::now();
      try {
        read.samples = load_(inputs_[next]);
        samples += read.samples.size();
      } catch (...) {
        read.error = std::current_exception();
      }
      read.seconds = seconds_since(started);
      group.push_back(std::move(read));
    }
    return group;
  }

  const std::vector<std::string>& inputs_;
  const int64_t sample_rate_;
  const size_t group_samples_;
  const Load load_;
  std::future<std::vector<Read>> pending_;  // last: joined before the members it reads go
};

// body(indices, recordings) for each group's files that could be read. A file that cannot be read
// fails alone; a failure in the body fails its group's files.
template <class Body>
void for_each_group(Outputs& outputs, GroupReader& reader, Body&& body) {
  for (auto group = reader.next(); !group.empty(); group = reader.next()) {
    std::vector<size_t> loaded;
    std::vector<std::vector<float>> recordings;
    for (GroupReader::Read& read : group) {
      if (read.error) {
        outputs.guarded({read.input}, [&] { std::rethrow_exception(read.error); });
        continue;
      }
      log::info(
          shown_name(outputs.inputs()[read.input]), ": ",
          static_cast<double>(read.samples.size()) / static_cast<double>(reader.sample_rate()),
          " s of audio loaded in ", read.seconds, " s");
      loaded.push_back(read.input);
      recordings.push_back(std::move(read.samples));
    }
    if (!loaded.empty()) outputs.guarded(loaded, [&] { body(loaded, recordings); });
  }
}

void reject_options(const ParsedArgs& args, std::span<const std::string_view> names,
                    const std::string& why) {
  for (std::string_view name : names) {
    if (args.has(name)) usage_fail("--", name, " ", why);
  }
}

int run_whisper(const ParsedArgs& args, whisper::Options options, whisper::Device device,
                const whisper::LoadOptions& load_options,
                const std::shared_ptr<const gguf::File>& model_file, Outputs& outputs) {
  reject_options(args, parakeet_only_options, "is an option of Parakeet models");
  const std::string& model_path = model_file->path();
  const std::vector<std::string>& inputs = outputs.inputs();
  // Several files in batched mode share the batches, a group at a time; otherwise each file is
  // transcribed alone. Either way the audio is read ahead, from before the model loads.
  const bool files_share_batches = options.batch_size > 1 && inputs.size() > 1;
  GroupReader reader(
      inputs, audio::kSampleRate, files_share_batches ? group_samples(audio::kSampleRate) : 0,
      [](const std::string& input) { return audio::load(input, audio::kSampleRate); });
  const auto loading = Clock::now();
  const std::unique_ptr<whisper::Model> model =
      whisper::Model::load(model_file, device, load_options);
  log::info("model loaded in ", seconds_since(loading), " s");
  const text::BpeTokenizer tokenizer = text::BpeTokenizer::from_gguf(*model_file);
  if (!options.language.empty()) model->vocabulary().language_token(options.language);
  const int64_t model_rate = model_file->get_int_or("whisper.sample_rate", audio::kSampleRate);
  if (model_rate != audio::kSampleRate) {
    fail(model_path, ": whisper.sample_rate is ", model_rate,
         " Hz; hark's Whisper front end runs at ", audio::kSampleRate, " Hz");
  }
  const whisper::Config& config = model->config();
  log::info("device ", device_name(device),
            device == whisper::Device::cuda ? " (" + compute::cuda::describe() + ")" : "");
  log::info("model ", model_path, ": d_model ", config.d_model, ", ", config.encoder_layers,
            " encoder and ", config.decoder_layers, " decoder layers, vocabulary ",
            config.vocab_size,
            model->vocabulary().multilingual ? ", multilingual" : ", English-only");

  if (files_share_batches) {
    for_each_group(
        outputs, reader,
        [&](const std::vector<size_t>& loaded, std::vector<std::vector<float>>& recordings) {
          const auto started = Clock::now();
          std::vector<std::span<const float>> views(recordings.begin(), recordings.end());
          ProgressLine progress("hark: " + std::to_string(loaded.size()) + " files");
          options.on_progress = [&progress](double fraction) { progress.update(fraction); };
          const std::vector<Transcript> transcripts =
              whisper::transcribe_many(*model, tokenizer, views, options);
          progress.clear();
          double audio_seconds = 0;
          for (const Transcript& transcript : transcripts) audio_seconds += transcript.duration;
          log_speed(std::to_string(loaded.size()) + " files", audio_seconds, seconds_since(started),
                    "");
          for (size_t k = 0; k < loaded.size(); ++k) outputs.emit(loaded[k], transcripts[k]);
        });
    log_gpu_profile();
    return outputs.failures() == 0 ? 0 : 1;
  }

  for_each_group(
      outputs, reader,
      [&](const std::vector<size_t>& loaded, std::vector<std::vector<float>>& recordings) {
        const std::string name = shown_name(inputs[loaded[0]]);
        const std::vector<float>& samples = recordings[0];
        const auto started = Clock::now();
        ProgressLine progress("hark: " + name);
        options.on_progress = [&progress](double fraction) { progress.update(fraction); };
        const Transcript transcript = whisper::transcribe(*model, tokenizer, samples, options);
        progress.clear();
        log_speed(name, static_cast<double>(samples.size()) / audio::kSampleRate,
                  seconds_since(started), transcript.language);
        outputs.emit(loaded[0], transcript);
      });
  log_gpu_profile();
  return outputs.failures() == 0 ? 0 : 1;
}

// Parakeet's own settings, read with the other options before any model is.
struct ParakeetSettings {
  parakeet::Device device = parakeet::Device::cpu;
  double max_piece_seconds = 120;
  int batch_size = 4;
};

ParakeetSettings parakeet_settings(const ParsedArgs& args, whisper::Device device) {
  ParakeetSettings settings;
  settings.device = parakeet_device(device);
  settings.max_piece_seconds = args.float_or("max-piece", settings.max_piece_seconds, 1.0, 400.0);
  settings.batch_size = args.int_or("batch-size", settings.batch_size, 1, 1024);
  return settings;
}

// Parakeet: each file cut at pauses into pieces its encoder's full attention handles, the pieces
// (of a group of files together, when there are several) transcribed `batch_size` at a time, then
// re-cut into subtitle-sized segments by their words.
int run_parakeet(const ParsedArgs& args, const ParakeetSettings& settings,
                 const std::shared_ptr<const gguf::File>& model_file, Outputs& outputs) {
  reject_options(args, whisper_only_options,
                 "is an option of Whisper models; Parakeet decodes greedily and takes no "
                 "language, task, prompt or timestamp mode");
  const parakeet::Device device = settings.device;
  const auto loading = Clock::now();
  const std::unique_ptr<parakeet::Model> model = parakeet::Model::load(model_file, device);
  log::info("model loaded in ", seconds_since(loading), " s");
  const parakeet::Config& config = model->config();
  const double longest = static_cast<double>(model->max_samples()) / config.sample_rate;
  PieceLimits limits;
  limits.max_seconds = settings.max_piece_seconds;
  if (limits.max_seconds > longest) {
    usage_fail("--max-piece ", limits.max_seconds, " is longer than this model's longest input, ",
               longest, " s");
  }
  const int batch_size = settings.batch_size;
  log::info("device ", device == parakeet::Device::cuda ? "cuda (" + compute::cuda::describe() + ")"
                                                        : std::string("cpu"));
  log::info("model ", model_file->path(), ": Parakeet ", parakeet::head_name(config.head),
            ", d_model ", config.d_model, ", ", config.layers, " layers, vocabulary ",
            config.vocab_size, "; pieces of at most ", limits.max_seconds, " s, ", batch_size,
            " at a time");

  // A recording cut at pauses into pieces on its own clock.
  auto pieces_of = [&](const std::vector<float>& samples) {
    std::vector<parakeet::Piece> pieces;
    for (const SampleRange& range : split_at_pauses(samples, limits, config.sample_rate)) {
      pieces.push_back({std::span(samples).subspan(range.begin, range.size()),
                        static_cast<double>(range.begin) / config.sample_rate});
    }
    return pieces;
  };
  auto load = [&](const std::string& input) {
    std::vector<float> samples = audio::load(input, config.sample_rate);
    if (samples.empty()) fail("the audio is empty");
    return samples;
  };

  // Files go in groups (for_each_group: a file alone, or many short ones together): their pieces
  // share the batches (short files would otherwise each run as a batch of one), and each file's
  // transcript is put back together from its own pieces.
  const std::vector<std::string>& inputs = outputs.inputs();
  GroupReader reader(inputs, config.sample_rate, group_samples(config.sample_rate), load);
  for_each_group(
      outputs, reader,
      [&](const std::vector<size_t>& loaded, std::vector<std::vector<float>>& recordings) {
        const auto started = Clock::now();
        const std::string label = loaded.size() == 1 ? shown_name(inputs[loaded[0]])
                                                     : std::to_string(loaded.size()) + " files";
        std::vector<parakeet::Piece> pieces;
        std::vector<size_t> owner;  // the recording each piece is from
        for (size_t k = 0; k < recordings.size(); ++k) {
          for (const parakeet::Piece& piece : pieces_of(recordings[k])) {
            pieces.push_back(piece);
            owner.push_back(k);
          }
        }
        log::info(label, ": ", pieces.size(), pieces.size() == 1 ? " piece" : " pieces");
        ProgressLine progress("hark: " + label);
        std::vector<Segment> segments = parakeet::transcribe_pieces(
            *model, pieces, static_cast<size_t>(batch_size), [&](size_t done) {
              progress.update(static_cast<double>(done) / static_cast<double>(pieces.size()));
            });
        progress.clear();
        std::vector<Transcript> transcripts(recordings.size());
        double audio_seconds = 0;
        for (size_t k = 0; k < recordings.size(); ++k) {
          transcripts[k].duration =
              static_cast<double>(recordings[k].size()) / static_cast<double>(config.sample_rate);
          audio_seconds += transcripts[k].duration;
        }
        for (size_t j = 0; j < segments.size(); ++j) {
          if (!segments[j].text.empty())
            transcripts[owner[j]].segments.push_back(std::move(segments[j]));
        }
        log_speed(label, audio_seconds, seconds_since(started), "");
        for (size_t k = 0; k < loaded.size(); ++k)
          outputs.emit(loaded[k], split_by_words(transcripts[k]));
      });
  log_gpu_profile();
  return outputs.failures() == 0 ? 0 : 1;
}

int run(const ParsedArgs& args) {
  if (args.positionals.empty()) usage_fail("missing MODEL and AUDIO (see 'hark help run')");
  if (args.positionals.size() < 2) usage_fail("missing AUDIO: give at least one audio file or -");
  const std::string& model_path = args.positionals[0];
  std::vector<std::string> inputs(args.positionals.begin() + 1, args.positionals.end());
  if (std::count(inputs.begin(), inputs.end(), "-") > 1)
    usage_fail("stdin (-) can be read only once");

  if (args.has("verbose")) log::set_level(log::Level::info);
  // Every option's value is checked before the model is read: a usage error costs no load.
  const whisper::Options whisper_options = decoding_options(args);
  const whisper::Device device = device_from_args(args);
  const whisper::LoadOptions whisper_load = whisper_load_options(args);
  const ParakeetSettings parakeet = parakeet_settings(args, device);
  const output::Format format = output_format(args);
  if (args.has("threads")) compute::set_threads(args.int_or("threads", 0, 1, 4096));
  Outputs outputs(std::move(inputs), format, args.value("output-dir"));

  const auto model_file = open_model_file(model_path);
  const std::string architecture = model_file->get_string_or("general.architecture", "");
  if (architecture == "parakeet") return run_parakeet(args, parakeet, model_file, outputs);
  return run_whisper(args, whisper_options, device, whisper_load, model_file, outputs);
}

}  // namespace

const Command run_command{
    "run",
    "Transcribe or translate audio files with a Whisper or Parakeet model.",
    "hark run MODEL AUDIO... [options]",
    run_description,
    run_options,
    run,
};

}  // namespace hark::cli
