#include "features/nemo_mel.h"

namespace hark::features {

MelConfig nemo_mel_config(int n_mels) {
  MelConfig c;
  c.sample_rate = 16000;
  c.n_fft = 512;
  c.win_length = 400;
  c.hop_length = 160;
  c.window = WindowKind::hann_symmetric;
  c.center = true;
  c.pad_mode = PadMode::zeros;
  c.preemphasis = 0.97;
  c.power = 2;
  c.n_mels = n_mels;
  c.f_min = 0;
  c.f_max = 8000;
  c.mel_scale = MelScale::slaney;
  c.filter_norm = FilterNorm::slaney;
  c.log = LogKind::ln;
  c.log_guard = 1.0 / (1 << 24);
  c.normalization = Normalization::per_feature;
  c.last_frame_is_padding = true;
  return c;
}

}  // namespace hark::features
