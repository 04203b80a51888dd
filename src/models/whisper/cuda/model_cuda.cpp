// The Whisper model on the GPU: the same Model interface as the CPU model (so every search,
// fallback and long-form rule works unchanged), plus batched encoding and a batched greedy
// search whose decode step is one CUDA Graph replayed per token, with the logit rules and the
// argmax on the device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "compute/cuda/device.h"
#include "compute/cuda/graph.h"
#include "features/mel.h"
#include "features/mel_cuda.h"
#include "features/whisper_mel.h"
#include "format/gguf.h"
#include "models/whisper/config.h"
#include "models/whisper/cuda/forward.h"
#include "models/whisper/model.h"

namespace hark::whisper {

namespace {

namespace gpu = compute::cuda;
using cuda::CrossKv;
using cuda::DecoderBuffers;
using cuda::EncodedBuffers;
using cuda::EncoderBuffers;
using cuda::KvCaches;

constexpr int kMaxSequences = 256;
// Batched greedy steps between two looks at the done flags (each look waits for the GPU).
constexpr int kStepsPerCheck = 8;

// Whether a batched step's attentions skip the windows that are done (gpu::advance_search).
// HARK_CUDA_SKIP_FINISHED=0 keeps them reading their keys (to compare; read at each call).
bool finished_windows_skipped() {
  const char* value = std::getenv("HARK_CUDA_SKIP_FINISHED");
  return value == nullptr || value[0] != '0';
}

class CudaWhisper;

// The model's config, once a usable GPU is known to be there (the first thing a CudaWhisper
// does, before its members create streams), and checked against what the kernels support.
Config config_for_gpu(const gguf::File& file) {
  gpu::require_device();
  Config config = read_config(file);
  for (const auto& [what, heads] :
       {std::pair{"encoder", config.encoder_heads}, std::pair{"decoder", config.decoder_heads}}) {
    const int head_dim = heads > 0 ? config.d_model / heads : 0;
    if (head_dim <= 0 || head_dim % 8 != 0 || head_dim > 128) {
      fail("whisper on CUDA: the ", what, "'s head size ", head_dim,
           " is not a multiple of 8 up to 128 (d_model ", config.d_model, ", ", heads, " heads)");
    }
  }
  return config;
}

// Windows encoded together share their device buffers.
struct EncodedBatch {
  EncodedBuffers buffers;
};

class CudaWindow final : public EncodedWindow {
 public:
  CudaWindow(const CudaWhisper* owner, std::shared_ptr<const EncodedBatch> batch, int index)
      : owner(owner), batch(std::move(batch)), index(index) {}
  std::vector<float> frames() const override;

  const CudaWhisper* owner;
  std::shared_ptr<const EncodedBatch> batch;
  int index;
};

// A recording's long-form log-mel computed by the GPU front end and left there, time-major
// (features::DeviceMelBatch of one utterance: F32 [total_frames, n_mels]).
class DeviceLongMel final : public LongMel {
 public:
  DeviceLongMel(const CudaWhisper* owner, int n_mels, features::DeviceMelBatch features)
      : LongMel(n_mels, features.frames.at(0),
                std::max<int64_t>(features.frames.at(0) - features::kWhisperWindowFrames, 0)),
        owner(owner),
        features(std::move(features)) {}

  // On the host: the rows downloaded, then laid out mel-major.
  std::vector<float> window(int64_t seek, int64_t count, int window_frames) const override {
    check_window(seek, count, window_frames);
    std::vector<float> rows(static_cast<size_t>(count * n_mels_));
    gpu::download(features.data() + seek * n_mels_, rows.size() * sizeof(float), rows.data());
    std::vector<float> window(static_cast<size_t>(n_mels_) * window_frames, 0.0f);
    for (int64_t t = 0; t < count; ++t) {
      for (int m = 0; m < n_mels_; ++m) window[m * window_frames + t] = rows[t * n_mels_ + m];
    }
    return window;
  }

  gpu::MelWindowCut cut(int64_t seek, int64_t count, int window_frames) const {
    check_window(seek, count, window_frames);
    return {features.data() + seek * n_mels_, count};
  }

