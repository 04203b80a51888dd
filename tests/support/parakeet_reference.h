// The transformers references of the tiny Parakeet checkpoints (tests/data/parakeet, made by
// tools/oracle/parakeet.py) and what the parity tests of every device do with them: load a
// checkpoint's reference tensors and notes, convert the checkpoint to GGUF and load it, read the
// test recordings, and compare greedy emissions.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "audio/audio.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "models/parakeet/convert.h"
#include "models/parakeet/model.h"
#include "support/compare.h"
#include "support/tensor_values.h"
#include "support/tiny_whisper.h"  // TempDir

namespace hark::testing {

// The recordings every reference holds outputs for, in the order of its batch.
constexpr const char* kParakeetClips[] = {"jfk", "beckett", "librivox-0870"};

struct ParakeetReference {
  std::filesystem::path dir;
  std::shared_ptr<const safetensors::File> tensors;
  nlohmann::json info;

  std::vector<float> values(const std::string& name) const { return values_of(*tensors, name); }
  std::vector<int32_t> ints(const std::string& name) const {
    const safetensors::TensorView& view = tensors->tensor(name);
    EXPECT_EQ(view.type, safetensors::ElementType::I32) << name;
    std::vector<int32_t> values(static_cast<size_t>(view.elements()));
    std::memcpy(values.data(), view.data, values.size() * sizeof(int32_t));
    return values;
  }
};

// `model`: tiny-random-ctc, tiny-random-rnnt or tiny-random-tdt.
inline ParakeetReference load_parakeet_reference(const std::string& model) {
  ParakeetReference r;
  r.dir = std::filesystem::path(HARK_TEST_DATA) / "parakeet" / model;
  r.tensors = safetensors::File::open((r.dir / "reference.safetensors").string());
  std::ifstream stream(r.dir / "reference.json");
  r.info = nlohmann::json::parse(stream);
  return r;
}

// The reference's checkpoint converted to GGUF (weight matrices as `type`) in `temp`, loaded.
inline std::unique_ptr<parakeet::Model> convert_and_load_parakeet(
    const ParakeetReference& reference, DType type, const TempDir& temp,
    parakeet::Device device = parakeet::Device::cpu) {
  const std::string path = (temp / ("model-" + std::string(dtype_name(type)) + ".gguf")).string();
  parakeet::convert_checkpoint(reference.dir.string(), path, type);
  return parakeet::Model::load(gguf::File::open(path), device);
}

inline std::vector<float> load_parakeet_clip(const std::string& clip) {
  return audio::load(std::string(HARK_TEST_DATA) + "/audio/" + clip + ".wav");
}

// What transformers emitted for a clip alone: tokens, frames and durations (TDT: the predicted
// duration; RNN-T: the frames advanced after the token, recorded in reference.json).
inline std::vector<parakeet::Emission> expected_emissions(const ParakeetReference& reference,
                                                          const std::string& clip,
                                                          parakeet::Head head) {
  const std::vector<int32_t> tokens = reference.ints("tokens." + clip);
  const std::vector<int32_t> frames = reference.ints("frames." + clip);
  std::vector<int32_t> durations(tokens.size(), 1);
  if (head == parakeet::Head::tdt) durations = reference.ints("durations." + clip);
  if (head == parakeet::Head::rnnt) {
    durations = reference.info.at("decode").at(clip).at("durations").get<std::vector<int32_t>>();
  }
  EXPECT_EQ(frames.size(), tokens.size());
  EXPECT_EQ(durations.size(), tokens.size());
  std::vector<parakeet::Emission> emissions;
  for (size_t i = 0; i < tokens.size(); ++i) {
    emissions.push_back({tokens[i], frames[i], durations[i]});
  }
  return emissions;
}

inline void expect_same_emissions(const std::vector<parakeet::Emission>& actual,
                                  const std::vector<parakeet::Emission>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].token, expected[i].token) << "token " << i;
    EXPECT_EQ(actual[i].frame, expected[i].frame) << "token " << i;
    EXPECT_EQ(actual[i].duration, expected[i].duration) << "token " << i;
  }
}

// How many emissions differ from the expected ones (in token, frame or duration, or by being
// there in only one of the lists).
inline size_t count_different_emissions(const std::vector<parakeet::Emission>& actual,
                                        const std::vector<parakeet::Emission>& expected) {
  size_t different = actual.size() > expected.size() ? actual.size() - expected.size()
                                                     : expected.size() - actual.size();
  for (size_t i = 0; i < std::min(actual.size(), expected.size()); ++i) {
    different += actual[i].token != expected[i].token || actual[i].frame != expected[i].frame ||
                 actual[i].duration != expected[i].duration;
  }
  return different;
}

