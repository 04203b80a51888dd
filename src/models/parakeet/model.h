// Parakeet: the model itself (front end, FastConformer encoder, CTC / RNN-T / TDT head and greedy
// decoding), read from GGUF. Text and timestamps (transcribe.h) see the model only through this
// interface, so that a CUDA implementation can stand behind it.
//
// Work is batched across utterances: encode() runs B utterances as one padded batch (each with
// its own length; padding never reaches the valid frames), and decode() steps the B greedy
// decodes in lockstep, one joint-network call and one prediction-network call per step for all
// utterances that need one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "models/parakeet/config.h"
#include "models/parakeet/tokens.h"

namespace hark::gguf {
class File;
}
namespace hark::features {
class MelSpectrogram;
}

namespace hark::parakeet {

// Where a model runs.
enum class Device { cpu, cuda };

// One token of a greedy decode.
struct Emission {
  int32_t token = 0;
  int32_t frame = 0;  // the encoder frame it was emitted on
  // Frames the decoder moved on after it: TDT the predicted duration (0 keeps the frame); RNN-T 1
  // when max_symbols_per_step forced the move, else 0; CTC 1.
  int32_t duration = 0;
};

// A fixed sequence of decoder decisions, for benchmarks (`hark bench`): random weights emit
// arbitrarily, so the cost of decoding would depend on the seed. Model::decode_pattern decodes as
// decode() does (the argmax, the joint network for every utterance still decoding and the
// prediction network for those that emit, all in lockstep) but takes each decision from here:
// - a token on each frame t with t % frames_per_token == 0, a blank everywhere else;
// - the token is 1 + t % (V - 2), or V - 1 where that is the blank: never the blank, and so
//   that CTC's merging of repeats never joins two of them;
// - TDT: the token's duration index is `duration` (1 <= duration <= frames_per_token, below the
//   number of durations), a blank moves one frame on: per frames_per_token frames, one token in
//   1 + frames_per_token - duration joint steps;
// - RNN-T: the token stays on its frame (duration 0; 1 when max_symbols_per_step is 1), the blank
//   of the next step moves on: frames_per_token + 1 joint steps per token;
// - CTC: tokens at those frames (duration 1).
// The default, one token per 320 ms, is about the rate of English speech in Parakeet's 1024
// pieces.
struct EmissionPattern {
  int frames_per_token = 4;
  int duration = 2;  // TDT only

  // Throws hark::Error unless the pattern fits the model (a vocabulary of at least 4, the limits
  // above).
  void check(const Config& config) const;
  bool emits_on(int64_t frame) const { return frame % frames_per_token == 0; }
  int32_t token(int64_t frame, const Config& config) const;
};

// The encoder's output for a batch of utterances, with what the head reads of it.
class EncodedBatch {
 public:
  virtual ~EncodedBatch() = default;
  virtual int size() const = 0;
  virtual int64_t frames(int utterance) const = 0;  // valid encoder frames T
  // [T, d_model] row-major: the last Conformer block's output.
  virtual std::vector<float> output(int utterance) const = 0;
  // [T, V] CTC logits, or [T, joint_hidden] encoder projection of a transducer's joint network.
  virtual std::vector<float> head_input(int utterance) const = 0;
  // Returns once the encoder's output is complete. On a GPU, encode() returns as soon as the
  // work is queued (so that the next batch's samples go up while this one computes); decode()
  // and the accessors above wait by themselves. For timing.
  virtual void wait() const {}
};

// A loaded model is immutable: encode() and decode() may be called from several threads at once.
// The Model must outlive the batches it hands out.
class Model {
 public:
  virtual ~Model();
  // Reads hyper-parameters, vocabulary and weights; throws hark::Error on anything missing or
  // inconsistent (names the key or tensor and the expected shape). With Device::cuda the weights
  // are copied to the GPU (hark::Error when there is none, or when hark was built without CUDA).
  static std::unique_ptr<Model> load(std::shared_ptr<const gguf::File> file,
                                     Device device = Device::cpu);