  const CudaWhisper* owner;
  features::DeviceMelBatch features;
};

// A step's device inputs, uploaded per call (the host-driven session).
struct StepInputs {
  gpu::Buffer ids, position_ids, positions;
  void upload(const std::vector<int32_t>& token_ids, const std::vector<int32_t>& token_positions,
              const std::vector<int32_t>& sequence_positions, cudaStream_t stream) {
    ids.reserve(token_ids.size() * sizeof(int32_t));
    position_ids.reserve(token_positions.size() * sizeof(int32_t));
    positions.reserve(sequence_positions.size() * sizeof(int32_t));
    gpu::upload(token_ids.data(), token_ids.size() * sizeof(int32_t), ids.data(), stream);
    gpu::upload(token_positions.data(), token_positions.size() * sizeof(int32_t),
                position_ids.data(), stream);
    gpu::upload(sequence_positions.data(), sequence_positions.size() * sizeof(int32_t),
                positions.data(), stream);
  }
};

class CudaWhisper final : public Model {
 public:
  CudaWhisper(std::shared_ptr<const gguf::File> file, const LoadOptions& options)
      : config_(config_for_gpu(*file)), vocabulary_(read_vocabulary(*file, config_)) {
    const whisper::Weights host = bind_weights(*file, config_);
    weights_ =
        cuda::upload_weights(config_, host,
                             cuda::element_for(host.decoder.layers.empty()
                                                   ? host.decoder.embed_tokens.type
                                                   : host.decoder.layers[0].ffn.fc1.weight.type));
    pass_ = std::make_unique<gpu::Pass>(weights_.element, stream_.get());
    cross_kv_policy_ = cuda::cross_kv_policy(config_, weights_, options.cross_kv);
    upload_rules();
  }

  const Config& config() const override { return config_; }
  const Vocabulary& vocabulary() const override { return vocabulary_; }
  Device device() const override { return Device::cuda; }
  const cuda::Weights& weights() const { return weights_; }

  std::shared_ptr<const EncodedWindow> encode(std::span<const float> mel) const override {
    return encode_batch(mel, 1)[0];
  }

  std::vector<std::shared_ptr<const EncodedWindow>> encode_batch(std::span<const float> mel,
                                                                 int count) const override {
    check_windows(mel, count);
    return encode_input({.host_mel = mel.data()}, count);
  }

  // Windows of this model's device mels are cut there; any other mel goes through the host.
  std::vector<std::shared_ptr<const EncodedWindow>> encode_windows(
      std::span<const MelWindow> windows) const override {
    std::vector<gpu::MelWindowCut> cuts;
    for (const MelWindow& w : windows) {
      const auto* device = dynamic_cast<const DeviceLongMel*>(w.mel);
      if (device == nullptr || device->owner != this) return Model::encode_windows(windows);
      cuts.push_back(device->cut(w.seek, w.frames, config_.window_frames()));
    }
    if (cuts.empty()) fail("whisper encoder: no windows to encode");
    return encode_input({.cuts = cuts.data()}, static_cast<int>(cuts.size()));
  }

  std::unique_ptr<DecoderSession> start(std::shared_ptr<const EncodedWindow> window,
                                        int n_sequences) const override;

 protected:
  // On the GPU front end (features/mel_cuda.h), which gives what the CPU's gives to F32
  // rounding; the features stay on the device for encode_windows. A recording whose features
  // do not fit in the GPU's memory (an hour: 184 MB, and its samples on the way) gets the CPU's.
  std::unique_ptr<LongMel> compute_long_mel(std::span<const float> samples) const override {
    try {
      return compute_long_mel_on_gpu(samples);
    } catch (const OutOfMemory& error) {
      log::warn(error.what(), "; computing the log-mel on the CPU");
      return Model::compute_long_mel(samples);
    }
  }