// ---- Checks every device's model passes against the reference ---------------------------------

// The reference tensor a head reads: CTC logits, or the transducer's projected encoder output.
inline std::string head_input_tensor(parakeet::Head head, const std::string& clip) {
  return (head == parakeet::Head::ctc ? "logits." : "projected.") + clip;
}

inline std::vector<std::span<const float>> clip_spans(
    const std::vector<std::vector<float>>& clips) {
  return {clips.begin(), clips.end()};
}

// Each clip encoded alone: its frame count, encoder output and head input (≤ 1e-4 relative).
inline void expect_encoder_and_head_match(const parakeet::Model& model,
                                          const std::vector<std::vector<float>>& clips,
                                          const ParakeetReference& reference) {
  const parakeet::Config& config = model.config();
  for (size_t c = 0; c < clips.size(); ++c) {
    const std::string clip = kParakeetClips[c];
    SCOPED_TRACE(clip);
    const std::span<const float> alone[] = {clips[c]};
    const auto encoded = model.encode(alone);
    ASSERT_EQ(encoded->size(), 1);
    const std::vector<float> expected = reference.values("encoder." + clip);
    EXPECT_EQ(encoded->frames(0), static_cast<int64_t>(expected.size()) / config.d_model);
    EXPECT_EQ(encoded->frames(0), model.encoder_frames(static_cast<int64_t>(clips[c].size())));
    EXPECT_LE(relative_error(encoded->output(0), expected), 1e-4);
    EXPECT_LE(relative_error(encoded->head_input(0),
                             reference.values(head_input_tensor(config.head, clip))),
              1e-4);
  }
}

// Each clip decoded alone: exactly transformers' emissions and text.
inline void expect_greedy_decoding_matches(const parakeet::Model& model,
                                           const std::vector<std::vector<float>>& clips,
                                           const ParakeetReference& reference) {
  for (size_t c = 0; c < clips.size(); ++c) {
    const std::string clip = kParakeetClips[c];
    SCOPED_TRACE(clip);
    const std::span<const float> alone[] = {clips[c]};
    const std::vector<std::vector<parakeet::Emission>> decoded = model.decode(*model.encode(alone));
    ASSERT_EQ(decoded.size(), 1u);
    expect_same_emissions(decoded[0], expected_emissions(reference, clip, model.config().head));
    std::vector<int32_t> tokens;
    for (const parakeet::Emission& emission : decoded[0]) tokens.push_back(emission.token);
    EXPECT_EQ(
        model.detokenizer().decode(tokens),
        reference.info.at("decode").at(clip).at("text").at("transformers").get<std::string>());
  }
}

// The clips as one padded batch: the reference's frame counts, encoder output and head input,
// and the emissions of each clip decoded alone, which are the reference's.
inline void expect_batch_decodes_as_each_alone(const parakeet::Model& model,
                                               const std::vector<std::vector<float>>& clips,
                                               const ParakeetReference& reference) {
  const auto encoded = model.encode(clip_spans(clips));
  ASSERT_EQ(encoded->size(), static_cast<int>(clips.size()));
  const std::vector<std::vector<parakeet::Emission>> decoded = model.decode(*encoded);
  ASSERT_EQ(decoded.size(), clips.size());
  const std::vector<int32_t> encoder_frames = reference.ints("batch.encoder_frames");
  for (size_t c = 0; c < clips.size(); ++c) {
    const std::string clip = kParakeetClips[c];
    SCOPED_TRACE(clip);
    EXPECT_EQ(encoded->frames(int(c)), encoder_frames[c]);
    EXPECT_LE(relative_error(encoded->output(int(c)), reference.values("encoder." + clip)), 1e-4);
    EXPECT_LE(relative_error(encoded->head_input(int(c)),
                             reference.values(head_input_tensor(model.config().head, clip))),
              1e-4);
    const std::span<const float> alone[] = {clips[c]};
    const std::vector<std::vector<parakeet::Emission>> single = model.decode(*model.encode(alone));
    expect_same_emissions(decoded[c], single[0]);
    expect_same_emissions(decoded[c], expected_emissions(reference, clip, model.config().head));
  }
}

}  // namespace hark::testing
