// Model's shared part (config, vocabulary, front end) and the CPU model: the encoder over a
// padded batch, and greedy CTC / RNN-T / TDT decoding of all utterances in lockstep.
#include "models/parakeet/model.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <future>
#include <memory>
#include <utility>

#include "base/error.h"
#include "compute/ops.h"
#include "features/mel.h"
#include "features/nemo_mel.h"
#include "format/gguf.h"
#include "models/parakeet/greedy.h"
#include "models/parakeet/weights.h"

namespace hark::parakeet {

namespace {

using compute::Shape;
using compute::Tensor;

// transformers' position table holds max_position_embeddings = 5000 frames.
constexpr int64_t kMaxEncoderFrames = 5000;
constexpr int64_t kMinFeatureFrames = 2;

class CpuBatch final : public EncodedBatch {
 public:
  int size() const override { return static_cast<int>(lengths.size()); }
  int64_t frames(int utterance) const override { return lengths.at(utterance); }
  std::vector<float> output(int utterance) const override { return rows(encoded, utterance); }
  std::vector<float> head_input(int utterance) const override { return rows(head, utterance); }

  int64_t padded_frames = 0;     // T of the longest utterance
  std::vector<int64_t> lengths;  // T per utterance
  Tensor encoded;                // [B, padded_frames, d]
  Tensor head;                   // [B, padded_frames, V or joint_hidden]
  const void* owner = nullptr;   // the model that encoded it

 private:
  std::vector<float> rows(const Tensor& tensor, int utterance) const {
    const int64_t frames = lengths.at(utterance);
    const float* first = tensor.row(static_cast<int64_t>(utterance) * padded_frames);
    return {first, first + frames * tensor.cols()};
  }
};

class CpuModel final : public Model {
 public:
  explicit CpuModel(std::shared_ptr<const gguf::File> file)
      : Model(*file), file_(std::move(file)), weights_(bind_weights(*file_, config())) {}

  std::unique_ptr<EncodedBatch> encode(
      std::span<const std::span<const float>> utterances) const override {
    check_utterances(utterances);
    const int64_t batch = static_cast<int64_t>(utterances.size());
    const int64_t width = config().d_model;
    const nn::ConvSubsampling& subsampling = weights_.encoder.subsampling;

    auto result = std::make_unique<CpuBatch>();
    result->owner = this;
    for (std::span<const float> samples : utterances) {
      result->lengths.push_back(encoder_frames(static_cast<int64_t>(samples.size())));
    }
    result->padded_frames = *std::max_element(result->lengths.begin(), result->lengths.end());
    const int64_t padded = result->padded_frames;

    // Each utterance is subsampled alone (its own feature length), then placed in its rows of the
    // zero-padded batch.
    Tensor& x = result->encoded;
    x = Tensor(Shape{batch, padded, width});
    nn::SubsamplingScratch subsampling_scratch;
    Tensor subsampled;
    std::vector<int64_t> rows;
    const std::vector<std::vector<float>> features_of = batch_features(utterances);
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<float>& values = features_of[b];
      const Tensor features_tensor(
          Shape{static_cast<int64_t>(values.size()) / config().n_mels, config().n_mels}, values);
      subsampling.forward(features_tensor, subsampling_scratch, subsampled);
      if (subsampled.dim(0) != result->lengths[b]) {
        fail("Parakeet encoder: ", subsampled.dim(0), " frames after subsampling, expected ",
             result->lengths[b]);
      }
      rows.resize(subsampled.dim(0));
      for (int64_t t = 0; t < subsampled.dim(0); ++t) rows[t] = b * padded + t;
      compute::scatter_rows(subsampled, rows, x);
    }

    Tensor positions;
    compute::relative_positions(padded, width, positions);
    nn::ConformerScratch scratch;
    for (const nn::ConformerBlock& block : weights_.encoder.blocks) {
      block.forward(x, positions, result->lengths, scratch);
    }
    if (weights_.ctc_head) {
      weights_.ctc_head->forward(x, result->head);
    } else {
      weights_.transducer->joint.project_encoder(x, result->head);
    }
    return result;
  }

