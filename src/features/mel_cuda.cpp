#include "features/mel_cuda.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <exception>
#include <numbers>

#include "base/error.h"

namespace hark::features {

namespace {

namespace gpu = compute::cuda;

// Frames per chunk: the products stay large enough to run at speed, and the scratch (about
// 80 MB for n_fft 512) stays bounded whatever the batch.
constexpr int64_t kChunkRows = 16384;
// The products' row counts are multiples of this (the last chunk's rows rounded up, zero frames),
// so that the cuBLASLt plans cached per shape stay few however many batch sizes come.
constexpr int64_t kRowQuantum = 256;

// Samples per piece of the upload: small enough that the copies to the GPU start early and the
// last one ends soon after the threads finish, large enough that each copy runs at speed.
constexpr int64_t kPieceSamples = int64_t{1} << 18;  // 1 MiB
// Where the utterance table sits in the staging buffer, after the samples.
constexpr size_t kTableAlignment = 16;

int round_up_to_4(int64_t n) {
  return static_cast<int>(std::max<int64_t>(4, (n + 3) / 4 * 4));
}

// Copies `samples` to `to` and returns the first that is NaN or infinite, or -1 (unless `check`
// is false). A block at a time, each tested while it is in cache; the exponent bits make the
// common case, all finite, one branch-free pass per block.
int64_t copy_finite(std::span<const float> samples, float* to, bool check) {
  constexpr size_t kBlock = 4096;
  int64_t first_bad = -1;
  for (size_t start = 0; start < samples.size(); start += kBlock) {
    const size_t end = std::min(samples.size(), start + kBlock);
    std::copy(samples.begin() + start, samples.begin() + end, to + start);
    if (!check || first_bad >= 0) continue;
    uint32_t bad = 0;
    for (size_t i = start; i < end; ++i) {
      bad |= static_cast<uint32_t>((std::bit_cast<uint32_t>(to[i]) & 0x7f800000u) == 0x7f800000u);
    }
    if (bad == 0) continue;
    for (size_t i = start; i < end && first_bad < 0; ++i) {
      if (!std::isfinite(to[i])) first_bad = static_cast<int64_t>(i);
    }
  }
  return first_bad;
}

gpu::MelLog log_of(LogKind kind) {
  switch (kind) {
    case LogKind::none:
      return gpu::MelLog::none;
    case LogKind::log10:
      return gpu::MelLog::log10;
    case LogKind::ln:
      return gpu::MelLog::ln;
  }
  fail("mel on the GPU: unknown log kind ", static_cast<int>(kind));
}

}  // namespace

CudaMelSpectrogram::CudaMelSpectrogram(const MelSpectrogram& mel) : mel_(mel) {
  const MelConfig& c = mel_.config();
  const std::vector<double>& window = mel_.window();
  const std::vector<double>& filterbank = mel_.filterbank();
  const int n_bins = mel_.n_bins();
  // The parameters below are passed to kernels and products as 32-bit values.
  if (c.n_fft > (1 << 24) || c.hop_length > (1 << 24)) {
    fail("mel on the GPU: n_fft ", c.n_fft, " and hop_length ", c.hop_length,
         " must be at most 2^24");
  }
  if (c.log_floor > 3e38 || c.log_guard > 3e38) {
    fail("mel on the GPU: log floor and guard must fit in F32");
  }

  // The window's non-zero part: the only samples of a frame the DFT needs.
  int first = 0, last = c.n_fft;
  while (first < last && window[first] == 0.0) ++first;
  while (last > first && window[last - 1] == 0.0) --last;
  framing_.hop = c.hop_length;
  framing_.pad = c.center ? c.n_fft / 2 : 0;
  framing_.first = first;
  framing_.span = last - first;
  framing_.width = round_up_to_4(framing_.span);  // 16-byte rows for the product
  framing_.reflect = c.pad_mode == PadMode::reflect;
  framing_.preemphasis = c.preemphasis;

  // The bins some filter uses; the others contribute exactly zero on the CPU too. The padding
  // bins' filter columns are zero: what the spectrum holds there does not count, if finite.
  int low = n_bins, high = 0;
  for (int m = 0; m < c.n_mels; ++m) {
    for (int b = 0; b < n_bins; ++b) {
      if (filterbank[static_cast<size_t>(m) * n_bins + b] != 0.0) {
        low = std::min(low, b);
        high = std::max(high, b + 1);
      }
    }
  }
  if (low >= high) low = high = 0;
  first_bin_ = low;
  bins_ = round_up_to_4(high - low);

  fft_ = gpu::mel_fft_supported(c.n_fft);
  if (fft_) {
    window_ = gpu::upload_vector(window);
    // Each filter's bins from its first non-zero one to its last (none: an empty range), which
    // the FFT kernel sums instead of the whole product's row.
    std::vector<int2> filter_bins(static_cast<size_t>(c.n_mels), int2{0, 0});
    for (int m = 0; m < c.n_mels; ++m) {
      int2& range = filter_bins[static_cast<size_t>(m)];
      for (int j = 0; j < high - low; ++j) {
        if (filterbank[static_cast<size_t>(m) * n_bins + low + j] == 0.0) continue;
        if (range.y == 0) range.x = j;
        range.y = j + 1;
      }
    }
    filter_bins_ = gpu::upload_vector(filter_bins);
  } else {
    // X[k] = Σ_n w[n] x[n] e^(−2πi k n / n_fft) over the window's non-zero n; the angle's
    // product is reduced modulo n_fft first so that it stays exact.
    const int width = framing_.width;
    std::vector<float> basis(static_cast<size_t>(2 * bins_) * width, 0.0f);
    for (int j = 0; j < high - low; ++j) {
      const int64_t bin = low + j;
      for (int col = 0; col < framing_.span; ++col) {
        const int64_t n = first + col;
        const double angle =
            2.0 * std::numbers::pi * static_cast<double>(bin * n % c.n_fft) / c.n_fft;
        basis[static_cast<size_t>(j) * width + col] =
            static_cast<float>(window[n] * std::cos(angle));
        basis[static_cast<size_t>(bins_ + j) * width + col] =
            static_cast<float>(-window[n] * std::sin(angle));
      }
    }
    basis_ = gpu::upload_vector(basis);
  }
  std::vector<float> filters(static_cast<size_t>(c.n_mels) * bins_, 0.0f);
  for (int m = 0; m < c.n_mels; ++m) {
    for (int j = 0; j < high - low; ++j) {
      filters[static_cast<size_t>(m) * bins_ + j] =
          static_cast<float>(filterbank[static_cast<size_t>(m) * n_bins + low + j]);
    }
  }
  filters_ = gpu::upload_vector(filters);
}

void CudaMelSpectrogram::compute(std::span<const std::span<const float>> utterances,
                                 cudaStream_t stream, DeviceMelBatch& out, gpu::StageClock* clock,
                                 int64_t trailing_zeros) {
  const MelConfig& c = mel_.config();
  if (trailing_zeros < 0) fail("mel: negative padding ", trailing_zeros);
  const int batch = static_cast<int>(utterances.size());
  const int64_t mels = c.n_mels;
  std::vector<gpu::MelUtterance> table(static_cast<size_t>(batch));
  out.batch = batch;
  out.frames.assign(static_cast<size_t>(batch), 0);
  out.padded_frames = 0;
  int64_t total_samples = 0;
  for (int b = 0; b < batch; ++b) {
    const auto count = static_cast<int64_t>(utterances[b].size());
    const int64_t frames = mel_.frame_count(count + trailing_zeros);
    gpu::MelUtterance& u = table[static_cast<size_t>(b)];
    u.offset = total_samples;
    u.samples = count;
    u.zeros = trailing_zeros;
    u.frames = frames;
    u.audio_frames = c.last_frame_is_padding ? std::max<int64_t>(frames - 1, 0) : frames;
    out.frames[static_cast<size_t>(b)] = frames;
    out.padded_frames = std::max(out.padded_frames, frames);
    total_samples += count;
  }
  const int64_t rows = batch * out.padded_frames;
  const int64_t product_rows = (rows + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
  out.values.reserve(sizeof(float) * std::max<int64_t>(product_rows * mels, 1));
  // No utterance gives a frame: no sample is looked at, as on the CPU, and there is no work.
  if (rows == 0) return;

  // The samples go up from page-locked memory (from the caller's pageable memory they would take
  // the driver's slower staged path), filled on parallel threads a piece at a time, each piece
  // queued for upload as soon as it is filled, so that the copies to the GPU run while other
  // threads still fill. The utterance table goes up from there too (it sits after the samples).
  const size_t signal_bytes = sizeof(float) * static_cast<size_t>(total_samples);
  const size_t table_offset =
      (signal_bytes + kTableAlignment - 1) / kTableAlignment * kTableAlignment;
  const size_t table_bytes = sizeof(gpu::MelUtterance) * table.size();
  auto* staged = static_cast<std::byte*>(staging_.prepare(table_offset + table_bytes));
  auto* staged_signal = reinterpret_cast<float*>(staged);
  out.signal.reserve(std::max<size_t>(signal_bytes, sizeof(float)));
  out.utterances.reserve(table_bytes);
  // The last call's kernels may still be queued behind other work on their stream: the copies
  // wait for those that read the buffers they overwrite, not for the rest.
  const cudaStream_t upload = upload_stream_.get();
  inputs_read_.make_wait(upload);
  std::memcpy(staged + table_offset, table.data(), table_bytes);
  staging_.upload_part(table_offset, table_bytes, out.utterances.data(), upload);

  // Each piece is a range of the concatenated signal, across utterances, and is checked on the
  // way as MelSpectrogram::compute checks samples: only those of utterances that give frames.
  const int64_t pieces = (total_samples + kPieceSamples - 1) / kPieceSamples;
  std::vector<int64_t> first_non_finite(static_cast<size_t>(pieces), -1);  // a signal position
  std::exception_ptr upload_error;  // exceptions cannot leave the parallel loop
  float* device_signal = out.signal.as<float>();
#pragma omp parallel for schedule(dynamic, 1) if (pieces > 1)
  for (int64_t piece = 0; piece < pieces; ++piece) {
    const int64_t begin = piece * kPieceSamples;
    const int64_t end = std::min(total_samples, begin + kPieceSamples);
    auto b = static_cast<int>(std::partition_point(table.begin(), table.end(),
                                                   [&](const gpu::MelUtterance& u) {
                                                     return u.offset + u.samples <= begin;
                                                   }) -
                              table.begin());
    for (; b < batch && table[static_cast<size_t>(b)].offset < end; ++b) {
      const gpu::MelUtterance& u = table[static_cast<size_t>(b)];
      const int64_t from = std::max(begin, u.offset);
      const int64_t to = std::min(end, u.offset + u.samples);
      if (from >= to) continue;
      const int64_t bad = copy_finite(utterances[b].subspan(static_cast<size_t>(from - u.offset),
                                                            static_cast<size_t>(to - from)),
                                      staged_signal + from, u.frames > 0);
      int64_t& first = first_non_finite[static_cast<size_t>(piece)];
      if (bad >= 0 && first < 0) first = from + bad;
    }
    try {
      staging_.upload_part(sizeof(float) * static_cast<size_t>(begin),
                           sizeof(float) * static_cast<size_t>(end - begin), device_signal + begin,
                           upload);
    } catch (...) {
#pragma omp critical(hark_mel_upload_error)
      if (!upload_error) upload_error = std::current_exception();
    }
  }
  staging_.finish_uploads();
  if (upload_error) std::rethrow_exception(upload_error);
  inputs_uploaded_.record(upload);
  // The first bad piece holds the first bad sample of the first bad utterance: before any kernel
  // is queued (the uploads only wrote the batch's own buffers), as the CPU reports it.
  for (const int64_t position : first_non_finite) {
    if (position < 0) continue;
    const auto owner = std::partition_point(
        table.begin(), table.end(),
        [&](const gpu::MelUtterance& u) { return u.offset + u.samples <= position; });
    fail("audio sample ", position - owner->offset, " is not a finite number");
  }

  if (clock != nullptr) clock->mark("features: waiting for the samples");
  inputs_uploaded_.make_wait(stream);
  if (clock != nullptr) clock->mark("features: spectrum");
  const auto* signal = out.signal.as<const float>();
  const auto* utterance_table = out.utterances.as<const gpu::MelUtterance>();
  float* values = out.values.as<float>();

  const auto exponent = static_cast<float>(c.power);
  const gpu::MelLog log = log_of(c.log);
  const auto log_floor = static_cast<float>(c.log_floor);
  const auto log_guard = static_cast<float>(c.log_guard);
  if (fft_) {
    // One kernel from the samples to the log-mel energies: no spectrum goes to memory.
    gpu::mel_fft_log_energies(signal, utterance_table, batch, out.padded_frames, framing_, c.n_fft,
                              window_.as<const double>(), first_bin_, bins_, exponent,
                              filters_.as<const float>(), filter_bins_.as<const int2>(),
                              static_cast<int>(mels), log, log_floor, log_guard, values, stream);
  } else {
    const int64_t chunk = std::min(product_rows, kChunkRows);
    power_.reserve(sizeof(float) * chunk * bins_);
    frames_.reserve(sizeof(float) * chunk * framing_.width);
    spectrum_.reserve(sizeof(float) * chunk * 2 * bins_);
    for (int64_t row0 = 0; row0 < rows; row0 += chunk) {
      const int64_t count = std::min(chunk, product_rows - row0);
      gpu::mel_frames(signal, utterance_table, batch, out.padded_frames, framing_, row0, count,
                      frames_.as<float>(), stream);
      gpu::mel_product(frames_.as<const float>(), count, framing_.width, basis_.as<const float>(),
                       2 * bins_, spectrum_.as<float>(), stream);
      gpu::mel_power(spectrum_.as<float>(), count, bins_, exponent, power_.as<float>(), stream);
      gpu::mel_product(power_.as<const float>(), count, bins_, filters_.as<const float>(), mels,
                       values + row0 * mels, stream);
    }
    gpu::mel_log(values, utterance_table, batch, out.padded_frames, mels, log, log_floor, log_guard,
                 stream);
  }
  if (clock != nullptr && c.normalization != Normalization::none) {
    clock->mark("features: normalisation");
  }
  switch (c.normalization) {
    case Normalization::none:
      break;
    case Normalization::whisper_dynamic_range:
      tops_.reserve(sizeof(unsigned) * batch);
      gpu::mel_normalize_dynamic_range(values, utterance_table, batch, out.padded_frames, mels,
                                       tops_.as<unsigned>(), stream);
      break;
    case Normalization::per_feature:
      gpu::mel_normalize_per_feature(values, utterance_table, batch, out.padded_frames, mels,
                                     stream);
      break;
  }
  inputs_read_.record(stream);
}

}  // namespace hark::features
