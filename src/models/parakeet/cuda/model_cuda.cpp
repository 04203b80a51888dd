// Parakeet on the GPU behind the same Model interface as the CPU model (model.cpp): the encoder
// runs as one padded batch on the device (forward_cuda.cpp); greedy decoding steps every
// utterance in lockstep, with the joint and prediction networks and their argmax on the device
// and the decisions taken on the host by the rules the CPU model uses (greedy.h).
#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "format/gguf.h"
#include "models/parakeet/cuda/forward.h"
#include "models/parakeet/greedy.h"
#include "models/parakeet/model.h"
#include "models/parakeet/weights.h"

namespace hark::parakeet {

namespace {

namespace gpu = compute::cuda;

// The kernels' limit on the attention's head size.
constexpr int kMaxHeadDim = 128;

// The file, once a usable GPU is known to be there: the first thing a CudaModel does, before its
// members create streams.
const gguf::File& on_gpu(const gguf::File& file) {
  gpu::require_device();
  return file;
}

class CudaBatch final : public EncodedBatch {
 public:
  int size() const override { return encoded.batch; }
  int64_t frames(int utterance) const override { return encoded.frames.at(utterance); }
  std::vector<float> output(int utterance) const override {
    return rows(encoded.output.data(), output_cols, element, utterance);
  }
  std::vector<float> head_input(int utterance) const override {
    return rows(encoded.head.data(), head_cols, head_f32 ? gpu::Element::f32 : element, utterance);
  }

  cuda::Encoded encoded;
  gpu::Element element = gpu::Element::f32;
  int64_t output_cols = 0, head_cols = 0;
  bool head_f32 = false;        // CTC logits are F32 whatever the element type
  const void* owner = nullptr;  // the model that encoded it

 private:
  std::vector<float> rows(const void* base, int64_t cols, gpu::Element e, int utterance) const {
    const int64_t first = static_cast<int64_t>(utterance) * encoded.padded_frames * cols;
    const auto* at = static_cast<const uint8_t*>(base) + first * gpu::element_size(e);
    return gpu::download_f32(at, frames(utterance) * cols, e);
  }
};

class CudaModel final : public Model {
 public:
  explicit CudaModel(std::shared_ptr<const gguf::File> file) : Model(on_gpu(*file)) {
    if (config().head_dim() > kMaxHeadDim) {
      fail("Parakeet on CUDA: the attention's head size ", config().head_dim(), " is above ",
           kMaxHeadDim, " (d_model ", config().d_model, ", ", config().heads, " heads)");
    }
    // The host weights are views into the file, needed only while they are copied.
    const Weights host = bind_weights(*file, config());
    weights_ = cuda::upload_weights(host, cuda::element_for(host));
    pass_ = std::make_unique<gpu::Pass>(weights_.element, stream_.get());
  }

  Device device() const override { return Device::cuda; }

  std::unique_ptr<EncodedBatch> encode(
      std::span<const std::span<const float>> utterances) const override {
    check_utterances(utterances);
    // The front end runs on the CPU, the utterances on parallel threads, and its output is
    // uploaded. It is the next thing to move to the GPU: 64 utterances of 20 s take 219 ms on
    // the H200 machine's 16 cores (336 ms one utterance after another), as long as the encoder.
    const std::vector<std::vector<float>> features_of = batch_features(utterances);
    std::vector<int64_t> frames;
    for (std::span<const float> samples : utterances) {
      frames.push_back(encoder_frames(static_cast<int64_t>(samples.size())));
    }
    auto batch = std::make_unique<CudaBatch>();
    batch->element = weights_.element;
    batch->output_cols = config().d_model;
    batch->head_f32 = config().head == Head::ctc;
    batch->head_cols = batch->head_f32 ? config().vocab_size : config().joint_hidden;
    batch->owner = this;
    {
      // The scratch is freed afterwards, as Whisper's: decoding needs the memory more than the
      // next encode needs the allocations saved.
      std::lock_guard lock(mutex_);
      cuda::EncoderBuffers scratch;
      cuda::encode(*pass_, config(), weights_, features_of, frames, scratch, batch->encoded);
      stream_.synchronize();
    }
    return batch;
  }

 private:
  std::vector<std::vector<Emission>> decode_batch(const EncodedBatch& batch,
                                                  const EmissionPattern* pattern) const override {
    const auto* encoded = dynamic_cast<const CudaBatch*>(&batch);
    if (encoded == nullptr || encoded->owner != this) {
      fail("Parakeet decode: the batch was not encoded by this model");
    }
    return config().head == Head::ctc ? decode_ctc(encoded->encoded, pattern)
                                      : decode_transducer(encoded->encoded, pattern);
  }

  // docs/parakeet.md §5.1: the argmax of every frame came with the encoder.
  std::vector<std::vector<Emission>> decode_ctc(const cuda::Encoded& encoded,
                                                const EmissionPattern* pattern) const {
    std::vector<int32_t> tokens(static_cast<size_t>(encoded.batch * encoded.padded_frames));
    gpu::download(encoded.frame_tokens.data(), tokens.size() * sizeof(int32_t), tokens.data());
    std::vector<std::vector<Emission>> result;
    for (int b = 0; b < encoded.batch; ++b) {
      const std::span<const int32_t> frames(tokens.data() + b * encoded.padded_frames,
                                            static_cast<size_t>(encoded.frames[b]));
      result.push_back(collapse_ctc(frames, config(), pattern));
    }
    return result;
  }

  // docs/parakeet.md §5.2 (RNN-T) and §5.3 (TDT): each step runs the joint network for the
  // utterances still decoding and the prediction network for those that emitted a token; only
  // the decisions (two numbers per utterance) come back to the host.
  std::vector<std::vector<Emission>> decode_transducer(const cuda::Encoded& encoded,
                                                       const EmissionPattern* pattern) const {
    const bool tdt = config().head == Head::tdt;
    const int batch = encoded.batch;
    std::lock_guard lock(mutex_);
    cuda::DecoderBuffers buffers;
    cuda::start_prediction(*pass_, config(), weights_, batch, buffers);
    TransducerSearch search(config(), encoded.frames, pattern);
    std::vector<int32_t> rows, ids(batch);
    while (search.next_step()) {
      const std::vector<int64_t>& active = search.active();
      const auto n = static_cast<int64_t>(active.size());
      rows.resize(static_cast<size_t>(2 * n));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t b = active[i];
        rows[i] = static_cast<int32_t>(b * encoded.padded_frames + search.frame(b));
        rows[n + i] = static_cast<int32_t>(b);
      }
      const std::vector<int32_t> decisions =
          cuda::joint(*pass_, config(), weights_, encoded, rows, buffers);
      std::fill(ids.begin(), ids.end(), -1);
      bool emitted = false;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t b = active[i];
        ids[b] = search.decide(b, decisions[i], tdt ? decisions[n + i] : 0);
        emitted = emitted || ids[b] >= 0;
      }
      if (emitted) cuda::predict(*pass_, config(), weights_, ids, buffers);
    }
    return search.take_emissions();
  }

  cuda::Weights weights_;
  // The encoder and the decoding steps run on the model's stream, one call at a time.
  mutable std::mutex mutex_;
  gpu::Stream stream_;
  std::unique_ptr<gpu::Pass> pass_;
};

}  // namespace

std::unique_ptr<Model> load_cuda(std::shared_ptr<const gguf::File> file) {
  return std::make_unique<CudaModel>(std::move(file));
}

}  // namespace hark::parakeet
