// A read-only memory mapping of a whole file. Weight files are mapped rather than read so that
// opening a multi-gigabyte model costs nothing until its pages are touched, and several models
// sharing a file share its pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace hark {

class MappedFile {
 public:
  // Maps `path`; throws hark::Error naming the path when it cannot be opened, is not a regular
  // file, or cannot be mapped. An empty file is valid: size() is 0 and data() is null.
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  void unmap() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hark
