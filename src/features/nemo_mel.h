// The front end of NVIDIA NeMo's ASR models (Parakeet), as transformers'
// ParakeetFeatureExtractor computes it (docs/parakeet.md §3): pre-emphasis 0.97, 25-ms symmetric
// Hann window in a 512-point FFT, 10-ms hop, zero-padded centring, |X|², slaney mel filters over
// 0–8 kHz, ln(x + 2^-24), and each mel channel normalised to zero mean and unit (unbiased)
// deviation over the frames that hold audio (the STFT's last frame does not; it is set to 0).
#pragma once

#include "features/mel.h"

namespace hark::features {

MelConfig nemo_mel_config(int n_mels);

}  // namespace hark::features