  std::unique_ptr<LongMel> compute_long_mel_on_gpu(std::span<const float> samples) const {
    const std::span<const float> one[] = {samples};
    features::DeviceMelBatch features;
    std::lock_guard lock(mutex_);
    if (front_end_ == nullptr) {
      front_end_ = std::make_unique<features::CudaMelSpectrogram>(
          features::MelSpectrogram(features::whisper_mel_config(config_.n_mels)));
    }
    pass_->mark("features: the samples to the GPU");
    front_end_->compute(one, stream_.get(), features, &pass_->clock(),
                        features::kWhisperWindowSamples);
    pass_->finish_stages();
    // Ready for every stream (a window read back to the host, another model's encoder); the
    // samples on the device (an hour: 230 MB) are no longer needed.
    stream_.synchronize();
    features.signal = {};
    features.utterances = {};
    return std::make_unique<DeviceLongMel>(this, config_.n_mels, std::move(features));
  }

 public:
  bool decodes_batches() const override { return true; }
  std::vector<GreedyOutcome> decode_greedy(std::span<const GreedyJob> jobs, bool timestamps,
                                           bool exact_lengths, GreedyTiming* timing) const override;

  std::shared_ptr<const CudaWindow> ours(const std::shared_ptr<const EncodedWindow>& window) const {
    auto cast = std::dynamic_pointer_cast<const CudaWindow>(window);
    if (cast == nullptr || cast->owner != this) {
      fail("whisper decoder: the window was not encoded by this model");
    }
    return cast;
  }

  // What the sequences of a session read: the one window.
  CrossKv cross_of(const CudaWindow& window) const {
    return cuda::cross_kv_of(config_, weights_.element, window.batch->buffers, window.index,
                             /*per_sequence=*/false);
  }

 private:
  void upload_rules() {
    auto existing = [this](const std::vector<int32_t>& ids) {
      std::vector<int32_t> kept;
      for (int32_t id : ids) {
        if (id >= 0 && id < config_.vocab_size) kept.push_back(id);
      }
      std::sort(kept.begin(), kept.end());
      kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
      return kept;
    };
    const std::vector<int32_t> suppress = existing(vocabulary_.suppress_tokens);
    const std::vector<int32_t> begin = existing(vocabulary_.begin_suppress_tokens);
    suppress_ = gpu::upload_vector<int32_t>(suppress);
    begin_suppress_ = gpu::upload_vector<int32_t>(begin);
    rules_.vocab_size = config_.vocab_size;
    rules_.eot = vocabulary_.eot;
    rules_.no_timestamps = vocabulary_.no_timestamps;
    rules_.timestamp_begin = vocabulary_.timestamp_begin;
    rules_.max_initial_timestamp_index = vocabulary_.max_initial_timestamp_index;
    rules_.suppress = suppress_.as<int32_t>();
    rules_.n_suppress = static_cast<int32_t>(suppress.size());
    rules_.begin_suppress = begin_suppress_.as<int32_t>();
    rules_.n_begin_suppress = static_cast<int32_t>(begin.size());
  }

  Config config_;
  Vocabulary vocabulary_;
  cuda::Weights weights_;
  cuda::CrossKvPolicy cross_kv_policy_;
  gpu::Buffer suppress_, begin_suppress_;
  gpu::GreedyRules rules_;
  // The encoder and the batched search run on the model's stream, one call at a time.
  mutable std::mutex mutex_;
  gpu::Stream stream_;
  std::unique_ptr<gpu::Pass> pass_;
  // Under mutex_: the encoder's scratch (forward.h: kept between calls only when small) and its
  // staging memory, and the front end (made at its first use). After stream_, so that they go
  // first.
  mutable EncoderBuffers scratch_;
  mutable std::unique_ptr<features::CudaMelSpectrogram> front_end_;

