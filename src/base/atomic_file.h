// Writes a file all-or-nothing: bytes go to a temporary file beside the destination, which is
// renamed over it only by commit(). A writer destroyed before commit() (an exception, a failed
// producer) removes the temporary, so a failed write never leaves a half file behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace hark {

class AtomicFileWriter {
 public:
  // Creates the temporary file; throws hark::Error naming `path` when it cannot.
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* bytes, size_t count);
  void write_zeros(size_t count);
  // Bytes written so far.
  uint64_t position() const { return position_; }
  // Flushes, syncs and renames the temporary over the destination.
  void commit();

 private:
  [[noreturn]] void fail_io(const char* what);

  std::string path_;
  std::string temp_path_;
  std::FILE* stream_ = nullptr;
  uint64_t position_ = 0;
};

}  // namespace hark
