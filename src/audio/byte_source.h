// Where encoded audio bytes come from: a file, standard input or a pipe, or memory. Decoders
// read through this one interface, so "-" and in-memory uploads take the same code path as files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hark::audio {

class ByteSource {
 public:
  virtual ~ByteSource() = default;

  // Reads up to `size` bytes into `buffer`; returns fewer only at the end of the input. Throws
  // hark::Error on a read error.
  virtual size_t read(uint8_t* buffer, size_t size) = 0;
  // Moves to `offset` bytes from the start. Returns false when the source cannot get there (a
  // pipe asked to go back past what it still remembers); a pipe moves forward by reading.
  virtual bool seek(uint64_t offset) = 0;
  virtual uint64_t position() const = 0;
  // Total size in bytes, when known (files, memory; not pipes).
  virtual std::optional<uint64_t> size() const = 0;
  // Whether seek() works anywhere (false for pipes).
  virtual bool seekable() const = 0;
  // How the source is named in error messages: the path, "standard input", ...
  virtual const std::string& name() const = 0;

  // Skips `count` bytes forward; returns how many were skipped (fewer only at the end).
  uint64_t skip(uint64_t count);
  // Reads exactly `size` bytes or returns false (at the end of the input).
  bool read_exact(uint8_t* buffer, size_t size);
};

// Opens a file by path; "-" is standard input. Throws hark::Error naming the path when it cannot
// be opened or is a directory.
std::unique_ptr<ByteSource> open_file(const std::string& path);
// Reads an already open stream (not closed at the end). A regular file is seekable; anything else
// (a pipe, a terminal, a socket) is read strictly front to back.
std::unique_ptr<ByteSource> open_stream(std::FILE* stream, const std::string& name);
// Reads bytes in memory, which must outlive the source.
std::unique_ptr<ByteSource> open_memory(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace hark::audio
