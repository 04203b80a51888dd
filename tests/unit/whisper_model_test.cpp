// The Whisper model on a tiny random model written here as GGUF: loading and its checks, and the
// consistency of the decoder (prefill vs one token at a time, parallel sequences, beam reorder).
// Agreement with transformers is tests/parity/whisper_model_parity_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "models/whisper/model.h"
#include "support/compare.h"
#include "support/tiny_whisper.h"

namespace hark::whisper {
namespace {

constexpr int kMels = 16, kWidth = 64, kHeads = 4, kFfn = 128, kLayers = 2;
constexpr int kVocab = 100, kSource = 20, kTarget = 16;
constexpr int32_t kEot = 50, kSot = 51, kEnglish = 52, kTranscribe = 55, kNoTimestamps = 59;

struct TinyModel {
  DType type = DType::F32;
  std::string omit_tensor;     // leave this tensor out
  std::string omit_key;        // leave this key out
  std::string reshape_tensor;  // give this tensor one extra row
  std::string architecture = "whisper";
  int heads = kHeads;
};

std::vector<float> random_values(const std::string& name, int64_t count, float scale,
                                 float offset) {
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(name)));
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = offset + uniform(rng);
  return values;
}

void write_tiny_model(const std::string& path, const TinyModel& spec) {
  gguf::Writer writer;
  auto set_u32 = [&](const std::string& key, uint32_t value) {
    if (key != spec.omit_key) writer.set_u32(key, value);
  };
  auto set_i32 = [&](const std::string& key, int32_t value) {
    if (key != spec.omit_key) writer.set_i32(key, value);
  };
  writer.set_string("general.architecture", spec.architecture);
  set_u32("whisper.vocab_size", kVocab);
  set_u32("whisper.n_mels", kMels);
  set_u32("whisper.d_model", kWidth);
  set_u32("whisper.encoder.layers", kLayers);
  set_u32("whisper.encoder.heads", spec.heads);
  set_u32("whisper.encoder.ffn_dim", kFfn);
  set_u32("whisper.decoder.layers", kLayers);
  set_u32("whisper.decoder.heads", spec.heads);
  set_u32("whisper.decoder.ffn_dim", kFfn);
  set_u32("whisper.max_source_positions", kSource);
  set_u32("whisper.max_target_positions", kTarget);
  set_i32("whisper.token.eot", kEot);
  set_i32("whisper.token.sot", kSot);
  set_i32("whisper.token.translate", 54);
  set_i32("whisper.token.transcribe", kTranscribe);
  set_i32("whisper.token.sot_lm", 56);
  set_i32("whisper.token.sot_prev", 57);
  set_i32("whisper.token.no_speech", 58);
  set_i32("whisper.token.no_timestamps", kNoTimestamps);
  set_i32("whisper.token.timestamp_begin", 60);
  writer.set_strings("whisper.languages", {"en", "de"});
  writer.set_bool("whisper.multilingual", true);
  writer.set_i32s("whisper.suppress_tokens", {1, 2, 3});
  writer.set_i32s("whisper.begin_suppress_tokens", {kEot});

  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool matrix,
                 float scale = 0.3f, float offset = 0.0f) {
    if (name == spec.omit_tensor) return;
    if (name == spec.reshape_tensor) shape[0] += 1;
    // Conv kernels have 3-value rows, which Q8_0 cannot hold: they stay F16, as in conversions.
    DType type = matrix ? spec.type : DType::F32;
    if (type == DType::Q8_0 && shape.back() % 32 != 0) type = DType::F16;
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    writer.add_tensor(name, type, shape, [=] {
      const std::vector<float> values = random_values(name, count, scale, offset);
      return quant::from_f32(type, values.data(), values.size());
    });
  };
  auto norm = [&](const std::string& prefix) {
    add(prefix + ".weight", {kWidth}, false, 0.1f, 1.0f);
    add(prefix + ".bias", {kWidth}, false, 0.05f);
  };
  auto attention = [&](const std::string& prefix) {
    for (const char* projection : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(prefix + "." + projection + ".weight", {kWidth, kWidth}, true, 0.2f);
      if (std::string(projection) != "k_proj") {
        add(prefix + "." + projection + ".bias", {kWidth}, false, 0.05f);
      }
    }
  };
  auto ffn = [&](const std::string& prefix) {
    add(prefix + ".fc1.weight", {kFfn, kWidth}, true, 0.2f);
    add(prefix + ".fc1.bias", {kFfn}, false, 0.05f);
    add(prefix + ".fc2.weight", {kWidth, kFfn}, true, 0.15f);
    add(prefix + ".fc2.bias", {kWidth}, false, 0.05f);
    norm(prefix + ".final_layer_norm");
  };
  add("encoder.conv1.weight", {kWidth, kMels, 3}, true, 0.2f);
  add("encoder.conv1.bias", {kWidth}, false, 0.05f);
  add("encoder.conv2.weight", {kWidth, kWidth, 3}, true, 0.1f);
  add("encoder.conv2.bias", {kWidth}, false, 0.05f);
  add("encoder.embed_positions.weight", {kSource, kWidth}, false, 0.5f);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "encoder.layers." + std::to_string(l);
    attention(p + ".self_attn");
    norm(p + ".self_attn_layer_norm");
    ffn(p);
  }
  norm("encoder.layer_norm");
  add("decoder.embed_tokens.weight", {kVocab, kWidth}, true, 0.5f);
  add("decoder.embed_positions.weight", {kTarget, kWidth}, false, 0.5f);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l);
    attention(p + ".self_attn");
    norm(p + ".self_attn_layer_norm");
    attention(p + ".encoder_attn");
    norm(p + ".encoder_attn_layer_norm");
    ffn(p);
  }
  norm("decoder.layer_norm");
  writer.write(path);
}

