// Writers for the parts of a NeMo `.nemo` archive, and a whole archive made from a Hugging Face
// Parakeet directory (tiny_parakeet.h's or tests/data/parakeet's): the same model, laid out as
// NeMo saves it, so that the two routes of `hark convert` can be compared file for file.
//
// Each writer follows the format's specification, independently of hark's readers: tar (ustar
// headers, GNU long names, pax paths), ZIP (stored entries, data aligned through the local extra
// field as torch.save does, ZIP64 on request), the pickle torch.save writes for a state dict
// (protocol 2), the SentencePiece ModelProto, and model_config.yaml as PyYAML writes it. The NeMo
// names are transformers' names mapped back (convert_nemo_to_hf.py read in reverse).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "format/safetensors.h"
#include "support/tiny_whisper.h"  // read_text

namespace hark::testing {

using Bytes = std::vector<uint8_t>;

inline void append(Bytes& out, const std::string& text) {
  out.insert(out.end(), text.begin(), text.end());
}
inline void append(Bytes& out, const Bytes& bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}
inline void put_le(Bytes& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

// ---------------------------------------------------------------------------------------------
// tar

struct TarFile {
  std::string name;
  Bytes contents;
  char type = '0';
};

struct TarOptions {
  bool gnu_long_names = true;  // names over 100 bytes: GNU 'L' entries, else pax 'x' headers
};

inline Bytes tar_header(const std::string& name, uint64_t size, char type,
                        const std::string& prefix = "") {
  Bytes header(512, 0);
  std::memcpy(header.data(), name.data(), std::min<size_t>(name.size(), 100));
  auto octal = [&](size_t offset, size_t width, uint64_t value) {
    std::string digits(width - 1, '0');
    for (size_t i = width - 1; i-- > 0; value /= 8) digits[i] = static_cast<char>('0' + value % 8);
    std::memcpy(header.data() + offset, digits.data(), width - 1);
  };
  octal(100, 8, 0644);
  octal(108, 8, 0);
  octal(116, 8, 0);
  octal(124, 12, size);
  octal(136, 12, 1700000000);
  header[156] = static_cast<uint8_t>(type);
  std::memcpy(header.data() + 257,
              "ustar\0"
              "00",
              8);
  std::memcpy(header.data() + 345, prefix.data(), std::min<size_t>(prefix.size(), 155));
  std::memset(header.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (uint8_t byte : header) sum += byte;
  char checksum[8];
  std::snprintf(checksum, sizeof checksum, "%06o", sum);
  std::memcpy(header.data() + 148, checksum, 7);  // six digits, NUL, then the space stays
  return header;
}

inline void tar_pad(Bytes& out) {
  out.resize((out.size() + 511) / 512 * 512, 0);
}

inline Bytes write_tar(const std::vector<TarFile>& files, const TarOptions& options = {}) {
  Bytes out;
  for (const TarFile& file : files) {
    if (file.name.size() > 100) {
      if (options.gnu_long_names) {
        const std::string name = file.name + '\0';
        append(out, tar_header("././@LongLink", name.size(), 'L'));
        append(out, name);
      } else {
        std::string record = " path=" + file.name + "\n";
        size_t length = record.size();
        while (std::to_string(length).size() + record.size() != length) {
          length = std::to_string(length).size() + record.size();
        }
        record = std::to_string(length) + record;
        append(out, tar_header("PaxHeader/x", record.size(), 'x'));
        append(out, record);
      }
      tar_pad(out);
    }
    append(out, tar_header(file.name.substr(0, 100), file.contents.size(), file.type));
    append(out, file.contents);
    tar_pad(out);
  }
  out.resize(out.size() + 1024, 0);  // two zero blocks end the archive
  return out;
}

inline Bytes gzip(const Bytes& data) {
  z_stream stream{};
  deflateInit2(&stream, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  Bytes out(deflateBound(&stream, data.size()) + 64);
  stream.next_in = const_cast<Bytef*>(data.data());
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

// ---------------------------------------------------------------------------------------------
// ZIP (stored entries)

struct ZipFile {
  std::string name;
  Bytes contents;
  uint16_t method = 0;  // claimed compression method (the bytes are stored as they are)
};

inline Bytes write_zip(const std::vector<ZipFile>& files, bool zip64) {
  Bytes out, directory;
  const uint32_t saturated = 0xffffffff;
  for (const ZipFile& file : files) {
    const uint64_t offset = out.size();
    // torch.save aligns each entry's data to 64 bytes with a padding extra field (id 0x4646).
    const size_t unpadded = offset + 30 + file.name.size() + 4;
    const size_t padding = (64 - unpadded % 64) % 64;
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, file.contents.data(), static_cast<uInt>(file.contents.size())));
    put_le(out, 0x04034b50, 4);
    put_le(out, 20, 2);
    put_le(out, 0, 2);
    put_le(out, file.method, 2);
    put_le(out, 0, 4);  // time, date
    put_le(out, crc, 4);
    put_le(out, file.contents.size(), 4);
    put_le(out, file.contents.size(), 4);
    put_le(out, file.name.size(), 2);
    put_le(out, 4 + padding, 2);
    append(out, file.name);
    put_le(out, 0x4646, 2);
    put_le(out, padding, 2);
    out.resize(out.size() + padding, 'Z');
    append(out, file.contents);

    Bytes extra;
    if (zip64) {
      put_le(extra, 0x0001, 2);
      put_le(extra, 24, 2);
      put_le(extra, file.contents.size(), 8);
      put_le(extra, file.contents.size(), 8);
      put_le(extra, offset, 8);
    }
    put_le(directory, 0x02014b50, 4);
    put_le(directory, 45, 2);
    put_le(directory, 45, 2);
    put_le(directory, 0, 2);
    put_le(directory, file.method, 2);
    put_le(directory, 0, 4);
    put_le(directory, crc, 4);
    put_le(directory, zip64 ? saturated : file.contents.size(), 4);
    put_le(directory, zip64 ? saturated : file.contents.size(), 4);
    put_le(directory, file.name.size(), 2);
    put_le(directory, extra.size(), 2);
    put_le(directory, 0, 2);  // comment
    put_le(directory, 0, 2);  // disk
    put_le(directory, 0, 2);  // internal attributes
    put_le(directory, 0, 4);  // external attributes
    put_le(directory, zip64 ? saturated : offset, 4);
    append(directory, file.name);
    append(directory, extra);
  }
  const uint64_t directory_offset = out.size();
  append(out, directory);
  if (zip64) {
    const uint64_t end64 = out.size();
    put_le(out, 0x06064b50, 4);
    put_le(out, 44, 8);
    put_le(out, 45, 2);
    put_le(out, 45, 2);
    put_le(out, 0, 4);
    put_le(out, 0, 4);
    put_le(out, files.size(), 8);
    put_le(out, files.size(), 8);
    put_le(out, directory.size(), 8);
    put_le(out, directory_offset, 8);
    put_le(out, 0x07064b50, 4);
    put_le(out, 0, 4);
    put_le(out, end64, 8);
    put_le(out, 1, 4);
  }
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 2);
  put_le(out, 0, 2);
  put_le(out, zip64 ? 0xffff : files.size(), 2);
  put_le(out, zip64 ? 0xffff : files.size(), 2);
  put_le(out, zip64 ? saturated : directory.size(), 4);
  put_le(out, zip64 ? saturated : directory_offset, 4);
  put_le(out, 0, 2);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The pickle of a state dict, as torch.save (protocol 2) writes it

struct PickledTensor {
  std::string name;
  safetensors::ElementType type = safetensors::ElementType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: row-major
  std::string storage_key;
  int64_t storage_offset = 0;
};

class PickleWriter {
 public:
  PickleWriter() {
    out_ = {0x80, 2};
    global("collections", "OrderedDict");
    out_.push_back(')');
    out_.push_back('R');
    put();
  }

  void add(const PickledTensor& tensor) {
    text(tensor.name);
    global("torch._utils", "_rebuild_tensor_v2");
    out_.push_back('(');
    out_.push_back('(');
    text("storage");
    global("torch", storage_class(tensor.type));
    text(tensor.storage_key);
    text("cpu");
    integer(1000);  // numel: not checked against the entry
    out_.push_back('t');
    out_.push_back('Q');
    integer(tensor.storage_offset);
    std::vector<int64_t> strides = tensor.strides;
    if (strides.empty()) {
      strides.resize(tensor.shape.size());
      int64_t stride = 1;
      for (size_t i = tensor.shape.size(); i-- > 0;) strides[i] = stride, stride *= tensor.shape[i];
    }
    tuple(tensor.shape);
    tuple(strides);
    out_.push_back(0x89);  // requires_grad False
    global("collections", "OrderedDict");
    out_.push_back(')');
    out_.push_back('R');
    out_.push_back('t');
    out_.push_back('R');
    put();
  }

  Bytes finish() {
    Bytes body = std::move(out_);
    // The items go in one MARK ... SETITEMS after the dict; BUILD sets the _metadata attribute.
    Bytes result(body.begin(), body.begin() + header_end_);
    result.push_back('(');
    result.insert(result.end(), body.begin() + header_end_, body.end());
    result.push_back('u');
    result.push_back('}');
    out_.clear();
    text("_metadata");
    append(result, out_);
    result.push_back('}');
    result.push_back('s');
    result.push_back('b');
    result.push_back('.');
    return result;
  }

  static std::string storage_class(safetensors::ElementType type) {
    switch (type) {
      case safetensors::ElementType::F16:
        return "HalfStorage";
      case safetensors::ElementType::BF16:
        return "BFloat16Storage";
      case safetensors::ElementType::I64:
        return "LongStorage";
      case safetensors::ElementType::F64:
        return "DoubleStorage";
      default:
        return "FloatStorage";
    }
  }

 private:
  // A global named twice is fetched from the memo the second time, as pickle does.
  void global(const std::string& module, const std::string& name) {
    const std::string key = module + "\n" + name + "\n";
    if (const auto found = globals_.find(key); found != globals_.end()) {
      out_.push_back('h');
      out_.push_back(static_cast<uint8_t>(found->second));
      return;
    }
    out_.push_back('c');
    append(out_, key);
    globals_[key] = memo_;
    put();
  }
  void put() {
    if (memo_ < 256) {
      out_.push_back('q');
      out_.push_back(static_cast<uint8_t>(memo_));
    } else {
      out_.push_back('r');
      put_le(out_, memo_, 4);
    }
    ++memo_;
    if (header_end_ == 0 && memo_ == 2) header_end_ = out_.size();
  }
  void text(const std::string& value) {
    out_.push_back('X');
    put_le(out_, value.size(), 4);
    append(out_, value);
  }
  void integer(int64_t value) {
    if (value >= 0 && value < 256) {
      out_.push_back('K');
      out_.push_back(static_cast<uint8_t>(value));
    } else if (value >= 0 && value < 65536) {
      out_.push_back('M');
      put_le(out_, value, 2);
    } else {
      out_.push_back('J');
      put_le(out_, static_cast<uint64_t>(value), 4);
    }
  }
  void tuple(const std::vector<int64_t>& values) {
    out_.push_back('(');
    for (int64_t value : values) integer(value);
    out_.push_back('t');
  }

  Bytes out_;
  std::map<std::string, uint32_t> globals_;
  uint32_t memo_ = 0;
  size_t header_end_ = 0;
};

// ---------------------------------------------------------------------------------------------
// SentencePiece ModelProto

struct SpPiece {
  std::string text;
  float score = 0.0f;
  int type = 1;
};

inline void put_varint(Bytes& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<uint8_t>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<uint8_t>(value));
}

inline void put_field(Bytes& out, int field, const Bytes& message) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 2);
  put_varint(out, message.size());
  append(out, message);
}

