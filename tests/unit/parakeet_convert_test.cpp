// `hark convert` for Parakeet: tiny checkpoints of each head (tests/support/tiny_parakeet.h) must
// land in GGUF with every tensor under its name, shape and type, the config keys and vocabulary
// stored, and every broken checkpoint refused with an error naming what is wrong.
#include "models/parakeet/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "base/error.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "format/safetensors.h"
#include "models/parakeet/config.h"
#include "models/parakeet/layout.h"
#include "support/process.h"
#include "support/tensor_values.h"
#include "support/tiny_parakeet.h"

namespace hark::parakeet {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::TinyParakeetSpec;

constexpr Head kHeads[] = {Head::ctc, Head::rnnt, Head::tdt};

TinyParakeetSpec spec_for(Head head) {
  TinyParakeetSpec spec;
  spec.head = head;
  return spec;
}

std::shared_ptr<const gguf::File> convert(const TempDir& temp, const TinyParakeetSpec& spec,
                                          DType type) {
  testing::write_tiny_parakeet(temp / "tiny", spec);
  const std::string out = (temp / "tiny.gguf").string();
  convert_checkpoint((temp / "tiny").string(), out, type);
  return gguf::File::open(out);
}

// The GGUF shape the spec asks for: a 1-wide convolution kernel ([out, in, 1] or
// [out, in, 1, 1]) is stored as the [out, in] matrix it is.
std::vector<int64_t> expected_shape(std::vector<int64_t> shape) {
  while (shape.size() > 2 && shape.back() == 1) shape.pop_back();
  return shape;
}

// Matrices: the linear layers, pointwise convolutions, LSTM weights and the embedding, i.e. every
// 2-D tensor but the per-head attention biases.
bool is_matrix(const std::string& name, const std::vector<int64_t>& gguf_shape) {
  return gguf_shape.size() == 2 && !name.ends_with("bias_u") && !name.ends_with("bias_v");
}

// ---------------------------------------------------------------------------------------------
// Tensors

TEST(ParakeetConvert, F32KeepsEveryTensorUnderItsName) {
  for (Head head : kHeads) {
    SCOPED_TRACE(std::string(head_name(head)));
    TempDir temp;
    const TinyParakeetSpec spec = spec_for(head);
    const auto file = convert(temp, spec, DType::F32);
    const auto checkpoint = safetensors::Checkpoint::open((temp / "tiny").string());
    const testing::TensorList expected = testing::tiny_parakeet_tensors(spec);
    ASSERT_EQ(file->tensors().size(), expected.size());  // the step counters are left out
    for (const auto& [name, shape] : expected) {
      const gguf::TensorInfo* tensor = file->find_tensor(name);
      ASSERT_NE(tensor, nullptr) << name;
      EXPECT_EQ(tensor->shape, expected_shape(shape)) << name;
      EXPECT_EQ(tensor->type, DType::F32) << name;
      EXPECT_EQ(testing::values_of(*tensor), testing::values_of(checkpoint, name)) << name;
    }
    for (const std::string& counter : testing::tiny_parakeet_counters(spec)) {
      EXPECT_EQ(file->find_tensor(counter), nullptr) << counter;
    }
  }
}

TEST(ParakeetConvert, LayoutListsTheCheckpointsTensorsInOrder) {
  for (Head head : kHeads) {
    const TinyParakeetSpec spec = spec_for(head);
    TempDir temp;
    const auto file = convert(temp, spec, DType::F16);
    const std::vector<TensorSpec> layout = tensor_layout(read_config(*file));
    const testing::TensorList expected = testing::tiny_parakeet_tensors(spec);
    ASSERT_EQ(layout.size(), expected.size()) << head_name(head);
    for (size_t i = 0; i < layout.size(); ++i) {
      EXPECT_EQ(layout[i].name, expected[i].first);
      EXPECT_EQ(layout[i].checkpoint_shape, expected[i].second) << layout[i].name;
      EXPECT_EQ(layout[i].shape, expected_shape(expected[i].second)) << layout[i].name;
    }
  }
}

TEST(ParakeetConvert, F16AppliesToMatricesOnly) {
  TempDir temp;
  const auto file = convert(temp, spec_for(Head::tdt), DType::F16);
  EXPECT_EQ(file->get_int("general.file_type"), 1);
  const auto checkpoint = safetensors::Checkpoint::open((temp / "tiny").string());
  int matrices = 0;
  for (const gguf::TensorInfo& tensor : file->tensors()) {
    const bool matrix = is_matrix(tensor.name, tensor.shape);
    matrices += matrix;
    EXPECT_EQ(tensor.type, matrix ? DType::F16 : DType::F32) << tensor.name;
    const std::vector<float> original = testing::values_of(checkpoint, tensor.name);
    const std::vector<float> stored = testing::values_of(tensor);
    ASSERT_EQ(stored.size(), original.size());
    for (size_t i = 0; i < stored.size(); ++i) {
      const float expected =
          matrix ? quant::f16_to_f32(quant::f32_to_f16(original[i])) : original[i];
      ASSERT_EQ(stored[i], expected) << tensor.name << " element " << i;
    }
  }
  EXPECT_GT(matrices, 20);
  // Convolution kernels that are not matrices stay exact.
  EXPECT_EQ(file->tensor("encoder.layers.1.conv.depthwise_conv.weight").type, DType::F32);
  EXPECT_EQ(file->tensor("encoder.subsampling.layers.2.weight").type, DType::F32);
  EXPECT_EQ(file->tensor("encoder.layers.0.conv.norm.running_var").type, DType::F32);
}

TEST(ParakeetConvert, Q8_0WhereRowsAreWholeBlocksAndF16Elsewhere) {
  TempDir temp;
  const auto file = convert(temp, spec_for(Head::tdt), DType::Q8_0);
  EXPECT_EQ(file->get_int("general.file_type"), 7);
  for (const gguf::TensorInfo& tensor : file->tensors()) {
    if (!is_matrix(tensor.name, tensor.shape)) {
      EXPECT_EQ(tensor.type, DType::F32) << tensor.name;
    } else {
      EXPECT_EQ(tensor.type, tensor.shape.back() % 32 == 0 ? DType::Q8_0 : DType::F16)
          << tensor.name;
    }
  }
  EXPECT_EQ(file->tensor("encoder.layers.0.self_attn.q_proj.weight").type, DType::Q8_0);
  EXPECT_EQ(file->tensor("encoder.layers.0.conv.pointwise_conv1.weight").type, DType::Q8_0);
  EXPECT_EQ(file->tensor("encoder.subsampling.linear.weight").type, DType::Q8_0);   // [32, 160]
  EXPECT_EQ(file->tensor("encoder.subsampling.layers.3.weight").type, DType::F16);  // [16, 16]
  EXPECT_EQ(file->tensor("decoder.lstm.weight_hh_l1").type, DType::F16);            // [96, 24]

  const auto checkpoint = safetensors::Checkpoint::open((temp / "tiny").string());
  const std::string name = "encoder.layers.1.feed_forward2.linear1.weight";
  const std::vector<float> original = testing::values_of(checkpoint, name);
  const std::vector<float> stored = testing::values_of(file->tensor(name));
  for (size_t block = 0; block < original.size() / 32; ++block) {
    float max_abs = 0;
    for (size_t i = 0; i < 32; ++i) {
      max_abs = std::max(max_abs, std::fabs(original[block * 32 + i]));
    }
    for (size_t i = 0; i < 32; ++i) {
      ASSERT_NEAR(stored[block * 32 + i], original[block * 32 + i], max_abs / 127 * 0.51 + 1e-7);
    }
  }
}

TEST(ParakeetConvert, Bf16CheckpointIsCopiedBitForBit) {
  TempDir temp;
  TinyParakeetSpec spec = spec_for(Head::ctc);
  spec.storage = safetensors::ElementType::BF16;
  const auto file = convert(temp, spec, DType::BF16);
  const auto checkpoint = safetensors::Checkpoint::open((temp / "tiny").string());
  const gguf::TensorInfo& tensor = file->tensor("ctc_head.weight");
  const safetensors::TensorView& view = checkpoint.tensor("ctc_head.weight");
  EXPECT_EQ(tensor.type, DType::BF16);
  EXPECT_EQ(tensor.shape, (std::vector<int64_t>{view.shape[0], view.shape[1]}));
  ASSERT_EQ(tensor.nbytes, view.nbytes);
  EXPECT_EQ(std::memcmp(tensor.data, view.data, view.nbytes), 0);
  // Vectors are widened to F32 exactly.
  EXPECT_EQ(testing::values_of(file->tensor("ctc_head.bias")),
            testing::values_of(checkpoint, "ctc_head.bias"));
}

TEST(ParakeetConvert, ShardedCheckpointGivesTheSameFile) {
  TempDir temp;
  TinyParakeetSpec sharded = spec_for(Head::rnnt);
  sharded.shards = 3;
  testing::write_tiny_parakeet(temp / "single", spec_for(Head::rnnt));
  testing::write_tiny_parakeet(temp / "sharded", sharded);
  ASSERT_FALSE(fs::exists(temp / "sharded" / "model.safetensors"));
  convert_checkpoint((temp / "single").string(), (temp / "single.gguf").string(), DType::F16);
  convert_checkpoint((temp / "sharded").string(), (temp / "sharded.gguf").string(), DType::F16);
  testing::expect_same_tensors(*gguf::File::open((temp / "single.gguf").string()),
                               *gguf::File::open((temp / "sharded.gguf").string()));
}

TEST(ParakeetConvert, ReportsProgressPerTensor) {
  TempDir temp;
  testing::write_tiny_parakeet(temp / "tiny", spec_for(Head::ctc));
  std::vector<std::string> seen;
  int last_total = 0;
  convert_checkpoint((temp / "tiny").string(), (temp / "tiny.gguf").string(), DType::F16,
                     [&](int done, int total, std::string_view name) {
                       EXPECT_EQ(done, static_cast<int>(seen.size()));
                       last_total = total;
                       seen.emplace_back(name);
                     });
  EXPECT_EQ(static_cast<int>(seen.size()), last_total + 1);  // one per tensor, then the end
  EXPECT_EQ(seen.front(), "encoder.subsampling.layers.0.weight");
}

// ---------------------------------------------------------------------------------------------
// Config keys and vocabulary

TEST(ParakeetConvert, ConfigKeysComeFromConfigJson) {
  for (Head head : kHeads) {
    SCOPED_TRACE(std::string(head_name(head)));
    TempDir temp;
    TinyParakeetSpec spec = spec_for(head);
    if (head == Head::tdt) {
      spec.n_mels = 128;
      spec.attention_bias = spec.conv_bias = spec.scale_input = false;
    }
    const auto file = convert(temp, spec, DType::F16);
    EXPECT_EQ(file->get_string("general.architecture"), "parakeet");
    EXPECT_EQ(file->get_string("general.name"), "tiny");
    EXPECT_EQ(file->get_string("parakeet.head"), head_name(head));
    const Config c = read_config(*file);
    const int vocab = testing::tiny_parakeet_vocab_size(head);
    EXPECT_EQ(c.head, head);
    EXPECT_EQ(c.vocab_size, vocab);
    EXPECT_EQ(c.blank_id, vocab - 1);
    EXPECT_EQ(c.n_mels, spec.n_mels);
    EXPECT_EQ(c.sample_rate, 16000);
    EXPECT_EQ(c.n_fft, 512);
    EXPECT_EQ(c.win_length, 400);
    EXPECT_EQ(c.hop_length, 160);
    EXPECT_FLOAT_EQ(c.preemphasis, 0.97f);
    EXPECT_EQ(c.d_model, spec.d_model);
    EXPECT_EQ(c.layers, spec.layers);
    EXPECT_EQ(c.heads, spec.heads);
    EXPECT_EQ(c.ffn_dim, spec.ffn);
    EXPECT_EQ(c.conv_kernel, spec.conv_kernel);
    EXPECT_EQ(c.subsampling_factor, 8);
    EXPECT_EQ(c.subsampling_channels, spec.subsampling_channels);
    EXPECT_EQ(c.subsampled_mels(), spec.n_mels == 128 ? 16 : 10);
    EXPECT_EQ(c.attention_bias, spec.attention_bias);
    EXPECT_EQ(c.conv_bias, spec.conv_bias);
    EXPECT_EQ(c.scale_input, spec.scale_input);
    EXPECT_FLOAT_EQ(c.layer_norm_eps, 1e-5f);
    EXPECT_FLOAT_EQ(c.batch_norm_eps, 1e-5f);
    if (head == Head::ctc) {
      EXPECT_FALSE(c.is_transducer());
      EXPECT_FALSE(file->has("parakeet.predictor.hidden"));
      continue;
    }
    EXPECT_EQ(c.predictor_hidden, spec.predictor_hidden);
    EXPECT_EQ(c.predictor_layers, spec.predictor_layers);
    EXPECT_EQ(c.joint_hidden, spec.predictor_hidden);
    EXPECT_EQ(c.max_symbols_per_step, spec.max_symbols_per_step);
    EXPECT_EQ(c.durations, head == Head::tdt ? spec.durations : std::vector<int>{});
    EXPECT_EQ(c.head_outputs(), vocab + (head == Head::tdt ? 5 : 0));
  }
}

TEST(ParakeetConvert, VocabularyIsStoredInIdOrder) {
  for (Head head : kHeads) {
    TempDir temp;
    const auto file = convert(temp, spec_for(head), DType::F16);
    const std::vector<std::string> pieces = testing::tiny_parakeet_pieces(head);
    EXPECT_EQ(file->get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(file->get_strings("tokenizer.ggml.tokens"), pieces);
    const std::vector<int64_t> types = file->get_ints("tokenizer.ggml.token_type");
    ASSERT_EQ(types.size(), pieces.size());
    const size_t specials = testing::tiny_parakeet_special_head(head).size();
    for (size_t id = 0; id < pieces.size(); ++id) {
      const bool special = id < specials || id + 1 == pieces.size();
      EXPECT_EQ(types[id], special ? 3 : 1) << pieces[id];
    }
    EXPECT_EQ(pieces[file->get_int("parakeet.blank_id")], testing::tiny_parakeet_blank_piece(head));
  }
}

TEST(ParakeetConvert, MissingConvolutionBiasKeyFollowsTheTensors) {
  for (bool conv_bias : {true, false}) {
    TempDir temp;
    TinyParakeetSpec spec = spec_for(Head::tdt);
    spec.conv_bias = conv_bias;
    spec.convolution_bias_key = false;
    const auto file = convert(temp, spec, DType::F16);
    EXPECT_EQ(read_config(*file).conv_bias, conv_bias);
    EXPECT_EQ(file->find_tensor("encoder.layers.0.conv.depthwise_conv.bias") != nullptr, conv_bias);
  }
}

TEST(ParakeetConvert, FeatureExtractorSettingsMayComeFromProcessorConfig) {
  TempDir temp;
  TinyParakeetSpec spec = spec_for(Head::ctc);
  testing::write_tiny_parakeet(temp / "tiny", spec);
  const auto extractor =
      nlohmann::json::parse(testing::read_text(temp / "tiny" / "preprocessor_config.json"));
  fs::remove(temp / "tiny" / "preprocessor_config.json");
  auto processor =
      nlohmann::json{{"processor_class", "ParakeetProcessor"}, {"feature_extractor", extractor}};
  processor["feature_extractor"]["n_fft"] = 400;  // read from here, and refused
  testing::write_json(temp / "tiny" / "processor_config.json", processor);
  EXPECT_THROW(convert_checkpoint((temp / "tiny").string(), (temp / "a.gguf").string(), DType::F16),
               Error);
  processor["feature_extractor"]["n_fft"] = 512;
  testing::write_json(temp / "tiny" / "processor_config.json", processor);
  convert_checkpoint((temp / "tiny").string(), (temp / "a.gguf").string(), DType::F16);
  EXPECT_EQ(read_config(*gguf::File::open((temp / "a.gguf").string())).n_fft, 512);
}

// ---------------------------------------------------------------------------------------------
// read_config / write_config

Config tdt_config() {
  Config c;
  c.head = Head::tdt;
  c.vocab_size = 8193;
  c.blank_id = 8192;
  c.n_mels = 128;
  c.d_model = 1024;
  c.layers = 24;
  c.heads = 8;
  c.ffn_dim = 4096;
  c.subsampling_channels = 256;
  c.attention_bias = c.conv_bias = c.scale_input = false;
  c.predictor_hidden = c.joint_hidden = 640;
  c.predictor_layers = 2;
  c.durations = {0, 1, 2, 3, 4};
  c.max_symbols_per_step = 10;
  return c;
}

// A GGUF holding the keys of `config`, then `edit` applied to them.
std::shared_ptr<const gguf::File> config_file(const TempDir& temp, const Config& config,
                                              const std::function<void(gguf::Writer&)>& edit = {}) {
  gguf::Writer writer;
  write_config(writer, config);
  if (edit) edit(writer);
  const std::string path = (temp / "config.gguf").string();
  writer.write(path);
  return gguf::File::open(path);
}

TEST(ParakeetConfig, RoundTripsThroughGguf) {
  TempDir temp;
  const Config written = tdt_config();
  const Config read = read_config(*config_file(temp, written));
  EXPECT_EQ(read.head, Head::tdt);
  EXPECT_EQ(read.vocab_size, 8193);
  EXPECT_EQ(read.blank_id, 8192);
  EXPECT_EQ(read.n_mels, 128);
  EXPECT_EQ(read.d_model, 1024);
  EXPECT_EQ(read.head_dim(), 128);
  EXPECT_EQ(read.layers, 24);
  EXPECT_EQ(read.ffn_dim, 4096);
  EXPECT_EQ(read.subsampled_mels(), 16);
  EXPECT_EQ(read.subsampling_stages(), 3);
  EXPECT_FALSE(read.attention_bias);
  EXPECT_FALSE(read.scale_input);
  EXPECT_EQ(read.predictor_hidden, 640);
  EXPECT_EQ(read.joint_hidden, 640);
  EXPECT_EQ(read.durations, written.durations);
  EXPECT_EQ(read.head_outputs(), 8198);
  EXPECT_EQ(read.max_symbols_per_step, 10);
}

void expect_config_error(const std::shared_ptr<const gguf::File>& file, const std::string& needle) {
  try {
    read_config(*file);
    ADD_FAILURE() << "read a broken config; expected an error mentioning " << needle;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
  }
}

TEST(ParakeetConfig, RefusesMissingAndInvalidKeys) {
  TempDir temp;
  const Config good = tdt_config();
  // A file with every key of `good` but `key`.
  auto without = [&](const std::string& key) {
    const auto full = config_file(temp, good);
    gguf::Writer writer;
    for (const auto& [name, value] : full->metadata()) {
      if (name != key) writer.set(name, value);
    }
    const std::string path = (temp / "without.gguf").string();
    writer.write(path);
    return gguf::File::open(path);
  };
  for (const char* key :
       {"parakeet.head", "parakeet.vocab_size", "parakeet.blank_id", "parakeet.encoder.d_model",
        "parakeet.encoder.scale_input", "parakeet.encoder.batch_norm_eps",
        "parakeet.subsampling.channels", "parakeet.n_fft", "parakeet.predictor.layers",
        "parakeet.joint.hidden", "parakeet.tdt.durations"}) {
    expect_config_error(without(key), std::string("'") + key + "' is missing");
  }
  expect_config_error(
      config_file(temp, good,
                  [](gguf::Writer& w) { w.set_string("general.architecture", "whisper"); }),
      "expected 'parakeet'");
  expect_config_error(
      config_file(temp, good, [](gguf::Writer& w) { w.set_string("parakeet.head", "lstm"); }),
      "unknown Parakeet head 'lstm'");
  expect_config_error(
      config_file(temp, good, [](gguf::Writer& w) { w.set_u32("parakeet.blank_id", 8193); }),
      "parakeet.blank_id");
  expect_config_error(
      config_file(temp, good, [](gguf::Writer& w) { w.set_u32("parakeet.encoder.heads", 7); }),
      "not divisible by parakeet.encoder.heads 7");
  expect_config_error(
      config_file(temp, good, [](gguf::Writer& w) { w.set_u32("parakeet.subsampling.factor", 6); }),
      "parakeet.subsampling.factor");
  expect_config_error(
      config_file(temp, good, [](gguf::Writer& w) { w.set_i32s("parakeet.tdt.durations", {}); }),
      "parakeet.tdt.durations");

  // A CTC file needs no transducer keys; write_config refuses what read_config would.
  Config ctc = good;
  ctc.head = Head::ctc;
  EXPECT_EQ(read_config(*config_file(temp, ctc)).head, Head::ctc);
  Config bad = good;
  bad.conv_kernel = 8;
  gguf::Writer writer;
  EXPECT_THROW(write_config(writer, bad), Error);
}

// ---------------------------------------------------------------------------------------------
// Broken checkpoints

// Each must fail with a hark::Error that names the problem, and leave no output.
void expect_conversion_error(const fs::path& dir, const fs::path& out, const std::string& needle) {
  try {
    convert_checkpoint(dir.string(), out.string(), DType::F16);
    ADD_FAILURE() << "converted a broken checkpoint; expected an error mentioning " << needle;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
  }
  EXPECT_FALSE(fs::exists(out));
}

class BrokenCheckpoint : public ::testing::Test {
 protected:
  // A fresh checkpoint of `head`, then `edit` applied to its config.json.
  void fresh(Head head, const std::function<void(nlohmann::json&)>& edit = {},
             TinyParakeetSpec spec = {}) {
    spec.head = head;
    fs::remove_all(dir());
    testing::write_tiny_parakeet(dir(), spec);
    if (edit) edit_json("config.json", edit);
  }
  void edit_json(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    auto json = nlohmann::json::parse(testing::read_text(dir() / name));
    edit(json);
    testing::write_json(dir() / name, json);
  }
  // Rewrites model.safetensors with `edit` applied to the float values of tensor `name`.
  void edit_tensor(const std::string& name, const std::function<void(std::vector<float>&)>& edit) {
    auto checkpoint = safetensors::Checkpoint::open(dir().string());
    safetensors::Writer writer;
    for (const std::string& other : checkpoint.names()) {
      const safetensors::TensorView& view = checkpoint.tensor(other);
      std::vector<uint8_t> bytes(view.data, view.data + view.nbytes);
      if (other == name) {
        std::vector<float> values = testing::values_of(checkpoint, name);
        edit(values);
        bytes = testing::encode_values(values, view.type);
      }
      writer.add(other, view.type, view.shape, std::move(bytes));
    }
    checkpoint = {};
    writer.write((dir() / "model.safetensors").string());
  }
  // Adds tensor `name` of `shape` to the checkpoint.
  void add_tensor(const std::string& name, std::vector<int64_t> shape) {
    auto checkpoint = safetensors::Checkpoint::open(dir().string());
    safetensors::Writer writer;
    for (const std::string& other : checkpoint.names()) {
      const safetensors::TensorView& view = checkpoint.tensor(other);
      writer.add(other, view.type, view.shape,
                 std::vector<uint8_t>(view.data, view.data + view.nbytes));
    }
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    writer.add(name, safetensors::ElementType::F32, std::move(shape),
               std::vector<uint8_t>(count * 4));
    checkpoint = {};
    writer.write((dir() / "model.safetensors").string());
  }
  void expect_error(const std::string& needle) { expect_conversion_error(dir(), out(), needle); }

  fs::path dir() const { return temp_ / "tiny"; }
  fs::path out() const { return temp_ / "out.gguf"; }

  TempDir temp_;
};

TEST_F(BrokenCheckpoint, ConfigJson) {
  expect_conversion_error(temp_ / "nowhere", out(), "not a directory");

  fresh(Head::ctc);
  fs::remove(dir() / "config.json");
  expect_error("no config.json");

  fresh(Head::ctc);
  testing::write_text(dir() / "config.json", "{\"model_type\": ");
  expect_error("invalid JSON");

  fresh(Head::ctc, [](auto& c) { c["model_type"] = "parakeet_encoder"; });
  expect_error("model_type is \"parakeet_encoder\"");

  fresh(Head::ctc, [](auto& c) { c["architectures"] = {"ParakeetForTDT"}; });
  expect_error("model_type says ctc but architectures says tdt");

  fresh(Head::ctc, [](auto& c) { c["architectures"] = {"ParakeetEncoder"}; });
  expect_error("ParakeetEncoder");

  fresh(Head::rnnt, [](auto& c) { c.erase("model_type"); });  // architectures suffice
  convert_checkpoint(dir().string(), out().string(), DType::F16);
  EXPECT_EQ(gguf::File::open(out().string())->get_string("parakeet.head"), "rnnt");
  fs::remove(out());

  fresh(Head::ctc, [](auto& c) { c.erase("encoder_config"); });
  expect_error("missing 'encoder_config'");

  fresh(Head::ctc, [](auto& c) { c.erase("vocab_size"); });
  expect_error("missing 'vocab_size'");

  fresh(Head::ctc, [](auto& c) { c.erase("pad_token_id"); });
  expect_error("missing 'pad_token_id'");

  fresh(Head::ctc, [](auto& c) { c["pad_token_id"] = 500; });
  expect_error("'pad_token_id' is 500");

  fresh(Head::tdt, [](auto& c) { c.erase("blank_token_id"); });
  expect_error("missing 'blank_token_id'");

  fresh(Head::tdt, [](auto& c) { c.erase("durations"); });
  expect_error("missing 'durations'");

  fresh(Head::tdt, [](auto& c) { c["durations"] = {0, 1, -2}; });
  expect_error("'durations' holds -2");

  fresh(Head::rnnt, [](auto& c) { c.erase("decoder_hidden_size"); });
  expect_error("missing 'decoder_hidden_size'");

  fresh(Head::rnnt, [](auto& c) { c.erase("max_symbols_per_step"); });
  expect_error("missing 'max_symbols_per_step'");

  fresh(Head::tdt, [](auto& c) { c["joint_hidden_size"] = 32; });
  expect_error("joint_hidden_size 32 differs from decoder_hidden_size 24");

  fresh(Head::tdt, [](auto& c) { c["hidden_act"] = "tanh"; });
  expect_error("'hidden_act' is \"tanh\"");

  fresh(Head::ctc, [](auto& c) { c["encoder_config"]["hidden_act"] = "gelu"; });
  expect_error("'encoder_config.hidden_act' is \"gelu\"");

  fresh(Head::ctc, [](auto& c) { c["encoder_config"]["attention_type"] = "rel_pos_local_attn"; });
  expect_error("local attention is not implemented");

  fresh(Head::ctc, [](auto& c) { c["encoder_config"]["num_attention_heads"] = 3; });
  expect_error("not a multiple of num_attention_heads 3");

  fresh(Head::ctc, [](auto& c) { c["encoder_config"]["scale_input"] = "yes"; });
  expect_error("'encoder_config.scale_input' should be true or false");

  fresh(Head::ctc, [](auto& c) { c["encoder_config"]["hidden_size"] = 32.5; });
  expect_error("'encoder_config.hidden_size' should be an integer");
}

TEST_F(BrokenCheckpoint, TensorsDisagreeingWithTheConfig) {
  fresh(Head::tdt, [](auto& c) { c["encoder_config"]["intermediate_size"] = 96; });
  expect_error(
      "encoder.layers.0.feed_forward1.linear1.weight has shape [64, 32], config.json "
      "implies [96, 32]");

  fresh(Head::tdt, [](auto& c) { c["encoder_config"]["num_hidden_layers"] = 3; });
  expect_error("no tensor encoder.layers.2.");

  fresh(Head::tdt, [](auto& c) { c["encoder_config"]["num_hidden_layers"] = 1; });
  expect_error("the checkpoint has tensor encoder.layers.1.");

  fresh(Head::tdt, [](auto& c) { c["durations"] = {0, 1, 2, 3}; });
  expect_error("joint.head.weight has shape [49, 24], config.json implies [48, 24]");

  fresh(Head::ctc, [](auto& c) { c["encoder_config"]["attention_bias"] = false; });
  expect_error("config.json turns that bias off");

  TinyParakeetSpec no_bias;
  no_bias.attention_bias = false;
  fresh(
      Head::ctc, [](auto& c) { c["encoder_config"]["attention_bias"] = true; }, no_bias);
  expect_error("no tensor encoder.layers.0.feed_forward1.linear1.bias");

  fresh(Head::ctc, [](auto& c) { c["encoder_config"]["num_mel_bins"] = 128; });
  expect_error("feature_size 80 differs");

  fresh(Head::ctc);
  add_tensor("lm_head.weight", {4, 4});
  expect_error("lm_head.weight");

  fresh(Head::ctc);
  fs::remove(dir() / "model.safetensors");
  expect_error("model.safetensors");

  fresh(Head::ctc);
  edit_tensor("encoder.layers.1.conv.norm.running_var", [](auto& v) { v[3] = -0.5f; });
  expect_error("negative variance");

  fresh(Head::ctc);
  edit_tensor("encoder.subsampling.linear.bias", [](auto& v) { v[7] = std::nanf(""); });
  expect_error("encoder.subsampling.linear.bias holds nan");
}

TEST_F(BrokenCheckpoint, TokenizerAndFrontEnd) {
  fresh(Head::tdt);
  fs::remove(dir() / "tokenizer.json");
  expect_error("no tokenizer.json");

  fresh(Head::tdt);
  edit_json("tokenizer.json",
            [](auto& t) { t["added_tokens"].erase(t["added_tokens"].size() - 1); });
  expect_error("no token has id 43");  // the blank

  fresh(Head::tdt);
  edit_json("tokenizer.json", [](auto& t) { t["model"]["vocab"]["xyz"] = 44; });
  expect_error("token 'xyz' has id 44, outside config.json's vocab_size 44");

  fresh(Head::tdt);
  edit_json("tokenizer.json", [](auto& t) { t["model"]["vocab"]["xyz"] = 7; });
  expect_error("id 7 is both");

  fresh(Head::tdt);
  edit_json("tokenizer.json", [](auto& t) { t["model"]["type"] = "WordPiece"; });
  expect_error("model.type is \"WordPiece\"");

  fresh(Head::tdt);
  edit_json("preprocessor_config.json", [](auto& p) { p["hop_length"] = 128; });
  expect_error("hop_length is 128; hark's Parakeet front end implements 160");

  fresh(Head::tdt);
  edit_json("preprocessor_config.json",
            [](auto& p) { p["feature_extractor_type"] = "WhisperFeatureExtractor"; });
  expect_error("ParakeetFeatureExtractor");
}

// ---------------------------------------------------------------------------------------------
// `hark convert` picks the converter from config.json

TEST(ParakeetConvertCli, DispatchesOnConfigJson) {
  TempDir temp;
  testing::write_tiny_parakeet(temp / "parakeet", spec_for(Head::ctc));
  testing::write_tiny_whisper(temp / "whisper");
  for (const auto& [model, architecture] :
       {std::pair{"parakeet", "parakeet"}, std::pair{"whisper", "whisper"}}) {
    const std::string out = (temp / (std::string(model) + ".gguf")).string();
    const testing::ProcessResult result = testing::run_process(
        {HARK_CLI_PATH, "convert", (temp / model).string(), "-o", out, "--type", "f32"});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(result.err, "");
    EXPECT_EQ(gguf::File::open(out)->get_string("general.architecture"), architecture);
  }

  testing::write_json(temp / "parakeet" / "config.json",
                      {{"model_type", "wav2vec2"}, {"architectures", {"Wav2Vec2ForCTC"}}});
  const testing::ProcessResult refused = testing::run_process(
      {HARK_CLI_PATH, "convert", (temp / "parakeet").string(), "-o", (temp / "x.gguf").string()});
  EXPECT_EQ(refused.exit_code, 1);
  const auto lines = refused.err_lines();
  ASSERT_EQ(lines.size(), 1u) << refused.err;
  EXPECT_NE(lines[0].find("\"wav2vec2\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("ParakeetForTDT"), std::string::npos) << lines[0];
  EXPECT_FALSE(fs::exists(temp / "x.gguf"));
}

}  // namespace
}  // namespace hark::parakeet