// A default tiny model with one field changed.
template <class Field, class Value>
TinyModel tiny_with(Field TinyModel::*field, Value value) {
  TinyModel spec;
  spec.*field = value;
  return spec;
}

std::unique_ptr<Model> load_tiny(const testing::TempDir& temp, const TinyModel& spec = {}) {
  const std::string path = (temp / "tiny.gguf").string();
  write_tiny_model(path, spec);
  return Model::load(gguf::File::open(path));
}

std::vector<float> tiny_mel(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> mel(kMels * 2 * kSource);
  for (float& v : mel) v = normal(rng);
  return mel;
}

using hark::testing::relative_error;

std::span<const float> row(const std::vector<float>& logits, size_t index) {
  return std::span<const float>(logits).subspan(index * kVocab, kVocab);
}

// Expects a hark::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& action, const std::vector<std::string>& parts) {
  try {
    action();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << e.what() << "' does not mention '" << part << "'";
    }
  }
}

TEST(WhisperModel, ReadsConfigAndVocabulary) {
  testing::TempDir temp;
  const auto model = load_tiny(temp);
  const Config& c = model->config();
  EXPECT_EQ(c.n_mels, kMels);
  EXPECT_EQ(c.d_model, kWidth);
  EXPECT_EQ(c.vocab_size, kVocab);
  EXPECT_EQ(c.encoder_layers, kLayers);
  EXPECT_EQ(c.decoder_heads, kHeads);
  EXPECT_EQ(c.decoder_ffn, kFfn);
  EXPECT_EQ(c.max_source_positions, kSource);
  EXPECT_EQ(c.max_target_positions, kTarget);
  EXPECT_EQ(c.window_frames(), 2 * kSource);

  const Vocabulary& v = model->vocabulary();
  EXPECT_EQ(v.eot, kEot);
  EXPECT_EQ(v.sot, kSot);
  EXPECT_EQ(v.transcribe, kTranscribe);
  EXPECT_EQ(v.no_timestamps, kNoTimestamps);
  EXPECT_EQ(v.timestamp_begin, 60);
  EXPECT_EQ(v.first_language, kEnglish);
  EXPECT_EQ(v.language_token("en"), kEnglish);
  EXPECT_EQ(v.language_token("DE"), kEnglish + 1);
  expect_error([&] { v.language_token("xx"); }, {"xx", "en de"});
  EXPECT_EQ(v.suppress_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(v.begin_suppress_tokens, (std::vector<int32_t>{kEot}));
  EXPECT_TRUE(v.multilingual);
  EXPECT_TRUE(v.is_timestamp(61));
  EXPECT_FALSE(v.is_timestamp(kEot));
}

TEST(WhisperModel, EncodesOneWindow) {
  testing::TempDir temp;
  const auto model = load_tiny(temp);
  const auto window = model->encode(tiny_mel(1));
  const std::vector<float> frames = window->frames();
  ASSERT_EQ(frames.size(), size_t(kSource * kWidth));
  for (float v : frames) ASSERT_TRUE(std::isfinite(v));
  // After the final layer norm each frame has mean ~ its bias mean, not a copy of the input.
  EXPECT_NE(frames[0], frames[kWidth]);
  // Deterministic, and different audio gives different frames.
  EXPECT_EQ(model->encode(tiny_mel(1))->frames(), frames);
  EXPECT_NE(model->encode(tiny_mel(2))->frames(), frames);
  expect_error([&] { model->encode(std::vector<float>(kMels * 2 * kSource - 1)); }, {"16 x 40"});
}

class WhisperDecoderTest : public ::testing::TestWithParam<DType> {};

TEST_P(WhisperDecoderTest, PrefillEqualsOneTokenAtATime) {
  testing::TempDir temp;
  const auto model = load_tiny(temp, tiny_with(&TinyModel::type, GetParam()));
  const auto window = model->encode(tiny_mel(3));
  // Three sequences of six tokens: the prefill runs the batched (sgemm) path, the single steps
  // the direct one.
  const std::vector<std::vector<int32_t>> prompts = {{kSot, kEnglish, kTranscribe, 7, 8, 9},
                                                     {kSot, kEnglish, kTranscribe, 7, 10, 11},
                                                     {kSot, 53, kTranscribe, kNoTimestamps, 1, 2}};
  const int steps = 6;
  std::vector<int> all_positions(steps);
  for (int p = 0; p < steps; ++p) all_positions[p] = p;

  auto prefill = model->start(window, 3);
  const std::vector<float> batched = prefill->advance(prompts, all_positions);
  ASSERT_EQ(batched.size(), size_t(3 * steps * kVocab));
  EXPECT_EQ(prefill->length(), steps);

  auto stepwise = model->start(window, 3);
  for (int p = 0; p < steps; ++p) {
    std::vector<std::vector<int32_t>> step = {{prompts[0][p]}, {prompts[1][p]}, {prompts[2][p]}};
    const std::vector<float> logits = stepwise->advance(step);
    ASSERT_EQ(logits.size(), size_t(3 * kVocab));
    for (int s = 0; s < 3; ++s) {
      EXPECT_LT(relative_error(row(logits, s), row(batched, s * steps + p)), 1e-5)
          << "sequence " << s << " position " << p;
    }
  }
  EXPECT_EQ(stepwise->length(), steps);

  // A sequence decoded alone gives what it gives next to others.
  auto alone = model->start(window, 1);
  const std::vector<float> single = alone->advance({prompts[2]});
  EXPECT_LT(relative_error(single, row(batched, 2 * steps + steps - 1)), 1e-5);

  // Logits only where asked, in the order asked.
  auto some = model->start(window, 3);
  const std::vector<float> picked = some->advance(prompts, {4, 1});
  ASSERT_EQ(picked.size(), size_t(3 * 2 * kVocab));
  EXPECT_LT(relative_error(row(picked, 2 * 2 + 0), row(batched, 2 * steps + 4)), 1e-5);
  EXPECT_LT(relative_error(row(picked, 1 * 2 + 1), row(batched, 1 * steps + 1)), 1e-5);
}

TEST_P(WhisperDecoderTest, ReorderFollowsTheBeams) {
  testing::TempDir temp;
  const auto model = load_tiny(temp, tiny_with(&TinyModel::type, GetParam()));
  const auto window = model->encode(tiny_mel(4));
  const std::vector<int32_t> a = {kSot, kEnglish, 7, 8}, b = {kSot, 53, 9, 10};
  auto beams = model->start(window, 2);
  beams->advance({a, b});
  // Both beams continue from what beam 1 held.
  beams->reorder(std::vector<int>{1, 1});
  const std::vector<float> next = beams->advance({{20}, {21}});

  auto reference = model->start(window, 1);
  reference->advance({b});
  const std::vector<float> after_20 = reference->advance({{20}});
  auto reference2 = model->start(window, 1);
  reference2->advance({b});
  const std::vector<float> after_21 = reference2->advance({{21}});
  EXPECT_LT(relative_error(row(next, 0), after_20), 1e-5);
  EXPECT_LT(relative_error(row(next, 1), after_21), 1e-5);

  // A swap, then identity (a no-op), then a further step.
  auto swapped = model->start(window, 2);
  swapped->advance({a, b});
  swapped->reorder(std::vector<int>{1, 0});
  swapped->reorder(std::vector<int>{0, 1});
  const std::vector<float> crossed = swapped->advance({{20}, {30}});
  auto plain = model->start(window, 2);
  plain->advance({b, a});
  const std::vector<float> expected = plain->advance({{20}, {30}});
  EXPECT_LT(relative_error(crossed, expected), 1e-5);

  expect_error([&] { beams->reorder(std::vector<int>{0}); }, {"reorder"});
  expect_error([&] { beams->reorder(std::vector<int>{0, 2}); }, {"source 2"});
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, WhisperDecoderTest,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(WhisperModel, QuantizedWeightsStayCloseToF32) {
  testing::TempDir f32_dir, q8_dir;
  const auto f32 = load_tiny(f32_dir, tiny_with(&TinyModel::type, DType::F32));
  const auto q8 = load_tiny(q8_dir, tiny_with(&TinyModel::type, DType::Q8_0));
  const std::vector<int32_t> prompt = {kSot, kEnglish, kTranscribe, kNoTimestamps};
  const std::vector<float> mel = tiny_mel(5);
  const std::vector<float> exact = f32->start(f32->encode(mel), 1)->advance({prompt});
  const std::vector<float> quantized = q8->start(q8->encode(mel), 1)->advance({prompt});
  const double error = relative_error(quantized, exact);
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 0.05);
}

TEST(WhisperModel, RejectsBadDecoderInput) {
  testing::TempDir temp;
  const auto model = load_tiny(temp);
  const auto window = model->encode(tiny_mel(6));
  auto session = model->start(window, 2);
  expect_error([&] { session->advance({{1}}); }, {"1 sequences", "2"});
  expect_error([&] { session->advance({{1, 2}, {3}}); }, {"same number"});
  expect_error([&] { session->advance({{1}, {kVocab}}); }, {"token 100"});
  expect_error([&] { session->advance({{1}, {-1}}); }, {"token -1"});
  expect_error([&] { session->advance({{1}, {2}}, {1}); }, {"position 1"});
  expect_error([&] { session->advance({{}, {}}); }, {"no tokens"});
  EXPECT_EQ(session->length(), 0);  // nothing was appended by the failed calls

  // The context ends at max_target_positions.
  std::vector<int32_t> full(kTarget, 7);
  session->advance({full, full});
  EXPECT_EQ(session->length(), kTarget);
  expect_error([&] { session->advance({{7}, {7}}); }, {"max_target_positions"});
  EXPECT_EQ(session->length(), kTarget);

  expect_error([&] { model->start(window, 0); }, {"0 sequences"});
  testing::TempDir other_dir;
  const auto other = load_tiny(other_dir);
  expect_error([&] { other->start(window, 1); }, {"not encoded by this model"});
}

TEST(WhisperModel, CrossKvModesByNameAndOnlyNativeOnTheCpu) {
  for (const CrossKvMode mode : {CrossKvMode::native, CrossKvMode::int8, CrossKvMode::frames,
                                 CrossKvMode::int8_frames, CrossKvMode::int8_auto}) {
    EXPECT_EQ(cross_kv_mode_from_name(cross_kv_mode_name(mode)), mode);
  }
  EXPECT_EQ(cross_kv_mode_from_name("int8-auto"), CrossKvMode::int8_auto);
  EXPECT_EQ(cross_kv_mode_from_name("int8_auto"), std::nullopt);
  EXPECT_EQ(cross_kv_mode_from_name(""), std::nullopt);
  EXPECT_EQ(cross_kv_mode_names(), "native, int8, frames, int8-frames or int8-auto");

  testing::TempDir temp;
  const std::string path = (temp / "tiny.gguf").string();
  write_tiny_model(path, {});
  EXPECT_NO_THROW(Model::load(gguf::File::open(path), Device::cpu, {CrossKvMode::native}));
  expect_error([&] { Model::load(gguf::File::open(path), Device::cpu, {CrossKvMode::int8}); },
               {"int8", "GPU", "CPU"});
}

TEST(WhisperModel, NamesWhatIsWrongInABadFile) {
  testing::TempDir temp;
  expect_error(
      [&] { load_tiny(temp, tiny_with(&TinyModel::omit_tensor, "decoder.layers.1.fc2.weight")); },
      {"decoder.layers.1.fc2.weight", "missing"});
  expect_error(
      [&] {
        load_tiny(temp,
                  tiny_with(&TinyModel::omit_tensor, "encoder.layers.0.self_attn.q_proj.bias"));
      },
      {"encoder.layers.0.self_attn.q_proj.bias"});
  expect_error(
      [&] { load_tiny(temp, tiny_with(&TinyModel::reshape_tensor, "encoder.conv2.weight")); },
      {"encoder.conv2.weight", "[65, 64, 3]", "[64, 64, 3]"});
  expect_error(
      [&] {
        load_tiny(temp, tiny_with(&TinyModel::reshape_tensor, "decoder.embed_positions.weight"));
      },
      {"decoder.embed_positions.weight", "[17, 64]", "[16, 64]"});
  expect_error([&] { load_tiny(temp, tiny_with(&TinyModel::omit_key, "whisper.decoder.ffn_dim")); },
               {"whisper.decoder.ffn_dim", "missing"});
  expect_error(
      [&] { load_tiny(temp, tiny_with(&TinyModel::omit_key, "whisper.token.timestamp_begin")); },
      {"whisper.token.timestamp_begin"});
  expect_error([&] { load_tiny(temp, tiny_with(&TinyModel::architecture, "llama")); },
               {"llama", "whisper"});
  expect_error([&] { load_tiny(temp, tiny_with(&TinyModel::heads, 3)); },
               {"whisper.d_model", "divisible"});
}

}  // namespace
}  // namespace hark::whisper