inline Bytes write_sentencepiece(const std::vector<SpPiece>& pieces) {
  Bytes model;
  for (const SpPiece& piece : pieces) {
    Bytes message;
    put_field(message, 1, Bytes(piece.text.begin(), piece.text.end()));
    put_varint(message, 2 << 3 | 5);
    uint32_t bits;
    std::memcpy(&bits, &piece.score, 4);
    put_le(message, bits, 4);
    if (piece.type != 1) {
      put_varint(message, 3 << 3);
      put_varint(message, piece.type);
    }
    put_field(model, 1, message);
  }
  // trainer_spec { model_type: BPE, vocab_size } and an empty normalizer_spec, which readers skip.
  Bytes trainer;
  put_varint(trainer, 3 << 3);
  put_varint(trainer, 2);
  put_varint(trainer, 4 << 3);
  put_varint(trainer, pieces.size());
  put_field(model, 2, trainer);
  put_field(model, 3, {});
  return model;
}

// ---------------------------------------------------------------------------------------------
// A whole .nemo from a Hugging Face Parakeet directory

// transformers' name -> NeMo's (convert_nemo_to_hf.py's renaming undone).
inline std::string nemo_tensor_name(std::string name) {
  static const std::pair<std::string, std::string> kReverse[] = {
      {"encoder.subsampling.layers.", "encoder.pre_encode.conv."},
      {"encoder.subsampling.linear.", "encoder.pre_encode.out."},
      {".conv.norm.", ".conv.batch_norm."},
      {"ctc_head.", "decoder.decoder_layers.0."},
      {"self_attn.q_proj.", "self_attn.linear_q."},
      {"self_attn.k_proj.", "self_attn.linear_k."},
      {"self_attn.v_proj.", "self_attn.linear_v."},
      {"self_attn.o_proj.", "self_attn.linear_out."},
      {"self_attn.relative_k_proj.", "self_attn.linear_pos."},
      {"self_attn.bias_u", "self_attn.pos_bias_u"},
      {"self_attn.bias_v", "self_attn.pos_bias_v"},
      {"decoder.embedding.", "decoder.prediction.embed."},
      {"decoder.lstm.", "decoder.prediction.dec_rnn.lstm."},
      {"encoder_projector.", "joint.enc."},
      {"decoder.decoder_projector.", "joint.pred."},
      {"joint.head.", "joint.joint_net.2."},
  };
  for (const auto& [from, to] : kReverse) {
    const size_t at = name.find(from);
    if (at != std::string::npos) {
      name.replace(at, from.size(), to);
      break;
    }
  }
  return name;
}

