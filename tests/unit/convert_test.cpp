#include "models/whisper/convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>

#include "base/error.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "format/safetensors.h"
#include "models/whisper/model.h"
#include "support/tensor_values.h"
#include "support/tiny_whisper.h"

namespace hark::whisper {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::TinyWhisperSpec;
std::shared_ptr<const gguf::File> convert(const TempDir& temp, const TinyWhisperSpec& spec,
                                          DType type) {
  testing::write_tiny_whisper(temp / "tiny", spec);
  const std::string out = (temp / "tiny.gguf").string();
  convert_checkpoint((temp / "tiny").string(), out, type);
  return gguf::File::open(out);
}

TEST(Convert, WritesEveryKeyOfTheFormat) {
  TempDir temp;
  const auto file = convert(temp, {}, DType::F32);
  EXPECT_EQ(file->get_string("general.architecture"), "whisper");
  EXPECT_EQ(file->get_string("general.name"), "tiny");
  EXPECT_EQ(file->get_int("general.file_type"), 0);
  EXPECT_EQ(file->get_int("general.alignment"), 32);
  EXPECT_EQ(file->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(file->get_strings("tokenizer.ggml.tokens").size(), size_t{testing::kTinyVocabSize});

  EXPECT_EQ(file->get_int("whisper.vocab_size"), testing::kTinyVocabSize);
  EXPECT_EQ(file->get_int("whisper.n_mels"), 80);
  EXPECT_EQ(file->get_int("whisper.d_model"), 32);
  EXPECT_EQ(file->get_int("whisper.encoder.layers"), 1);
  EXPECT_EQ(file->get_int("whisper.encoder.heads"), 2);
  EXPECT_EQ(file->get_int("whisper.encoder.ffn_dim"), 64);
  EXPECT_EQ(file->get_int("whisper.decoder.layers"), 1);
  EXPECT_EQ(file->get_int("whisper.decoder.heads"), 2);
  EXPECT_EQ(file->get_int("whisper.decoder.ffn_dim"), 48);
  EXPECT_EQ(file->get_int("whisper.max_source_positions"), 1500);
  EXPECT_EQ(file->get_int("whisper.max_target_positions"), 64);

  EXPECT_EQ(file->get_int("whisper.token.eot"), 256);
  EXPECT_EQ(file->get_int("whisper.token.sot"), 257);
  EXPECT_EQ(file->get_int("whisper.token.translate"), 357);
  EXPECT_EQ(file->get_int("whisper.token.transcribe"), 358);
  EXPECT_EQ(file->get_int("whisper.token.sot_lm"), 359);
  EXPECT_EQ(file->get_int("whisper.token.sot_prev"), 360);
  EXPECT_EQ(file->get_int("whisper.token.no_speech"), 361);
  EXPECT_EQ(file->get_int("whisper.token.no_timestamps"), 362);
  EXPECT_EQ(file->get_int("whisper.token.timestamp_begin"), 363);
  const std::vector<std::string> languages = file->get_strings("whisper.languages");
  ASSERT_EQ(languages.size(), 99u);
  EXPECT_EQ(languages.front(), "en");
  EXPECT_EQ(languages[1], "zh");
  EXPECT_TRUE(file->get_bool("whisper.multilingual"));
  EXPECT_EQ(file->get_ints("whisper.suppress_tokens"), (std::vector<int64_t>{1, 2, 7, 257}));
  EXPECT_EQ(file->get_ints("whisper.begin_suppress_tokens"), (std::vector<int64_t>{220, 256}));
  EXPECT_EQ(file->get_int("whisper.max_initial_timestamp_index"), 50);
  EXPECT_EQ(file->get_int("whisper.sample_rate"), 16000);
  EXPECT_EQ(file->get_int("whisper.n_fft"), 400);
  EXPECT_EQ(file->get_int("whisper.hop_length"), 160);
  EXPECT_EQ(file->get_int("whisper.chunk_length"), 30);
}

TEST(Convert, F32KeepsEveryTensorExactlyUnderItsShortName) {
  TempDir temp;
  const TinyWhisperSpec spec;
  const auto file = convert(temp, spec, DType::F32);
  const auto checkpoint = safetensors::Checkpoint::open((temp / "tiny").string());
  const auto expected = testing::tiny_whisper_tensors(spec);
  ASSERT_EQ(file->tensors().size(), expected.size());
  for (const auto& [hf_name, shape] : expected) {
    const std::string name = hf_name.substr(std::string("model.").size());
    const gguf::TensorInfo* tensor = file->find_tensor(name);
    ASSERT_NE(tensor, nullptr) << name;
    EXPECT_EQ(tensor->shape, shape) << name;
    EXPECT_EQ(tensor->type, DType::F32) << name;
    EXPECT_EQ(testing::values_of(*tensor), testing::values_of(checkpoint, hf_name)) << name;
  }
  EXPECT_EQ(file->find_tensor("proj_out.weight"), nullptr);
}

TEST(Convert, F16AppliesToMatricesOnly) {
  TempDir temp;
  const auto file = convert(temp, {}, DType::F16);
  EXPECT_EQ(file->get_int("general.file_type"), 1);
  const auto checkpoint = safetensors::Checkpoint::open((temp / "tiny").string());
  for (const gguf::TensorInfo& tensor : file->tensors()) {
    const std::string& name = tensor.name;
    const bool matrix = name.ends_with("proj.weight") || name.ends_with("fc1.weight") ||
                        name.ends_with("fc2.weight") || name == "encoder.conv1.weight" ||
                        name == "encoder.conv2.weight" || name == "decoder.embed_tokens.weight";
    EXPECT_EQ(tensor.type, matrix ? DType::F16 : DType::F32) << tensor.name;
    const std::vector<float> original = testing::values_of(checkpoint, "model." + tensor.name);
    const std::vector<float> stored = testing::values_of(tensor);
    ASSERT_EQ(stored.size(), original.size());
    for (size_t i = 0; i < stored.size(); ++i) {
      const float expected =
          matrix ? quant::f16_to_f32(quant::f32_to_f16(original[i])) : original[i];
      ASSERT_EQ(stored[i], expected) << tensor.name << " element " << i;
    }
  }
}

TEST(Convert, Q8_0WhereRowsAreWholeBlocksAndF16Elsewhere) {
  TempDir temp;
  const auto file = convert(temp, {}, DType::Q8_0);
  EXPECT_EQ(file->get_int("general.file_type"), 7);
  EXPECT_EQ(file->tensor("encoder.layers.0.self_attn.q_proj.weight").type, DType::Q8_0);
  EXPECT_EQ(file->tensor("encoder.layers.0.fc1.weight").type, DType::Q8_0);  // [64, 32]
  EXPECT_EQ(file->tensor("encoder.layers.0.fc2.weight").type, DType::Q8_0);  // [32, 64]
  EXPECT_EQ(file->tensor("decoder.layers.0.fc1.weight").type, DType::Q8_0);  // [48, 32]
  EXPECT_EQ(file->tensor("decoder.layers.0.fc2.weight").type, DType::F16);   // [32, 48]
  EXPECT_EQ(file->tensor("encoder.conv1.weight").type, DType::F16);          // [32, 80, 3]
  EXPECT_EQ(file->tensor("decoder.embed_tokens.weight").type, DType::Q8_0);
  EXPECT_EQ(file->tensor("decoder.embed_positions.weight").type, DType::F32);
  EXPECT_EQ(file->tensor("decoder.layer_norm.weight").type, DType::F32);

  const auto checkpoint = safetensors::Checkpoint::open((temp / "tiny").string());
  const gguf::TensorInfo& q = file->tensor("decoder.layers.0.encoder_attn.v_proj.weight");
  const std::vector<float> original =
      testing::values_of(checkpoint, "model.decoder.layers.0.encoder_attn.v_proj.weight");
  const std::vector<float> stored = testing::values_of(q);
  for (size_t block = 0; block < original.size() / 32; ++block) {
    float max_abs = 0;
    for (size_t i = 0; i < 32; ++i)
      max_abs = std::max(max_abs, std::fabs(original[block * 32 + i]));
    for (size_t i = 0; i < 32; ++i) {
      // Each value is within half a quantization step (max|x|/127, rounded up to F16) of itself.
      ASSERT_NEAR(stored[block * 32 + i], original[block * 32 + i], max_abs / 127 * 0.51 + 1e-7);
    }
  }
}

TEST(Convert, Bf16AndF16CheckpointsAreAccepted) {
  for (const auto storage : {safetensors::ElementType::F16, safetensors::ElementType::BF16}) {
    TempDir temp;
    TinyWhisperSpec spec;
    spec.storage = storage;
    const auto file = convert(temp, spec, DType::F32);
    const auto checkpoint = safetensors::Checkpoint::open((temp / "tiny").string());
    for (const char* name : {"encoder.conv2.weight", "decoder.layers.0.final_layer_norm.bias"}) {
      EXPECT_EQ(testing::values_of(file->tensor(name)),
                testing::values_of(checkpoint, std::string("model.") + name))
          << name;
    }
  }
}

TEST(Convert, SameTypeIsCopiedBitForBit) {
  TempDir temp;
  TinyWhisperSpec spec;
  spec.storage = safetensors::ElementType::BF16;
  const auto file = convert(temp, spec, DType::BF16);
  const auto checkpoint = safetensors::Checkpoint::open((temp / "tiny").string());
  const gguf::TensorInfo& tensor = file->tensor("decoder.embed_tokens.weight");
  const safetensors::TensorView& view = checkpoint.tensor("model.decoder.embed_tokens.weight");
  EXPECT_EQ(tensor.type, DType::BF16);
  ASSERT_EQ(tensor.nbytes, view.nbytes);
  EXPECT_EQ(std::memcmp(tensor.data, view.data, view.nbytes), 0);
}

TEST(Convert, ShardedCheckpointGivesTheSameFile) {
  TempDir temp;
  TinyWhisperSpec sharded;
  sharded.shards = 3;
  testing::write_tiny_whisper(temp / "single");
  testing::write_tiny_whisper(temp / "sharded", sharded);
  ASSERT_TRUE(fs::exists(temp / "sharded" / "model.safetensors.index.json"));
  ASSERT_FALSE(fs::exists(temp / "sharded" / "model.safetensors"));
  convert_checkpoint((temp / "single").string(), (temp / "single.gguf").string(), DType::F16);
  convert_checkpoint((temp / "sharded").string(), (temp / "sharded.gguf").string(), DType::F16);
  testing::expect_same_tensors(*gguf::File::open((temp / "single.gguf").string()),
                               *gguf::File::open((temp / "sharded.gguf").string()));
}

TEST(Convert, ReportsProgressPerTensor) {
  TempDir temp;
  testing::write_tiny_whisper(temp / "tiny");
  std::vector<std::string> seen;
  int last_total = 0;
  convert_checkpoint((temp / "tiny").string(), (temp / "tiny.gguf").string(), DType::F16,
                     [&](int done, int total, std::string_view name) {
                       EXPECT_EQ(done, static_cast<int>(seen.size()));
                       last_total = total;
                       seen.emplace_back(name);
                     });
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(static_cast<int>(seen.size()), last_total + 1);  // one per tensor, then the end
  EXPECT_EQ(seen.front(), "encoder.conv1.weight");
}

TEST(Convert, MissingGenerationConfigGivesOpenaiDefaults) {
  TempDir temp;
  TinyWhisperSpec spec;
  spec.generation_config = false;
  const auto file = convert(temp, spec, DType::F32);
  // The tiny tokenizer has no merges, so a symbol of one ASCII character is one token (its byte),
  // longer symbols and " " + symbol are several and not suppressed, except that " -", " '" and
  // the musical symbols contribute their first token: the space byte and 0xE2.
  std::vector<int64_t> expected = {0x20, 0xE2, 257, 357, 358, 359, 360, 361};
  for (unsigned char c : std::string("\"#()*+/:;<=>@[\\]^_`{|}~")) expected.push_back(c);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(file->get_ints("whisper.suppress_tokens"), expected);
  EXPECT_EQ(file->get_ints("whisper.begin_suppress_tokens"), (std::vector<int64_t>{0x20, 256}));
  EXPECT_EQ(file->get_int("whisper.max_initial_timestamp_index"), 50);
  EXPECT_FALSE(file->get_bool("whisper.multilingual"));  // vocab_size < 51865
}

TEST(Convert, MissingPreprocessorConfigGivesWhispersFrontEnd) {
  TempDir temp;
  TinyWhisperSpec spec;
  spec.preprocessor_config = false;
  const auto file = convert(temp, spec, DType::F32);
  EXPECT_EQ(file->get_int("whisper.sample_rate"), 16000);
  EXPECT_EQ(file->get_int("whisper.chunk_length"), 30);
}

TEST(Convert, ExtraTensorsAndTiedProjOutAreLeftOut) {
  TempDir temp;
  TinyWhisperSpec spec;
  spec.shards = 2;
  testing::write_tiny_whisper(temp / "tiny", spec);
  // Add proj_out (tied) and an unrelated tensor in a third shard listed in the index.
  safetensors::Writer extra;
  extra.add("proj_out.weight", safetensors::ElementType::F32, {testing::kTinyVocabSize, 32},
            std::vector<uint8_t>(size_t{testing::kTinyVocabSize} * 32 * 4));
  extra.add("model.unused", safetensors::ElementType::F32, {2}, std::vector<uint8_t>(8));
  extra.write((temp / "tiny" / "extra.safetensors").string());
  auto index =
      nlohmann::json::parse(testing::read_text(temp / "tiny" / "model.safetensors.index.json"));
  index["weight_map"]["proj_out.weight"] = "extra.safetensors";
  index["weight_map"]["model.unused"] = "extra.safetensors";
  testing::write_json(temp / "tiny" / "model.safetensors.index.json", index);

  convert_checkpoint((temp / "tiny").string(), (temp / "tiny.gguf").string(), DType::F16);
  const auto file = gguf::File::open((temp / "tiny.gguf").string());
  EXPECT_EQ(file->find_tensor("proj_out.weight"), nullptr);
  EXPECT_EQ(file->find_tensor("unused"), nullptr);
  EXPECT_EQ(file->tensors().size(), testing::tiny_whisper_tensors(spec).size());
}

// Each broken checkpoint must fail with a hark::Error that names the problem, and leave no output.
void expect_conversion_error(const fs::path& dir, const fs::path& out, const std::string& needle) {
  try {
    convert_checkpoint(dir.string(), out.string(), DType::F16);
    ADD_FAILURE() << "converted a broken checkpoint; expected an error mentioning " << needle;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
  }
  EXPECT_FALSE(fs::exists(out));
}

TEST(Convert, RejectsBrokenCheckpoints) {
  TempDir temp;
  const fs::path dir = temp / "tiny";
  const fs::path out = temp / "out.gguf";
  auto fresh = [&] {
    fs::remove_all(dir);
    testing::write_tiny_whisper(dir);
  };
  auto edit_config = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto config = nlohmann::json::parse(testing::read_text(dir / "config.json"));
    edit(config);
    testing::write_json(dir / "config.json", config);
  };

  expect_conversion_error(temp / "nowhere", out, "not a directory");

  fresh();
  fs::remove(dir / "config.json");
  expect_conversion_error(dir, out, "config.json");

  fresh();
  testing::write_text(dir / "config.json", "{\"model_type\": \"whisper\",");
  expect_conversion_error(dir, out, "invalid JSON");

  fresh();
  edit_config([](auto& c) { c["model_type"] = "llama"; });
  expect_conversion_error(dir, out, "\"llama\"");

  fresh();
  edit_config([](auto& c) { c["architectures"] = {"WhisperForAudioClassification"}; });
  expect_conversion_error(dir, out, "WhisperForAudioClassification");

  fresh();
  edit_config([](auto& c) { c.erase("d_model"); });
  expect_conversion_error(dir, out, "missing 'd_model'");

  fresh();
  edit_config([](auto& c) { c["d_model"] = "32"; });
  expect_conversion_error(dir, out, "'d_model' should be an integer");

  fresh();
  edit_config([](auto& c) { c["encoder_attention_heads"] = 3; });
  expect_conversion_error(dir, out, "not a multiple of encoder_attention_heads");

  fresh();
  edit_config([](auto& c) { c["tie_word_embeddings"] = false; });
  expect_conversion_error(dir, out, "tie_word_embeddings");

  fresh();
  edit_config([](auto& c) { c["decoder_start_token_id"] = 1; });
  expect_conversion_error(dir, out, "decoder_start_token_id");

  fresh();
  edit_config([](auto& c) { c["eos_token_id"] = 257; });
  expect_conversion_error(dir, out, "eos_token_id");

  fresh();
  edit_config([](auto& c) { c["encoder_ffn_dim"] = 96; });  // the checkpoint's fc1 is [64, 32]
  expect_conversion_error(dir, out, "encoder.layers.0.fc1.weight has shape [64, 32]");

  fresh();
  edit_config([](auto& c) { c["decoder_layers"] = 2; });
  expect_conversion_error(dir, out, "no tensor model.decoder.layers.1.");

  fresh();
  edit_config([](auto& c) { c["num_mel_bins"] = 128; });  // preprocessor says 80
  expect_conversion_error(dir, out, "feature_size 80");

  fresh();
  edit_config([](auto& c) { c["max_source_positions"] = 750; });
  expect_conversion_error(dir, out, "mel frames");

  fresh();
  edit_config([](auto& c) { c["vocab_size"] = 1000; });  // fewer than the tokenizer's tokens
  expect_conversion_error(dir, out, "tokenizer has");

  fresh();
  fs::remove(dir / "tokenizer.json");
  expect_conversion_error(dir, out, "no tokenizer");

  fresh();
  fs::remove(dir / "model.safetensors");
  expect_conversion_error(dir, out, "model.safetensors");

  fresh();
  testing::write_json(dir / "generation_config.json", {{"suppress_tokens", {1, 999999}}});
  expect_conversion_error(dir, out, "999999");

  fresh();
  testing::write_json(dir / "generation_config.json", {{"lang_to_id", {{"<|en|>", 300}}}});
  expect_conversion_error(dir, out, "lang_to_id");
}

TEST(Convert, RejectsNonFiniteWeights) {
  TempDir temp;
  testing::write_tiny_whisper(temp / "tiny");
  // Rewrite one tensor with a NaN in it.
  auto checkpoint = safetensors::Checkpoint::open((temp / "tiny").string());
  safetensors::Writer writer;
  for (const std::string& name : checkpoint.names()) {
    const safetensors::TensorView& view = checkpoint.tensor(name);
    std::vector<uint8_t> bytes(view.data, view.data + view.nbytes);
    if (name == "model.encoder.conv1.bias") {
      const float nan = std::nanf("");
      std::memcpy(bytes.data() + 4 * 5, &nan, 4);
    }
    writer.add(name, view.type, view.shape, std::move(bytes));
  }
  checkpoint = {};
  writer.write((temp / "tiny" / "model.safetensors").string());
  // F32 -> F32 copies bytes as they are; any conversion looks at the values.
  expect_conversion_error(temp / "tiny", temp / "out.gguf", "encoder.conv1.bias");
}

// The checkpoints the oracle saved with transformers, when they are in the tree.
fs::path oracle_checkpoint(const char* name) {
  const fs::path dir = fs::path(HARK_TEST_DATA) / "whisper" / name;
  if (!fs::exists(dir / "config.json")) {
    std::cout << "skipping " << name << ": " << dir << " is not there\n";
    return {};
  }
  return dir;
}

TEST(Convert, OracleCheckpointsConvertAndLoad) {
  for (const char* name : {"tiny-random-tiny.en", "tiny-random-large-v3"}) {
    const fs::path dir = oracle_checkpoint(name);
    if (dir.empty()) continue;
    SCOPED_TRACE(name);
    TempDir temp;
    const fs::path out = temp / "model.gguf";
    convert_checkpoint(dir.string(), out.string(), DType::Q8_0);
    const auto file = gguf::File::open(out.string());
    const auto config = nlohmann::json::parse(testing::read_text(dir / "config.json"));
    const auto generation =
        nlohmann::json::parse(testing::read_text(dir / "generation_config.json"));
    const bool v3 = std::string(name).find("large-v3") != std::string::npos;
    EXPECT_EQ(file->get_int("whisper.vocab_size"), config["vocab_size"].get<int64_t>());
    EXPECT_EQ(file->get_int("whisper.n_mels"), v3 ? 128 : 80);
    EXPECT_EQ(file->get_int("whisper.token.sot"), config["decoder_start_token_id"].get<int64_t>());
    EXPECT_EQ(file->get_int("whisper.token.eot"), 50257 - (v3 ? 0 : 1));
    EXPECT_EQ(file->get_int("whisper.token.no_speech"), 50363 - (v3 ? 0 : 2));
    EXPECT_EQ(file->get_int("whisper.token.timestamp_begin"), 50365 - (v3 ? 0 : 2));
    EXPECT_EQ(file->get_strings("whisper.languages").size(), v3 ? 100u : 99u);
    EXPECT_EQ(file->get_bool("whisper.multilingual"), v3);
    EXPECT_EQ(file->get_ints("whisper.suppress_tokens"),
              generation["suppress_tokens"].get<std::vector<int64_t>>());
    EXPECT_EQ(file->tensor("decoder.embed_tokens.weight").type, DType::Q8_0);
    // What the converter writes is what the model loader reads.
    const auto model = Model::load(file);
    EXPECT_EQ(model->config().vocab_size, config["vocab_size"].get<int>());
    EXPECT_EQ(model->vocabulary().sot, file->get_int("whisper.token.sot"));
  }
}

// Without generation_config.json the converter computes openai-whisper's lists from the
// tokenizer; for the real vocabularies they must equal what Hugging Face ships.
TEST(Convert, DefaultSuppressListsMatchHuggingFaces) {
  for (const char* name : {"tiny-random-tiny.en", "tiny-random-large-v3"}) {
    const fs::path dir = oracle_checkpoint(name);
    if (dir.empty()) continue;
    SCOPED_TRACE(name);
    TempDir temp;
    const fs::path copy = temp / name;
    fs::create_directories(copy);
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string file = entry.path().filename().string();
      if (file != "generation_config.json" && !file.starts_with("reference")) {
        fs::copy_file(entry.path(), copy / file);
      }
    }
    convert_checkpoint(copy.string(), (temp / "model.gguf").string(), DType::F16);
    const auto file = gguf::File::open((temp / "model.gguf").string());
    const auto generation =
        nlohmann::json::parse(testing::read_text(dir / "generation_config.json"));
    EXPECT_EQ(file->get_ints("whisper.suppress_tokens"),
              generation["suppress_tokens"].get<std::vector<int64_t>>());
    EXPECT_EQ(file->get_ints("whisper.begin_suppress_tokens"),
              generation["begin_suppress_tokens"].get<std::vector<int64_t>>());
  }
}

}  // namespace
}  // namespace hark::whisper
