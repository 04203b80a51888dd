// Whisper's audio encoder: two convolutions (the second with stride 2) with GELU, sinusoidal
// positions (stored as a table), pre-LN transformer blocks, and a final layer norm.
#pragma once

#include <span>

#include "models/whisper/weights.h"

namespace hark::whisper {

// mel [n_mels x window_frames()] row-major → frames [1, max_source_positions, d_model].
// Throws hark::Error when mel is not exactly one window.
void run_encoder(const Config& config, const EncoderWeights& weights, std::span<const float> mel,
                 compute::Tensor& frames);

}  // namespace hark::whisper