struct NemoTensor {
  PickledTensor pickled;  // storage_key and offset are assigned when written
  Bytes bytes;
};

struct NemoParts {
  std::string yaml;
  std::vector<SpPiece> pieces;
  std::vector<NemoTensor> tensors;
};

struct NemoArchiveOptions {
  bool compress = false;        // gzip the tar
  bool zip64 = false;           // ZIP64 records in the checkpoint
  bool dot_slash = true;        // "./model_config.yaml", as NeMo's tarfile writes
  bool long_names = false;      // a tokenizer member name over 100 bytes
  bool gnu_long_names = true;   // how long names are written
  bool share_storages = false;  // pairs of tensors in one storage, the second at an offset
};

// YAML for a string as PyYAML might quote it: single quotes, or double quotes with \u escapes.
inline std::string yaml_quoted(const std::string& text, bool double_quotes) {
  std::string out;
  if (!double_quotes) {
    out = "'";
    for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  }
  out = "\"";
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == 0xe2 && i + 2 < text.size()) {  // three-byte UTF-8 (U+2581 and the like)
      const unsigned code = (byte & 0x0f) << 12 | (text[i + 1] & 0x3f) << 6 | (text[i + 2] & 0x3f);
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04X", code);
      out += escape;
      i += 2;
    } else if (text[i] == '"' || text[i] == '\\') {
      out += '\\';
      out += text[i];
    } else {
      out += text[i];
    }
  }
  return out + "\"";
}