 private:
  std::vector<std::vector<Emission>> decode_batch(const EncodedBatch& batch,
                                                  const EmissionPattern* pattern) const override {
    const auto* encoded = dynamic_cast<const CpuBatch*>(&batch);
    if (encoded == nullptr || encoded->owner != this) {
      fail("Parakeet decode: the batch was not encoded by this model");
    }
    return config().head == Head::ctc ? decode_ctc(*encoded, pattern)
                                      : decode_transducer(*encoded, pattern);
  }

  // docs/parakeet.md §5.1: the frame's argmax, repeats collapsed, blanks dropped.
  std::vector<std::vector<Emission>> decode_ctc(const CpuBatch& encoded,
                                                const EmissionPattern* pattern) const {
    const int vocab = config().vocab_size;
    std::vector<std::vector<Emission>> result;
    std::vector<int32_t> frame_tokens;
    for (int b = 0; b < encoded.size(); ++b) {
      frame_tokens.resize(static_cast<size_t>(encoded.lengths[b]));
      for (int64_t t = 0; t < encoded.lengths[b]; ++t) {
        frame_tokens[t] = argmax(encoded.head.row(b * encoded.padded_frames + t), vocab);
      }
      result.push_back(collapse_ctc(frame_tokens, config(), pattern));
    }
    return result;
  }

  // The prediction network's state for every utterance, and its projection into the joint
  // space, which changes only when an utterance emits a token.
  struct Predictor {
    nn::LstmState state;     // h, c [B, H] per layer
    Tensor projected;        // [B, joint_hidden]
    nn::LstmState selected;  // the rows of the utterances that advance, gathered
    Tensor selected_projected;
    nn::PredictionScratch scratch;
  };

  // Feeds tokens[i] to utterance which[i] (distinct), all of them in one LSTM step.
  void advance(const TransducerWeights& transducer, std::span<const int64_t> which,
               std::span<const int32_t> tokens, Predictor& p) const {
    const size_t layers = p.state.h.size();
    p.selected.h.resize(layers);
    p.selected.c.resize(layers);
    for (size_t l = 0; l < layers; ++l) {
      compute::gather_rows(p.state.h[l], which, p.selected.h[l]);
      compute::gather_rows(p.state.c[l], which, p.selected.c[l]);
    }
    const Tensor& output = transducer.prediction.step(tokens, p.selected, p.scratch);
    transducer.joint.project_prediction(output, p.selected_projected);
    compute::scatter_rows(p.selected_projected, which, p.projected);
    for (size_t l = 0; l < layers; ++l) {
      compute::scatter_rows(p.selected.h[l], which, p.state.h[l]);
      compute::scatter_rows(p.selected.c[l], which, p.state.c[l]);
    }
  }

  // docs/parakeet.md §5.2 (RNN-T) and §5.3 (TDT), every utterance with its own frame pointer,
  // LSTM state and prediction; each step runs the joint network once for the utterances still
  // decoding and the LSTM once for those that emitted a token.
  std::vector<std::vector<Emission>> decode_transducer(const CpuBatch& encoded,
                                                       const EmissionPattern* pattern) const {
    const TransducerWeights& transducer = *weights_.transducer;
    const Config& c = config();
    const bool tdt = c.head == Head::tdt;
    const int vocab = c.vocab_size;
    const int durations = static_cast<int>(c.durations.size());
    const int64_t batch = encoded.size();

    Predictor p;
    p.state = transducer.prediction.zero_state(batch);
    std::vector<int64_t> everyone(batch);
    for (int64_t b = 0; b < batch; ++b) everyone[b] = b;
    // The first prediction is that of the blank, looked up like any token.
    p.projected = Tensor(Shape{batch, c.joint_hidden});
    advance(transducer, everyone, std::vector<int32_t>(batch, c.blank_id), p);

    TransducerSearch search(c, encoded.lengths, pattern);
    const Tensor& projected_encoder = encoded.head;  // [B, padded, joint_hidden]
    Tensor encoder_rows, prediction_rows, hidden, logits;
    std::vector<int64_t> frame_rows, emitting;
    std::vector<int32_t> emitted;
    while (search.next_step()) {
      const std::vector<int64_t>& active = search.active();
      frame_rows.clear();
      for (int64_t b : active) frame_rows.push_back(b * encoded.padded_frames + search.frame(b));
      compute::gather_rows(projected_encoder, frame_rows, encoder_rows);
      compute::gather_rows(p.projected, active, prediction_rows);
      transducer.joint.forward(encoder_rows, prediction_rows, hidden, logits);

      emitting.clear();
      emitted.clear();
      for (size_t i = 0; i < active.size(); ++i) {
        const int64_t b = active[i];
        const float* row = logits.row(static_cast<int64_t>(i));
        const int32_t token =
            search.decide(b, argmax(row, vocab), tdt ? argmax(row + vocab, durations) : 0);
        if (token >= 0) {
          emitting.push_back(b);
          emitted.push_back(token);
        }
      }
      if (!emitting.empty()) advance(transducer, emitting, emitted, p);
    }
    return search.take_emissions();
  }

