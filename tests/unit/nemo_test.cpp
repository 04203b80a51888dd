// NeMo `.nemo` import: each reader (tar, ZIP, torch pickle, YAML subset, SentencePiece) on
// archives written by tests/support/tiny_nemo.h, including its refusals, and the converter, whose
// GGUF must be the very file the Hugging Face route writes for the same model.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "format/gguf.h"
#include "format/sentencepiece.h"
#include "format/tar.h"
#include "format/torch_pickle.h"
#include "format/yaml_lite.h"
#include "format/zip.h"
#include "models/parakeet/convert.h"
#include "models/parakeet/layout.h"
#include "models/parakeet/nemo.h"
#include "support/process.h"
#include "support/tensor_values.h"
#include "support/tiny_nemo.h"
#include "support/tiny_parakeet.h"

namespace hark {
namespace {

namespace fs = std::filesystem;
using testing::Bytes;
using testing::TempDir;

Bytes bytes_of(const std::string& text) {
  return Bytes(text.begin(), text.end());
}

std::string text_of(std::span<const uint8_t> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Bytes read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// Runs `action` and expects a hark::Error whose message contains `needle`.
void expect_error(const std::function<void()>& action, const std::string& needle) {
  try {
    action();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos)
        << "message: " << error.what() << "\nexpected to contain: " << needle;
  }
}

// ---------------------------------------------------------------------------------------------
// tar

TEST(NemoTar, ListsRegularFilesWithLongNames) {
  const std::string long_name = "./" + std::string(150, 'x') + "_tokenizer.model";
  for (bool gnu : {true, false}) {
    const Bytes archive = testing::write_tar({{"./", {}, '5'},
                                              {"./model_config.yaml", bytes_of("a: 1\n")},
                                              {long_name, bytes_of("spm")},
                                              {"./empty", {}}},
                                             {gnu});
    const auto members = tar::list_members(archive, "t.nemo");
    ASSERT_EQ(members.size(), 3u);
    EXPECT_EQ(members[0].name, "model_config.yaml");
    EXPECT_EQ(members[1].name, long_name.substr(2));
    EXPECT_EQ(members[2].name, "empty");
    EXPECT_EQ(text_of(std::span(archive).subspan(members[0].offset, members[0].size)), "a: 1\n");
    EXPECT_EQ(text_of(std::span(archive).subspan(members[1].offset, members[1].size)), "spm");
    EXPECT_EQ(members[2].size, 0u);
    EXPECT_TRUE(tar::looks_like_tar(archive));
  }
  EXPECT_FALSE(tar::looks_like_tar(bytes_of(std::string(600, 'a'))));
}

TEST(NemoTar, RefusesTruncatedOrCorruptArchives) {
  const Bytes archive = testing::write_tar({{"weights.ckpt", Bytes(2000, 7)}});
  expect_error([&] { tar::list_members(std::span(archive).first(1200), "t.nemo"); },
               "truncated tar archive: 'weights.ckpt' at offset 0 needs 2000 bytes");
  expect_error([&] { tar::list_members(std::span(archive).first(300), "t.nemo"); },
               "partial header at offset 0");
  Bytes corrupt = archive;
  corrupt[10] ^= 1;
  expect_error([&] { tar::list_members(corrupt, "t.nemo"); }, "bad header checksum at offset 0");
  // Without the end blocks the archive still reads.
  EXPECT_EQ(tar::list_members(std::span(archive).first(512 + 2048), "t.nemo").size(), 1u);
}

TEST(NemoTar, Gunzip) {
  Bytes data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 % 251);
  const Bytes compressed = testing::gzip(data);
  ASSERT_TRUE(tar::is_gzip(compressed));
  EXPECT_EQ(tar::gunzip(compressed, "x.gz"), data);
  expect_error([&] { tar::gunzip(std::span(compressed).first(compressed.size() / 2), "x.gz"); },
               "truncated gzip stream");
  Bytes corrupt = compressed;
  corrupt[20] ^= 0xff;
  corrupt[21] ^= 0xff;
  expect_error([&] { tar::gunzip(corrupt, "x.gz"); }, "x.gz: ");
}

// ---------------------------------------------------------------------------------------------
// ZIP

TEST(NemoZip, ReadsStoredEntriesAndZip64) {
  for (bool zip64 : {false, true}) {
    const Bytes archive = testing::write_zip(
        {{"archive/data.pkl", bytes_of("pickle")}, {"archive/data/0", Bytes(1000, 3)}}, zip64);
    const zip::Archive zip(archive, "w.ckpt");
    ASSERT_EQ(zip.entries().size(), 2u);
    EXPECT_EQ(text_of(zip.data(*zip.find("archive/data.pkl"))), "pickle");
    const auto storage = zip.data(*zip.find("archive/data/0"));
    EXPECT_EQ(storage.size(), 1000u);
    EXPECT_EQ(storage[999], 3);
    EXPECT_EQ((storage.data() - archive.data()) % 64, 0);  // the padding was skipped
    EXPECT_EQ(zip.find("archive/data/1"), nullptr);
  }
}

TEST(NemoZip, RefusesCompressedEntriesAndBrokenArchives) {
  const Bytes archive = testing::write_zip({{"a/data.pkl", bytes_of("x"), 8}}, false);
  const zip::Archive zip(archive, "w.ckpt");
  expect_error([&] { zip.data(zip.entries()[0]); }, "a/data.pkl is compressed (ZIP method 8)");
  expect_error([] { zip::Archive(bytes_of(std::string(100, 'x')), "w.ckpt"); },
               "not a ZIP archive (no end of central directory record)");
  Bytes shifted = testing::write_zip({{"a/data.pkl", Bytes(500, 1)}}, false);
  shifted.erase(shifted.begin(), shifted.begin() + 100);
  expect_error([&] { zip::Archive(shifted, "w.ckpt"); }, "w.ckpt: the ZIP central directory");
}

// ---------------------------------------------------------------------------------------------
// torch pickle

std::vector<testing::NemoTensor> three_tensors() {
  std::vector<testing::NemoTensor> tensors(3);
  tensors[0].pickled = {"encoder.w", safetensors::ElementType::F32, {2, 3}, {}, "", 0};
  tensors[0].bytes.resize(24);
  for (size_t i = 0; i < 6; ++i) {
    const float value = float(i) + 0.5f;
    std::memcpy(tensors[0].bytes.data() + 4 * i, &value, 4);
  }
  tensors[1].pickled = {"encoder.b", safetensors::ElementType::F16, {4}, {}, "", 0};
  tensors[1].bytes.assign(8, 0x3c);
  tensors[2].pickled = {"norm.num_batches_tracked", safetensors::ElementType::I64, {}, {}, "", 0};
  tensors[2].bytes.assign(8, 0);
  return tensors;
}

TEST(TorchPickle, ReadsTheStateDictOfACheckpoint) {
  for (bool shared : {false, true}) {
    const Bytes checkpoint = testing::write_torch_checkpoint(three_tensors(), false, shared);
    const auto views = torch::read_checkpoint(checkpoint, "w.ckpt");
    ASSERT_EQ(views.size(), 3u);
    EXPECT_EQ(views[0].name, "encoder.w");
    EXPECT_EQ(views[0].type, safetensors::ElementType::F32);
    EXPECT_EQ(views[0].shape, (std::vector<int64_t>{2, 3}));
    float last;
    std::memcpy(&last, views[0].data + 20, 4);
    EXPECT_EQ(last, 5.5f);
    EXPECT_EQ(views[1].type, safetensors::ElementType::F16);
    EXPECT_EQ(views[1].nbytes, 8u);
    EXPECT_EQ(views[1].data[7], 0x3c);
    EXPECT_EQ(views[2].type, safetensors::ElementType::I64);
    EXPECT_TRUE(views[2].shape.empty());
  }
  testing::PickleWriter writer;
  writer.add({"a", safetensors::ElementType::BF16, {5, 1, 2}, {}, "7", 3});
  const auto records = torch::read_state_dict_pickle(writer.finish(), "data.pkl");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].storage_key, "7");
  EXPECT_EQ(records[0].storage_offset, 3);
  EXPECT_EQ(records[0].strides, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(records[0].type, safetensors::ElementType::BF16);
}