// model_config.yaml, tokenizer pieces and NeMo-named tensors of the model in `hf_dir`.
inline NemoParts nemo_parts_from_hf(const std::filesystem::path& hf_dir) {
  using nlohmann::json;
  const json config = json::parse(read_text(hf_dir / "config.json"));
  const json encoder = config["encoder_config"];
  const json tokenizer = json::parse(read_text(hf_dir / "tokenizer.json"));
  const std::string model_type = config["model_type"];
  const std::string head = model_type.substr(model_type.find('_') + 1);
  const int vocab = config["vocab_size"];
  const int n_mels = encoder["num_mel_bins"];

  // The SentencePiece pieces: every id but the appended blank (V - 1).
  NemoParts parts;
  parts.pieces.resize(vocab - 1);
  for (const auto& [piece, id] : tokenizer["model"]["vocab"].items()) {
    if (id.get<int>() < vocab - 1) parts.pieces[id.get<int>()].text = piece;
  }
  for (const json& added : tokenizer["added_tokens"]) {
    const int id = added["id"];
    if (id >= vocab - 1) continue;
    SpPiece& piece = parts.pieces[id];
    piece.text = added["content"];
    piece.type = piece.text == "<unk>" ? 2 : piece.text == "<pad>" ? 4 : 3;
  }
  for (size_t id = 0; id < parts.pieces.size(); ++id) parts.pieces[id].score = -float(id);

  const auto flag = [](bool value) { return std::string(value ? "true" : "false"); };
  std::string y;
  y += "sample_rate: 16000\nlog_prediction: true\n";
  y += "labels:\n";
  for (size_t id = 0; id < parts.pieces.size(); ++id) {
    y += "- " + yaml_quoted(parts.pieces[id].text, id % 2 == 1) + "\n";
  }
  y += "tokenizer:\n  dir: null\n  type: bpe\n  model: nemo:TOKENIZER\n"
       "  vocab_path: nemo:0123_vocab.txt\n";
  y += "preprocessor:\n"
       "  _target_: nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor\n"
       "  sample_rate: 16000\n  normalize: per_feature\n  window_size: 0.025\n"
       "  window_stride: 0.01\n  window: hann\n  features: " +
       std::to_string(n_mels) +
       "\n  n_fft: 512\n  log: true\n  frame_splicing: 1\n  dither: 1.0e-05\n  pad_to: 0\n"
       "  pad_value: 0.0\n";
  const int d_model = encoder["hidden_size"];
  y += "encoder:\n  _target_: nemo.collections.asr.modules.ConformerEncoder\n";
  y += "  feat_in: " + std::to_string(n_mels) + "\n  feat_out: -1\n";
  y += "  n_layers: " + std::to_string(encoder["num_hidden_layers"].get<int>()) + "\n";
  y += "  d_model: " + std::to_string(d_model) + "\n";
  y += "  use_bias: " + flag(encoder["attention_bias"]) + "\n";
  y += "  subsampling: dw_striding\n  subsampling_factor: 8\n";
  y += "  subsampling_conv_channels: " +
       std::to_string(encoder["subsampling_conv_channels"].get<int>()) + "\n";
  y += "  causal_downsampling: false\n";
  y += "  ff_expansion_factor: " +
       std::to_string(encoder["intermediate_size"].get<int>() / d_model) + "\n";
  y += "  self_attention_model: rel_pos\n";
  y += "  n_heads: " + std::to_string(encoder["num_attention_heads"].get<int>()) + "\n";
  y += "  att_context_size:\n  - -1\n  - -1\n  att_context_style: regular\n";
  y += "  xscaling: " + flag(encoder["scale_input"]) + "\n";
  y += "  untie_biases: true\n  pos_emb_max_len: 5000\n";
  y += "  conv_kernel_size: " + std::to_string(encoder["conv_kernel_size"].get<int>()) + "\n";
  y += "  conv_norm_type: batch_norm\n  conv_context_size: null\n  dropout: 0.1\n";
  const int pieces = vocab - 1;
  if (head == "ctc") {
    y += "decoder:\n  _target_: nemo.collections.asr.modules.ConvASRDecoder\n";
    y += "  feat_in: " + std::to_string(d_model) + "\n  num_classes: " + std::to_string(pieces) +
         "\n  vocabulary: []\n";
  } else {
    const int hidden = config["decoder_hidden_size"];
    y += "model_defaults:\n  enc_hidden: " + std::to_string(d_model) +
         "\n  pred_hidden: " + std::to_string(hidden) +
         "\n  joint_hidden: " + std::to_string(hidden) + "\n";
    if (head == "tdt") {
      y += "  tdt_durations:\n";
      for (int duration : config["durations"]) y += "  - " + std::to_string(duration) + "\n";
    }
    y += "decoder:\n  _target_: nemo.collections.asr.modules.RNNTDecoder\n"
         "  normalization_mode: null\n  random_state_sampling: false\n  blank_as_pad: true\n";
    y += "  vocab_size: " + std::to_string(pieces) + "\n";
    y += "  prednet:\n    pred_hidden: ${model_defaults.pred_hidden}\n";
    y += "    pred_rnn_layers: " + std::to_string(config["num_decoder_layers"].get<int>()) +
         "\n    t_max: null\n    dropout: 0.2\n";
    y += "joint:\n  _target_: nemo.collections.asr.modules.RNNTJoint\n  log_softmax: null\n";
    y += "  num_classes: " + std::to_string(pieces) + "\n  vocabulary: []\n";
    if (head == "tdt") {
      y += "  num_extra_outputs: " + std::to_string(config["durations"].size()) + "\n";
    }
    y += "  jointnet:\n    joint_hidden: " + std::to_string(hidden) +
         "\n    activation: relu\n    dropout: 0.2\n";
    y += "decoding:\n  strategy: greedy_batch\n";
    if (head == "tdt") y += "  model_type: tdt\n  durations: ${model_defaults.tdt_durations}\n";
    y +=
        "  greedy:\n    max_symbols: " + std::to_string(config["max_symbols_per_step"].get<int>()) +
        "\n";
    if (head == "tdt") y += "loss:\n  loss_name: tdt\n";
  }
  y += "target: nemo.collections.asr.models.EncDecRNNTBPEModel\n";
  parts.yaml = y;

  const auto checkpoint = safetensors::Checkpoint::open(hf_dir.string());
  for (const std::string& name : checkpoint.names()) {
    const safetensors::TensorView& view = checkpoint.tensor(name);
    NemoTensor tensor;
    tensor.pickled.name = nemo_tensor_name(name);
    tensor.pickled.type = view.type;
    tensor.pickled.shape = view.shape;
    tensor.bytes.assign(view.data, view.data + view.nbytes);
    parts.tensors.push_back(std::move(tensor));
  }
  // What NeMo's state dict also holds: the front end's window and filterbank.
  for (const auto& [name, shape] :
       {std::pair{std::string("preprocessor.featurizer.window"), std::vector<int64_t>{400}},
        std::pair{std::string("preprocessor.featurizer.fb"),
                  std::vector<int64_t>{1, n_mels, 257}}}) {
    NemoTensor tensor;
    tensor.pickled.name = name;
    tensor.pickled.shape = shape;
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    tensor.bytes.assign(count * 4, 0);
    parts.tensors.insert(parts.tensors.begin(), std::move(tensor));
  }
  return parts;
}

