// Helpers for the audio tests: synthetic WAV files built byte by byte, tones and their measurement,
// temporary files, and feeding bytes through a real pipe.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "support/scratch_dir.h"

namespace hark::audio::test_util {

using Bytes = std::vector<uint8_t>;

inline void put_u16(Bytes& out, unsigned value) {
  out.push_back(static_cast<uint8_t>(value));
  out.push_back(static_cast<uint8_t>(value >> 8));
}
inline void put_u32(Bytes& out, uint32_t value) {
  put_u16(out, value & 0xffff);
  put_u16(out, value >> 16);
}
inline void put_u64(Bytes& out, uint64_t value) {
  put_u32(out, static_cast<uint32_t>(value));
  put_u32(out, static_cast<uint32_t>(value >> 32));
}
// Little-endian bytes of any trivially copyable values (the test host is little-endian).
template <class T>
Bytes le_bytes(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}
inline Bytes int24_bytes(const std::vector<int32_t>& values) {
  Bytes out;
  for (int32_t value : values) {
    const auto bits = static_cast<uint32_t>(value);
    out.push_back(static_cast<uint8_t>(bits));
    out.push_back(static_cast<uint8_t>(bits >> 8));
    out.push_back(static_cast<uint8_t>(bits >> 16));
  }
  return out;
}

// The fields of a fmt chunk; block_align < 0 means "the right value".
struct Fmt {
  uint16_t tag = 1;
  uint16_t channels = 1;
  uint32_t sample_rate = 16000;
  uint16_t bits = 16;
  int block_align = -1;
  // WAVE_FORMAT_EXTENSIBLE (tag 0xfffe): valid bits and the sub-format's tag.
  uint16_t valid_bits = 0;
  uint16_t sub_format = 1;
  bool foreign_guid = false;  // a GUID outside the KSDATAFORMAT_SUBTYPE family
};

inline Bytes fmt_body(const Fmt& fmt) {
  Bytes body;
  const int container_bytes = (fmt.bits + 7) / 8;
  const int block_align = fmt.block_align >= 0 ? fmt.block_align : fmt.channels * container_bytes;
  put_u16(body, fmt.tag);
  put_u16(body, fmt.channels);
  put_u32(body, fmt.sample_rate);
  put_u32(body, fmt.sample_rate * static_cast<uint32_t>(block_align));
  put_u16(body, static_cast<unsigned>(block_align));
  put_u16(body, fmt.bits);
  if (fmt.tag == 0xfffe) {
    put_u16(body, 22);
    put_u16(body, fmt.valid_bits);
    put_u32(body, 0);  // channel mask
    put_u16(body, fmt.sub_format);
    const uint8_t tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                              0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71};
    body.insert(body.end(), std::begin(tail), std::end(tail));
    if (fmt.foreign_guid) body[body.size() - 1] ^= 0xff;
  }
  return body;
}

// A RIFF file assembled chunk by chunk; sizes can be overridden to build broken files.
class Riff {
 public:
  explicit Riff(const char* id = "RIFF") : id_(id) {}

  Riff& chunk(const char* id, const Bytes& body, std::optional<uint32_t> declared = {}) {
    body_.insert(body_.end(), id, id + 4);
    put_u32(body_, declared ? *declared : static_cast<uint32_t>(body.size()));
    body_.insert(body_.end(), body.begin(), body.end());
    if (body.size() % 2 == 1) body_.push_back(0);
    return *this;
  }
  Riff& fmt(const Fmt& fmt) { return chunk("fmt ", fmt_body(fmt)); }
  Riff& data(const Bytes& samples, std::optional<uint32_t> declared = {}) {
    return chunk("data", samples, declared);
  }
  // Raw bytes with no chunk header (to cut a file short, say).
  Riff& raw(const Bytes& bytes) {
    body_.insert(body_.end(), bytes.begin(), bytes.end());
    return *this;
  }

  Bytes bytes(std::optional<uint32_t> declared_riff_size = {}) const {
    Bytes out(id_, id_ + 4);
    put_u32(out,
            declared_riff_size ? *declared_riff_size : static_cast<uint32_t>(body_.size() + 4));
    out.insert(out.end(), {'W', 'A', 'V', 'E'});
    out.insert(out.end(), body_.begin(), body_.end());
    return out;
  }

 private:
  const char* id_;
  Bytes body_;
};

inline Bytes wav(const Fmt& fmt, const Bytes& samples) {
  return Riff().fmt(fmt).data(samples).bytes();
}

inline Bytes pcm16(const std::vector<float>& samples) {
  std::vector<int16_t> values;
  for (float sample : samples) {
    values.push_back(
        static_cast<int16_t>(std::lround(std::clamp(sample, -1.0f, 32767.0f / 32768) * 32768)));
  }
  return le_bytes(values);
}

