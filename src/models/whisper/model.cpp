// Model::load and the three objects behind model.h: the model (config, vocabulary, weights bound
// to the mapped GGUF), an encoded window (encoder output + cross-attention K/V), and a decoder
// session (n sequences with their caches).
#include "models/whisper/model.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "features/mel.h"
#include "features/whisper_mel.h"
#include "format/gguf.h"
#include "models/whisper/config.h"
#include "models/whisper/decoder.h"
#include "models/whisper/encoder.h"
#include "models/whisper/weights.h"

namespace hark::whisper {

namespace {

// More parallel sequences than any search uses (beam 5 x best_of 5); a larger number is a bug.
constexpr int kMaxSequences = 256;

class WhisperModel;

class WhisperWindow final : public EncodedWindow {
 public:
  explicit WhisperWindow(const WhisperModel* owner) : owner(owner) {}
  std::vector<float> frames() const override {
    return {encoded.values().begin(), encoded.values().end()};
  }

  const WhisperModel* owner;
  compute::Tensor encoded;  // [1, S, d]
  CrossKv cross;
};

class WhisperSession final : public DecoderSession {
 public:
  WhisperSession(const Config& config, const DecoderWeights& weights,
                 std::shared_ptr<const WhisperWindow> window, int n_sequences)
      : config_(config),
        weights_(weights),
        window_(std::move(window)),
        state_(config, n_sequences) {}

  int n_sequences() const override { return state_.n_sequences; }
  int length() const override { return state_.length; }

  std::vector<float> advance(const std::vector<std::vector<int32_t>>& tokens,
                             const std::vector<int>& positions) override {
    if (static_cast<int>(tokens.size()) != state_.n_sequences) {
      fail("whisper decoder: tokens for ", tokens.size(), " sequences, the session has ",
           state_.n_sequences);
    }
    const size_t steps = tokens[0].size();
    if (steps == 0) fail("whisper decoder: advance() with no tokens");
    flat_tokens_.clear();
    for (const std::vector<int32_t>& sequence : tokens) {
      if (sequence.size() != steps) {
        fail("whisper decoder: every sequence must append the same number of tokens (", steps,
             " and ", sequence.size(), ")");
      }
      flat_tokens_.insert(flat_tokens_.end(), sequence.begin(), sequence.end());
    }
    last_position_[0] = static_cast<int>(steps) - 1;
    std::span<const int> wanted =
        positions.empty() ? std::span<const int>(last_position_) : std::span<const int>(positions);
    run_decoder(config_, weights_, window_->cross, state_, flat_tokens_, static_cast<int>(steps),
                wanted, logits_);
    return {logits_.values().begin(), logits_.values().end()};
  }

  void reorder(std::span<const int> source) override {
    if (static_cast<int>(source.size()) != state_.n_sequences) {
      fail("whisper decoder: reorder with ", source.size(), " sources for ", state_.n_sequences,
           " sequences");
    }
    for (int s : source) {
      if (s < 0 || s >= state_.n_sequences) {
        fail("whisper decoder: reorder source ", s, " of ", state_.n_sequences, " sequences");
      }
    }
    for (nn::KvCache& cache : state_.caches) cache.reorder(source);
  }

 private:
  const Config& config_;
  const DecoderWeights& weights_;
  std::shared_ptr<const WhisperWindow> window_;
  DecoderState state_;
  std::vector<int32_t> flat_tokens_;
  int last_position_[1] = {0};
  compute::Tensor logits_;
};

class WhisperModel final : public Model {
 public:
  explicit WhisperModel(std::shared_ptr<const gguf::File> file)
      : file_(std::move(file)),
        config_(read_config(*file_)),
        vocabulary_(read_vocabulary(*file_, config_)),
        weights_(bind_weights(*file_, config_)) {}

  const Config& config() const override { return config_; }
  const Vocabulary& vocabulary() const override { return vocabulary_; }

  std::shared_ptr<const EncodedWindow> encode(std::span<const float> mel) const override {
    auto window = std::make_shared<WhisperWindow>(this);
    run_encoder(config_, weights_.encoder, mel, window->encoded);
    project_cross_kv(weights_.decoder, window->encoded, window->cross);
    return window;
  }

  std::unique_ptr<DecoderSession> start(std::shared_ptr<const EncodedWindow> window,
                                        int n_sequences) const override {
    auto ours = std::dynamic_pointer_cast<const WhisperWindow>(window);
    if (ours == nullptr || ours->owner != this) {
      fail("whisper decoder: the window was not encoded by this model");
    }
    if (n_sequences < 1 || n_sequences > kMaxSequences) {
      fail("whisper decoder: ", n_sequences, " sequences (1 to ", kMaxSequences, " allowed)");
    }
    return std::make_unique<WhisperSession>(config_, weights_.decoder, std::move(ours),
                                            n_sequences);
  }

 private:
  std::shared_ptr<const gguf::File> file_;
  Config config_;
  Vocabulary vocabulary_;
  Weights weights_;
};

constexpr std::pair<CrossKvMode, std::string_view> kCrossKvModeNames[] = {
    {CrossKvMode::native, "native"},       {CrossKvMode::int8, "int8"},
    {CrossKvMode::frames, "frames"},       {CrossKvMode::int8_frames, "int8-frames"},
    {CrossKvMode::int8_auto, "int8-auto"},
};

}  // namespace

std::optional<CrossKvMode> cross_kv_mode_from_name(std::string_view name) {
  for (const auto& [mode, mode_name] : kCrossKvModeNames) {
    if (name == mode_name) return mode;
  }
  return std::nullopt;
}

std::string cross_kv_mode_names() {
  std::string names;
  const size_t count = std::size(kCrossKvModeNames);
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) names += i + 1 == count ? " or " : ", ";
    names += kCrossKvModeNames[i].second;
  }
  return names;
}