// The torch.save checkpoint of `tensors` (storage keys assigned here).
inline Bytes write_torch_checkpoint(std::vector<NemoTensor> tensors, bool zip64,
                                    bool share_storages) {
  std::vector<ZipFile> entries;
  PickleWriter pickle;
  std::vector<ZipFile> storages;
  for (size_t i = 0; i < tensors.size(); ++i) {
    PickledTensor& pickled = tensors[i].pickled;
    const bool second_of_pair =
        share_storages && i % 2 == 1 && tensors[i - 1].pickled.type == pickled.type;
    if (second_of_pair) {
      pickled.storage_key = storages.back().name;
      pickled.storage_offset = static_cast<int64_t>(storages.back().contents.size() /
                                                    safetensors::element_size(pickled.type));
      append(storages.back().contents, tensors[i].bytes);
    } else {
      if (pickled.storage_key.empty()) pickled.storage_key = std::to_string(storages.size());
      storages.push_back({pickled.storage_key, tensors[i].bytes});
    }
    pickle.add(pickled);
  }
  entries.push_back({"model_weights/data.pkl", pickle.finish()});
  entries.push_back({"model_weights/byteorder", Bytes{'l', 'i', 't', 't', 'l', 'e'}});
  for (ZipFile& storage : storages) {
    storage.name = "model_weights/data/" + storage.name;
    entries.push_back(std::move(storage));
  }
  entries.push_back({"model_weights/version", Bytes{'3', '\n'}});
  return write_zip(entries, zip64);
}

