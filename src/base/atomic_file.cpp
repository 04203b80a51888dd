#include "base/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/error.h"

namespace hark {

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  // The temporary sits in the destination's directory so the final rename stays on one file
  // system (and is therefore atomic).
  temp_path_ = path_ + ".tmp.XXXXXX";
  int fd = ::mkstemp(temp_path_.data());
  if (fd < 0) fail(path_, ": cannot create a temporary file to write: ", std::strerror(errno));
  ::fchmod(fd, 0644);  // mkstemp makes it private (0600); a finished model file is not
  stream_ = ::fdopen(fd, "wb");
  if (stream_ == nullptr) {
    int error = errno;
    ::close(fd);
    ::unlink(temp_path_.c_str());
    fail(path_, ": cannot open a temporary file to write: ", std::strerror(error));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (stream_ != nullptr) {
    std::fclose(stream_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFileWriter::write(const void* bytes, size_t count) {
  if (count == 0) return;
  if (std::fwrite(bytes, 1, count, stream_) != count) fail_io("write");
  position_ += count;
}

void AtomicFileWriter::write_zeros(size_t count) {
  static const char zeros[4096] = {};
  while (count > 0) {
    size_t chunk = count < sizeof zeros ? count : sizeof zeros;
    write(zeros, chunk);
    count -= chunk;
  }
}

void AtomicFileWriter::commit() {
  if (std::fflush(stream_) != 0) fail_io("flush");
  if (::fsync(::fileno(stream_)) != 0) fail_io("sync");
  std::FILE* stream = std::exchange(stream_, nullptr);
  if (std::fclose(stream) != 0) {
    int error = errno;
    ::unlink(temp_path_.c_str());
    fail(path_, ": cannot close the written file: ", std::strerror(error));
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int error = errno;
    ::unlink(temp_path_.c_str());
    fail(path_, ": cannot rename ", temp_path_, " into place: ", std::strerror(error));
  }
}

void AtomicFileWriter::fail_io(const char* what) {
  // The destructor removes the temporary file.
  fail(path_, ": cannot ", what, " (", position_, " bytes written): ", std::strerror(errno));
}

}  // namespace hark