inline std::vector<float> sine(double frequency, int sample_rate, size_t count,
                               double amplitude = 0.5, double phase = 0) {
  std::vector<float> samples(count);
  for (size_t i = 0; i < count; ++i) {
    samples[i] = static_cast<float>(
        amplitude * std::sin(2 * M_PI * frequency * static_cast<double>(i) / sample_rate + phase));
  }
  return samples;
}

// The middle of a signal, away from the edges where filters ramp in and out.
inline std::span<const float> middle(const std::vector<float>& samples,
                                     double edge_fraction = 0.1) {
  const auto edge = static_cast<size_t>(static_cast<double>(samples.size()) * edge_fraction);
  return std::span<const float>(samples).subspan(edge, samples.size() - 2 * edge);
}

inline double rms(std::span<const float> samples) {
  double sum = 0;
  for (float sample : samples) sum += static_cast<double>(sample) * sample;
  return samples.empty() ? 0 : std::sqrt(sum / static_cast<double>(samples.size()));
}

// Amplitude of the component at `frequency`: projection on a sine and a cosine.
inline double tone_amplitude(std::span<const float> samples, int sample_rate, double frequency) {
  double in_phase = 0, quadrature = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const double angle = 2 * M_PI * frequency * static_cast<double>(i) / sample_rate;
    in_phase += samples[i] * std::cos(angle);
    quadrature += samples[i] * std::sin(angle);
  }
  return 2 * std::hypot(in_phase, quadrature) / static_cast<double>(samples.size());
}

// Frequency of a pure tone from its rising zero crossings (interpolated between samples).
inline double tone_frequency(std::span<const float> samples, int sample_rate) {
  double first = -1, last = -1;
  int crossings = 0;
  for (size_t i = 1; i < samples.size(); ++i) {
    if (samples[i - 1] < 0 && samples[i] >= 0) {
      const double at = static_cast<double>(i - 1) + samples[i - 1] / (samples[i - 1] - samples[i]);
      if (first < 0) first = at;
      last = at;
      ++crossings;
    }
  }
  if (crossings < 2) return 0;
  return (crossings - 1) * sample_rate / (last - first);
}

inline double decibels(double ratio) {
  return 20 * std::log10(std::max(ratio, 1e-20));
}

// The lag of `b` against `a` (b[i + lag] ~ a[i]) that maximizes their normalized correlation.
struct Alignment {
  int lag = 0;
  double correlation = 0;
};
inline Alignment best_alignment(std::span<const float> a, std::span<const float> b, int max_lag) {
  Alignment best{0, -2};
  for (int lag = -max_lag; lag <= max_lag; ++lag) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const long j = static_cast<long>(i) + lag;
      if (j < 0 || j >= static_cast<long>(b.size())) continue;
      ab += static_cast<double>(a[i]) * b[static_cast<size_t>(j)];
      aa += static_cast<double>(a[i]) * a[i];
      bb += static_cast<double>(b[static_cast<size_t>(j)]) * b[static_cast<size_t>(j)];
    }
    const double correlation = ab / std::sqrt(std::max(aa * bb, 1e-30));
    if (correlation > best.correlation) best = {lag, correlation};
  }
  return best;
}

// A file of the running test's own scratch folder. The folder lives until the next test asks for
// one (or the program ends), so a test's files can be read back after it writes them, and none is
// left behind.
inline std::string temp_path(const std::string& name) {
  static std::unique_ptr<hark::test::ScratchDir> scratch;
  static const ::testing::TestInfo* owner = nullptr;
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!scratch || owner != test) {
    scratch.reset();  // the previous test's folder goes first
    scratch = std::make_unique<hark::test::ScratchDir>();
    owner = test;
  }
  return scratch->file(name);
}

inline std::string write_temp(const std::string& name, const Bytes& bytes) {
  const std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
  return path;
}

inline Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `consume` on the read end of a real pipe while a thread writes `bytes` into it, so the
// reader sees a non-seekable stream that arrives in pieces. The pipe is closed afterwards either
// way; an exception from `consume` propagates.
inline void through_pipe(const Bytes& bytes, const std::function<void(std::FILE*)>& consume) {
  std::signal(SIGPIPE, SIG_IGN);  // a reader that gives up early must not kill the writer
  int ends[2];
  ASSERT_EQ(pipe(ends), 0);
  std::thread writer([&bytes, fd = ends[1]] {
    size_t done = 0;
    while (done < bytes.size()) {
      const size_t piece = std::min<size_t>(bytes.size() - done, 4093);  // odd-sized pieces
      const ssize_t wrote = write(fd, bytes.data() + done, piece);
      if (wrote <= 0) break;
      done += static_cast<size_t>(wrote);
    }
    close(fd);
  });
  std::FILE* stream = fdopen(ends[0], "rb");
  auto cleanup = [&] {
    std::fclose(stream);
    writer.join();
  };
  try {
    consume(stream);
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

}  // namespace hark::audio::test_util
