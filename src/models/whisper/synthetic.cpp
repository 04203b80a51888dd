#include "models/whisper/synthetic.h"

#include <array>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "base/random.h"
#include "format/gguf.h"
#include "format/hf_checkpoint.h"
#include "format/quant.h"
#include "models/whisper/config.h"
#include "models/whisper/layout.h"
#include "models/whisper/tokens.h"

namespace hark::whisper {

namespace {

Config make_config(int vocab, int mels, int d, int encoder_layers, int decoder_layers, int heads) {
  Config config;
  config.vocab_size = vocab;
  config.n_mels = mels;
  config.d_model = d;
  config.encoder_layers = encoder_layers;
  config.decoder_layers = decoder_layers;
  config.encoder_heads = config.decoder_heads = heads;
  config.encoder_ffn = config.decoder_ffn = 4 * d;
  return config;
}

constexpr int kEnglish = 51864, kMultilingual = 51865, kV3 = 51866;

const std::array<NamedConfig, 11> kConfigs = {{
    {"tiny", make_config(kMultilingual, 80, 384, 4, 4, 6)},
    {"tiny.en", make_config(kEnglish, 80, 384, 4, 4, 6)},
    {"base", make_config(kMultilingual, 80, 512, 6, 6, 8)},
    {"base.en", make_config(kEnglish, 80, 512, 6, 6, 8)},
    {"small", make_config(kMultilingual, 80, 768, 12, 12, 12)},
    {"small.en", make_config(kEnglish, 80, 768, 12, 12, 12)},
    {"medium", make_config(kMultilingual, 80, 1024, 24, 24, 16)},
    {"medium.en", make_config(kEnglish, 80, 1024, 24, 24, 16)},
    {"large-v2", make_config(kMultilingual, 80, 1280, 32, 32, 20)},
    {"large-v3", make_config(kV3, 128, 1280, 32, 32, 20)},
    {"large-v3-turbo", make_config(kV3, 128, 1280, 32, 4, 20)},
}};

}  // namespace

std::span<const NamedConfig> reference_configs() {
  return kConfigs;
}

const Config& reference_config(std::string_view name) {
  std::string known;
  for (const NamedConfig& named : kConfigs) {
    if (named.name == name) return named.config;
    known += (known.empty() ? "" : ", ") + std::string(named.name);
  }
  fail("unknown Whisper configuration '", name, "' (known: ", known, ")");
}

void write_random_model(const Config& config, DType type, const std::string& path, uint64_t seed) {
  gguf::Writer writer;
  writer.set_string("general.architecture", "whisper");
  writer.set_string("general.name", "random-weights");
  writer.set_u32("general.file_type", hf::gguf_file_type(type));
  write_config(writer, config);
  write_vocabulary(writer, standard_vocabulary(config.vocab_size));

  uint64_t tensor_seed = seed;
  for (TensorSpec& tensor : tensor_layout(config)) {
    const DType stored = stored_type(tensor, type);
    // Scale like a trained model's: unit-variance activations stay bounded through the layers.
    const float scale =
        tensor.matrix ? 1.0f / std::sqrt(static_cast<float>(tensor.shape.back())) : 0.02f;
    const bool is_norm_gain = tensor.name.find("norm.weight") != std::string::npos;
    const std::vector<int64_t> shape = tensor.shape;
    writer.add_tensor(tensor.name, stored, tensor.shape,
                      [shape, stored, scale, is_norm_gain, state = tensor_seed++]() {
                        int64_t count = 1;
                        for (int64_t dim : shape) count *= dim;
                        std::vector<float> values(static_cast<size_t>(count));
                        SplitMix64 random(state);
                        for (float& value : values) {
                          value = is_norm_gain ? 1.0f + 0.1f * random.uniform()
                                               : scale * random.uniform();
                        }
                        return quant::from_f32(stored, values.data(), values.size());
                      });
  }
  writer.write(path);
}

}  // namespace hark::whisper
