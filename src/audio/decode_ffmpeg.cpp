// Everything that is not WAV: FFmpeg's demuxers and decoders (mp3, flac, ogg/vorbis, opus,
// m4a/aac, ...), fed from our ByteSource through a custom AVIOContext, so files, standard input
// and memory all stream the same way. The first audio stream is decoded with the send/receive API
// and each decoded frame is downmixed by the same code as WAV samples.
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
}

#include <algorithm>
#include <cerrno>
#include <exception>
#include <utility>

#include "audio/decoder.h"
#include "audio/libav.h"
#include "audio/samples.h"
#include "base/log.h"

namespace hark::audio {
namespace {

constexpr int kIoBufferBytes = 64 * 1024;
// Damaged packets FFmpeg's own tools would skip with a warning; beyond this many, the input is
// corrupt rather than scratched.
constexpr int kMaxDamagedPackets = 10;
// How much shorter than its header says a stream may decode before it counts as truncated
// (encoder delay and padding trims take a few hundredths of a second).
constexpr double kTruncationSlackSeconds = 1.0;

bool encoding_of(AVSampleFormat format, Encoding& encoding) {
  switch (av_get_packed_sample_fmt(format)) {
    case AV_SAMPLE_FMT_U8:
      encoding = Encoding::kUnsigned8;
      return true;
    case AV_SAMPLE_FMT_S16:
      encoding = Encoding::kSigned16;
      return true;
    case AV_SAMPLE_FMT_S32:
      encoding = Encoding::kSigned32;
      return true;
    case AV_SAMPLE_FMT_S64:
      encoding = Encoding::kSigned64;
      return true;
    case AV_SAMPLE_FMT_FLT:
      encoding = Encoding::kFloat32;
      return true;
    case AV_SAMPLE_FMT_DBL:
      encoding = Encoding::kFloat64;
      return true;
    default:
      return false;
  }
}

// Demuxers such as HLS, DASH or concat open further files or URLs named inside the input. An
// uploaded playlist must not make hark read local files or the network, so all such opens fail:
// those that go through the context's io_open here, those that open a context of their own (concat)
// through the protocol whitelist it inherits.
int refuse_nested_open(AVFormatContext*, AVIOContext**, const char*, int, AVDictionary**) {
  return AVERROR(EPERM);
}

class FfmpegDecoder final : public Decoder {
 public:
  explicit FfmpegDecoder(ByteSource& source) : source_(source) {
    libav::quiet_logs();
    libav::forget_log_error();
    try {
      open();
    } catch (...) {
      close();
      throw;
    }
  }
  ~FfmpegDecoder() override { close(); }
  FfmpegDecoder(const FfmpegDecoder&) = delete;
  FfmpegDecoder& operator=(const FfmpegDecoder&) = delete;

  bool next(std::vector<float>& mono, int& sample_rate) override {
    mono.clear();
    while (true) {
      const int status = avcodec_receive_frame(codec_, frame_);
      if (status == 0) {
        convert_frame(mono);
        sample_rate = frame_->sample_rate;
        av_frame_unref(frame_);
        if (!mono.empty()) return true;
      } else if (status == AVERROR_EOF) {
        finish();
        return false;
      } else if (status == AVERROR(EAGAIN)) {
        feed();
      } else {
        damaged(status);
      }
    }
  }

