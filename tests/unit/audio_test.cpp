// The audio module without FFmpeg: our WAV parser (every sample format, chunk layouts, broken
// files), the Reader's streaming, standard input, and both resamplers' quality. Runs in every
// build; tests that need FFmpeg's decoders live in audio_ffmpeg_test.cpp.
#include <gtest/gtest.h>
#include <stdio_ext.h>
#include <sys/stat.h>

#include <cstdlib>
#include <random>

#include "audio/audio.h"
#include "audio/resampler.h"
#include "base/error.h"
#include "unit/audio_test_util.h"

namespace hark::audio {
namespace {

using namespace test_util;

std::vector<float> from_memory(const Bytes& bytes, int sample_rate = kSampleRate) {
  return load_memory(bytes, sample_rate);
}

// Expects `action` to throw hark::Error whose message contains every one of `parts`.
template <class Action>
void expect_error(Action action, const std::vector<std::string>& parts) {
  try {
    action();
    ADD_FAILURE() << "no hark::Error thrown";
  } catch (const Error& error) {
    const std::string message = error.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message \"" << message << "\" lacks \"" << part << "\"";
    }
  }
}

std::vector<std::string> plus(std::vector<std::string> parts, const std::string& more) {
  parts.push_back(more);
  return parts;
}

// Expects the bytes to fail the same way from a file, from memory and from a pipe, with a message
// that names the input.
void expect_bad_wav(const Bytes& bytes, const std::vector<std::string>& parts) {
  const std::string path = write_temp("bad.wav", bytes);
  expect_error([&] { load(path); }, plus(parts, path));
  expect_error([&] { from_memory(bytes); }, parts);
  through_pipe(bytes, [&](std::FILE* pipe) {
    expect_error([&] { load_stream(pipe, "the pipe"); }, plus(parts, "the pipe"));
  });
}

// ---------------------------------------------------------------------------------------------
// Sample formats: each decodes to exactly the expected floats (16 kHz mono, no resampling).

TEST(AudioWav, Unsigned8) {
  const Bytes data = {0, 64, 128, 192, 255};
  const auto samples = from_memory(wav({.bits = 8}, data));
  EXPECT_EQ(samples, (std::vector<float>{-1, -0.5, 0, 0.5, 127 / 128.0f}));
}

TEST(AudioWav, Signed16) {
  const auto data = le_bytes(std::vector<int16_t>{-32768, -16384, 0, 16384, 32767});
  const auto samples = from_memory(wav({.bits = 16}, data));
  EXPECT_EQ(samples, (std::vector<float>{-1, -0.5, 0, 0.5, 32767 / 32768.0f}));
}

TEST(AudioWav, Signed24) {
  const auto data = int24_bytes({-8388608, -4194304, 0, 1, 8388607});
  const auto samples = from_memory(wav({.bits = 24}, data));
  EXPECT_EQ(samples, (std::vector<float>{-1, -0.5, 0, 1 / 8388608.0f, 8388607 / 8388608.0f}));
}

TEST(AudioWav, Signed32) {
  const auto data = le_bytes(std::vector<int32_t>{INT32_MIN, -(1 << 30), 0, 1 << 30, INT32_MAX});
  const auto samples = from_memory(wav({.bits = 32}, data));
  EXPECT_EQ(samples, (std::vector<float>{-1, -0.5, 0, 0.5, 1}));  // INT32_MAX rounds to 1 in float
}

TEST(AudioWav, Float32) {
  const std::vector<float> values = {-1, -0.5f, 0, 0.25f, 0.999f, 1.5f};
  const auto samples = from_memory(wav({.tag = 3, .bits = 32}, le_bytes(values)));
  EXPECT_EQ(samples, values);  // float input is not clipped
}

TEST(AudioWav, Float64) {
  const std::vector<double> values = {-1, -0.5, 0, 0.25, 1.0 / 3};
  const auto samples = from_memory(wav({.tag = 3, .bits = 64}, le_bytes(values)));
  EXPECT_EQ(samples, (std::vector<float>{-1, -0.5f, 0, 0.25f, static_cast<float>(1.0 / 3)}));
}

TEST(AudioWav, G711) {
  // Codes and their G.711 linear values (16-bit scale).
  const auto alaw = from_memory(wav({.tag = 6, .bits = 8}, {0xd5, 0x55, 0xaa, 0x2a}));
  EXPECT_EQ(alaw,
            (std::vector<float>{8 / 32768.0f, -8 / 32768.0f, 32256 / 32768.0f, -32256 / 32768.0f}));
  const auto mulaw = from_memory(wav({.tag = 7, .bits = 8}, {0xff, 0x80, 0x00, 0x7e}));
  EXPECT_EQ(mulaw, (std::vector<float>{0, 32124 / 32768.0f, -32124 / 32768.0f, -8 / 32768.0f}));
}

TEST(AudioWav, ExtensiblePcmHonoursValidBits) {
  // 20 valid bits in 24-bit containers: the low 4 bits are noise that must be ignored.
  const auto data = int24_bytes({0x7fffff, -0x800000 | 0xf, 0x00000f});
  const auto samples = from_memory(wav({.tag = 0xfffe, .bits = 24, .valid_bits = 20}, data));
  EXPECT_EQ(samples, (std::vector<float>{0x7ffff0 / 8388608.0f, -1, 0}));

  // 24 valid bits in 32-bit containers.
  const auto wide = le_bytes(std::vector<int32_t>{0x123456ff, -0x10000000});
  const auto wide_samples = from_memory(wav({.tag = 0xfffe, .bits = 32, .valid_bits = 24}, wide));
  EXPECT_EQ(wide_samples,
            (std::vector<float>{static_cast<float>(0x12345600 / 2147483648.0), -0.125f}));
}

TEST(AudioWav, ExtensibleFloatAndZeroValidBits) {
  const std::vector<float> values = {0.125f, -0.75f};
  EXPECT_EQ(from_memory(wav({.tag = 0xfffe, .bits = 32, .valid_bits = 32, .sub_format = 3},
                            le_bytes(values))),
            values);
  // Some writers leave wValidBitsPerSample at 0 to mean "all of them".
  const auto data = le_bytes(std::vector<int16_t>{16384, -3});
  EXPECT_EQ(from_memory(wav({.tag = 0xfffe, .bits = 16, .valid_bits = 0}, data)),
            (std::vector<float>{0.5f, -3 / 32768.0f}));
}

TEST(AudioWav, MultichannelDownmixIsTheMean) {
  // Three channels, interleaved: frame 0 = (3000, 6000, 9000), frame 1 = (-300, 0, 0).
  const auto data = le_bytes(std::vector<int16_t>{3000, 6000, 9000, -300, 0, 0});
  const auto samples = from_memory(wav({.channels = 3}, data));
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_FLOAT_EQ(samples[0], 6000 / 32768.0f);
  EXPECT_FLOAT_EQ(samples[1], -100 / 32768.0f);

  // Opposite stereo channels cancel; six float channels average.
  const auto stereo = le_bytes(std::vector<int16_t>{1000, -1000, -5, 5});
  EXPECT_EQ(from_memory(wav({.channels = 2}, stereo)), (std::vector<float>{0, 0}));
  const auto six = le_bytes(std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f});
  const auto mixed = from_memory(wav({.tag = 3, .channels = 6, .bits = 32}, six));
  ASSERT_EQ(mixed.size(), 1u);
  EXPECT_NEAR(mixed[0], 0.35f, 1e-7);
}

