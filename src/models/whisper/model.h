// Whisper: the model itself (weights, encoder, decoder with K/V caches), read from GGUF.
// Decoding strategies (greedy, beam, timestamps, fallback, long-form) live in search.h and
// transcribe.h and see the model only through this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hark::gguf {
class File;
}

namespace hark::whisper {

struct Config {
  int n_mels = 80;
  int d_model = 0;
  int vocab_size = 0;
  int encoder_layers = 0, encoder_heads = 0, encoder_ffn = 0;
  int decoder_layers = 0, decoder_heads = 0, decoder_ffn = 0;
  int max_source_positions = 1500;                                // encoder frames per window
  int max_target_positions = 448;                                 // decoder context
  int window_frames() const { return 2 * max_source_positions; }  // mel frames per 30-s window
};

// Token ids Whisper's decoding rules need, and the language list (codes in token order).
struct Vocabulary {
  int32_t eot = -1, sot = -1, translate = -1, transcribe = -1, sot_lm = -1, sot_prev = -1;
  int32_t no_speech = -1, no_timestamps = -1, timestamp_begin = -1;
  int32_t first_language = -1;                 // id of the first language token (<|en|>)
  std::vector<std::string> languages;          // "en", "zh", ... in id order
  std::vector<int32_t> suppress_tokens;        // generation_config.suppress_tokens
  std::vector<int32_t> begin_suppress_tokens;  // generation_config.begin_suppress_tokens
  int max_initial_timestamp_index = 50;        // 1.0 s at 0.02 s per timestamp token
  bool multilingual = true;

  int32_t language_token(const std::string& code) const;  // throws hark::Error on unknown code
  bool is_timestamp(int32_t id) const { return id >= timestamp_begin; }
};

// The encoder's output for one 30-s window, plus the cross-attention K/V of every decoder layer,
// computed once and shared by every sequence decoded on that window.
class EncodedWindow {
 public:
  virtual ~EncodedWindow() = default;
  // [max_source_positions x d_model], row-major, after the encoder's final layer norm.
  virtual std::vector<float> frames() const = 0;
};

// A recording's long-form log-mel as openai computes it (its samples followed by 30 s of zeros),
// kept where the model's encoder reads it: on the host (Model::long_mel of the CPU model, or a
// caller's mel), or on the GPU (the CUDA model's). The windows of a transcription are cut from it.
class LongMel {
 public:
  virtual ~LongMel() = default;
  int64_t total_frames() const { return total_frames_; }
  int64_t content_frames() const { return content_frames_; }  // frames of audio, the rest zeros
  // Frames [seek, seek + count) of each of the n_mels rows, zero-padded to window_frames:
  // [n_mels x window_frames], on the host. Throws hark::Error unless the frames exist.
  virtual std::vector<float> window(int64_t seek, int64_t count, int window_frames) const = 0;

 protected:
  LongMel(int n_mels, int64_t total_frames, int64_t content_frames);
  void check_window(int64_t seek, int64_t count, int window_frames) const;
  int n_mels_ = 0;
  int64_t total_frames_ = 0, content_frames_ = 0;
};

// A log-mel [n_mels x total_frames] in the caller's memory, which must outlive it.
class HostLongMel : public LongMel {
 public:
  // Throws hark::Error unless `mel` is whole rows and content_frames within them.
  HostLongMel(std::span<const float> mel, int n_mels, int64_t content_frames);
  // Computes it: features::whisper_long_log_mel of the samples; throws hark::Error on
  // non-finite audio.
  HostLongMel(std::span<const float> samples, int n_mels);
  std::span<const float> values() const { return mel_; }
  std::vector<float> window(int64_t seek, int64_t count, int window_frames) const override;