 private:
  void open() {
    const std::string& name = source_.name();
    auto* buffer = static_cast<uint8_t*>(av_malloc(kIoBufferBytes));
    if (buffer) {
      io_ = avio_alloc_context(buffer, kIoBufferBytes, /*write_flag=*/0, this, &read_callback,
                               nullptr, source_.seekable() ? &seek_callback : nullptr);
    }
    if (!io_) {
      av_free(buffer);
      fail("out of memory opening '", name, "'");
    }
    format_ = avformat_alloc_context();
    if (!format_) fail("out of memory opening '", name, "'");
    format_->pb = io_;
    format_->io_open = refuse_nested_open;
    // No protocol is called "none": the whitelist admits none of them (our own AVIO needs none).
    format_->protocol_whitelist = av_strdup("none");
    if (!format_->protocol_whitelist) fail("out of memory opening '", name, "'");

    // The name doubles as a format hint: probing weighs a matching file extension.
    int status = avformat_open_input(&format_, name.c_str(), nullptr, nullptr);
    rethrow_callback_error();
    if (status < 0) {
      fail("'", name, "' is not an audio file FFmpeg recognizes: ", libav::error_text(status));
    }
    // Some formats only reveal codec parameters in their first packets. A failure here is not
    // final: the decoder may still open with what the header gave.
    status = avformat_find_stream_info(format_, nullptr);
    rethrow_callback_error();
    if (status < 0) log::debug("'", name, "': ", libav::error_text(status));

    for (unsigned i = 0; i < format_->nb_streams; ++i) {
      AVStream* stream = format_->streams[i];
      if (stream_index_ < 0 && stream->codecpar->codec_type == AVMEDIA_TYPE_AUDIO) {
        stream_index_ = static_cast<int>(i);
      } else {
        stream->discard = AVDISCARD_ALL;
      }
    }
    if (stream_index_ < 0) fail("'", name, "' has no audio stream");
    const AVCodecParameters* parameters = format_->streams[stream_index_]->codecpar;
    const AVCodec* codec = avcodec_find_decoder(parameters->codec_id);
    if (!codec) {
      fail("'", name, "': this FFmpeg build has no decoder for ",
           avcodec_get_name(parameters->codec_id), " audio");
    }
    codec_ = avcodec_alloc_context3(codec);
    if (!codec_) fail("out of memory opening '", name, "'");
    status = avcodec_parameters_to_context(codec_, parameters);
    if (status >= 0) {
      // Lets the decoder apply the container's encoder-delay and padding trims exactly.
      codec_->pkt_timebase = format_->streams[stream_index_]->time_base;
      status = avcodec_open2(codec_, codec, nullptr);
    }
    if (status < 0) {
      fail("'", name, "': cannot open the ", avcodec_get_name(parameters->codec_id),
           " decoder: ", libav::error_text(status));
    }
    packet_ = av_packet_alloc();
    frame_ = av_frame_alloc();
    if (!packet_ || !frame_) fail("out of memory opening '", name, "'");

    info_.format = std::string(format_->iformat->name) + "/" + codec->name;
    info_.sample_rate = parameters->sample_rate;
    info_.channels = parameters->ch_layout.nb_channels;
  }

  void close() {
    av_frame_free(&frame_);
    av_packet_free(&packet_);
    avcodec_free_context(&codec_);
    avformat_close_input(&format_);  // leaves a custom AVIOContext to its owner
    if (io_) {
      av_freep(&io_->buffer);  // FFmpeg may have swapped the buffer we gave it for another
      avio_context_free(&io_);
    }
  }

  // Sends the next packet of our stream to the decoder, or the end-of-stream flush.
  void feed() {
    if (flushed_) fail("FFmpeg's ", codec_->codec->name, " decoder asked for input after the end");
    while (true) {
      int status = av_read_frame(format_, packet_);
      rethrow_callback_error();
      if (status == AVERROR_EOF) {
        avcodec_send_packet(codec_, nullptr);
        flushed_ = true;
        return;
      }
      if (status < 0) {
        fail("cannot read '", source_.name(), "' after ", seconds_decoded(),
             " s of audio: ", libav::error_text(status),
             source_.seekable() ? ""
                                : " (the input is a stream; formats whose index comes after the "
                                  "media, like many m4a files, can only be read from a file)");
      }
      if (packet_->stream_index != stream_index_) {
        av_packet_unref(packet_);
        continue;
      }
      status = avcodec_send_packet(codec_, packet_);
      av_packet_unref(packet_);
      if (status < 0) damaged(status);
      return;
    }
  }

  void convert_frame(std::vector<float>& mono) {
    const std::string& name = source_.name();
    SampleLayout layout;
    layout.channels = frame_->ch_layout.nb_channels;
    layout.planar = av_sample_fmt_is_planar(static_cast<AVSampleFormat>(frame_->format)) != 0;
    if (!encoding_of(static_cast<AVSampleFormat>(frame_->format), layout.encoding)) {
      fail("'", name, "': the decoder produced samples in an unexpected format (",
           av_get_sample_fmt_name(static_cast<AVSampleFormat>(frame_->format)), ")");
    }
    if (layout.channels < 1) fail("'", name, "': the decoder produced a frame with no channels");
    if (frame_->sample_rate < kMinSampleRate || frame_->sample_rate > kMaxSampleRate) {
      fail("'", name, "' has a sample rate of ", frame_->sample_rate, " Hz; hark reads ",
           kMinSampleRate, " to ", kMaxSampleRate, " Hz");
    }
    if (!mix_to_mono(frame_->extended_data, layout, static_cast<size_t>(frame_->nb_samples),
                     mono)) {
      fail("'", name, "' decodes to a NaN or infinite sample after ", seconds_decoded(), " s");
    }
    frames_decoded_ += frame_->nb_samples;
    rate_ = frame_->sample_rate;
  }