inline void write_nemo(const std::filesystem::path& path, const NemoParts& parts,
                       const NemoArchiveOptions& options = {}) {
  const std::string prefix = options.dot_slash ? "./" : "";
  const std::string tokenizer_name =
      options.long_names ? std::string(120, 'f') + "_tokenizer.model" : "0123abcd_tokenizer.model";
  std::string yaml = parts.yaml;
  if (const size_t at = yaml.find("nemo:TOKENIZER"); at != std::string::npos) {
    yaml.replace(at, 14, "nemo:" + tokenizer_name);
  }
  std::vector<TarFile> files;
  if (options.dot_slash) files.push_back({"./", {}, '5'});
  files.push_back({prefix + "model_config.yaml", Bytes(yaml.begin(), yaml.end())});
  files.push_back({prefix + tokenizer_name, write_sentencepiece(parts.pieces)});
  files.push_back({prefix + "0123_vocab.txt", Bytes{'a', '\n'}});
  files.push_back({prefix + "model_weights.ckpt",
                   write_torch_checkpoint(parts.tensors, options.zip64, options.share_storages)});
  Bytes archive = write_tar(files, {options.gnu_long_names});
  if (options.compress) archive = gzip(archive);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(archive.data()), archive.size());
}

}  // namespace hark::testing