 private:
  std::vector<float> owned_;
  std::span<const float> mel_;
};

// One window for Model::encode_windows: `frames` frames of `mel` from `seek`, then zeros up to
// a window.
struct MelWindow {
  const LongMel* mel = nullptr;
  int64_t seek = 0, frames = 0;
};

// Autoregressive decoding of n parallel sequences (beams, or samples) over one window.
class DecoderSession {
 public:
  virtual ~DecoderSession() = default;
  virtual int n_sequences() const = 0;
  virtual int length() const = 0;  // tokens in each sequence's K/V cache so far
  // Appends tokens[s] to sequence s (every sequence appends the same number) and returns logits
  // [n_sequences][positions.size()][vocab] flattened, for the given positions among the appended
  // ones (0 = first appended); empty `positions` means the last appended position only.
  virtual std::vector<float> advance(const std::vector<std::vector<int32_t>>& tokens,
                                     const std::vector<int>& positions = {}) = 0;
  // Beam search: afterwards sequence i continues from what sequence source[i] held.
  virtual void reorder(std::span<const int> source) = 0;
};

// Where a model runs.
enum class Device { cpu, cuda };

// What the decoder's cross-attention reads of an encoded window on the GPU
// (models/whisper/cuda/forward.h, CrossKvStorage, says what each costs and gains): every decoder
// layer's K and V in the weights' type (native), the same in INT8 (int8), the encoder's frames
// with the K and V products folded into the attention (frames), those frames in INT8 as well
// (int8_frames: an H100/H200, F16 weights), or int8_auto: INT8 K/V for a batch of fewer than
// kInt8AutoFramesFromWindows windows, INT8 frames from there (INT8 K/V everywhere INT8 frames do
// not run). The CPU model keeps native K/V.
enum class CrossKvMode { native, int8, frames, int8_frames, int8_auto };

// Windows from which int8_auto keeps a batch as INT8 frames. On an H100, large-v3's steps over
// INT8 K/V and over INT8 frames, ms: 3.15 / 4.17 at 24 sequences, 4.54 / 4.97 at 48, 4.59 / 5.00
// at 52, 4.86 / 5.14 at 56, 4.98 / 4.70 at 60, 5.32 / 4.88 at 64 (bench/RESULTS.md,
// thirty-seventh session). The frames' encoder is 0.6-0.7 ms a window faster (no K/V product), so
// at 56 the two tie on the standard workload's RTFx (1,913-1,931 / 1,917-1,924); at 60 the frames
// lead by 9 % (1,962-1,970 / 2,150-2,154), and their batch takes about 60 % of the memory.
constexpr int kInt8AutoFramesFromWindows = 60;

// The names of the command line and of HARK_CUDA_CROSS_KV: native, int8, frames, int8-frames,
// int8-auto; nullopt for any other.
std::optional<CrossKvMode> cross_kv_mode_from_name(std::string_view name);
std::string_view cross_kv_mode_name(CrossKvMode mode);
// "native, int8, frames, int8-frames or int8-auto", for messages.
std::string cross_kv_mode_names();

struct LoadOptions {
  // The GPU's cross-attention storage; unset: the environment's HARK_CUDA_CROSS_KV when set, else
  // native. Anything but native is an error on the CPU.
  std::optional<CrossKvMode> cross_kv;
};

// One window for Model::decode_greedy: its prompt (search.h's make_prompt) and how many tokens
// may be sampled after it at most.
struct GreedyJob {
  std::shared_ptr<const EncodedWindow> window;
  std::vector<int32_t> prompt;
  int sot_index = 0;  // position of <|startoftranscript|> in the prompt
  int limit = 1;      // tokens sampled at most
};

struct GreedyOutcome {
  std::vector<int32_t> tokens;  // sampled, <|endoftext|> included when the window ended
  double sum_logprob = 0;
  float no_speech_prob = 0;
};

// How long a decode_greedy call took, for benchmarks.
struct GreedyTiming {
  double prompt_ms = 0;  // all prompts, one after the other, and the first token
  double setup_ms = 0;   // the second token's step, run once before the step is captured
  double steps_ms = 0;   // the replayed steps, from the first launch to the last one's end
  int steps = 0;         // replayed steps
};

// A loaded model is immutable: encode() and start() may be called from several threads at once.
// The Model must outlive the windows and sessions it hands out (they refer to its weights).
class Model {
 public:
  virtual ~Model() = default;
  // Reads hyper-parameters, vocabulary and weights; throws hark::Error on anything missing or
  // inconsistent (names the key or tensor and the expected shape).
  // With Device::cuda the weights are copied to the GPU (hark::Error when there is none or it
  // lacks memory) and the file may be closed afterwards.
  static std::unique_ptr<Model> load(std::shared_ptr<const gguf::File> file,
                                     Device device = Device::cpu, const LoadOptions& options = {});

  virtual const Config& config() const = 0;
  virtual const Vocabulary& vocabulary() const = 0;
  // mel: [n_mels x window_frames()] row-major log-mel of one window.
  virtual std::shared_ptr<const EncodedWindow> encode(std::span<const float> mel) const = 0;
  virtual std::unique_ptr<DecoderSession> start(std::shared_ptr<const EncodedWindow> window,
                                                int n_sequences) const = 0;

  virtual Device device() const { return Device::cpu; }
  // `count` windows at once (mel: count x [n_mels x window_frames()]). The CUDA model encodes
  // them as one batch; the CPU model one after the other.
  virtual std::vector<std::shared_ptr<const EncodedWindow>> encode_batch(std::span<const float> mel,
                                                                         int count) const;
  // A recording's long-form log-mel, computed where this model runs: on the CPU (HostLongMel),
  // or on the GPU, where it stays for encode_windows. Throws hark::Error on empty or non-finite
  // audio.
  std::unique_ptr<LongMel> long_mel(std::span<const float> samples) const;
  // The windows as one encode_batch() call, cut from their long mels (which may differ); the
  // CUDA model cuts those on the GPU there, without a copy through the host.
  virtual std::vector<std::shared_ptr<const EncodedWindow>> encode_windows(
      std::span<const MelWindow> windows) const;
  // Greedy decoding of consecutive windows of one encode_batch() call (all of them, or one), in
  // their order, as one batch on the device, under Whisper's logit rules (timestamp rules when
  // `timestamps`). Gives for each what the host-driven greedy search over a DecoderSession gives.
  // The batch steps until its longest window is done; a window that is done costs the steps that
  // follow little more than its rows of the products. `exact_lengths`: each window samples
  // exactly its job's limit, <|endoftext|> ending none (benchmarks with random weights). Only
  // models with decodes_batches(); the others throw.
  virtual bool decodes_batches() const { return false; }

  virtual std::vector<GreedyOutcome> decode_greedy(std::span<const GreedyJob> jobs, bool timestamps,
                                                   bool exact_lengths = false,
                                                   GreedyTiming* timing = nullptr) const;

 protected:
  // Values per window; throws hark::Error unless `mel` holds exactly `count` >= 1 windows.
  size_t check_windows(std::span<const float> mel, int count) const;
  // long_mel() of samples that are not empty.
  virtual std::unique_ptr<LongMel> compute_long_mel(std::span<const float> samples) const;
};

// The CUDA implementation of load() (models/whisper/cuda/), or a clear error in builds
// without CUDA.
std::unique_ptr<Model> load_cuda(std::shared_ptr<const gguf::File> file,
                                 const LoadOptions& options);

}  // namespace hark::whisper