  void damaged(int status) {
    ++damaged_packets_;
    last_damage_ = libav::error_text(status);
    libav::forget_log_error();
    if (damaged_packets_ > kMaxDamagedPackets) {
      fail("'", source_.name(), "' is corrupt: more than ", kMaxDamagedPackets,
           " packets failed to decode, the last after ", seconds_decoded(), " s: ", last_damage_);
    }
  }

  void finish() {
    if (frames_decoded_ == 0) {
      fail("no audio could be decoded from '", source_.name(), "'",
           damaged_packets_ ? ": " + last_damage_ : std::string());
    }
    // A cut-off download decodes without complaint up to the cut. Where the header states the
    // length exactly (FLAC's STREAMINFO, mp3's Xing/Info frame, mp4's index), compare.
    const AVStream* stream = format_->streams[stream_index_];
    if (format_->duration_estimation_method == AVFMT_DURATION_FROM_STREAM && stream->duration > 0) {
      const double declared = static_cast<double>(stream->duration) * av_q2d(stream->time_base);
      const double decoded = seconds_decoded();
      if (declared - decoded > std::max(kTruncationSlackSeconds, 0.05 * declared)) {
        fail("'", source_.name(), "' is truncated: its header declares ", declared,
             " s of audio, but it ends after ", decoded, " s");
      }
    }
    if (damaged_packets_ > 0 && !warned_) {
      warned_ = true;
      log::warn("'", source_.name(), "': skipped ", damaged_packets_,
                " damaged packet(s); the audio around them may be missing (", last_damage_, ")");
    }
  }

  double seconds_decoded() const {
    return rate_ > 0 ? static_cast<double>(frames_decoded_) / rate_ : 0.0;
  }

  // FFmpeg calls these from C; an exception must not unwind through it, so it is parked here and
  // rethrown once the FFmpeg call returns.
  static int read_callback(void* opaque, uint8_t* buffer, int size) {
    auto* self = static_cast<FfmpegDecoder*>(opaque);
    try {
      const size_t got = self->source_.read(buffer, static_cast<size_t>(size));
      return got == 0 ? AVERROR_EOF : static_cast<int>(got);
    } catch (...) {
      self->callback_error_ = std::current_exception();
      return AVERROR(EIO);
    }
  }

  static int64_t seek_callback(void* opaque, int64_t offset, int whence) {
    auto* self = static_cast<FfmpegDecoder*>(opaque);
    try {
      const auto size = self->source_.size();
      int64_t target = offset;
      switch (whence & ~AVSEEK_FORCE) {
        case AVSEEK_SIZE:
          return size ? static_cast<int64_t>(*size) : AVERROR(ENOSYS);
        case SEEK_SET:
          break;
        case SEEK_CUR:
          target += static_cast<int64_t>(self->source_.position());
          break;
        case SEEK_END:
          if (!size) return AVERROR(ENOSYS);
          target += static_cast<int64_t>(*size);
          break;
        default:
          return AVERROR(EINVAL);
      }
      if (target < 0) return AVERROR(EINVAL);
      return self->source_.seek(static_cast<uint64_t>(target)) ? target : AVERROR(EIO);
    } catch (...) {
      self->callback_error_ = std::current_exception();
      return AVERROR(EIO);
    }
  }

  void rethrow_callback_error() {
    if (callback_error_) std::rethrow_exception(std::exchange(callback_error_, nullptr));
  }

  ByteSource& source_;
  AVIOContext* io_ = nullptr;
  AVFormatContext* format_ = nullptr;
  AVCodecContext* codec_ = nullptr;
  AVPacket* packet_ = nullptr;
  AVFrame* frame_ = nullptr;
  int stream_index_ = -1;
  bool flushed_ = false;
  std::exception_ptr callback_error_;

  int64_t frames_decoded_ = 0;
  int rate_ = 0;
  int damaged_packets_ = 0;
  std::string last_damage_;
  bool warned_ = false;
};

}  // namespace

std::unique_ptr<Decoder> open_ffmpeg(ByteSource& source) {
  return std::make_unique<FfmpegDecoder>(source);
}

}  // namespace hark::audio