// A whole-file load reads blocks large enough to mix on parallel threads (256k frames of
// 16-bit stereo); each frame must still be exactly the mean of its channels, as a stream, which
// reads small blocks, gets it.
TEST(AudioWav, LongBlocksMixLikeShortOnes) {
  for (const uint16_t channels : {1, 2, 3}) {
    SCOPED_TRACE(channels);
    constexpr size_t kFrames = 300001;
    std::vector<int16_t> values(kFrames * channels);
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<int16_t>((i * 7919) % 65536 - 32768);
    }
    const Bytes bytes = wav({.channels = channels}, le_bytes(values));
    const std::vector<float> whole = from_memory(bytes);
    ASSERT_EQ(whole.size(), kFrames);
    for (size_t f = 0; f < kFrames; ++f) {
      float sum = 0;
      for (size_t c = 0; c < channels; ++c) sum += values[f * channels + c] * (1.0f / 32768);
      ASSERT_EQ(whole[f], sum * (1.0f / static_cast<float>(channels))) << f;
    }
    through_pipe(bytes, [&](std::FILE* pipe) {
      Reader reader = Reader::open_stream(pipe, "the pipe");
      std::vector<float> streamed;
      while (reader.read(streamed)) {
      }
      EXPECT_EQ(streamed, whole);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Chunk layouts.

TEST(AudioWav, SkipsUnknownAndOddSizedChunks) {
  const auto data = le_bytes(std::vector<int16_t>{100, 200, 300});
  const Bytes bytes = Riff()
                          .chunk("junk", {1, 2, 3})  // odd size: one padding byte follows
                          .fmt({})
                          .chunk("LIST", Bytes(27, 'x'))
                          .data(data)
                          .chunk("id3 ", Bytes(10, 0))
                          .bytes();
  EXPECT_EQ(from_memory(bytes),
            (std::vector<float>{100 / 32768.0f, 200 / 32768.0f, 300 / 32768.0f}));
}

TEST(AudioWav, DataBeforeFmtWhenSeekable) {
  const auto data = le_bytes(std::vector<int16_t>{1, 2});
  const Bytes bytes = Riff().data(data).chunk("junk", {9}).fmt({}).bytes();
  EXPECT_EQ(from_memory(bytes), (std::vector<float>{1 / 32768.0f, 2 / 32768.0f}));
  EXPECT_EQ(load(write_temp("late-fmt.wav", bytes)), from_memory(bytes));
  // A pipe cannot go back for the data it passed.
  through_pipe(bytes, [](std::FILE* pipe) {
    expect_error([&] { load_stream(pipe, "the pipe"); }, {"the pipe", "no fmt chunk before"});
  });
}

TEST(AudioWav, Rf64) {
  const auto data = le_bytes(std::vector<int16_t>{-16384, 16384, 8192});
  Bytes ds64;
  put_u64(ds64, 0);            // RIFF size (unused)
  put_u64(ds64, data.size());  // data size
  put_u64(ds64, 3);            // sample count
  put_u32(ds64, 0);            // table length
  const Bytes bytes =
      Riff("RF64").chunk("ds64", ds64).fmt({}).data(data, 0xffffffff).bytes(0xffffffff);
  EXPECT_EQ(from_memory(bytes), (std::vector<float>{-0.5f, 0.5f, 0.25f}));
}

TEST(AudioWav, StreamingPlaceholderSizeReadsToTheEnd) {
  // ffmpeg writing WAV to a pipe cannot go back to fill in the sizes: they stay 0xffffffff.
  const auto data = le_bytes(std::vector<int16_t>{1000, 2000, 3000, 4000});
  const Bytes bytes = Riff().fmt({}).data(data, 0xffffffff).bytes(0xffffffff);
  const std::vector<float> expected = {1000 / 32768.0f, 2000 / 32768.0f, 3000 / 32768.0f,
                                       4000 / 32768.0f};
  EXPECT_EQ(from_memory(bytes), expected);
  through_pipe(bytes, [&](std::FILE* pipe) { EXPECT_EQ(load_stream(pipe, "pipe"), expected); });
}

TEST(AudioWav, TrailingPartialFrameIsDropped) {
  Bytes data = le_bytes(std::vector<int16_t>{100, -100, 200, -200});
  data.push_back(7);  // half a frame
  const auto samples = from_memory(wav({.channels = 2}, data));
  EXPECT_EQ(samples, (std::vector<float>{0, 0}));
}

TEST(AudioWav, ReadsTheRepositoryRecordings) {
  const auto jfk = load(HARK_TEST_DATA "/audio/jfk.wav");
  EXPECT_EQ(jfk.size(), 176000u);  // 11 s at 16 kHz
  EXPECT_GT(rms(jfk), 0.01);
  EXPECT_LE(*std::max_element(jfk.begin(), jfk.end()), 1.0f);
  const auto bytes = read_bytes(HARK_TEST_DATA "/audio/jfk.wav");
  EXPECT_EQ(load_memory(bytes), jfk);

  Reader reader = Reader::open(HARK_TEST_DATA "/audio/beckett.wav");
  EXPECT_EQ(reader.source().format, "wav/pcm_s16le");
  EXPECT_EQ(reader.source().sample_rate, 16000);
  EXPECT_EQ(reader.source().channels, 1);
  EXPECT_GT(reader.read_all().size(), 16000u);
}

// ---------------------------------------------------------------------------------------------
// Broken and unsupported files: a hark::Error that names the input and says what is wrong.

TEST(AudioWavErrors, EmptyFile) {
  expect_bad_wav({}, {"empty"});
}

TEST(AudioWavErrors, NotAWavFile) {
  // Without FFmpeg the message says so; with it, FFmpeg does not recognize these either.
  expect_bad_wav(Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!', '\n'}, {});
  Bytes wrong_form = wav({}, le_bytes(std::vector<int16_t>{1, 2}));
  wrong_form[11] = 'X';  // "WAVX"
  expect_bad_wav(wrong_form, {});
#ifndef HARK_HAVE_FFMPEG
  expect_error([] { from_memory({'O', 'g', 'g', 'S', 0, 2, 0, 0, 0, 0, 0, 0, 0}); }, {"no FFmpeg"});
#endif
}

TEST(AudioWavErrors, MissingChunks) {
  const auto data = le_bytes(std::vector<int16_t>{1, 2});
  expect_bad_wav(Riff().data(data).bytes(), {"no fmt chunk"});
  expect_bad_wav(Riff().fmt({}).chunk("LIST", {1, 2}).bytes(), {"no data chunk"});
  expect_bad_wav(Riff().bytes(), {"no fmt chunk"});
}

TEST(AudioWavErrors, Truncated) {
  // The data chunk claims 1000 bytes; 10 follow.
  const auto data = le_bytes(std::vector<int16_t>{1, 2, 3, 4, 5});
  expect_bad_wav(Riff().fmt({}).data(data, 1000).bytes(), {"truncated", "1000"});
  // A chunk before the data runs past the end of the file.
  expect_bad_wav(Riff().fmt({}).chunk("LIST", {1, 2}, 5000).bytes(), {"truncated"});
  // An RF64 size near 2^64 must not wrap around the check.
  Bytes ds64;
  put_u64(ds64, 0);
  put_u64(ds64, ~uint64_t{0} - 20);
  put_u64(ds64, 0);
  expect_bad_wav(Riff("RF64").chunk("ds64", ds64).fmt({}).data(data, 0xffffffff).bytes(),
                 {"truncated"});
  // The file stops inside the fmt chunk, and inside a chunk header.
  const Bytes whole = wav({}, data);
  expect_bad_wav(Bytes(whole.begin(), whole.begin() + 30), {"truncated"});
  expect_bad_wav(Bytes(whole.begin(), whole.begin() + 40), {"truncated"});
}

TEST(AudioWavErrors, BadFmt) {
  const auto data = le_bytes(std::vector<int16_t>{1, 2});
  expect_bad_wav(wav({.channels = 0}, data), {"0 channels"});
  expect_bad_wav(wav({.sample_rate = 0}, data), {"sample rate of 0 Hz"});
  expect_bad_wav(wav({.sample_rate = 5000000}, data), {"sample rate of 5000000 Hz"});
  expect_bad_wav(wav({.channels = 2, .block_align = 2}, data), {"block align"});
  expect_bad_wav(wav({.tag = 3, .bits = 16}, data), {"16-bit float"});
  expect_bad_wav(wav({.bits = 40}, data), {"40-bit integer"});
  expect_bad_wav(wav({.tag = 0xfffe, .bits = 16, .valid_bits = 20}, data), {"20 valid bits"});
  expect_bad_wav(Riff().chunk("fmt ", Bytes(14, 1)).data(data).bytes(), {"shorter than 16"});
  Bytes short_extensible = fmt_body({.tag = 0xfffe});
  short_extensible.resize(18);
  expect_bad_wav(Riff().chunk("fmt ", short_extensible).data(data).bytes(), {"EXTENSIBLE"});
}

TEST(AudioWavErrors, UnsupportedEncodings) {
  // An unknown format tag and a sub-format GUID from outside the PCM family: neither we nor
  // FFmpeg decode them.
  const auto data = le_bytes(std::vector<int16_t>{1, 2});
  expect_bad_wav(wav({.tag = 0x1234}, data), {"format tag 0x1234"});
  expect_bad_wav(wav({.tag = 0xfffe, .foreign_guid = true}, data), {"sub-format"});
}

TEST(AudioWavErrors, NonFiniteFloat) {
  const std::vector<float> values = {0.5f, std::nanf(""), 0.25f};
  expect_bad_wav(wav({.tag = 3, .bits = 32}, le_bytes(values)), {"NaN or infinite"});
  const std::vector<double> infinite = {HUGE_VAL};
  expect_bad_wav(wav({.tag = 3, .bits = 64}, le_bytes(infinite)), {"NaN or infinite"});
  // Deep inside a block that is checked on parallel threads.
  std::vector<float> long_stereo(2 * 300000, 0.125f);
  long_stereo[2 * 150000 + 1] = -HUGE_VALF;
  expect_bad_wav(wav({.tag = 3, .channels = 2, .bits = 32}, le_bytes(long_stereo)),
                 {"NaN or infinite"});
}

TEST(AudioWavErrors, NoSamples) {
  expect_bad_wav(wav({}, {}), {"no audio samples"});
  expect_bad_wav(wav({.channels = 2}, {1}), {"no audio samples"});  // not even one frame
  // A Reader just ends.
  const Bytes empty = wav({}, {});
  Reader reader = Reader::open_memory(empty);
  std::vector<float> out;
  EXPECT_FALSE(reader.read(out));
  EXPECT_TRUE(out.empty());
}

TEST(AudioErrors, UnreadablePaths) {
  const std::string missing = ::testing::TempDir() + "hark_no_such_file.wav";
  expect_error([&] { load(missing); }, {missing, "cannot open"});
  expect_error([] { load(::testing::TempDir()); }, {"directory"});
  const auto bytes = wav({}, le_bytes(std::vector<int16_t>{1}));
  expect_error([&] { from_memory(bytes, 0); }, {"output sample rate"});
  expect_error([&] { from_memory(bytes, 10000000); }, {"output sample rate"});
}

TEST(AudioWavErrors, MutatedFilesNeverCrash) {
  // Random damage to valid files of several layouts: every outcome is either samples (all
  // finite) or a hark::Error, never a crash, a hang or an out-of-bounds read (ASan builds).
  const std::vector<Bytes> seeds = {
      Riff()
          .chunk("junk", {1, 2, 3})
          .fmt({.channels = 2, .sample_rate = 44100})
          .data(pcm16(sine(440, 44100, 400)))
          .chunk("LIST", Bytes(5, 1))
          .bytes(),
      wav({.tag = 0xfffe, .channels = 3, .bits = 24, .valid_bits = 20}, Bytes(3 * 3 * 50, 7)),
      wav({.tag = 3, .bits = 32}, le_bytes(sine(100, 16000, 300))),
  };
  std::mt19937 random(11);
  int decoded = 0, rejected = 0;
  for (const Bytes& seed : seeds) {
    for (int round = 0; round < 500; ++round) {
      Bytes bytes = seed;
      for (int edits = 1 + static_cast<int>(random() % 4); edits > 0 && !bytes.empty(); --edits) {
        const size_t at = random() % bytes.size();
        switch (random() % 4) {
          case 0:
            bytes[at] = static_cast<uint8_t>(random());
            break;
          case 1:
            bytes[at] ^= static_cast<uint8_t>(1u << (random() % 8));
            break;
          case 2:
            bytes.resize(at);
            break;
          default:
            bytes[at] = random() % 2 ? 0xff : 0x00;
        }
      }
      try {
        const auto samples = from_memory(bytes);
        ASSERT_FALSE(samples.empty());
        for (float sample : samples) ASSERT_TRUE(std::isfinite(sample));
        ++decoded;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(decoded, 0);
  EXPECT_GT(rejected, 0);
}

// ---------------------------------------------------------------------------------------------
// Streaming and resampling through the Reader.

TEST(AudioReader, StreamsLongInputInBlocks) {
  // 20 s of 44.1 kHz stereo: the reader hands it out in many blocks whose concatenation is
  // exactly load()'s output, resampled to 16 kHz.
  const int rate = 44100;
  const auto left = sine(440, rate, 20 * rate, 0.5);
  std::vector<int16_t> interleaved;
  for (float sample : left) {
    const auto value = static_cast<int16_t>(std::lround(sample * 32767));
    interleaved.push_back(value);
    interleaved.push_back(value);
  }
  const Bytes bytes = wav({.channels = 2, .sample_rate = rate}, le_bytes(interleaved));
  const std::string path = write_temp("long.wav", bytes);

  Reader reader = Reader::open(path);
  EXPECT_EQ(reader.source().sample_rate, rate);
  EXPECT_EQ(reader.source().channels, 2);
  EXPECT_EQ(reader.source().frames, static_cast<uint64_t>(20 * rate));
  std::vector<float> streamed;
  int blocks = 0;
  while (reader.read(streamed)) ++blocks;
  EXPECT_GT(blocks, 10);
  EXPECT_FALSE(reader.read(streamed));

  const auto loaded = load(path);
  EXPECT_EQ(streamed, loaded);
  EXPECT_NEAR(static_cast<double>(loaded.size()), 20 * 16000, 1);
  EXPECT_NEAR(tone_frequency(middle(loaded), 16000), 440, 440 * 0.001);
  EXPECT_NEAR(tone_amplitude(middle(loaded), 16000, 440), 0.5, 0.005);
  std::remove(path.c_str());
}

TEST(AudioReader, OtherOutputRates) {
  const auto tone = sine(1000, 16000, 16000);
  const Bytes bytes = wav({}, pcm16(tone));
  const auto at_8k = from_memory(bytes, 8000);
  EXPECT_NEAR(static_cast<double>(at_8k.size()), 8000, 1);
  EXPECT_NEAR(tone_frequency(middle(at_8k), 8000), 1000, 10);
  // No resampling at the input's own rate: the samples come through untouched.
  EXPECT_EQ(from_memory(bytes, 16000), from_memory(bytes));
}

// ---------------------------------------------------------------------------------------------
// Standard input: "-" reads fd 0, whether a regular file or a pipe is redirected to it.

class StdinRedirect {
 public:
  explicit StdinRedirect(int fd) : saved_(dup(0)) {
    dup2(fd, 0);
    close(fd);
    __fpurge(stdin);
    clearerr(stdin);
  }
  ~StdinRedirect() {
    dup2(saved_, 0);
    close(saved_);
    __fpurge(stdin);
    clearerr(stdin);
  }
  StdinRedirect(const StdinRedirect&) = delete;
  StdinRedirect& operator=(const StdinRedirect&) = delete;

 private:
  int saved_;
};

TEST(AudioStdin, DashReadsARedirectedFile) {
  const auto expected = load(HARK_TEST_DATA "/audio/jfk.wav");
  StdinRedirect redirect(open(HARK_TEST_DATA "/audio/jfk.wav", O_RDONLY));
  EXPECT_EQ(load("-"), expected);
}

TEST(AudioStdin, DashReadsAPipe) {
  const Bytes bytes = read_bytes(HARK_TEST_DATA "/audio/jfk.wav");
  const auto expected = load_memory(bytes);
  through_pipe(bytes, [&](std::FILE* pipe) {
    StdinRedirect redirect(dup(fileno(pipe)));
    EXPECT_EQ(load("-"), expected);
  });
}

TEST(AudioStdin, PipeMatchesMemoryWithChunksAndResampling) {
  std::vector<int32_t> values;
  for (float sample : sine(300, 22050, 4000, 0.5)) {
    values.push_back(static_cast<int32_t>(sample * 2e9f));
    values.push_back(static_cast<int32_t>(sample * -1e9f));
  }
  const auto data = le_bytes(values);
  const Bytes bytes = Riff()
                          .chunk("junk", Bytes(3001, 1))
                          .fmt({.channels = 2, .sample_rate = 22050, .bits = 32})
                          .data(data)
                          .bytes();
  const auto expected = from_memory(bytes);
  through_pipe(bytes, [&](std::FILE* pipe) { EXPECT_EQ(load_stream(pipe, "pipe"), expected); });
}

// ---------------------------------------------------------------------------------------------
// Resamplers: the sinc one (always built) and the build's choice (libswresample with FFmpeg).

struct ResamplerCase {
  const char* name;
  std::unique_ptr<Resampler> (*make)(int, int);
  double min_stopband_db;  // attenuation of a tone well above the output's Nyquist frequency
  double max_phase_error;  // largest deviation from the ideal resampled tone, mid-signal
};

std::vector<float> resample(const ResamplerCase& which, int from, int to,
                            const std::vector<float>& input, size_t block = 4096) {
  auto resampler = which.make(from, to);
  std::vector<float> output;
  for (size_t start = 0; start < input.size(); start += block) {
    resampler->process(std::span(input).subspan(start, std::min(block, input.size() - start)),
                       output);
  }
  resampler->finish(output);
  return output;
}

class ResamplerTest : public ::testing::TestWithParam<ResamplerCase> {};

TEST_P(ResamplerTest, KeepsFrequencyAndAmplitude) {
  for (int rate : {44100, 48000, 8000, 22050, 11025, 32000, 96000, 44056}) {
    SCOPED_TRACE(rate);
    const auto output = resample(GetParam(), rate, 16000, sine(1000, rate, rate, 0.5));
    EXPECT_NEAR(static_cast<double>(output.size()), 16000, 1);
    EXPECT_NEAR(tone_frequency(middle(output), 16000), 1000, 10);
    EXPECT_NEAR(tone_amplitude(middle(output), 16000, 1000), 0.5, 0.005);
  }
}

TEST_P(ResamplerTest, IsAlignedWithTheInput) {
  // Output sample k is the input's value at time k / 16000: no delay, no phase shift.
  for (int rate : {44100, 8000, 48000}) {
    SCOPED_TRACE(rate);
    const auto output = resample(GetParam(), rate, 16000, sine(997, rate, rate, 0.5, 0.3));
    const auto ideal = sine(997, 16000, output.size(), 0.5, 0.3);
    double worst = 0;
    for (size_t k = 1000; k + 1000 < output.size(); ++k) {
      worst = std::max(worst, std::abs(static_cast<double>(output[k]) - ideal[k]));
    }
    EXPECT_LT(worst, GetParam().max_phase_error);
  }
}

TEST_P(ResamplerTest, RemovesWhatWouldAlias) {
  // A 10 kHz tone cannot exist at 16 kHz; whatever is left of it folds back to 6 kHz.
  const auto output = resample(GetParam(), 44100, 16000, sine(10000, 44100, 44100, 0.5));
  const auto rest = middle(output);
  EXPECT_LT(decibels(rms(rest) / (0.5 / std::sqrt(2.0))), -GetParam().min_stopband_db);
}

TEST_P(ResamplerTest, BlockSizeDoesNotMatter) {
  std::mt19937 random(7);
  std::normal_distribution<float> noise(0, 0.2f);
  std::vector<float> input(30000);
  for (float& sample : input) sample = noise(random);
  const auto whole = resample(GetParam(), 44100, 16000, input, input.size());
  for (size_t block : {1, 7, 1000, 4097}) {
    SCOPED_TRACE(block);
    const auto pieces = resample(GetParam(), 44100, 16000, input, block);
    ASSERT_EQ(pieces.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(pieces[i], whole[i], 1e-6) << i;
  }
}

TEST_P(ResamplerTest, OutOfRangeRatesAreErrors) {
  EXPECT_THROW(GetParam().make(0, 16000), Error);
  EXPECT_THROW(GetParam().make(44100, -1), Error);
  EXPECT_THROW(GetParam().make(kMaxSampleRate + 1, 16000), Error);
}

INSTANTIATE_TEST_SUITE_P(
    Audio, ResamplerTest,
    ::testing::Values(ResamplerCase{"sinc", make_sinc_resampler, 80, 1e-3},
                      // libswresample's default filter (ffmpeg's) lets a little more through.
                      ResamplerCase{"default", make_resampler, 60, 1e-2}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(AudioSincResampler, PassbandStopbandAndImages) {
  const ResamplerCase sinc{"sinc", make_sinc_resampler, 80, 0};
  // Flat to 7 kHz (0.9 of 8 kHz is 7.2 kHz).
  const auto treble = resample(sinc, 48000, 16000, sine(7000, 48000, 48000, 0.5));
  EXPECT_NEAR(tone_amplitude(middle(treble), 16000, 7000), 0.5, 0.005);
  // At least 80 dB down from 8 kHz on, where tones would alias.
  for (double frequency : {8100.0, 9000.0, 15000.0, 21000.0}) {
    SCOPED_TRACE(frequency);
    const auto output = resample(sinc, 44100, 16000, sine(frequency, 44100, 44100, 0.5));
    EXPECT_LT(decibels(rms(middle(output)) / (0.5 / std::sqrt(2.0))), -80);
  }
  // Upsampling 8 kHz -> 16 kHz: a 3 kHz tone stays, its 5 kHz image must not appear.
  const auto up = resample(sinc, 8000, 16000, sine(3000, 8000, 8000, 0.5));
  EXPECT_NEAR(tone_amplitude(middle(up), 16000, 3000), 0.5, 0.005);
  EXPECT_LT(decibels(tone_amplitude(middle(up), 16000, 5000) / 0.5), -80);
}

TEST(AudioSincResampler, OutputLengthAndOddRates) {
  // Every output instant inside the input's span: ceil(n * out / in) samples.
  for (auto [from, count] : std::vector<std::pair<int, size_t>>{
           {44100, 44101}, {44100, 1}, {48000, 48002}, {8000, 8001}, {1000, 3}, {767999, 50000}}) {
    SCOPED_TRACE(from);
    auto resampler = make_sinc_resampler(from, 16000);
    std::vector<float> output;
    resampler->process(std::vector<float>(count, 0.25f), output);
    resampler->finish(output);
    const auto expected = (static_cast<uint64_t>(count) * 16000 + from - 1) / from;
    ASSERT_EQ(output.size(), expected);
    // DC passes at unit gain once the filter is inside the signal.
    if (output.size() > 200) {
      EXPECT_NEAR(output[output.size() / 2], 0.25f, 1e-5);
    }
  }
}

TEST(AudioResampler, EqualRatesCopy) {
  const auto input = sine(1234, 16000, 5000);
  auto resampler = make_resampler(16000, 16000);
  std::vector<float> output;
  resampler->process(input, output);
  resampler->finish(output);
  EXPECT_EQ(output, input);
}

}  // namespace
}  // namespace hark::audio
