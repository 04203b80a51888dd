#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.h"

namespace hark {

namespace {

// Closes the descriptor on every path out of the constructor; the mapping outlives it.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  FileDescriptor file;
  file.fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0) fail(path_, ": cannot open: ", std::strerror(errno));

  struct stat info {};
  if (::fstat(file.fd, &info) != 0) fail(path_, ": cannot stat: ", std::strerror(errno));
  if (!S_ISREG(info.st_mode)) fail(path_, ": not a regular file");
  if (info.st_size == 0) return;  // mmap rejects a zero length; an empty mapping needs none

  size_ = static_cast<size_t>(info.st_size);
  void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (address == MAP_FAILED) {
    size_ = 0;
    fail(path_, ": cannot map ", info.st_size, " bytes: ", std::strerror(errno));
  }
  data_ = static_cast<const uint8_t*>(address);
}

MappedFile::~MappedFile() {
  unmap();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::unmap() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace hark
