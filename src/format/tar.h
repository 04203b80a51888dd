// Reading tar archives (POSIX ustar, GNU long names, pax headers) held in memory, as a NeMo
// `.nemo` model is: members are byte ranges of the archive, never copied. A gzip-compressed
// archive (`.tar.gz`) is inflated into memory first with gunzip.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hark::tar {

struct Member {
  std::string name;     // as archived, without leading "./"
  uint64_t offset = 0;  // of the member's bytes in the archive
  uint64_t size = 0;
};

// The regular files of the archive in archive order (directories, links and other entries are
// left out). Throws hark::Error naming `where` and the offset on a truncated or corrupt archive.
std::vector<Member> list_members(std::span<const uint8_t> archive, const std::string& where);

// Whether `bytes` starts with a tar header (its checksum is right).
bool looks_like_tar(std::span<const uint8_t> bytes);

// Whether `bytes` starts with the gzip magic number.
bool is_gzip(std::span<const uint8_t> bytes);

// The inflated bytes of a gzip stream (every member of a multi-member stream, in order).
std::vector<uint8_t> gunzip(std::span<const uint8_t> compressed, const std::string& where);

}  // namespace hark::tar