TEST(TorchPickle, RefusesWhatAStateDictDoesNotHold) {
  expect_error(
      [] {
        torch::read_state_dict_pickle(Bytes{0x80, 2, 0xff}, "data.pkl");
      },
      "data.pkl: pickle byte 2: unknown or unsupported pickle opcode 0xff");
  Bytes code = {0x80, 2};
  testing::append(code, "cos\nsystem\nq\x00X\x02\x00\x00\x00ls\x85R.");
  expect_error([&] { torch::read_state_dict_pickle(code, "data.pkl"); },
               "names os.system, which a PyTorch state dict does not use");
  expect_error(
      [] {
        torch::read_state_dict_pickle(Bytes{0x80, 2, 'X', 9, 0, 0, 0, 'a'}, "p");
      },
      "truncated pickle");
  expect_error(
      [] {
        torch::read_state_dict_pickle(Bytes{0x80, 2, 'K', 1, '.'}, "p");
      },
      "the pickle holds a int, not a state dict");

  testing::PickleWriter transposed;
  transposed.add({"w", safetensors::ElementType::F32, {2, 3}, {1, 2}, "0", 0});
  expect_error([&] { torch::read_state_dict_pickle(transposed.finish(), "data.pkl"); },
               "tensor w is not contiguous (shape [2, 3], strides [1, 2])");

  std::vector<testing::NemoTensor> tensors = three_tensors();
  tensors[0].bytes.resize(20);  // one float short
  expect_error(
      [&] {
        torch::read_checkpoint(testing::write_torch_checkpoint(tensors, false, false), "w.ckpt");
      },
      "tensor encoder.w (6 elements from element 0) overruns its storage of 20 bytes");
  expect_error(
      [] {
        torch::read_checkpoint(Bytes{0x80, 2, 0x8a, 10}, "w.ckpt");
      },
      "legacy (pre-1.6, non-ZIP) torch.save file");
}