std::string_view cross_kv_mode_name(CrossKvMode mode) {
  for (const auto& [known, name] : kCrossKvModeNames) {
    if (known == mode) return name;
  }
  return "unknown";
}

std::unique_ptr<Model> Model::load(std::shared_ptr<const gguf::File> file, Device device,
                                   const LoadOptions& options) {
  if (file == nullptr) fail("whisper: no model file");
  if (device == Device::cuda) return load_cuda(std::move(file), options);
  if (options.cross_kv.has_value() && *options.cross_kv != CrossKvMode::native) {
    fail("whisper: the cross-attention storage ", cross_kv_mode_name(*options.cross_kv),
         " is the GPU's; the CPU model keeps native K/V");
  }
  return std::make_unique<WhisperModel>(std::move(file));
}

size_t Model::check_windows(std::span<const float> mel, int count) const {
  const size_t window_values = static_cast<size_t>(config().n_mels) * config().window_frames();
  if (count < 1 || mel.size() != window_values * count) {
    fail("whisper encoder: ", mel.size(), " log-mel values for ", count, " windows of ",
         window_values);
  }
  return window_values;
}

std::vector<std::shared_ptr<const EncodedWindow>> Model::encode_batch(std::span<const float> mel,
                                                                      int count) const {
  const size_t window_values = check_windows(mel, count);
  std::vector<std::shared_ptr<const EncodedWindow>> windows;
  for (int i = 0; i < count; ++i)
    windows.push_back(encode(mel.subspan(i * window_values, window_values)));
  return windows;
}

LongMel::LongMel(int n_mels, int64_t total_frames, int64_t content_frames)
    : n_mels_(n_mels), total_frames_(total_frames), content_frames_(content_frames) {
  if (n_mels <= 0) fail("Whisper log-mel: ", n_mels, " mel rows");
  if (content_frames < 0 || content_frames > total_frames) {
    fail("Whisper transcribe: ", content_frames, " frames of audio in a log-mel of ", total_frames,
         " frames");
  }
}

void LongMel::check_window(int64_t seek, int64_t count, int window_frames) const {
  if (seek < 0 || count < 0 || count > window_frames || seek + count > total_frames_) {
    fail("Whisper log-mel: frames [", seek, ", ", seek + count, ") of a window of ", window_frames,
         " from a log-mel of ", total_frames_);
  }
}

HostLongMel::HostLongMel(std::span<const float> mel, int n_mels, int64_t content_frames)
    : LongMel(n_mels, n_mels > 0 ? static_cast<int64_t>(mel.size()) / n_mels : 0, content_frames),
      mel_(mel) {
  if (mel.size() % static_cast<size_t>(n_mels) != 0) {
    fail("Whisper transcribe: ", mel.size(), " log-mel values are not ", n_mels, " rows");
  }
}

HostLongMel::HostLongMel(std::span<const float> samples, int n_mels) : LongMel(n_mels, 0, 0) {
  const features::MelSpectrogram spectrogram(features::whisper_mel_config(n_mels));
  owned_ = features::whisper_long_log_mel(spectrogram, samples);
  mel_ = owned_;
  total_frames_ = static_cast<int64_t>(owned_.size()) / n_mels;
  content_frames_ = std::max<int64_t>(total_frames_ - features::kWhisperWindowFrames, 0);
}

std::vector<float> HostLongMel::window(int64_t seek, int64_t count, int window_frames) const {
  check_window(seek, count, window_frames);
  std::vector<float> window(static_cast<size_t>(n_mels_) * window_frames, 0.0f);
  for (int row = 0; row < n_mels_; ++row) {
    const float* from = mel_.data() + row * total_frames_ + seek;
    std::copy(from, from + count, window.begin() + static_cast<int64_t>(row) * window_frames);
  }
  return window;
}

std::unique_ptr<LongMel> Model::long_mel(std::span<const float> samples) const {
  if (samples.empty()) fail("Whisper transcribe: the audio is empty (0 samples)");
  return compute_long_mel(samples);
}

std::unique_ptr<LongMel> Model::compute_long_mel(std::span<const float> samples) const {
  return std::make_unique<HostLongMel>(samples, config().n_mels);
}

std::vector<std::shared_ptr<const EncodedWindow>> Model::encode_windows(
    std::span<const MelWindow> windows) const {
  const int window_frames = config().window_frames();
  std::vector<float> mel;
  for (const MelWindow& w : windows) {
    if (w.mel == nullptr) fail("whisper encoder: a window without its log-mel");
    const std::vector<float> values = w.mel->window(w.seek, w.frames, window_frames);
    mel.insert(mel.end(), values.begin(), values.end());
  }
  return encode_batch(mel, static_cast<int>(windows.size()));
}

std::vector<GreedyOutcome> Model::decode_greedy(std::span<const GreedyJob>, bool, bool,
                                                GreedyTiming*) const {
  fail("whisper: batched greedy decoding needs the CUDA backend");
}

}  // namespace hark::whisper