  const Config& config() const { return config_; }
  const Detokenizer& detokenizer() const { return detokenizer_; }
  virtual Device device() const { return Device::cpu; }

  // Seconds per encoder frame: hop_length × subsampling_factor / sample_rate (80 ms).
  double frame_seconds() const;
  // Feature frames L (samples / hop_length) and encoder frames T (L halved per subsampling
  // stage, rounding up) of an utterance of `samples` samples.
  int64_t feature_frames(int64_t samples) const;
  int64_t encoder_frames(int64_t samples) const;
  // The shortest utterance: two feature frames, the least the per-feature normalisation's
  // unbiased variance is defined for (transformers divides by zero below it).
  int64_t min_samples() const;
  // The longest utterance: 5000 encoder frames (400 s), transformers' max_position_embeddings and
  // the most its position table covers. Longer audio must be split first (attention is
  // quadratic in the length anyway).
  int64_t max_samples() const;

  // The front end (docs/parakeet.md §3): [L, n_mels] row-major, time-major, for mono samples at
  // sample_rate. Throws hark::Error outside [min_samples(), max_samples()] or on NaN/infinity.
  std::vector<float> features(std::span<const float> samples) const;
  // features() of each utterance of a batch, the utterances on parallel CPU threads.
  std::vector<std::vector<float>> batch_features(
      std::span<const std::span<const float>> utterances) const;

  // Features and encoder for a batch of utterances (each as features() requires; at least one).
  virtual std::unique_ptr<EncodedBatch> encode(
      std::span<const std::span<const float>> utterances) const = 0;
  // Greedy decoding (docs/parakeet.md §5) of every utterance of a batch this model encoded: the
  // emitted tokens (blanks left out) in order, per utterance.
  std::vector<std::vector<Emission>> decode(const EncodedBatch& batch) const {
    return decode_batch(batch, nullptr);
  }
  // decode() with the decisions taken from `pattern` (see EmissionPattern); throws hark::Error
  // for a pattern the model's head cannot follow.
  std::vector<std::vector<Emission>> decode_pattern(const EncodedBatch& batch,
                                                    const EmissionPattern& pattern) const;

 protected:
  explicit Model(const gguf::File& file);
  // What decode() and decode_pattern() run: with a pattern, its decisions replace the argmax's.
  // Throws hark::Error for a batch that another model encoded.
  virtual std::vector<std::vector<Emission>> decode_batch(const EncodedBatch& batch,
                                                          const EmissionPattern* pattern) const = 0;
  // Throws hark::Error unless there is at least one utterance and each fits the limits.
  void check_utterances(std::span<const std::span<const float>> utterances) const;
  // The front end features() runs (its config, window and filterbank), for a model that runs it
  // elsewhere (the CUDA model, on the GPU).
  const features::MelSpectrogram& mel() const { return *mel_; }

 private:
  Config config_;
  Detokenizer detokenizer_;
  std::unique_ptr<const features::MelSpectrogram> mel_;
};

// Batches of utterances through encode() and decode() (decode_pattern() with a pattern), in
// order: the emissions of batch i, per utterance, go to done(i, ...) on the calling thread, batch
// by batch. On a GPU, batch i + 1 is encoded while batch i decodes on a second thread: the
// decoder's short steps then run beside the encoder's products instead of after them (the CUDA
// model encodes and decodes on streams of their own). On the CPU, where each already takes every
// core, one after the other.
using BatchDone = std::function<void(size_t batch, std::vector<std::vector<Emission>> emissions)>;
void encode_and_decode(const Model& model,
                       std::span<const std::vector<std::span<const float>>> batches,
                       const EmissionPattern* pattern, const BatchDone& done);

// Model::load with Device::cuda (cuda/model_cuda.cpp; cuda/model_nocuda.cpp in a build without
// CUDA, where it throws hark::Error).
std::unique_ptr<Model> load_cuda(std::shared_ptr<const gguf::File> file);

}  // namespace hark::parakeet
