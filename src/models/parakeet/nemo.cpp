#include "models/parakeet/nemo.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/mapped_file.h"
#include "format/hf_checkpoint.h"
#include "format/safetensors.h"
#include "format/sentencepiece.h"
#include "format/tar.h"
#include "format/torch_pickle.h"
#include "format/yaml_lite.h"
#include "models/parakeet/config.h"
#include "models/parakeet/layout.h"

namespace hark::parakeet {

namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// The archive

// The .nemo's bytes (mapped, or inflated when gzip-compressed), its members and the tensors of
// its checkpoint, which point into those bytes: one object that the GGUF writer keeps alive.
struct Archive {
  std::string path;
  std::optional<MappedFile> mapped;
  std::vector<uint8_t> inflated;
  std::span<const uint8_t> bytes;
  std::vector<tar::Member> members;
  std::vector<safetensors::TensorView> tensors;

  std::span<const uint8_t> contents(const tar::Member& member) const {
    return bytes.subspan(member.offset, member.size);
  }
  std::string_view text(const tar::Member& member) const {
    const std::span<const uint8_t> data = contents(member);
    return {reinterpret_cast<const char*>(data.data()), data.size()};
  }
  std::string where(const tar::Member& member) const { return path + ": " + member.name; }

  // The member whose file name (without folders) is `name`; hark::Error when none is.
  const tar::Member& member(std::string_view name) const {
    const tar::Member* found = find(name);
    if (found == nullptr) fail(path, ": the archive has no ", name, " (", listing(), ")");
    return *found;
  }
  const tar::Member* find(std::string_view name) const {
    for (const tar::Member& member : members) {
      if (fs::path(member.name).filename() == name) return &member;
    }
    return nullptr;
  }
  std::string listing() const {
    std::string names = "it holds";
    for (const tar::Member& member : members) names += " " + member.name;
    return members.empty() ? "it is empty" : names;
  }
};

std::shared_ptr<Archive> open_archive(const std::string& path) {
  auto archive = std::make_shared<Archive>();
  archive->path = path;
  archive->mapped.emplace(path);
  archive->bytes = archive->mapped->bytes();
  if (tar::is_gzip(archive->bytes)) {
    // NeMo has written both; a compressed one is inflated whole into memory.
    archive->inflated = tar::gunzip(archive->bytes, path);
    archive->mapped.reset();
    archive->bytes = archive->inflated;
  }
  if (!tar::looks_like_tar(archive->bytes)) {
    fail(path, ": not a .nemo archive (neither a tar nor a gzip-compressed tar)");
  }
  archive->members = tar::list_members(archive->bytes, path);
  return archive;
}

// ---------------------------------------------------------------------------------------------
// model_config.yaml

// One mapping of model_config.yaml; `path` ("encoder.") names it in messages. A missing key takes
// `fallback` when one is given (NeMo's default for it), else is an error naming it.
class Section {
 public:
  Section(const yaml::Node* node, std::string file, std::string path)
      : node_(node), file_(std::move(file)), path_(std::move(path)) {}

  bool present() const { return node_ != nullptr && node_->is_mapping(); }
  const yaml::Node* find(std::string_view key) const {
    if (!present()) return nullptr;
    const yaml::Node* value = node_->find(key);
    return value == nullptr || value->is_null() ? nullptr : value;
  }
  Section section(std::string_view key) const {
    return Section(find(key), file_, path_ + std::string(key) + ".");
  }