  std::vector<std::shared_ptr<const EncodedWindow>> encode_input(const cuda::EncoderInput& input,
                                                                 int count) const {
    auto batch = std::make_shared<EncodedBatch>();
    {
      // A small batch's scratch stays for the next call; a large one's is freed (forward.h).
      std::lock_guard lock(mutex_);
      cuda::encode(*pass_, config_, weights_, input, count, cross_kv_policy_.for_batch(count),
                   scratch_, batch->buffers);
      stream_.synchronize();
      if (!scratch_.kept) {
        for (gpu::Buffer* buffer : scratch_.buffers()) *buffer = {};
      }
    }
    std::vector<std::shared_ptr<const EncodedWindow>> windows;
    for (int i = 0; i < count; ++i) windows.push_back(std::make_shared<CudaWindow>(this, batch, i));
    return windows;
  }
};

std::vector<float> CudaWindow::frames() const {
  const Config& config = owner->config();
  const int64_t count = int64_t{config.max_source_positions} * config.d_model;
  const gpu::Element e = owner->weights().element;
  const auto* base = static_cast<const uint8_t*>(batch->buffers.frames.data());
  return gpu::download_f32(base + count * index * gpu::element_size(e), count, e);
}

// n sequences decoding one window, driven from the host (language detection, beam search,
// sampling, temperature fallback): each advance() returns the logits to the host.
class CudaSession final : public DecoderSession {
 public:
  CudaSession(const CudaWhisper& model, std::shared_ptr<const CudaWindow> window, int n)
      : model_(model),
        window_(std::move(window)),
        pass_(model.weights().element, stream_.get()),
        caches_(model.config(), model.weights().element, n, model.config().max_target_positions),
        n_(n) {}

  int n_sequences() const override { return n_; }
  int length() const override { return length_; }

  std::vector<float> advance(const std::vector<std::vector<int32_t>>& tokens,
                             const std::vector<int>& positions) override {
    const Config& config = model_.config();
    if (static_cast<int>(tokens.size()) != n_) {
      fail("whisper decoder: tokens for ", tokens.size(), " sequences, the session has ", n_);
    }
    const int steps = static_cast<int>(tokens[0].size());
    if (steps == 0) fail("whisper decoder: advance() with no tokens");
    if (length_ + steps > config.max_target_positions) {
      fail("whisper decoder: ", length_, " + ", steps,
           " tokens exceed the context of max_target_positions = ", config.max_target_positions);
    }
    std::vector<int32_t> ids, position_ids;
    for (const std::vector<int32_t>& sequence : tokens) {
      if (static_cast<int>(sequence.size()) != steps) {
        fail("whisper decoder: every sequence must append the same number of tokens (", steps,
             " and ", sequence.size(), ")");
      }
      for (int t = 0; t < steps; ++t) {
        if (sequence[t] < 0 || sequence[t] >= config.vocab_size) {
          fail("whisper decoder: token ", sequence[t], " is outside the vocabulary of ",
               config.vocab_size);
        }
        ids.push_back(sequence[t]);
        position_ids.push_back(length_ + t);
      }
    }
    std::vector<int> wanted = positions.empty() ? std::vector<int>{steps - 1} : positions;
    for (int p : wanted) {
      if (p < 0 || p >= steps)
        fail("whisper decoder: logits asked for position ", p, " of ", steps);
    }
    inputs_.upload(ids, position_ids, std::vector<int32_t>(n_, length_), stream_.get());
    cuda::decode_tokens(pass_, config, model_.weights(), caches_, 0, n_, steps, length_,
                        inputs_.ids.as<int32_t>(), inputs_.position_ids.as<int32_t>(),
                        inputs_.positions.as<int32_t>(), model_.cross_of(*window_), scratch_);
    length_ += steps;

    // The wanted rows, gathered into scratch.h, through the final norm and the output product.
    const int64_t rows = int64_t{n_} * static_cast<int64_t>(wanted.size());
    std::vector<int64_t> wanted_rows;
    for (int s = 0; s < n_; ++s) {
      for (int p : wanted) wanted_rows.push_back(int64_t{s} * steps + p);
    }
    cuda::gather_rows(scratch_.x.data(), wanted_rows, pass_.bytes(config.d_model),
                      scratch_.h.data(), stream_.get());
    logits_.reserve(sizeof(float) * rows * config.vocab_size);
    cuda::logits(pass_, config, model_.weights(), scratch_.h.data(), rows, logits_.as<float>());
    std::vector<float> host(static_cast<size_t>(rows * config.vocab_size));
    gpu::download(logits_.data(), host.size() * sizeof(float), host.data(), stream_.get());
    stream_.synchronize();
    return host;
  }

