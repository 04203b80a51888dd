// Parakeet on the GPU behind the same Model interface as the CPU model (model.cpp): the front end
// (features/mel_cuda.h) and the encoder run as one padded batch on the device (forward_cuda.cpp);
// greedy transducer decoding steps every utterance in lockstep entirely on the device (the joint
// network over a look-ahead window of frames, the decisions by the rules the CPU model uses in
// greedy.h, the prediction network), one step captured into a CUDA Graph and replayed, the host
// looking only every few steps whether any utterance still decodes.
#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "base/error.h"
#include "compute/cuda/device.h"
#include "compute/cuda/graph.h"
#include "features/mel_cuda.h"
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

// Frames the joint network evaluates per utterance and decoding step. A step's cost hardly
// depends on it: the step is a dozen launches, and the joint's head product reads the same
// weights for batch · 8 rows as for batch rows. Blanks inside the window cost nothing more
// (they leave the prediction as it is), so a step ends at the next token: with one token per
// ~4 frames (320 ms, speech in Parakeet's 1024 pieces) 8 frames usually reach it, and silence
// passes at 8 frames a step. A wider window only gains in long silences, for more rows of
// logits (batch · window · (V + durations) F32 values).
constexpr int kWindow = 8;

// Decoding steps replayed between two looks at whether any utterance still decodes: each look
// waits for the GPU, and once all are done, the steps left of the chunk change nothing.
constexpr int kStepsPerCheck = 8;

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
    return rows(encoded.output.data(), output_cols, output_cols, element, utterance);
  }
  std::vector<float> head_input(int utterance) const override {
    return rows(encoded.head.data(), head_cols, encoded.head_stride,
                head_f32 ? gpu::Element::f32 : element, utterance);
  }
  void wait() const override { ready.synchronize(); }
  // Its buffers go back to the pool on the model's encoder stream, once the work that writes them
  // is done (the Model outlives its batches, model.h).
  ~CudaBatch() override {
    try {
      ready.synchronize();
    } catch (...) {  // an error of the encoder's work: the memory goes back all the same
    }
  }

  cuda::Encoded encoded;
  gpu::Event ready;  // recorded after the encoder's last work for the batch
  gpu::Element element = gpu::Element::f32;
  int64_t output_cols = 0, head_cols = 0;
  bool head_f32 = false;        // CTC logits are F32 whatever the element type
  const void* owner = nullptr;  // the model that encoded it

 private:
  // The first `cols` values of each of the utterance's rows (of `stride` values: a padded head's
  // logits have more).
  std::vector<float> rows(const void* base, int64_t cols, int64_t stride, gpu::Element e,
                          int utterance) const {
    ready.synchronize();
    const int64_t first = static_cast<int64_t>(utterance) * encoded.padded_frames * stride;
    const auto* at = static_cast<const uint8_t*>(base) + first * gpu::element_size(e);
    const int64_t count = frames(utterance);
    std::vector<float> values = gpu::download_f32(at, count * stride, e);
    // Row 0 is in place already; row t moves forward from t · stride to t · cols.
    for (int64_t t = 1; t < count && stride != cols; ++t) {
      std::copy_n(values.begin() + t * stride, cols, values.begin() + t * cols);
    }
    values.resize(static_cast<size_t>(count * cols));
    return values;
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
    encode_pass_ = std::make_unique<gpu::Pass>(weights_.element, encode_stream_.get());
    decode_pass_ = std::make_unique<gpu::Pass>(weights_.element, decode_stream_.get());
    cuda::precompute_input_gates(*decode_pass_, weights_);
  }

  Device device() const override { return Device::cuda; }

  std::unique_ptr<EncodedBatch> encode(
      std::span<const std::span<const float>> utterances) const override {
    check_utterances(utterances);
    // Feature frames L and encoder frames T of each utterance.
    std::vector<int64_t> lengths, frames;
    for (std::span<const float> samples : utterances) {
      lengths.push_back(feature_frames(static_cast<int64_t>(samples.size())));
      frames.push_back(encoder_frames(static_cast<int64_t>(samples.size())));
    }
    auto batch = std::make_unique<CudaBatch>();
    batch->element = weights_.element;
    batch->output_cols = config().d_model;
    batch->head_f32 = config().head == Head::ctc;
    batch->head_cols = batch->head_f32 ? config().vocab_size : config().joint_hidden;
    batch->owner = this;
    {
      std::lock_guard lock(encode_mutex_);
      // The front end on the GPU, the whole batch at once (features/mel_cuda.h), as
      // Model::features computes it: the STFT's last frame of each utterance is padding (zeros),
      // the encoder reads the L before it.
      features::DeviceMelBatch& features = features_;
      encode_pass_->mark("features: staging the samples");
      front_end_.compute(utterances, encode_stream_.get(), features, &encode_pass_->clock());
      for (size_t b = 0; b < lengths.size(); ++b) {
        if (features.frames[b] != lengths[b] + 1) {
          fail("Parakeet front end: ", features.frames[b], " STFT frames for ",
               utterances[b].size(), " samples, expected ", lengths[b] + 1);
        }
      }
      cuda::encode(*encode_pass_, config(), weights_,
                   cuda::Features{features.data(), features.padded_frames, lengths}, frames,
                   encoder_scratch_, batch->encoded);
      // No wait here: the caller may already copy up the next batch's samples (the front end's
      // staging waits for this batch's uploads, the stream orders the rest). The scratch stays
      // for the next call: freeing device memory waits for the whole device.
      batch->ready.record(encode_stream_.get());
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
    if (config().head == Head::ctc) {
      encoded->wait();
      return decode_ctc(encoded->encoded, pattern);
    }
    return decode_transducer(*encoded, pattern);
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

  // docs/parakeet.md §5.2 (RNN-T) and §5.3 (TDT): every step runs the joint network over a
  // window of each utterance's frames, takes the decisions (transducer_decide) and feeds the
  // tokens to the prediction network, all on the device; finished utterances stay as they are.
  std::vector<std::vector<Emission>> decode_transducer(const CudaBatch& batch,
                                                       const EmissionPattern* pattern) const {
    std::lock_guard lock(decode_mutex_);
    const cuda::Encoded& encoded = batch.encoded;
    gpu::Pass& pass = *decode_pass_;
    const cudaStream_t stream = decode_stream_.get();
    batch.ready.make_wait(stream);
    pass.mark("transducer search");
    cuda::DecoderBuffers& buffers = decoder_buffers_;
    cuda::start_prediction(pass, config(), weights_, encoded.batch, kWindow, buffers);
    cuda::Search& search = search_;
    cuda::start_search(pass, config(), encoded, pattern, search);
    auto step = [&] { cuda::search_step(pass, config(), weights_, encoded, search, buffers); };
    // Once outside the capture: cuBLASLt picks its kernels and the pass sizes its scratch, so
    // that the capture allocates nothing. The capture then only updates the last decode's graph
    // when the launches are the same (another batch's encoder rows).
    step();
    gpu::Graph& graph = step_graph_;
    graph.capture(stream, step);
    // Every step takes at least one decision for each utterance still decoding, and the search
    // stops an utterance after max_symbols_per_step · T of them.
    const int64_t most_steps = int64_t{search.capacity};
    int64_t taken = 1;
    std::vector<int32_t> count;
    while (cuda::still_decoding(pass, search, count) > 0) {
      if (taken > most_steps) fail("Parakeet decode: still decoding after ", taken, " steps");
      for (int i = 0; i < kStepsPerCheck; ++i) graph.launch(stream);
      taken += kStepsPerCheck;
    }
    std::vector<std::vector<Emission>> emissions = cuda::take_emissions(pass, search, count);
    pass.finish_stages();
    return emissions;
  }

  cuda::Weights weights_;
  // The encoder (with the front end) and the decoder each have a stream, a pass and a lock of
  // their own: while one thread decodes a batch, another can encode the next (encode_and_decode,
  // model.h), the decoder's short steps going ahead of the encoder's products on the GPU.
  gpu::Stream encode_stream_, decode_stream_{gpu::Stream::Priority::high};
  std::unique_ptr<gpu::Pass> encode_pass_, decode_pass_;
  mutable std::mutex encode_mutex_, decode_mutex_;
  // Under encode_mutex_: the encoder's scratch, and the front end (Model::mel() on the GPU).
  mutable cuda::EncoderBuffers encoder_scratch_;
  mutable features::CudaMelSpectrogram front_end_{mel()};
  mutable features::DeviceMelBatch features_;
  // Under decode_mutex_: the transducer search's buffers and step graph, kept from one decode to
  // the next (a clip's decode would spend more on allocating them than on its steps).
  mutable cuda::DecoderBuffers decoder_buffers_;
  mutable cuda::Search search_;
  mutable gpu::Graph step_graph_;
};

}  // namespace

std::unique_ptr<Model> load_cuda(std::shared_ptr<const gguf::File> file) {
  return std::make_unique<CudaModel>(std::move(file));
}

}  // namespace hark::parakeet