  int64_t integer(std::string_view key, int64_t min, int64_t max,
                  std::optional<int64_t> fallback = std::nullopt) const {
    const yaml::Node* value = find(key);
    if (value == nullptr) {
      if (fallback) return *fallback;
      missing(key);
    }
    const std::optional<int64_t> number = value->as_int();
    if (!number) wrong(key, *value, "an integer");
    if (*number < min || *number > max) {
      fail(file_, ": '", path_, key, "' is ", *number, ", expected ", min, " to ", max);
    }
    return *number;
  }
  int size(std::string_view key, std::optional<int64_t> fallback = std::nullopt,
           int64_t max = 1 << 24) const {
    return static_cast<int>(integer(key, 1, max, fallback));
  }
  double number(std::string_view key, std::optional<double> fallback = std::nullopt) const {
    const yaml::Node* value = find(key);
    if (value == nullptr) {
      if (fallback) return *fallback;
      missing(key);
    }
    const std::optional<double> number = value->as_float();
    if (!number || !std::isfinite(*number)) wrong(key, *value, "a number");
    return *number;
  }
  bool flag(std::string_view key, bool fallback) const {
    const yaml::Node* value = find(key);
    if (value == nullptr) return fallback;
    const std::optional<bool> flag = value->as_bool();
    if (!flag) wrong(key, *value, "true or false");
    return *flag;
  }
  std::string text(std::string_view key, std::string fallback = "") const {
    const yaml::Node* value = find(key);
    if (value == nullptr) return fallback;
    if (!value->is_scalar()) wrong(key, *value, "a string");
    return value->text();
  }
  std::vector<int> integer_list(std::string_view key, int64_t min, int64_t max) const {
    const yaml::Node* value = find(key);
    if (value == nullptr) missing(key);
    if (!value->is_sequence() || value->items().empty()) {
      wrong(key, *value, "a non-empty list of integers");
    }
    std::vector<int> numbers;
    for (const yaml::Node& item : value->items()) {
      const std::optional<int64_t> number = item.as_int();
      if (!number || *number < min || *number > max) {
        fail(file_, ": '", path_, key, "' holds ", item.describe(), ", expected ", min, " to ",
             max);
      }
      numbers.push_back(static_cast<int>(*number));
    }
    return numbers;
  }

  // A setting hark implements one way only: when present, it must be `expected`.
  void require(std::string_view key, std::string_view expected, std::string_view why) const {
    const yaml::Node* value = find(key);
    if (value != nullptr && (!value->is_scalar() || value->text() != expected)) {
      fail(file_, ": '", path_, key, "' is ", value->describe(), "; hark implements ", expected,
           " only (", why, ")");
    }
  }
  void require_flag(std::string_view key, bool expected, std::string_view why) const {
    if (flag(key, expected) != expected) {
      fail(file_, ": '", path_, key, "' is ", expected ? "false" : "true", "; hark implements ",
           expected ? "true" : "false", " only (", why, ")");
    }
  }
  void require_number(std::string_view key, double expected, std::string_view why) const {
    if (find(key) != nullptr && number(key) != expected) {
      fail(file_, ": '", path_, key, "' is ", number(key), "; hark implements ", expected,
           " only (", why, ")");
    }
  }

  [[noreturn]] void missing(std::string_view key) const {
    fail(file_, ": missing '", path_, key, "'");
  }
  [[noreturn]] void wrong(std::string_view key, const yaml::Node& value,
                          std::string_view expected) const {
    fail(file_, ": '", path_, key, "' should be ", expected, ", found ", value.describe());
  }