  void reorder(std::span<const int> source) override {
    if (static_cast<int>(source.size()) != n_) {
      fail("whisper decoder: reorder with ", source.size(), " sources for ", n_, " sequences");
    }
    for (int s : source) {
      if (s < 0 || s >= n_) fail("whisper decoder: reorder source ", s, " of ", n_, " sequences");
    }
    bool identity = true;
    for (int i = 0; i < n_; ++i) identity = identity && source[i] == i;
    if (identity || length_ == 0) return;
    caches_.reorder(source.data(), length_, stream_.get());
  }

 private:
  const CudaWhisper& model_;
  std::shared_ptr<const CudaWindow> window_;
  gpu::Stream stream_;
  gpu::Pass pass_;
  KvCaches caches_;
  DecoderBuffers scratch_;
  StepInputs inputs_;
  gpu::Buffer logits_;
  int n_;
  int length_ = 0;
};

std::unique_ptr<DecoderSession> CudaWhisper::start(std::shared_ptr<const EncodedWindow> window,
                                                   int n_sequences) const {
  auto window_here = ours(window);
  if (n_sequences < 1 || n_sequences > kMaxSequences) {
    fail("whisper decoder: ", n_sequences, " sequences (1 to ", kMaxSequences, " allowed)");
  }
  return std::make_unique<CudaSession>(*this, std::move(window_here), n_sequences);
}

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::vector<GreedyOutcome> CudaWhisper::decode_greedy(std::span<const GreedyJob> jobs,
                                                      bool timestamps, bool exact_lengths,
                                                      GreedyTiming* timing) const {
  const int batch = static_cast<int>(jobs.size());
  if (batch == 0) return {};
  // The windows must follow each other in one encode_batch() call (checked below): the step
  // reads their cross-attention K/V at a fixed stride from the first one's.
  auto first = ours(jobs[0].window);
  const int first_window = first->index;
  int steps = 0, longest_prompt = 0;
  for (int j = 0; j < batch; ++j) {
    const GreedyJob& job = jobs[j];
    auto window = ours(job.window);
    if (window->batch != first->batch || window->index != first_window + j) {
      fail("whisper: decode_greedy needs consecutive windows of one encode_batch() call");
    }
    const int prompt = static_cast<int>(job.prompt.size());
    // Each sampled token but the last is fed back (search.cpp: sample_limit).
    if (prompt == 0 || prompt > config_.max_target_positions || job.sot_index < 0 ||
        job.sot_index >= prompt || job.limit < 1 ||
        prompt + job.limit - 1 > config_.max_target_positions) {
      fail("whisper: invalid greedy job (", prompt, " prompt tokens, limit ", job.limit, ")");
    }
    for (int32_t id : job.prompt) {
      if (id < 0 || id >= config_.vocab_size) fail("whisper decoder: token ", id, " out of range");
    }
    steps = std::max(steps, job.limit);
    longest_prompt = std::max(longest_prompt, prompt);
  }
  std::lock_guard lock(mutex_);
  const cudaStream_t stream = stream_.get();
  gpu::Pass& pass = *pass_;
  const int vocab = config_.vocab_size;

  // Slots run past their own limit when others go on; the cache and the position table have
  // room for that, and the extra tokens are dropped below.
  KvCaches caches(config_, weights_.element, batch, longest_prompt + steps);
  DecoderBuffers scratch;
  gpu::Buffer logits_buffer(sizeof(float) * int64_t{batch} * vocab);
  gpu::Buffer history(sizeof(int32_t) * batch * steps), count(sizeof(int32_t) * batch), done(batch),
      sum_logprob(sizeof(double) * batch), next(sizeof(int32_t) * batch);
  gpu::check(cudaMemsetAsync(count.data(), 0, count.bytes(), stream), "clear");
  gpu::check(cudaMemsetAsync(done.data(), 0, done.bytes(), stream), "clear");
  gpu::check(cudaMemsetAsync(sum_logprob.data(), 0, sum_logprob.bytes(), stream), "clear");
  std::vector<int32_t> limits(batch);
  for (int j = 0; j < batch; ++j) limits[j] = jobs[j].limit;
  const gpu::Buffer limits_dev = gpu::upload_vector(limits, stream);
  gpu::GreedyState state{history.as<int32_t>(),    steps,
                         count.as<int32_t>(),      done.as<uint8_t>(),
                         sum_logprob.as<double>(), limits_dev.as<int32_t>()};
  gpu::GreedyRules rules = rules_;
  rules.timestamps = timestamps;
  rules.eot_ends = !exact_lengths;

  // The prompts, in as few decoder passes as they allow: each run of consecutive jobs whose
  // prompts have one length (in the batched mode, usually all of them) is one pass over its
  // sequences, which read their windows' cross-attention K/V at the batch's stride. Each prompt's
  // rows at <|startoftranscript|> and at its end are gathered, and all their logits computed at
  // once: the end rows start the search, the others give no_speech_prob.
  const auto prompt_start = std::chrono::steady_clock::now();
  StepInputs inputs;
  const size_t row_bytes = pass.bytes(config_.d_model);
  const EncodedBuffers& encoded = first->batch->buffers;
  gpu::Buffer selected(2 * row_bytes * batch);  // per job: <|startoftranscript|> row, end row
  for (int first_job = 0; first_job < batch;) {
    const int prompt = static_cast<int>(jobs[first_job].prompt.size());
    int end_job = first_job + 1;
    while (end_job < batch && static_cast<int>(jobs[end_job].prompt.size()) == prompt) ++end_job;
    const int run = end_job - first_job;
    std::vector<int32_t> ids, position_ids;
    std::vector<int64_t> rows;
    for (int i = 0; i < run; ++i) {
      const GreedyJob& job = jobs[first_job + i];
      ids.insert(ids.end(), job.prompt.begin(), job.prompt.end());
      for (int p = 0; p < prompt; ++p) position_ids.push_back(p);
      rows.push_back(int64_t{i} * prompt + job.sot_index);
      rows.push_back(int64_t{i} * prompt + prompt - 1);
    }
    inputs.upload(ids, position_ids, std::vector<int32_t>(run, 0), stream);
    const CrossKv cross =
        cuda::cross_kv_of(config_, weights_.element, encoded, first_window + first_job,
                          /*per_sequence=*/true);
    cuda::decode_tokens(pass, config_, weights_, caches, first_job, run, prompt, 0,
                        inputs.ids.as<int32_t>(), inputs.position_ids.as<int32_t>(),
                        inputs.positions.as<int32_t>(), cross, scratch);
    cuda::gather_rows(scratch.x.data(), rows, row_bytes,
                      selected.as<uint8_t>() + 2 * row_bytes * first_job, stream);
    first_job = end_job;
  }
  scratch.cross = {};  // INT8 cross K/V dequantised for the prompts: the steps read them as stored
  const size_t row_floats = sizeof(float) * vocab;
  gpu::Buffer prompt_logits(2 * row_floats * batch);
  cuda::logits(pass, config_, weights_, selected.data(), 2 * batch, prompt_logits.as<float>());
  gpu::check(
      cudaMemcpy2DAsync(logits_buffer.data(), row_floats, prompt_logits.as<uint8_t>() + row_floats,
                        2 * row_floats, row_floats, batch, cudaMemcpyDeviceToDevice, stream),
      "prompt logits");
  // The no-speech probabilities at <|startoftranscript|>, computed where the logits are: on the
  // host, a batch of 64 rows of large-v3's vocabulary took tens of milliseconds of exponentials.
  std::vector<GreedyOutcome> outcomes(batch);
  if (vocabulary_.no_speech >= 0 && vocabulary_.no_speech < vocab) {
    gpu::Buffer no_speech(sizeof(float) * batch);
    gpu::token_probability(prompt_logits.as<float>(), 2 * int64_t{vocab}, batch, vocab,
                           vocabulary_.no_speech, no_speech.as<float>(), stream);
    std::vector<float> probabilities(batch);
    gpu::download(no_speech.data(), no_speech.bytes(), probabilities.data(), stream);
    stream_.synchronize();
    for (int j = 0; j < batch; ++j) outcomes[j].no_speech_prob = probabilities[j];
  }
  std::vector<int32_t> positions(batch), lengths(batch);
  for (int j = 0; j < batch; ++j) {
    positions[j] = static_cast<int32_t>(jobs[j].prompt.size());
    lengths[j] = positions[j] + 1;
  }
  gpu::Buffer positions_dev = gpu::upload_vector<int32_t>(positions, stream);
  gpu::Buffer lengths_dev = gpu::upload_vector<int32_t>(lengths, stream);
  const int32_t* cross_lengths = cuda::frame_lengths(config_, batch, scratch, stream);
  const CrossKv cross = cuda::cross_kv_of(config_, weights_.element, encoded, first_window, true);
  // What the step's attentions read: the lengths, 0 for the windows that are done.
  gpu::Buffer live_lengths(sizeof(int32_t) * batch), live_cross_lengths(sizeof(int32_t) * batch);
  const bool skip_finished = finished_windows_skipped();
  auto advance = [&](int by) {
    gpu::advance_search(positions_dev.as<int32_t>(), lengths_dev.as<int32_t>(), by,
                        done.as<uint8_t>(), skip_finished, cross_lengths, batch,
                        live_lengths.as<int32_t>(), live_cross_lengths.as<int32_t>(), stream);
  };

  // The first token comes from the prompts' logits; every further one from a replayed step.
  gpu::greedy_step(rules, logits_buffer.as<float>(), batch, state, next.as<int32_t>(), stream);
  advance(0);
  auto step = [&] {
    cuda::decode_step(pass, config_, weights_, caches, batch, next.as<int32_t>(),
                      positions_dev.as<int32_t>(), live_lengths.as<int32_t>(),
                      live_cross_lengths.as<int32_t>(), cross, scratch);
    cuda::logits(pass, config_, weights_, scratch.x.data(), batch, logits_buffer.as<float>());
    pass.mark("greedy search");
    gpu::greedy_step(rules, logits_buffer.as<float>(), batch, state, next.as<int32_t>(), stream);
    advance(1);
  };
  stream_.synchronize();
  if (timing) timing->prompt_ms = milliseconds_since(prompt_start);

  int taken = 1;  // tokens chosen so far
  if (steps > 1) {
    const auto setup_start = std::chrono::steady_clock::now();
    step();  // once outside the capture: cuBLASLt picks its kernels, modules load
    ++taken;
    gpu::Graph graph;
    graph.capture(stream, step);
    stream_.synchronize();
    if (timing) timing->setup_ms = milliseconds_since(setup_start);

    const auto steps_start = std::chrono::steady_clock::now();
    std::vector<uint8_t> done_host(batch);
    int replayed = 0;
    while (taken < steps) {
      // While profiling, the step runs eagerly, so that its stages can be timed.
      if (pass.profiling()) {
        step();
      } else {
        graph.launch(stream);
      }
      ++taken;
      ++replayed;
      if (taken % kStepsPerCheck == 0) {
        gpu::download(done.data(), batch, done_host.data(), stream);
        stream_.synchronize();
        if (std::all_of(done_host.begin(), done_host.end(), [](uint8_t d) { return d != 0; })) {
          break;
        }
      }
    }
    stream_.synchronize();
    pass.finish_stages();
    if (timing) {
      timing->steps_ms = milliseconds_since(steps_start);
      timing->steps = replayed;
    }
  }

  std::vector<int32_t> history_host(static_cast<size_t>(batch) * steps), count_host(batch);
  std::vector<double> sum_host(batch);
  gpu::download(history.data(), history.bytes(), history_host.data());
  gpu::download(count.data(), count.bytes(), count_host.data());
  gpu::download(sum_logprob.data(), sum_logprob.bytes(), sum_host.data());
  for (int j = 0; j < batch; ++j) {
    const int32_t* row = history_host.data() + static_cast<size_t>(j) * steps;
    outcomes[j].tokens.assign(row, row + count_host[j]);
    outcomes[j].sum_logprob = sum_host[j];
  }
  return outcomes;
}

}  // namespace

std::unique_ptr<Model> load_cuda(std::shared_ptr<const gguf::File> file,
                                 const LoadOptions& options) {
  return std::make_unique<CudaWhisper>(std::move(file), options);
}

}  // namespace hark::whisper