  std::shared_ptr<const gguf::File> file_;  // the weights point into its mapping
  Weights weights_;
};

}  // namespace

Model::Model(const gguf::File& file)
    : config_(read_config(file)),
      detokenizer_(Detokenizer::from_gguf(file, config_)),
      mel_(std::make_unique<const features::MelSpectrogram>(
          features::nemo_mel_config(config_.n_mels))) {
  // The front end implements ParakeetFeatureExtractor's settings and nothing else.
  const features::MelConfig& mel = mel_->config();
  if (config_.sample_rate != mel.sample_rate || config_.n_fft != mel.n_fft ||
      config_.win_length != mel.win_length || config_.hop_length != mel.hop_length ||
      std::abs(config_.preemphasis - mel.preemphasis) > 1e-6) {
    fail(file.path(), ": the Parakeet front end implements ", mel.sample_rate, " Hz, n_fft ",
         mel.n_fft, ", window ", mel.win_length, ", hop ", mel.hop_length, ", pre-emphasis ",
         mel.preemphasis, "; the file asks for ", config_.sample_rate, " Hz, n_fft ", config_.n_fft,
         ", window ", config_.win_length, ", hop ", config_.hop_length, ", pre-emphasis ",
         config_.preemphasis);
  }
}

Model::~Model() = default;

std::vector<std::vector<Emission>> Model::decode_pattern(const EncodedBatch& batch,
                                                         const EmissionPattern& pattern) const {
  pattern.check(config_);
  return decode_batch(batch, &pattern);
}

void EmissionPattern::check(const Config& config) const {
  if (frames_per_token < 1) {
    fail("Parakeet emission pattern: frames_per_token is ", frames_per_token, ", expected >= 1");
  }
  if (config.vocab_size < 4) {
    fail("Parakeet emission pattern: needs a vocabulary of at least 4 tokens, the model has ",
         config.vocab_size);
  }
  if (config.head != Head::tdt) return;
  const int durations = static_cast<int>(config.durations.size());
  if (duration < 1 || duration > frames_per_token || duration >= durations) {
    fail("Parakeet emission pattern: duration ", duration, " is not in 1 to ",
         std::min(frames_per_token, durations - 1),
         " (at most frames_per_token, below the model's ", durations, " durations)");
  }
}

int32_t EmissionPattern::token(int64_t frame, const Config& config) const {
  const auto id = static_cast<int32_t>(1 + frame % (config.vocab_size - 2));
  return id == config.blank_id ? config.vocab_size - 1 : id;
}

void encode_and_decode(const Model& model,
                       std::span<const std::vector<std::span<const float>>> batches,
                       const EmissionPattern* pattern, const BatchDone& done) {
  auto decode = [&](const EncodedBatch& encoded) {
    return pattern != nullptr ? model.decode_pattern(encoded, *pattern) : model.decode(encoded);
  };
  if (model.device() != Device::cuda) {
    for (size_t i = 0; i < batches.size(); ++i) done(i, decode(*model.encode(batches[i])));
    return;
  }
  // One batch decoding on the worker while the next encodes here. The future's destructor waits,
  // so an exception on either side leaves no thread behind.
  std::future<std::vector<std::vector<Emission>>> decoding;
  for (size_t i = 0; i < batches.size(); ++i) {
    std::shared_ptr<const EncodedBatch> encoded = model.encode(batches[i]);
    if (decoding.valid()) done(i - 1, decoding.get());
    decoding = std::async(std::launch::async, [&decode, encoded] { return decode(*encoded); });
  }
  if (decoding.valid()) done(batches.size() - 1, decoding.get());
}

