// The audio module's FFmpeg side: compressed formats against the WAV originals, every input path
// (file, memory, pipe), formats encoded here with FFmpeg's own encoders, and bad input.
//
// The build leaves out files ending in _ffmpeg.cpp when FFmpeg is off; this one ends in _test.cpp,
// so it guards itself as well.
#ifdef HARK_HAVE_FFMPEG

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
}

#include <gtest/gtest.h>

#include <random>
#include <string_view>

#include "audio/audio.h"
#include "audio/resampler.h"
#include "base/error.h"
#include "base/log.h"
#include "unit/audio_test_util.h"

namespace hark::audio {
namespace {

using namespace test_util;

const std::string kAudio = HARK_TEST_DATA "/audio/";

// Encodes `samples` (the same in every channel) with FFmpeg's `codec` into a `container` file.
// Returns the file's path.
std::string encode(const std::string& file_name, const std::vector<float>& samples, int rate,
                   int channels, const char* container, const char* codec_name) {
  const std::string path = temp_path(file_name);
  const AVCodec* codec = avcodec_find_encoder_by_name(codec_name);
  EXPECT_NE(codec, nullptr) << codec_name;
  if (!codec) return path;
  AVFormatContext* muxer = nullptr;
  EXPECT_GE(avformat_alloc_output_context2(&muxer, nullptr, container, path.c_str()), 0);
  AVStream* stream = avformat_new_stream(muxer, nullptr);
  AVCodecContext* encoder = avcodec_alloc_context3(codec);
  encoder->sample_rate = rate;
  av_channel_layout_default(&encoder->ch_layout, channels);
  encoder->sample_fmt = codec->sample_fmts[0];
  encoder->time_base = {1, rate};
  if (muxer->oformat->flags & AVFMT_GLOBALHEADER) encoder->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  EXPECT_GE(avcodec_open2(encoder, codec, nullptr), 0);
  EXPECT_GE(avcodec_parameters_from_context(stream->codecpar, encoder), 0);
  stream->time_base = encoder->time_base;
  EXPECT_GE(avio_open(&muxer->pb, path.c_str(), AVIO_FLAG_WRITE), 0);
  EXPECT_GE(avformat_write_header(muxer, nullptr), 0);

  AVPacket* packet = av_packet_alloc();
  auto drain = [&] {
    while (avcodec_receive_packet(encoder, packet) == 0) {
      av_packet_rescale_ts(packet, encoder->time_base, stream->time_base);
      packet->stream_index = stream->index;
      EXPECT_GE(av_interleaved_write_frame(muxer, packet), 0);
    }
  };
  const int frame_size = encoder->frame_size > 0 ? encoder->frame_size : 1024;
  AVFrame* frame = av_frame_alloc();
  const bool planar = av_sample_fmt_is_planar(encoder->sample_fmt);
  const AVSampleFormat packed = av_get_packed_sample_fmt(encoder->sample_fmt);
  for (size_t start = 0; start < samples.size(); start += static_cast<size_t>(frame_size)) {
    const int count = static_cast<int>(std::min<size_t>(frame_size, samples.size() - start));
    frame->nb_samples = count;
    frame->format = encoder->sample_fmt;
    frame->sample_rate = rate;
    av_channel_layout_copy(&frame->ch_layout, &encoder->ch_layout);
    EXPECT_GE(av_frame_get_buffer(frame, 0), 0);
    for (int i = 0; i < count; ++i) {
      const float value = samples[start + static_cast<size_t>(i)];
      for (int c = 0; c < channels; ++c) {
        const int plane = planar ? c : 0;
        const int index = planar ? i : i * channels + c;
        if (packed == AV_SAMPLE_FMT_FLT) {
          reinterpret_cast<float*>(frame->extended_data[plane])[index] = value;
        } else if (packed == AV_SAMPLE_FMT_S16) {
          reinterpret_cast<int16_t*>(frame->extended_data[plane])[index] =
              static_cast<int16_t>(std::lround(value * 32767));
        } else if (packed == AV_SAMPLE_FMT_S32) {
          reinterpret_cast<int32_t*>(frame->extended_data[plane])[index] =
              static_cast<int32_t>(std::lround(value * 2147483647.0));
        } else {
          ADD_FAILURE() << "encoder wants " << av_get_sample_fmt_name(encoder->sample_fmt);
        }
      }
    }
    frame->pts = static_cast<int64_t>(start);
    EXPECT_GE(avcodec_send_frame(encoder, frame), 0);
    av_frame_unref(frame);
    drain();
  }
  avcodec_send_frame(encoder, nullptr);
  drain();
  EXPECT_GE(av_write_trailer(muxer), 0);
  avio_closep(&muxer->pb);
  av_frame_free(&frame);
  av_packet_free(&packet);
  avcodec_free_context(&encoder);
  avformat_free_context(muxer);
  return path;
}

template <class Action>
std::string error_of(Action action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "no hark::Error thrown";
  return "";
}

// Runs `action` with the process's stderr sent to a file; returns what was written there.
template <class Action>
std::string stderr_of(Action action) {
  const std::string path = temp_path("stderr.txt");
  std::fflush(stderr);
  const int saved = dup(2);
  const int file = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(file, 2);
  close(file);
  try {
    action();
  } catch (...) {
  }
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  const Bytes bytes = read_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

// ---------------------------------------------------------------------------------------------
// The repository's recordings: the compressed copies of jfk.wav decode to the same speech.

TEST(AudioFfmpeg, CompressedCopiesMatchTheWav) {
  const auto reference = load(kAudio + "jfk.wav");
  for (const char* name : {"jfk.mp3", "jfk-44k-stereo.flac"}) {
    SCOPED_TRACE(name);
    const auto decoded = load(kAudio + name);
    // Same length (encoder delay and padding trimmed), same timing, same level.
    EXPECT_NEAR(static_cast<double>(decoded.size()), static_cast<double>(reference.size()), 160);
    const Alignment alignment = best_alignment(reference, decoded, 50);
    EXPECT_EQ(alignment.lag, 0);
    EXPECT_GT(alignment.correlation, 0.999);
    EXPECT_NEAR(rms(decoded), rms(reference), 0.01 * rms(reference));
  }
  Reader flac = Reader::open(kAudio + "jfk-44k-stereo.flac");
  EXPECT_EQ(flac.source().format, "flac/flac");
  EXPECT_EQ(flac.source().sample_rate, 44100);
  EXPECT_EQ(flac.source().channels, 2);
  Reader mp3 = Reader::open(kAudio + "jfk.mp3");
  EXPECT_EQ(mp3.source().format, "mp3/mp3float");
}

TEST(AudioFfmpeg, MemoryAndPipesMatchFiles) {
  for (const char* name : {"jfk.mp3", "jfk-44k-stereo.flac"}) {
    SCOPED_TRACE(name);
    const auto from_file = load(kAudio + name);
    const Bytes bytes = read_bytes(kAudio + name);
    EXPECT_EQ(load_memory(bytes), from_file);
    through_pipe(bytes, [&](std::FILE* pipe) {
      // From a pipe, FFmpeg's mp3 demuxer does not trim the encoder's padding after the last
      // frame (at most one 1152-sample frame); everything before it is identical.
      auto piped = load_stream(pipe, "pipe");
      ASSERT_GE(piped.size(), from_file.size());
      EXPECT_LE(piped.size(), from_file.size() + 1152);
      piped.resize(from_file.size());
      EXPECT_EQ(piped, from_file);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Formats encoded here, with FFmpeg's encoders: a 440 Hz tone in, a 440 Hz tone out.

struct Encoded {
  const char* file;
  const char* container;
  const char* codec;
  int rate;
  int channels;
  const char* format;  // what SourceInfo reports
  double amplitude_tolerance;
};

class FfmpegFormatTest : public ::testing::TestWithParam<Encoded> {};

TEST_P(FfmpegFormatTest, DecodesTheTone) {
  const Encoded& which = GetParam();
  const auto tone = sine(440, which.rate, static_cast<size_t>(which.rate) * 2, 0.5);
  const std::string path =
      encode(which.file, tone, which.rate, which.channels, which.container, which.codec);
  Reader reader = Reader::open(path);
  EXPECT_EQ(reader.source().format, which.format);
  EXPECT_EQ(reader.source().sample_rate, which.rate);
  EXPECT_EQ(reader.source().channels, which.channels);
  const auto samples = reader.read_all();
  EXPECT_NEAR(static_cast<double>(samples.size()), 32000, 1600);
  EXPECT_NEAR(tone_frequency(middle(samples), kSampleRate), 440, 2);
  EXPECT_NEAR(tone_amplitude(middle(samples), kSampleRate, 440), 0.5, which.amplitude_tolerance);
  EXPECT_EQ(load_memory(read_bytes(path)), samples);
}

INSTANTIATE_TEST_SUITE_P(
    Audio, FfmpegFormatTest,
    ::testing::Values(
        Encoded{"tone.ogg", "ogg", "libvorbis", 44100, 2, "ogg/vorbis", 0.02},
        Encoded{"tone.opus", "ogg", "libopus", 48000, 1, "ogg/opus", 0.02},
        Encoded{"tone.m4a", "ipod", "aac", 22050, 2, "mov,mp4,m4a,3gp,3g2,mj2/aac", 0.02},
        Encoded{"tone.mp3", "mp3", "libmp3lame", 32000, 1, "mp3/mp3float",
                0.03},  // LAME's output is 5% quieter than its input

        Encoded{"tone.flac", "flac", "flac", 96000, 6, "flac/flac", 0.001},
        Encoded{"tone.adpcm.wav", "wav", "adpcm_ima_wav", 16000, 1, "wav/adpcm_ima_wav", 0.01}),
    [](const auto& info) {
      std::string name = info.param.codec;
      for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

TEST(AudioFfmpeg, OggThroughAPipe) {
  const auto tone = sine(440, 48000, 48000, 0.5);
  const std::string path = encode("tone.ogg", tone, 48000, 1, "ogg", "libopus");
  const auto expected = load(path);
  through_pipe(read_bytes(path),
               [&](std::FILE* pipe) { EXPECT_EQ(load_stream(pipe, "pipe"), expected); });
}

TEST(AudioFfmpeg, ChainedOggChangesRateMidStream) {
  // Two Ogg Vorbis streams back to back, 44.1 kHz stereo then 22.05 kHz mono: the reader must
  // switch resamplers at the seam, or the second second would play at the wrong pitch and speed.
  const auto first =
      encode("first.ogg", sine(440, 44100, 44100, 0.5), 44100, 2, "ogg", "libvorbis");
  const auto second =
      encode("second.ogg", sine(440, 22050, 22050, 0.5), 22050, 1, "ogg", "libvorbis");
  Bytes chained = read_bytes(first);
  const Bytes tail = read_bytes(second);
  chained.insert(chained.end(), tail.begin(), tail.end());
  const auto samples = load_memory(chained);
  EXPECT_NEAR(static_cast<double>(samples.size()), 32000, 800);
  const std::vector<float> halves[] = {
      std::vector<float>(samples.begin() + 2000, samples.begin() + 14000),
      std::vector<float>(samples.end() - 14000, samples.end() - 2000)};
  for (const auto& half : halves) {
    EXPECT_NEAR(tone_frequency(half, kSampleRate), 440, 2);
    EXPECT_NEAR(tone_amplitude(half, kSampleRate, 440), 0.5, 0.02);
  }
}

TEST(AudioFfmpeg, M4aWithItsIndexAtTheEndCannotStreamFromAPipe) {
  // The ipod muxer writes the moov index after the media, which a pipe cannot seek back to:
  // a clear error, not a crash or a hang.
  const auto tone = sine(440, 16000, 30 * 16000, 0.5);
  const std::string path = encode("late-index.m4a", tone, 16000, 1, "ipod", "aac");
  EXPECT_NEAR(static_cast<double>(load(path).size()), 30 * 16000, 2048);
  through_pipe(read_bytes(path), [&](std::FILE* pipe) {
    const std::string message = error_of([&] { load_stream(pipe, "the pipe"); });
    EXPECT_NE(message.find("the pipe"), std::string::npos) << message;
  });
}

// ---------------------------------------------------------------------------------------------
// Bad input: a hark::Error naming the file, and nothing from FFmpeg on the terminal.

TEST(AudioFfmpegErrors, TextNamedMp3) {
  const std::string path = write_temp(
      "notes.mp3", Bytes(std::string_view("These are my meeting notes, not audio.\n").begin(),
                         std::string_view("These are my meeting notes, not audio.\n").end()));
  std::string message;
  const std::string printed = stderr_of([&] { message = error_of([&] { load(path); }); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_EQ(printed, "");
}

TEST(AudioFfmpegErrors, NoAudioStream) {
  const std::string subtitles = "1\n00:00:01,000 --> 00:00:02,000\nHello.\n\n";
  const std::string path = write_temp("captions.srt", Bytes(subtitles.begin(), subtitles.end()));
  const std::string message = error_of([&] { load(path); });
  EXPECT_NE(message.find("no audio stream"), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
}

TEST(AudioFfmpegErrors, PlaylistsCannotOpenOtherFiles) {
  // A concat script or an HLS playlist naming a real file next to it (an upload could name
  // anything on the server): FFmpeg must not open it.
  const std::string concat = "ffconcat version 1.0\nfile 'jfk.mp3'\n";
  const std::string hls =
      "#EXTM3U\n#EXT-X-TARGETDURATION:11\n#EXTINF:11,\njfk.mp3\n#EXT-X-ENDLIST\n";
  for (const auto& [text, name] :
       {std::pair{concat, "list.ffconcat"}, std::pair{hls, "list.m3u8"}}) {
    SCOPED_TRACE(name);
    const Bytes bytes(text.begin(), text.end());
    std::string message;
    const std::string printed = stderr_of([&] {
      message =
          error_of([&] { Reader::open_memory(bytes, kSampleRate, kAudio + name).read_all(); });
    });
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_EQ(printed, "");
  }
}

TEST(AudioFfmpegErrors, CorruptAndTruncatedFiles) {
  const Bytes flac = read_bytes(kAudio + "jfk-44k-stereo.flac");
  const Bytes mp3 = read_bytes(kAudio + "jfk.mp3");
  std::mt19937 random(3);
  // Random bytes; the start of a FLAC stream cut inside its header; an mp3 whose frames are
  // garbage after the ID3 tag.
  Bytes noise(5000);
  for (uint8_t& byte : noise) byte = static_cast<uint8_t>(random());
  Bytes garbled = mp3;
  for (size_t i = 200; i < garbled.size(); ++i) garbled[i] = static_cast<uint8_t>(random());
  for (const Bytes& bytes : {noise, Bytes(flac.begin(), flac.begin() + 20), garbled}) {
    std::string message;
    const std::string printed = stderr_of([&] { message = error_of([&] { load_memory(bytes); }); });
    EXPECT_NE(message, "");
    EXPECT_EQ(printed, "");
  }
}

TEST(AudioFfmpegErrors, TruncatedFilesWhoseHeaderStatesTheLength) {
  // FLAC's STREAMINFO and the mp3's Info frame give the length: a file cut in half says so.
  for (const char* name : {"jfk-44k-stereo.flac", "jfk.mp3"}) {
    SCOPED_TRACE(name);
    const Bytes bytes = read_bytes(kAudio + name);
    const Bytes half(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 2));
    std::string message;
    const std::string printed = stderr_of([&] { message = error_of([&] { load_memory(half); }); });
    EXPECT_NE(message.find("truncated"), std::string::npos) << message;
    EXPECT_EQ(printed, "");
  }
}

TEST(AudioFfmpegErrors, ScratchedFileStillDecodes) {
  // A few damaged frames in the middle of an mp3 are skipped, as FFmpeg's tools do, with a
  // warning; the rest of the audio is intact.
  Bytes mp3 = read_bytes(kAudio + "jfk.mp3");
  for (size_t i = mp3.size() / 2; i < mp3.size() / 2 + 300; ++i) mp3[i] ^= 0x5a;
  std::vector<float> samples;
  stderr_of([&] { samples = load_memory(mp3); });
  EXPECT_NEAR(static_cast<double>(samples.size()), 176000, 2000);
}

TEST(AudioFfmpegErrors, MutatedFilesNeverCrash) {
  // Damage in the headers and first packets of each container: samples or a hark::Error, never
  // a crash (ASan builds check the reads), and no FFmpeg chatter on the terminal.
  const auto tone = sine(440, 16000, 8000, 0.5);
  const std::vector<std::string> paths = {
      encode("tone.mp3", tone, 16000, 1, "mp3", "libmp3lame"),
      encode("tone.ogg", tone, 16000, 1, "ogg", "libvorbis"),
      encode("tone.m4a", tone, 16000, 1, "ipod", "aac"),
      encode("tone.flac", tone, 16000, 1, "flac", "flac"),
  };
  const log::Level level = log::level();
  log::set_level(log::Level::error);  // skipped damaged packets are warnings
  std::mt19937 random(5);
  int rejected = 0;
  const std::string printed = stderr_of([&] {
    for (const std::string& path : paths) {
      const Bytes seed = read_bytes(path);
      for (int round = 0; round < 60; ++round) {
        Bytes bytes = seed;
        const size_t region = std::min<size_t>(bytes.size(), 2048);
        for (int edits = 1 + static_cast<int>(random() % 3); edits > 0; --edits) {
          bytes[random() % region] = static_cast<uint8_t>(random());
        }
        try {
          for (float sample : load_memory(bytes)) ASSERT_TRUE(std::isfinite(sample));
        } catch (const Error&) {
          ++rejected;
        }
      }
    }
  });
  log::set_level(level);
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(printed, "");
}

// ---------------------------------------------------------------------------------------------
// libswresample (the default here) and our sinc resampler agree where both are accurate.

TEST(AudioFfmpeg, SwrAndSincAgree) {
  std::vector<float> input(44100, 0);
  for (double frequency : {150.0, 1000.0, 2500.0, 5000.0}) {
    const auto tone = sine(frequency, 44100, input.size(), 0.2, frequency / 1000);
    for (size_t i = 0; i < input.size(); ++i) input[i] += tone[i];
  }
  auto run = [&](std::unique_ptr<Resampler> resampler) {
    std::vector<float> output;
    resampler->process(input, output);
    resampler->finish(output);
    return output;
  };
  const auto swr = run(make_swr_resampler(44100, 16000));
  const auto sinc = run(make_sinc_resampler(44100, 16000));
  ASSERT_NEAR(static_cast<double>(swr.size()), static_cast<double>(sinc.size()), 1);
  double worst = 0;
  for (size_t i = 500; i + 500 < std::min(swr.size(), sinc.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(swr[i]) - sinc[i]));
  }
  EXPECT_LT(worst, 0.005);
}

}  // namespace
}  // namespace hark::audio

#endif  // HARK_HAVE_FFMPEG
