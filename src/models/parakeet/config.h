// Parakeet's hyper-parameters (docs/parakeet.md §1), read from and written to the parakeet.* GGUF
// keys (docs/formats.md). A FastConformer encoder feeds one of three heads: CTC, RNN-T, or TDT
// (an RNN-T whose joint network also predicts how many encoder frames to skip).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hark::gguf {
class File;
class Writer;
}  // namespace hark::gguf

namespace hark::parakeet {

enum class Head { ctc, rnnt, tdt };

std::string_view head_name(Head head);       // "ctc", "rnnt", "tdt"
Head head_from_name(std::string_view name);  // throws hark::Error on anything else

struct Config {
  Head head = Head::ctc;
  int vocab_size = 0;  // V: SentencePiece pieces + the blank
  int blank_id = 0;    // CTC: config.json pad_token_id; RNN-T/TDT: blank_token_id

  // Front end (transformers' ParakeetFeatureExtractor); hark implements exactly these values
  // besides n_mels, so they are stored to be checked, not to be varied.
  int n_mels = 80;
  int sample_rate = 16000;
  int n_fft = 512;
  int win_length = 400;
  int hop_length = 160;
  float preemphasis = 0.97f;

  // Encoder.
  int d_model = 0;
  int layers = 0;
  int heads = 0;
  int ffn_dim = 0;
  int conv_kernel = 9;           // depthwise kernel of the conv module
  int subsampling_factor = 8;    // a power of two: log2 of it strided conv stages
  int subsampling_channels = 0;  // C
  bool attention_bias = true;    // biases of q/k/v/o and of the feed-forward linears
  bool conv_bias = true;         // biases of the conv module's three convolutions
  bool scale_input = false;      // multiply the subsampling output by sqrt(d_model)
  float layer_norm_eps = 1e-5f;
  float batch_norm_eps = 1e-5f;  // of the conv module's BatchNorm, folded by the loader

  // Transducers (RNN-T and TDT) only; zero / empty for CTC.
  int predictor_hidden = 0;      // H: embedding, LSTM and the prediction projection
  int predictor_layers = 0;      // LSTM layers
  int joint_hidden = 0;          // width of the joint network (= H in every checkpoint)
  std::vector<int> durations;    // TDT: frame advance per duration logit ([0, 1, 2, 3, 4])
  int max_symbols_per_step = 0;  // RNN-T: tokens emitted on one frame before moving on

  bool is_transducer() const { return head != Head::ctc; }
  int head_dim() const { return d_model / heads; }
  int subsampling_stages() const;  // log2(subsampling_factor)
  int subsampled_mels() const;     // frequency bins after the strided stages (80 -> 10)
  // Outputs of the last layer: V for CTC and RNN-T, V + durations for TDT.
  int head_outputs() const { return vocab_size + static_cast<int>(durations.size()); }
};

// Reads the parakeet.* keys; throws hark::Error naming the file and the key that is missing or
// invalid (or inconsistent: d_model not divisible by heads, a blank outside the vocabulary, an
// architecture other than parakeet).
Config read_config(const gguf::File& file);

// general.architecture and the parakeet.* keys of `config`. Throws hark::Error when `config` is
// not one read_config would accept, so that no writer produces a file the reader refuses.
void write_config(gguf::Writer& writer, const Config& config);

// The checks read_config applies, for configs built in code (converter, synthetic models);
// `where` starts each message.
void validate(const Config& config, const std::string& where);

}  // namespace hark::parakeet