std::unique_ptr<Model> Model::load(std::shared_ptr<const gguf::File> file, Device device) {
  if (file == nullptr) fail("Parakeet: no model file");
  switch (device) {
    case Device::cpu:
      return std::make_unique<CpuModel>(std::move(file));
    case Device::cuda:
      return load_cuda(std::move(file));
  }
  fail("Parakeet: unknown device");
}

double Model::frame_seconds() const {
  return static_cast<double>(config_.hop_length) / config_.sample_rate * config_.subsampling_factor;
}

int64_t Model::feature_frames(int64_t samples) const {
  return samples / config_.hop_length;
}

int64_t Model::encoder_frames(int64_t samples) const {
  // Each stage is a kernel-3, stride-2, padding-1 convolution: n -> (n - 1) / 2 + 1.
  int64_t frames = feature_frames(samples);
  for (int stage = 0; stage < config_.subsampling_stages(); ++stage) frames = (frames - 1) / 2 + 1;
  return frames;
}

int64_t Model::min_samples() const {
  return kMinFeatureFrames * config_.hop_length;
}

int64_t Model::max_samples() const {
  return kMaxEncoderFrames * config_.subsampling_factor * config_.hop_length;
}

std::vector<std::vector<float>> Model::batch_features(
    std::span<const std::span<const float>> utterances) const {
  std::vector<std::vector<float>> features_of(utterances.size());
  // An exception may not leave an OpenMP region: the first one is kept and thrown afterwards.
  std::exception_ptr failure;
  const auto count = static_cast<int64_t>(utterances.size());
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    try {
      features_of[i] = features(utterances[i]);
    } catch (...) {
#pragma omp critical(parakeet_features)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
  return features_of;
}

std::vector<float> Model::features(std::span<const float> samples) const {
  const auto count = static_cast<int64_t>(samples.size());
  if (count < min_samples()) {
    fail("Parakeet: ", count, " samples of audio are too short; at least ", min_samples(), " (",
         static_cast<double>(min_samples()) / config_.sample_rate, " s) are needed");
  }
  if (count > max_samples()) {
    fail("Parakeet: ", count, " samples of audio are too long for one piece; at most ",
         max_samples(), " (", static_cast<double>(max_samples()) / config_.sample_rate,
         " s): split longer audio first");
  }
  // [n_mels, L + 1], the STFT's last frame padding: transposed to [L + 1, n_mels], that frame
  // is the last row, left out.
  const int64_t frames = feature_frames(count);
  const int64_t mels = config_.n_mels;
  const std::vector<float> spectrogram = mel_->compute(samples);
  const Tensor by_mel(Shape{mels, static_cast<int64_t>(spectrogram.size()) / mels}, spectrogram);
  Tensor by_time;
  compute::transpose(by_mel, by_time);
  if (by_time.dim(0) != frames + 1) {
    fail("Parakeet front end: ", by_time.dim(0), " STFT frames for ", count, " samples, expected ",
         frames + 1);
  }
  const std::span<const float> valid = by_time.values().first(static_cast<size_t>(frames * mels));
  return {valid.begin(), valid.end()};
}

void Model::check_utterances(std::span<const std::span<const float>> utterances) const {
  if (utterances.empty()) fail("Parakeet: no audio to encode (an empty batch)");
  for (std::span<const float> samples : utterances) {
    const auto count = static_cast<int64_t>(samples.size());
    if (count < min_samples() || count > max_samples()) {
      fail("Parakeet: an utterance of ", count, " samples; each must hold ", min_samples(), " to ",
           max_samples());
    }
  }
}

}  // namespace hark::parakeet
