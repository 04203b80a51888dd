#include "audio/byte_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace hark::audio {

uint64_t ByteSource::skip(uint64_t count) {
  const uint64_t start = position();
  if (seekable() && size()) {
    const uint64_t target = std::min(start + count, std::max(*size(), start));
    return seek(target) ? target - start : 0;
  }
  uint8_t scratch[65536];
  uint64_t skipped = 0;
  while (skipped < count) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(count - skipped, sizeof scratch));
    const size_t got = read(scratch, want);
    skipped += got;
    if (got < want) break;
  }
  return skipped;
}

bool ByteSource::read_exact(uint8_t* buffer, size_t size) {
  return read(buffer, size) == size;
}

namespace {

// A FILE*: a regular file is seekable with a known size; anything else is a pipe.
class FileSource final : public ByteSource {
 public:
  FileSource(std::FILE* file, std::string name, bool owned)
      : file_(file), name_(std::move(name)), owned_(owned) {
    struct stat info {};
    if (fstat(fileno(file_), &info) != 0) {
      const int error = errno;
      close();
      fail("cannot inspect '", name_, "': ", std::strerror(error));
    }
    if (S_ISDIR(info.st_mode)) {
      close();
      fail("'", name_, "' is a directory, not an audio file");
    }
    if (S_ISREG(info.st_mode)) {
      // Standard input redirected from a file may already be part-way in; count from there.
      const off_t start = ftello(file_);
      if (start >= 0 && start <= info.st_size) {
        seekable_ = true;
        start_ = static_cast<uint64_t>(start);
        size_ = static_cast<uint64_t>(info.st_size) - start_;
      }
    }
  }
  ~FileSource() override { close(); }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  size_t read(uint8_t* buffer, size_t size) override {
    size_t done = 0;
    if (!seekable_ && position_ < consumed_) {
      // Replaying the remembered start of a pipe after a seek back.
      done = static_cast<size_t>(std::min<uint64_t>(size, consumed_ - position_));
      std::memcpy(buffer, history_.data() + position_, done);
      position_ += done;
      if (done == size) return done;
    }
    const size_t got = read_file(buffer + done, size - done);
    if (!seekable_) remember(buffer + done, got);
    position_ += got;
    return done + got;
  }

  bool seek(uint64_t offset) override {
    if (seekable_) {
      if (offset > static_cast<uint64_t>(INT64_MAX) - start_ ||
          fseeko(file_, static_cast<off_t>(start_ + offset), SEEK_SET) != 0) {
        return false;
      }
      position_ = offset;
      return true;
    }
    if (offset <= consumed_) {
      if (!remembering_ && offset != position_) return false;
      position_ = offset;
      return true;
    }
    // Forward: read and drop the bytes in between (position_ may still be replaying history).
    position_ = consumed_;
    const uint64_t gap = offset - consumed_;
    return skip(gap) == gap;
  }

  uint64_t position() const override { return position_; }
  std::optional<uint64_t> size() const override { return size_; }
  bool seekable() const override { return seekable_; }
  const std::string& name() const override { return name_; }

 private:
  // Enough to go back over a header: format sniffing needs 12 bytes, and handing a WAV file that
  // our parser does not decode over to FFmpeg needs its chunks up to the data.
  static constexpr size_t kHistoryLimit = size_t{1} << 20;

  size_t read_file(uint8_t* buffer, size_t size) {
    if (size == 0) return 0;
    const size_t got = std::fread(buffer, 1, size, file_);
    if (got < size && std::ferror(file_)) {
      fail("read error on '", name_, "' after ", position_ + got, " bytes: ", std::strerror(errno));
    }
    return got;
  }

  void remember(const uint8_t* bytes, size_t count) {
    consumed_ += count;
    if (!remembering_) return;
    if (history_.size() + count > kHistoryLimit) {
      remembering_ = false;
      std::vector<uint8_t>().swap(history_);
      return;
    }
    history_.insert(history_.end(), bytes, bytes + count);
  }

  void close() {
    if (owned_ && file_) std::fclose(file_);
    file_ = nullptr;
  }

  std::FILE* file_;
  std::string name_;
  bool owned_;
  bool seekable_ = false;
  uint64_t start_ = 0;  // the file offset that counts as position 0
  std::optional<uint64_t> size_;
  uint64_t position_ = 0;
  // Pipes only: bytes taken from the pipe so far, and the first of them, kept so that format
  // detection can look at the start and go back.
  uint64_t consumed_ = 0;
  std::vector<uint8_t> history_;
  bool remembering_ = true;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(std::span<const uint8_t> bytes, std::string name)
      : bytes_(bytes), name_(std::move(name)) {}

  size_t read(uint8_t* buffer, size_t size) override {
    const size_t count = static_cast<size_t>(
        std::min<uint64_t>(size, bytes_.size() - std::min<uint64_t>(position_, bytes_.size())));
    if (count > 0) std::memcpy(buffer, bytes_.data() + position_, count);
    position_ += count;
    return count;
  }
  bool seek(uint64_t offset) override {
    position_ = offset;
    return true;
  }
  uint64_t position() const override { return position_; }
  std::optional<uint64_t> size() const override { return bytes_.size(); }
  bool seekable() const override { return true; }
  const std::string& name() const override { return name_; }

 private:
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint64_t position_ = 0;
};

}  // namespace

std::unique_ptr<ByteSource> open_file(const std::string& path) {
  if (path == "-") return open_stream(stdin, "standard input");
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) fail("cannot open '", path, "': ", std::strerror(errno));
  return std::make_unique<FileSource>(file, path, /*owned=*/true);
}

std::unique_ptr<ByteSource> open_stream(std::FILE* stream, const std::string& name) {
  return std::make_unique<FileSource>(stream, name, /*owned=*/false);
}

std::unique_ptr<ByteSource> open_memory(std::span<const uint8_t> bytes, const std::string& name) {
  return std::make_unique<MemorySource>(bytes, name);
}

}  // namespace hark::audio