 private:
  const yaml::Node* node_;
  std::string file_;
  std::string path_;
};

std::string class_name(const std::string& target) {
  const size_t dot = target.rfind('.');
  return dot == std::string::npos ? target : target.substr(dot + 1);
}

Head read_head(const Section& model, const std::string& file) {
  const Section decoder = model.section("decoder");
  if (!decoder.present()) fail(file, ": missing 'decoder' (the model's head)");
  const std::string target = class_name(decoder.text("_target_"));
  if (target == "ConvASRDecoder") return Head::ctc;
  if (decoder.section("prednet").present()) {
    const bool tdt = model.section("model_defaults").find("tdt_durations") != nullptr ||
                     model.section("decoding").find("durations") != nullptr ||
                     model.section("loss").text("loss_name") == "tdt" ||
                     model.section("joint").integer("num_extra_outputs", 0, 1024, 0) > 0;
    return tdt ? Head::tdt : Head::rnnt;
  }
  fail(file, ": the decoder is ", target.empty() ? "unnamed" : target,
       "; hark converts CTC (ConvASRDecoder) and transducer (RNNTDecoder) Parakeet models");
}

// The preprocessor: hark's front end (features/nemo_mel.h) implements NeMo's
// AudioToMelSpectrogramPreprocessor with these settings and any number of mel bins.
void read_front_end(const Section& preprocessor, const std::string& file, Config& c) {
  if (!preprocessor.present()) fail(file, ": missing 'preprocessor'");
  const std::string target = class_name(preprocessor.text("_target_"));
  if (!target.empty() && target != "AudioToMelSpectrogramPreprocessor") {
    fail(file, ": the preprocessor is ", target,
         "; hark implements AudioToMelSpectrogramPreprocessor");
  }
  c.n_mels = preprocessor.size("features", 64, 4096);
  const Config implemented;
  const int sample_rate = preprocessor.size("sample_rate", 16000, 1 << 20);
  const double window_size = preprocessor.number("window_size", 0.02);
  const double window_stride = preprocessor.number("window_stride", 0.01);
  // In seconds, as convert_nemo_to_hf.py turns them into samples.
  const auto samples = [&](double seconds) {
    return static_cast<int>(std::lround(seconds * sample_rate));
  };
  const int n_fft = preprocessor.size("n_fft", 512, 1 << 16);
  const std::pair<std::string_view, std::pair<int, int>> sizes[] = {
      {"sample_rate", {sample_rate, implemented.sample_rate}},
      {"n_fft", {n_fft, implemented.n_fft}},
      {"window_size", {samples(window_size), implemented.win_length}},
      {"window_stride", {samples(window_stride), implemented.hop_length}}};
  for (const auto& [key, values] : sizes) {
    if (values.first != values.second) {
      fail(file, ": 'preprocessor.", key, "' gives ", values.first,
           " samples; hark's Parakeet front end implements ", values.second);
    }
  }
  preprocessor.require_number("preemph", implemented.preemphasis, "pre-emphasis");
  preprocessor.require("window", "hann", "STFT window");
  preprocessor.require("normalize", "per_feature", "feature normalisation");
  preprocessor.require_flag("log", true, "log-mel features");
  preprocessor.require_number("frame_splicing", 1, "no frame splicing");
  preprocessor.require_number("mag_power", 2.0, "power spectrum");
  preprocessor.require("log_zero_guard_type", "add", "log(mel + guard)");
  preprocessor.require("mel_norm", "slaney", "slaney mel filterbank");
  preprocessor.require_number("lowfreq", 0, "mel filterbank from 0 Hz");
  preprocessor.require_flag("exact_pad", false, "centered STFT frames");
}

void read_encoder(const Section& encoder, const std::string& file, Config& c) {
  if (!encoder.present()) fail(file, ": missing 'encoder' (the FastConformer encoder's settings)");
  const std::string target = class_name(encoder.text("_target_"));
  if (!target.empty() && target != "ConformerEncoder") {
    fail(file, ": the encoder is ", target, "; hark implements ConformerEncoder (FastConformer)");
  }
  // NeMo's ConformerEncoder defaults where a key is missing.
  encoder.require("subsampling", "dw_striding", "FastConformer's depthwise-striding subsampling");
  if (encoder.find("subsampling") == nullptr) {
    fail(file, ": missing 'encoder.subsampling' (hark implements dw_striding)");
  }
  encoder.require("self_attention_model", "rel_pos",
                  "full relative-position attention; local attention is not implemented");
  encoder.require("conv_norm_type", "batch_norm", "the conv module's BatchNorm");
  encoder.require_flag("causal_downsampling", false, "non-causal subsampling");
  encoder.require_flag("untie_biases", true, "per-layer attention position biases");
  encoder.require_number("subsampling_conv_kernel_size", 3, "subsampling kernel");
  encoder.require_number("subsampling_conv_stride", 2, "subsampling stride");
  if (const yaml::Node* context = encoder.find("att_context_size")) {
    const bool full = context->is_sequence() && context->items().size() == 2 &&
                      context->items()[0].as_int() == -1 && context->items()[1].as_int() == -1;
    if (!full) {
      fail(file, ": 'encoder.att_context_size' is ", context->describe(),
           "; hark implements full attention ([-1, -1]) only");
    }
  }
  if (encoder.find("reduction") != nullptr) {
    fail(file, ": 'encoder.reduction' is set; hark does not implement mid-encoder reduction");
  }

  c.d_model = encoder.size("d_model", std::nullopt, 1 << 16);
  c.layers = encoder.size("n_layers", std::nullopt, 1024);
  c.heads = encoder.size("n_heads", 4, 1024);
  const double expansion = encoder.number("ff_expansion_factor", 4);
  c.ffn_dim = static_cast<int>(std::lround(expansion * c.d_model));
  if (c.ffn_dim < 1 || c.ffn_dim != expansion * c.d_model) {
    fail(file, ": 'encoder.ff_expansion_factor' ", expansion, " times d_model ", c.d_model,
         " is not a width");
  }
  c.conv_kernel = encoder.size("conv_kernel_size", 31, 1023);
  c.subsampling_factor = encoder.size("subsampling_factor", 4, 64);
  // -1: as wide as the model.
  const int64_t channels = encoder.integer("subsampling_conv_channels", -1, 1 << 16, -1);
  if (channels == 0 || channels < -1) {
    fail(file, ": 'encoder.subsampling_conv_channels' is ", channels);
  }
  c.subsampling_channels = channels == -1 ? c.d_model : static_cast<int>(channels);
  c.scale_input = encoder.flag("xscaling", true);
  // convert_nemo_to_hf.py sets both attention_bias and convolution_bias from use_bias.
  c.attention_bias = encoder.flag("use_bias", true);
  c.conv_bias = c.attention_bias;

  const int feat_in = encoder.size("feat_in", c.n_mels, 4096);
  if (feat_in != c.n_mels) {
    fail(file, ": 'encoder.feat_in' ", feat_in, " differs from 'preprocessor.features' ", c.n_mels);
  }
  if (c.d_model % c.heads != 0) {
    fail(file, ": 'encoder.d_model' ", c.d_model, " is not a multiple of 'encoder.n_heads' ",
         c.heads);
  }
}

void read_transducer(const Section& model, const std::string& file, int pieces, Config& c) {
  const Section decoder = model.section("decoder");
  const Section prednet = decoder.section("prednet");
  const Section joint = model.section("joint");
  const Section jointnet = joint.section("jointnet");
  if (!jointnet.present()) fail(file, ": missing 'joint.jointnet' (the joint network)");
  c.predictor_hidden = prednet.size("pred_hidden", std::nullopt, 1 << 16);
  c.predictor_layers = prednet.size("pred_rnn_layers", std::nullopt, 1024);
  c.joint_hidden = jointnet.size("joint_hidden", std::nullopt, 1 << 16);
  jointnet.require("activation", "relu", "joint network activation");
  for (const auto& [section, key] :
       {std::pair{&decoder, "vocab_size"}, std::pair{&joint, "num_classes"}}) {
    if (section->find(key) != nullptr && section->integer(key, 0, 1 << 24) != pieces) {
      fail(file, ": '", key, "' of the ", section == &decoder ? "decoder" : "joint", " is ",
           section->integer(key, 0, 1 << 24), ", but the tokenizer has ", pieces, " pieces");
    }
  }
  // What NeMo's greedy decoding uses (convert_nemo_to_hf.py writes 10, the value every
  // published Parakeet has).
  c.max_symbols_per_step =
      model.section("decoding").section("greedy").size("max_symbols", 10, 1024);
  if (c.head == Head::rnnt) return;

  const Section defaults = model.section("model_defaults");
  c.durations = defaults.find("tdt_durations") != nullptr
                    ? defaults.integer_list("tdt_durations", 0, 1024)
                    : model.section("decoding").integer_list("durations", 0, 1024);
  const int extra = static_cast<int>(joint.integer("num_extra_outputs", 0, 1024, 0));
  if (joint.find("num_extra_outputs") != nullptr && extra != static_cast<int>(c.durations.size())) {
    fail(file, ": 'joint.num_extra_outputs' ", extra, " differs from the ", c.durations.size(),
         " TDT durations");
  }
  for (size_t i = 0; i < c.durations.size(); ++i) {
    if (c.durations[i] != static_cast<int>(i)) {
      log::warn(file, ": TDT durations are not [0, 1, 2, ...]; transformers (and hark) advance by ",
                "the duration's index, NeMo by its value");
      break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

// The SentencePiece model the config names ("nemo:<hash>_tokenizer.model"), else the archive's
// only *.model member.
const tar::Member& tokenizer_member(const Archive& archive, const Section& model) {
  std::string named = model.section("tokenizer").text("model");
  if (named.starts_with("nemo:")) named.erase(0, 5);
  if (!named.empty()) {
    if (const tar::Member* member = archive.find(fs::path(named).filename().string())) {
      return *member;
    }
  }
  const tar::Member* found = nullptr;
  for (const tar::Member& member : archive.members) {
    if (!member.name.ends_with(".model")) continue;
    if (found != nullptr) {
      fail(archive.path, ": more than one SentencePiece model (", found->name, ", ", member.name,
           ") and the config's 'tokenizer.model' names neither");
    }
    found = &member;
  }
  if (found == nullptr) {
    fail(archive.path, ": no SentencePiece tokenizer (*.model); ", archive.listing());
  }
  return *found;
}

// The pieces and token types as transformers' ParakeetConverter and convert_nemo_to_hf.py make
// them, as `hark convert` then reads them from tokenizer.json: control pieces, <unk> and the pad
// token are special (control); user-defined pieces are added but not special; with byte fallback,
// <0xNN> pieces are bytes; then the blank is appended as V - 1 (<pad> for CTC, which the
// converter appends as the CTC blank, <blank> for transducers).
Vocabulary read_vocabulary(const Archive& archive, const tar::Member& member, Head head) {
  const std::vector<sentencepiece::Piece> pieces =
      sentencepiece::read_pieces(archive.contents(member), archive.where(member));
  Vocabulary vocabulary;
  bool has_pad = false;
  for (const sentencepiece::Piece& piece : pieces) {
    int32_t type = is_byte_piece(piece.text) ? kTokenByte : kTokenNormal;
    if (piece.type == sentencepiece::PieceType::control) type = kTokenControl;
    if (piece.type == sentencepiece::PieceType::user_defined) type = kTokenUserDefined;
    // The tokenizer's unk and pad tokens (RNN-T's pad is the appended <blank>).
    if (piece.text == "<unk>" || (piece.text == "<pad>" && head != Head::rnnt)) {
      type = kTokenControl;
    }
    has_pad = has_pad || piece.text == "<pad>";
    vocabulary.pieces.push_back(piece.text);
    vocabulary.types.push_back(type);
  }
  vocabulary.pieces.push_back(head == Head::ctc && !has_pad ? "<pad>" : "<blank>");
  vocabulary.types.push_back(kTokenControl);
  return vocabulary;
}

// ---------------------------------------------------------------------------------------------
// Tensors

// convert_nemo_to_hf.py's renaming, applied in its order to every occurrence.
constexpr std::pair<std::string_view, std::string_view> kRenames[] = {
    {"encoder.pre_encode.conv.", "encoder.subsampling.layers."},
    {"encoder.pre_encode.out.", "encoder.subsampling.linear."},
    {"encoder.pos_enc.", "encoder.encode_positions."},
    {".conv.batch_norm.", ".conv.norm."},
    {"decoder.decoder_layers.0.", "ctc_head."},
    {"linear_k", "k_proj"},
    {"linear_v", "v_proj"},
    {"linear_out", "o_proj"},
    {"linear_q", "q_proj"},
    {"pos_bias_u", "bias_u"},
    {"pos_bias_v", "bias_v"},
    {"linear_pos", "relative_k_proj"},
    {"decoder.prediction.embed.", "decoder.embedding."},
    {"decoder.prediction.dec_rnn.lstm.", "decoder.lstm."},
    {"joint.enc.", "encoder_projector."},
    {"joint.pred.", "decoder.decoder_projector."},
    {"joint.joint_net.2.", "joint.head."},
};

// State-dict entries hark does not need: the front end's window and filterbank (recomputed),
// BatchNorm's step counters and the position table (derived).
bool is_unused(const std::string& nemo_name) {
  return nemo_name.starts_with("preprocessor.featurizer.") ||
         nemo_name.ends_with(".num_batches_tracked") || nemo_name.starts_with("encoder.pos_enc.");
}

bool is_float(safetensors::ElementType type) {
  using safetensors::ElementType;
  return type == ElementType::F32 || type == ElementType::F16 || type == ElementType::BF16 ||
         type == ElementType::F64;
}

// One source per tensor of the layout, found by its transformers name; every tensor of the
// checkpoint must be used.
std::vector<const safetensors::TensorView*> plan_tensors(const Archive& archive,
                                                         const std::string& where,
                                                         const Config& config) {
  std::map<std::string, const safetensors::TensorView*, std::less<>> by_hf_name;
  bool skipped_ctc = false;
  for (const safetensors::TensorView& tensor : archive.tensors) {
    if (is_unused(tensor.name)) continue;
    // Hybrid TDT/RNN-T + CTC models: the transducer is converted, the auxiliary CTC head left.
    if (config.is_transducer() && tensor.name.starts_with("ctc_decoder.")) {
      skipped_ctc = true;
      continue;
    }
    const auto [entry, inserted] = by_hf_name.emplace(hf_tensor_name(tensor.name), &tensor);
    if (!inserted) {
      fail(where, ": tensors ", entry->second->name, " and ", tensor.name, " both map to ",
           entry->first);
    }
  }
  if (skipped_ctc) log::warn(where, ": the auxiliary CTC head (ctc_decoder.*) is left out");

  std::vector<const safetensors::TensorView*> sources;
  for (const TensorSpec& spec : tensor_layout(config)) {
    const auto found = by_hf_name.find(spec.name);
    if (found == by_hf_name.end()) {
      fail(where, ": the checkpoint has no tensor for ", spec.name, " ",
           hf::shape_text(spec.checkpoint_shape), " (transformers' name)");
    }
    const safetensors::TensorView& tensor = *found->second;
    if (tensor.shape != spec.checkpoint_shape) {
      fail(where, ": tensor ", tensor.name, " has shape ", hf::shape_text(tensor.shape),
           ", model_config.yaml implies ", hf::shape_text(spec.checkpoint_shape));
    }
    if (!is_float(tensor.type)) {
      fail(where, ": tensor ", tensor.name, " is ", safetensors::element_type_name(tensor.type),
           "; expected F32, F16 or BF16");
    }
    sources.push_back(&tensor);
    by_hf_name.erase(found);
  }
  // A tensor the config does not account for means config and weights disagree.
  if (!by_hf_name.empty()) {
    const auto& [hf_name, tensor] = *by_hf_name.begin();
    fail(where, ": the checkpoint has tensor ", tensor->name, " (", hf_name, "), which a ",
         head_name(config.head), " model as model_config.yaml describes it does not have",
         config.attention_bias ? "" : " (encoder.use_bias is false)");
  }
  return sources;
}

}  // namespace

std::string hf_tensor_name(const std::string& nemo_name) {
  std::string name = nemo_name;
  for (const auto& [from, to] : kRenames) {
    for (size_t at = name.find(from); at != std::string::npos; at = name.find(from, at)) {
      name.replace(at, from.size(), to);
      at += to.size();
    }
  }
  return name;
}

bool is_nemo_archive(const std::string& path) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) return false;
  if (fs::path(path).extension() == ".nemo") return true;
  const MappedFile file(path);
  return tar::is_gzip(file.bytes()) || tar::looks_like_tar(file.bytes());
}

void convert_nemo(const std::string& nemo_path, const std::string& out_path, DType type,
                  const ConvertProgress& progress) {
  check_weight_type(type);
  const std::shared_ptr<Archive> archive = open_archive(nemo_path);

  const tar::Member& config_member = archive->member("model_config.yaml");
  const std::string config_file = archive->where(config_member);
  const yaml::Node root = yaml::parse(archive->text(config_member), config_file);
  if (!root.is_mapping()) fail(config_file, ": expected a mapping of the model's settings");
  const Section model(&root, config_file, "");

  Config config;
  config.head = read_head(model, config_file);
  read_front_end(model.section("preprocessor"), config_file, config);
  read_encoder(model.section("encoder"), config_file, config);

  const tar::Member& tokenizer = tokenizer_member(*archive, model);
  const Vocabulary vocabulary = read_vocabulary(*archive, tokenizer, config.head);
  const int pieces = static_cast<int>(vocabulary.pieces.size()) - 1;
  config.vocab_size = pieces + 1;
  config.blank_id = pieces;
  if (const yaml::Node* labels = root.find("labels"); labels && labels->is_sequence()) {
    if (static_cast<int>(labels->items().size()) != pieces) {
      fail(config_file, ": 'labels' holds ", labels->items().size(), " tokens, but ",
           tokenizer.name, " has ", pieces, " pieces");
    }
  }
  if (config.head == Head::ctc) {
    const Section decoder = model.section("decoder");
    // -1 until NeMo fills it in from the tokenizer.
    const int64_t classes = decoder.integer("num_classes", -1, 1 << 24, -1);
    if (classes != -1 && classes != pieces) {
      fail(config_file, ": 'decoder.num_classes' is ", classes, ", but the tokenizer has ", pieces,
           " pieces");
    }
  } else {
    read_transducer(model, config_file, pieces, config);
  }
  validate(config, config_file);

  const tar::Member& weights = archive->member("model_weights.ckpt");
  const std::string weights_file = archive->where(weights);
  archive->tensors = torch::read_checkpoint(archive->contents(weights), weights_file);
  const std::vector<const safetensors::TensorView*> sources =
      plan_tensors(*archive, weights_file, config);

  write_model(config, fs::path(nemo_path).stem().string(), vocabulary, sources, archive, type,
              out_path, progress);
}

}  // namespace hark::parakeet