// ---------------------------------------------------------------------------------------------
// YAML

// As PyYAML 6 dumps it (yaml.dump(..., default_flow_style=False, allow_unicode=True,
// sort_keys=False)), OmegaConf's settings.
constexpr std::string_view kPyYamlDump = R"(name: FastConformer-TDT
labels:
- <unk>
- ▁the
- ''''
- '"'
- ':'
- '- a'
- '#'
- 'a: b'
- ''
- 'yes'
- '1.5'
- \
- "tab\there"
- ü
encoder:
  d_model: 1024
  xscaling: false
  dropout: 1.0e-05
  att_context_size:
  - -1
  - -1
  conv_context_size: null
  stride: 0.01
long: 'word word word word word word word word word word word word word word word
  word word word word word word word word word word word word word word word '
nested:
- a: 1
  b:
  - 1
  - 2
- c: x
empty_list: []
empty_map: {}
)";

TEST(YamlLite, ReadsPyYamlOutput) {
  const yaml::Node root = yaml::parse(kPyYamlDump, "c.yaml");
  ASSERT_TRUE(root.is_mapping());
  EXPECT_EQ(root.find("name")->text(), "FastConformer-TDT");
  const std::vector<std::string> labels = {"<unk>", "\u2581the", "'",         "\"",    ":",
                                           "- a",   "#",         "a: b",      "",      "yes",
                                           "1.5",   "\\",        "tab\there", "\u00fc"};
  const yaml::Node& list = *root.find("labels");
  ASSERT_EQ(list.items().size(), labels.size());
  for (size_t i = 0; i < labels.size(); ++i) EXPECT_EQ(list.items()[i].text(), labels[i]) << i;
  EXPECT_FALSE(list.items()[9].as_bool());  // quoted: a string, not a boolean
  EXPECT_FALSE(list.items()[10].as_float());
  const yaml::Node& encoder = *root.find("encoder");
  EXPECT_EQ(encoder.find("d_model")->as_int(), 1024);
  EXPECT_EQ(encoder.find("xscaling")->as_bool(), false);
  EXPECT_EQ(encoder.find("dropout")->as_float(), 1.0e-05);
  EXPECT_EQ(encoder.find("stride")->as_float(), 0.01);
  EXPECT_EQ(encoder.find("att_context_size")->items().at(1).as_int(), -1);
  EXPECT_TRUE(encoder.find("conv_context_size")->is_null());
  std::string words;
  for (int i = 0; i < 30; ++i) words += "word ";
  EXPECT_EQ(root.find("long")->text(), words);
  EXPECT_EQ(root.find_path("nested")->items().at(0).find("b")->items().at(1).as_int(), 2);
  EXPECT_EQ(root.find_path("nested")->items().at(1).find("c")->text(), "x");
  EXPECT_TRUE(root.find("empty_list")->is_sequence());
  EXPECT_TRUE(root.find("empty_list")->items().empty());
  EXPECT_TRUE(root.find("empty_map")->is_mapping());
}

TEST(YamlLite, FlowBlockScalarsInterpolationAndErrors) {
  const yaml::Node root = yaml::parse(
      "---\n# comment\ndefaults: {hidden: 640, durations: [0, 1, 2]}  # trailing\n"
      "decoder:\n  hidden: ${defaults.hidden}\n  durations: ${defaults.durations}\n"
      "  missing: ${nowhere.x}\n"
      "text: |\n  line one\n  line two\n"
      "folded: >-\n  a\n  b\n"
      "escapes: \"\\x41\\u00e9\\\\ \\\"q\\\"\"\n"
      "plain: a\n  continued\n",
      "c.yaml");
  EXPECT_EQ(root.find_path("decoder.hidden")->as_int(), 640);
  EXPECT_EQ(root.find_path("decoder.durations")->items().size(), 3u);
  EXPECT_EQ(root.find_path("decoder.missing")->text(), "${nowhere.x}");
  EXPECT_EQ(root.find("text")->text(), "line one\nline two\n");
  EXPECT_EQ(root.find("folded")->text(), "a b");
  EXPECT_EQ(root.find("escapes")->text(), "A\u00e9\\ \"q\"");
  EXPECT_EQ(root.find("plain")->text(), "a continued");

  expect_error([] { yaml::parse("a: &x 1\nb: *x\n", "c.yaml"); },
               "c.yaml:1:4: anchors, aliases and tags are not supported");
  expect_error([] { yaml::parse("a:\n  b: 1\n   c: 2\n", "c.yaml"); }, "c.yaml:3:");
  expect_error([] { yaml::parse("a: 'open\n", "c.yaml"); }, "unterminated quoted string");
  expect_error([] { yaml::parse("a: [1, 2\n", "c.yaml"); }, "unterminated flow collection");
}

// ---------------------------------------------------------------------------------------------
// SentencePiece

TEST(SentencePiece, ReadsPiecesScoresAndTypes) {
  const Bytes model = testing::write_sentencepiece(
      {{"<unk>", 0.0f, 2}, {"<pad>", 0.0f, 3}, {"\u2581the", -1.5f, 1}, {"<0x41>", 0.0f, 6}});
  const auto pieces = sentencepiece::read_pieces(model, "t.model");
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].type, sentencepiece::PieceType::unknown);
  EXPECT_EQ(pieces[1].type, sentencepiece::PieceType::control);
  EXPECT_EQ(pieces[2].text, "\u2581the");
  EXPECT_EQ(pieces[2].score, -1.5f);
  EXPECT_EQ(pieces[2].type, sentencepiece::PieceType::normal);
  EXPECT_EQ(pieces[3].type, sentencepiece::PieceType::byte);

  expect_error([&] { sentencepiece::read_pieces(std::span(model).first(model.size() - 3), "t"); },
               "truncated");
  expect_error([] { sentencepiece::read_pieces(Bytes{0x0b}, "t.model"); }, "wire type 3");
  expect_error([] { sentencepiece::read_pieces(Bytes{}, "t.model"); }, "has no pieces");
}

// ---------------------------------------------------------------------------------------------
// The converter

using parakeet::Head;
constexpr Head kHeads[] = {Head::ctc, Head::rnnt, Head::tdt};

testing::TinyParakeetSpec spec_for(Head head) {
  testing::TinyParakeetSpec spec;
  spec.head = head;
  return spec;
}

// Converts `hf_dir` through the HF route and `nemo` through the .nemo route; the files must be
// identical (general.name comes from the directory and the archive's stem, named alike here).
void expect_same_gguf(const fs::path& hf_dir, const fs::path& nemo, const TempDir& temp,
                      DType type) {
  const fs::path from_hf = temp / "from-hf.gguf";
  const fs::path from_nemo = temp / "from-nemo.gguf";
  parakeet::convert_checkpoint(hf_dir.string(), from_hf.string(), type);
  parakeet::convert_nemo(nemo.string(), from_nemo.string(), type);
  const Bytes expected = read_file(from_hf);
  const Bytes actual = read_file(from_nemo);
  if (expected == actual) return;
  ADD_FAILURE() << "the GGUFs differ (" << expected.size() << " and " << actual.size() << " bytes)";
  const auto hf_file = gguf::File::open(from_hf.string());
  const auto nemo_file = gguf::File::open(from_nemo.string());
  for (const auto& [key, value] : hf_file->metadata()) {
    const gguf::Value* other = nemo_file->find(key);
    EXPECT_TRUE(other != nullptr && other->data == value.data) << "key " << key;
  }
  testing::expect_same_tensors(*hf_file, *nemo_file);
}

TEST(NemoConvert, SameGgufAsTheHuggingFaceRoute) {
  for (Head head : kHeads) {
    for (DType type : {DType::F32, DType::Q8_0}) {
      SCOPED_TRACE(std::string(parakeet::head_name(head)) + " " + std::string(dtype_name(type)));
      TempDir temp;
      testing::write_tiny_parakeet(temp / "tiny", spec_for(head));
      testing::write_nemo(temp / "tiny.nemo", testing::nemo_parts_from_hf(temp / "tiny"));
      expect_same_gguf(temp / "tiny", temp / "tiny.nemo", temp, type);
    }
  }
}

TEST(NemoConvert, SameGgufForTheReferenceModels) {
  for (const char* model : {"tiny-random-ctc", "tiny-random-rnnt", "tiny-random-tdt"}) {
    SCOPED_TRACE(model);
    const fs::path dir = fs::path(HARK_TEST_DATA) / "parakeet" / model;
    if (!fs::exists(dir / "model.safetensors")) GTEST_SKIP() << dir << " is missing";
    TempDir temp;
    const fs::path nemo = temp / (std::string(model) + ".nemo");
    testing::write_nemo(nemo, testing::nemo_parts_from_hf(dir));
    expect_same_gguf(dir, nemo, temp, DType::F16);
  }
}

TEST(NemoConvert, EveryArchiveLayoutGivesTheSameFile) {
  TempDir temp;
  testing::TinyParakeetSpec spec = spec_for(Head::tdt);
  spec.storage = safetensors::ElementType::BF16;
  testing::write_tiny_parakeet(temp / "tiny", spec);
  const testing::NemoParts parts = testing::nemo_parts_from_hf(temp / "tiny");
  testing::NemoArchiveOptions options;
  options.compress = true;
  options.zip64 = true;
  options.dot_slash = false;
  options.long_names = true;
  options.share_storages = true;
  for (bool gnu : {true, false}) {
    options.gnu_long_names = gnu;
    testing::write_nemo(temp / "tiny.nemo", parts, options);
    expect_same_gguf(temp / "tiny", temp / "tiny.nemo", temp, DType::F16);
  }
}

TEST(NemoConvert, NamesMapToTransformersNames) {
  for (Head head : kHeads) {
    for (const auto& [name, shape] : testing::tiny_parakeet_tensors(spec_for(head))) {
      const std::string nemo = testing::nemo_tensor_name(name);
      EXPECT_EQ(parakeet::hf_tensor_name(nemo), name) << nemo;
    }
  }
  EXPECT_EQ(parakeet::hf_tensor_name("encoder.layers.3.self_attn.linear_pos.weight"),
            "encoder.layers.3.self_attn.relative_k_proj.weight");
  EXPECT_EQ(parakeet::hf_tensor_name("joint.joint_net.2.bias"), "joint.head.bias");
}

TEST(NemoConvert, CliConvertsANemoFile) {
  TempDir temp;
  testing::write_tiny_parakeet(temp / "tiny", spec_for(Head::rnnt));
  testing::write_nemo(temp / "model.nemo", testing::nemo_parts_from_hf(temp / "tiny"));
  const std::string out = (temp / "out.gguf").string();
  const testing::ProcessResult result =
      testing::run_process({HARK_CLI_PATH, "convert", (temp / "model.nemo").string(), "-o", out});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto file = gguf::File::open(out);
  EXPECT_EQ(file->get_string("parakeet.head"), "rnnt");
  EXPECT_EQ(file->get_string("general.name"), "model");
  EXPECT_EQ(file->get_strings("tokenizer.ggml.tokens").back(), "<blank>");
}

// A .nemo of the tiny TDT model, edited, must be refused with `needle` in the message.
class BrokenNemo : public ::testing::Test {
 protected:
  BrokenNemo() {
    testing::write_tiny_parakeet(temp_ / "tiny", spec_for(Head::tdt));
    parts_ = testing::nemo_parts_from_hf(temp_ / "tiny");
  }
  void expect_refused(const testing::NemoParts& parts, const std::string& needle) {
    testing::write_nemo(temp_ / "m.nemo", parts);
    expect_error(
        [&] {
          parakeet::convert_nemo((temp_ / "m.nemo").string(), (temp_ / "o.gguf").string(),
                                 DType::F16);
        },
        needle);
    EXPECT_FALSE(fs::exists(temp_ / "o.gguf"));
  }
  void expect_yaml_refused(const std::string& from, const std::string& to,
                           const std::string& needle) {
    testing::NemoParts parts = parts_;
    const size_t at = parts.yaml.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    parts.yaml.replace(at, from.size(), to);
    expect_refused(parts, needle);
  }
  testing::NemoTensor* tensor(testing::NemoParts& parts, const std::string& name) {
    for (auto& t : parts.tensors) {
      if (t.pickled.name == name) return &t;
    }
    ADD_FAILURE() << "no tensor " << name;
    return &parts.tensors[0];
  }

  TempDir temp_;
  testing::NemoParts parts_;
};

TEST_F(BrokenNemo, Config) {
  expect_yaml_refused("subsampling: dw_striding", "subsampling: striding",
                      "'encoder.subsampling' is striding; hark implements dw_striding only");
  expect_yaml_refused("  - -1\n  - -1\n", "  - 128\n  - 128\n",
                      "'encoder.att_context_size' is [128, 128]");
  expect_yaml_refused("window_stride: 0.01", "window_stride: 0.02",
                      "'preprocessor.window_stride' gives 320 samples");
  expect_yaml_refused("normalize: per_feature", "normalize: all_features",
                      "'preprocessor.normalize' is all_features");
  expect_yaml_refused("  feat_in: 80", "  feat_in: 64",
                      "'encoder.feat_in' 64 differs from 'preprocessor.features' 80");
  expect_yaml_refused("activation: relu", "activation: tanh",
                      "'joint.jointnet.activation' is tanh");
  expect_yaml_refused("num_extra_outputs: 5", "num_extra_outputs: 4",
                      "'joint.num_extra_outputs' 4 differs from the 5 TDT durations");
  expect_yaml_refused("  vocab_size: 43", "  vocab_size: 40",
                      "'vocab_size' of the decoder is 40, but the tokenizer has 43 pieces");
  expect_yaml_refused("labels:\n- '<unk>'\n", "labels:\n", "'labels' holds 42 tokens, but");
  expect_yaml_refused("RNNTDecoder\n", "RNNTDecoder\n  prednet: null\n",
                      "the decoder is RNNTDecoder; hark converts CTC");
  expect_yaml_refused("    pred_rnn_layers: 2", "    pred_rnn_layers: two",
                      "'decoder.prednet.pred_rnn_layers' should be an integer, found two");
  expect_yaml_refused("d_model: 32", "d_model: 32\n  stray text", "expected 'key: value'");
}

TEST_F(BrokenNemo, TensorsAndArchive) {
  testing::NemoParts parts = parts_;
  parts.tensors.pop_back();  // joint.joint_net.2.weight (the last in name order)
  expect_refused(parts, "the checkpoint has no tensor for joint.head.weight [49, 24]");

  parts = parts_;
  tensor(parts, "encoder.layers.1.self_attn.linear_q.weight")->pickled.strides = {1, 32};
  expect_refused(parts, "tensor encoder.layers.1.self_attn.linear_q.weight is not contiguous");

  parts = parts_;
  parts.tensors.push_back(*tensor(parts, "joint.enc.bias"));
  parts.tensors.back().pickled.name = "joint.extra.bias";
  expect_refused(parts,
                 "the checkpoint has tensor joint.extra.bias (joint.extra.bias), which a "
                 "tdt model as model_config.yaml describes it does not have");

  expect_yaml_refused("use_bias: true", "use_bias: false", "(encoder.use_bias is false)");
  expect_yaml_refused("ff_expansion_factor: 2", "ff_expansion_factor: 3",
                      "feed_forward1.linear1.weight has shape [64, 32], model_config.yaml implies "
                      "[96, 32]");

  parts = parts_;
  const size_t at = parts.yaml.find("model: nemo:TOKENIZER");
  parts.yaml.replace(at, 21, "model: nemo:absent.model");
  testing::write_nemo(temp_ / "m.nemo", parts);
  // The config's name is missing; the only *.model member is used.
  parakeet::convert_nemo((temp_ / "m.nemo").string(), (temp_ / "o.gguf").string(), DType::F16);
  EXPECT_TRUE(fs::exists(temp_ / "o.gguf"));

  testing::write_text(temp_ / "plain.nemo", "not an archive at all, just text");
  expect_error(
      [&] { parakeet::convert_nemo((temp_ / "plain.nemo").string(), "x.gguf", DType::F16); },
      "not a .nemo archive");
  const Bytes no_weights = testing::write_tar({{"./model_config.yaml", bytes_of(parts_.yaml)}});
  std::ofstream(temp_ / "nw.nemo", std::ios::binary)
      .write(reinterpret_cast<const char*>(no_weights.data()), no_weights.size());
  expect_error([&] { parakeet::convert_nemo((temp_ / "nw.nemo").string(), "x.gguf", DType::F16); },
               "no SentencePiece tokenizer (*.model); it holds model_config.yaml");
}

}  // namespace
}  // namespace hark
