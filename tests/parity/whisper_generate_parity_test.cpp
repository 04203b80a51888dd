// Whisper's decoding against transformers' WhisperForConditionalGeneration.generate()
// (tests/data/whisper/<model>/reference.json, made by tools/oracle/whisper.py): the checkpoint is
// converted to GGUF, the test audio goes through hark's log-mel and transcribe_mel(), and the
// greedy (and beam) token ids of every decoding call must equal transformers' exactly.
//
// transformers 5.17 decodes 30-s inputs with its long-form loop: a window whose output holds a
// pair of timestamps is followed by another window from the last one, over the rest of the 3000
// frames. transcribe_mel() over the 3000-frame window log-mel, with content_frames = 3000, runs
// the same loop. Settings that make the two agree: no temperature fallback, no silence skipping,
// no conditioning on earlier windows, and prompt_ids carried to every window.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "audio/audio.h"
#include "compute/cuda/cuda.h"
#include "features/whisper_mel.h"
#include "format/gguf.h"
#include "models/whisper/convert.h"
#include "models/whisper/model.h"
#include "models/whisper/transcribe.h"
#include "support/tiny_whisper.h"
#include "text/bpe.h"

namespace hark::whisper {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Loaded {
  std::unique_ptr<Model> model;
  text::BpeTokenizer tokenizer;
  json reference;
  fs::path dir;
};

// Converts tests/data/whisper/<name> and reads its reference; nullopt (with the reason) when the
// data is not there.
// On the GPU the model runs in F32 (an F32 conversion of the F16 checkpoint), as the references
// were made; on the CPU an F16 conversion computes in F32 as well.
std::optional<Loaded> load(const std::string& name, std::string& why, Device device = Device::cpu) {
  if (device == Device::cuda && !compute::cuda::available()) {
    why = "no GPU: " + compute::cuda::describe();
    return std::nullopt;
  }
  const fs::path dir = fs::path(HARK_TEST_DATA) / "whisper" / name;
  if (!fs::exists(dir / "reference.json") || !fs::exists(dir / "config.json")) {
    why = "no reference data in " + dir.string() + " (made by tools/oracle/whisper.py)";
    return std::nullopt;
  }
  testing::TempDir temp;
  const std::string gguf_path = (temp / "model.gguf").string();
  // The checkpoint is F16: an F16 conversion holds exactly the reference's weights.
  convert_checkpoint(dir.string(), gguf_path, device == Device::cuda ? DType::F32 : DType::F16);
  const auto file = gguf::File::open(gguf_path);
  std::ifstream stream(dir / "reference.json");
  return Loaded{Model::load(file, device), text::BpeTokenizer::from_gguf(*file),
                json::parse(stream), dir};
}

std::vector<float> load_audio(const json& reference, const std::string& audio) {
  return audio::load(std::string(HARK_TEST_DATA) + "/" +
                     reference.at("audio").at(audio).at("file").get<std::string>());
}

// transcribe_mel() as transformers' generate() was called with `kwargs`.
Options options_for(const json& kwargs, const text::BpeTokenizer& tokenizer) {
  Options options;
  options.language = kwargs.value("language", "");
  options.task =
      kwargs.value("task", "transcribe") == "translate" ? Task::translate : Task::transcribe;
  options.timestamps = kwargs.value("return_timestamps", false);
  options.beam_size = kwargs.value("num_beams", 1);
  options.max_tokens = kwargs.at("max_new_tokens").get<int>();
  options.temperatures = {0.0f};
  options.fallback = false;
  options.no_speech_threshold = 1.0f;  // a probability is never above 1: no window is skipped
  options.condition_on_previous_text = kwargs.value("condition_on_prev_tokens", false);
  if (kwargs.contains("prompt_ids")) {
    // get_prompt_ids(text) = <|startofprev|> + encode(" " + text.strip()).
    std::vector<int32_t> ids = kwargs.at("prompt_ids").get<std::vector<int32_t>>();
    ids.erase(ids.begin());
    options.initial_prompt = tokenizer.decode(ids);
    options.carry_initial_prompt = true;
  }
  return options;
}

struct Decoding {
  Transcript transcript;
  std::vector<WindowReport> windows;
  std::vector<int32_t> sequences;  // what generate() returns: each window's kept tokens
};

Decoding run(const Loaded& loaded, std::span<const float> mel, int64_t content_frames,
             Options options) {
  Decoding decoding;
  options.on_window = [&](const WindowReport& window) { decoding.windows.push_back(window); };
  decoding.transcript =
      transcribe_mel(*loaded.model, loaded.tokenizer, mel, content_frames, options);
  for (const WindowReport& window : decoding.windows) {
    decoding.sequences.insert(decoding.sequences.end(), window.tokens.begin(),
                              window.tokens.begin() + window.kept);
  }
  return decoding;
}

// Every decoding call's prompt and greedy choices, and the returned sequence.
void expect_same_windows(const Decoding& decoding, const json& expected, int32_t eot) {
  const json& windows = expected.at("windows");
  ASSERT_EQ(decoding.windows.size(), windows.size()) << "decoding calls";
  for (size_t i = 0; i < windows.size(); ++i) {
    SCOPED_TRACE("window " + std::to_string(i));
    const json& window = windows[i];
    EXPECT_EQ(decoding.windows[i].prompt, window.at("decoder_prompt").get<std::vector<int32_t>>());
    std::vector<int32_t> chosen = decoding.windows[i].tokens;
    if (window.at("stopped") == "eos") chosen.push_back(eot);
    EXPECT_EQ(chosen, window.at("steps_chosen").get<std::vector<int32_t>>());
  }
  EXPECT_EQ(decoding.sequences, expected.at("sequences").get<std::vector<int32_t>>());
}

struct GenerateCase {
  const char* model;
  Device device;
};

class WhisperGenerateParity : public ::testing::TestWithParam<GenerateCase> {};

TEST_P(WhisperGenerateParity, GreedyCasesMatchTransformers) {
  std::string why;
  const std::optional<Loaded> loaded = load(GetParam().model, why, GetParam().device);
  if (!loaded) GTEST_SKIP() << why;
  const features::MelSpectrogram spectrogram(
      features::whisper_mel_config(loaded->model->config().n_mels));
  const int32_t eot = loaded->model->vocabulary().eot;

  int compared = 0;
  for (const json& expected : loaded->reference.at("generate")) {
    const std::string name = expected.at("name");
    SCOPED_TRACE(name);
    const json& kwargs = expected.at("kwargs");
    ASSERT_FALSE(kwargs.value("do_sample", false));
    const std::vector<float> samples = load_audio(loaded->reference, expected.at("audio"));
    // transformers' extractor: the audio padded to one 30-s window, all of which is decoded.
    const std::vector<float> mel = features::whisper_window_log_mel(spectrogram, samples);
    const Decoding decoding =
        run(*loaded, mel, features::kWhisperWindowFrames, options_for(kwargs, loaded->tokenizer));
    expect_same_windows(decoding, expected, eot);
    if (expected.contains("detected_language")) {
      EXPECT_EQ(decoding.transcript.language, expected.at("detected_language"));
    }
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

TEST_P(WhisperGenerateParity, BeamSearchMatchesTransformers) {
  std::string why;
  const std::optional<Loaded> loaded = load(GetParam().model, why, GetParam().device);
  if (!loaded) GTEST_SKIP() << why;
  if (loaded->reference.value("beam", json()).is_null()) {
    GTEST_SKIP() << "no beam case for " << GetParam().model;
  }
  const json& expected = loaded->reference.at("beam");
  const features::MelSpectrogram spectrogram(
      features::whisper_mel_config(loaded->model->config().n_mels));
  const std::vector<float> samples = load_audio(loaded->reference, expected.at("audio"));
  const std::vector<float> mel = features::whisper_window_log_mel(spectrogram, samples);
  const Decoding decoding = run(*loaded, mel, features::kWhisperWindowFrames,
                                options_for(expected.at("kwargs"), loaded->tokenizer));
  ASSERT_EQ(decoding.windows.size(), expected.at("window_prompts").size());
  EXPECT_EQ(decoding.windows[0].prompt,
            expected.at("window_prompts")[0].get<std::vector<int32_t>>());
  EXPECT_EQ(decoding.sequences, expected.at("sequences").get<std::vector<int32_t>>());
}

TEST_P(WhisperGenerateParity, LongFormMatchesTransformers) {
  std::string why;
  const std::optional<Loaded> loaded = load(GetParam().model, why, GetParam().device);
  if (!loaded) GTEST_SKIP() << why;
  if (loaded->reference.value("long_form", json()).is_null()) {
    GTEST_SKIP() << "no long-form case for " << GetParam().model;
  }
  const json& expected = loaded->reference.at("long_form");
  const features::MelSpectrogram spectrogram(
      features::whisper_mel_config(loaded->model->config().n_mels));
  const std::vector<float> samples = load_audio(loaded->reference, expected.at("audio"));
  // transformers' extractor with truncation=False, padding="longest": the log-mel of the audio
  // alone (no 30 s of zeros after it), which generate() cuts into windows zero-padded to 3000.
  const std::vector<float> mel = spectrogram.compute(samples);
  const int64_t frames = static_cast<int64_t>(mel.size()) / spectrogram.n_mels();
  ASSERT_EQ(frames, expected.at("input_features_shape")[2].get<int64_t>());
  const Decoding decoding =
      run(*loaded, mel, frames, options_for(expected.at("kwargs"), loaded->tokenizer));
  expect_same_windows(decoding, expected, loaded->model->vocabulary().eot);

  // Segment times: transformers' segments keep a final pair's closing timestamp among their
  // tokens, openai's (hark's) do not; their times agree.
  const json& segments = expected.at("segments");
  ASSERT_EQ(decoding.transcript.segments.size(), segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    SCOPED_TRACE("segment " + std::to_string(i));
    const Segment& segment = decoding.transcript.segments[i];
    EXPECT_NEAR(segment.start, segments[i].at("start").get<double>(), 1e-6);
    EXPECT_NEAR(segment.end, segments[i].at("end").get<double>(), 1e-6);
    std::vector<int32_t> tokens = segments[i].at("tokens").get<std::vector<int32_t>>();
    if (tokens.size() == segment.tokens.size() + 1) tokens.pop_back();
    EXPECT_EQ(segment.tokens, tokens);
  }
}

// More beam searches (tests/data/whisper/beam_cases.json, made by
// tools/oracle/whisper_beam_cases.py): 2 to 5 beams, with and without timestamps, beams that end
// early and searches that stop before max_new_tokens. They fail if the rules are applied before
// the log-softmax (openai's order), if finished beams are normalised by another length, or if
// transformers' stopping heuristic is left out.
TEST(WhisperBeamParity, MoreBeamSearchesMatchTransformers) {
  const fs::path path = fs::path(HARK_TEST_DATA) / "whisper" / "beam_cases.json";
  if (!fs::exists(path))
    GTEST_SKIP() << path << " is not there (tools/oracle/whisper_beam_cases.py)";
  std::ifstream stream(path);
  const json cases = json::parse(stream).at("cases");
  std::map<std::string, Loaded> models;
  int compared = 0;
  for (const json& expected : cases) {
    const std::string name = expected.at("model");
    SCOPED_TRACE(name + " " + expected.at("audio").get<std::string>() + " " +
                 expected.at("kwargs").dump());
    if (!models.contains(name)) {
      std::string why;
      std::optional<Loaded> loaded = load(name, why);
      if (!loaded) GTEST_SKIP() << why;
      models.emplace(name, std::move(*loaded));
    }
    const Loaded& loaded = models.at(name);
    const features::MelSpectrogram spectrogram(
        features::whisper_mel_config(loaded.model->config().n_mels));
    const std::vector<float> samples = load_audio(loaded.reference, expected.at("audio"));
    const std::vector<float> mel = features::whisper_window_log_mel(spectrogram, samples);
    const Decoding decoding = run(loaded, mel, features::kWhisperWindowFrames,
                                  options_for(expected.at("kwargs"), loaded.tokenizer));
    const json& windows = expected.at("windows");
    ASSERT_EQ(decoding.windows.size(), windows.size()) << "decoding calls";
    for (size_t i = 0; i < windows.size(); ++i) {
      EXPECT_EQ(decoding.windows[i].prompt,
                windows[i].at("decoder_prompt").get<std::vector<int32_t>>());
    }
    EXPECT_EQ(decoding.sequences, expected.at("sequences").get<std::vector<int32_t>>());
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, WhisperGenerateParity,
                         ::testing::Values(GenerateCase{"tiny-random-large-v3", Device::cpu},
                                           GenerateCase{"tiny-random-tiny.en", Device::cpu},
                                           GenerateCase{"tiny-random-large-v3", Device::cuda},
                                           GenerateCase{"tiny-random-tiny.en", Device::cuda}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.model) +
                                              (info.param.device == Device::cuda ? "_cuda" : "");
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace hark::whisper
