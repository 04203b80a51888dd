#include "format/zip.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/error.h"
#include "base/little_endian.h"

namespace hark::zip {

namespace {

constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kEnd64Signature = 0x06064b50;
constexpr uint32_t kEnd64LocatorSignature = 0x07064b50;
constexpr uint32_t kCentralSignature = 0x02014b50;
constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr size_t kEndSize = 22;
constexpr size_t kEnd64LocatorSize = 20;
constexpr size_t kEnd64Size = 56;
constexpr size_t kCentralSize = 46;
constexpr size_t kLocalSize = 30;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr size_t kMaxComment = 0xffff;

using little_endian::u16;
using little_endian::u32;
using little_endian::u64;

}  // namespace

Archive::Archive(std::span<const uint8_t> bytes, std::string where)
    : bytes_(bytes), where_(std::move(where)) {
  auto holds = [&](uint64_t offset, uint64_t size) {
    return offset <= bytes_.size() && size <= bytes_.size() - offset;
  };
  // The end record sits in the last 22 + 65535 bytes (it may be followed by a comment).
  if (bytes_.size() < kEndSize) fail(where_, ": not a ZIP archive (", bytes_.size(), " bytes)");
  size_t end = bytes_.size() - kEndSize;
  const size_t lowest = end > kMaxComment ? end - kMaxComment : 0;
  while (u32(bytes_.data() + end) != kEndSignature) {
    if (end == lowest) fail(where_, ": not a ZIP archive (no end of central directory record)");
    --end;
  }
  const uint8_t* record = bytes_.data() + end;
  uint64_t count = u16(record + 10);
  uint64_t directory_size = u32(record + 12);
  uint64_t directory_offset = u32(record + 16);
  // ZIP64: the classic record's fields saturate and a locator just before it points to the
  // 64-bit record.
  if (end >= kEnd64LocatorSize &&
      u32(bytes_.data() + end - kEnd64LocatorSize) == kEnd64LocatorSignature) {
    const uint64_t end64 = u64(bytes_.data() + end - kEnd64LocatorSize + 8);
    if (!holds(end64, kEnd64Size) || u32(bytes_.data() + end64) != kEnd64Signature) {
      fail(where_, ": corrupt ZIP64 end of central directory record");
    }
    const uint8_t* record64 = bytes_.data() + end64;
    count = u64(record64 + 32);
    directory_size = u64(record64 + 40);
    directory_offset = u64(record64 + 48);
  }
  if (!holds(directory_offset, directory_size)) {
    fail(where_, ": the ZIP central directory (", directory_size, " bytes at offset ",
         directory_offset, ") lies outside the file of ", bytes_.size(), " bytes; truncated?");
  }
  if (count > directory_size / kCentralSize) {
    fail(where_, ": the ZIP central directory cannot hold ", count, " entries");
  }

  uint64_t offset = directory_offset;
  const uint64_t directory_end = directory_offset + directory_size;
  for (uint64_t index = 0; index < count; ++index) {
    if (offset + kCentralSize > directory_end || u32(bytes_.data() + offset) != kCentralSignature) {
      fail(where_, ": corrupt ZIP central directory at entry ", index);
    }
    const uint8_t* header = bytes_.data() + offset;
    Entry entry;
    entry.method = u16(header + 10);
    entry.compressed_size = u32(header + 20);
    entry.size = u32(header + 24);
    const uint16_t name_length = u16(header + 28);
    const uint16_t extra_length = u16(header + 30);
    const uint16_t comment_length = u16(header + 32);
    entry.header_offset = u32(header + 42);
    const uint64_t next = offset + kCentralSize + name_length + extra_length + comment_length;
    if (next > directory_end) fail(where_, ": corrupt ZIP central directory at entry ", index);
    entry.name.assign(reinterpret_cast<const char*>(header + kCentralSize), name_length);

    // Saturated fields are given, in this order, by the ZIP64 extra field.
    const uint8_t* extra = header + kCentralSize + name_length;
    for (size_t at = 0; at + 4 <= extra_length;) {
      const uint16_t id = u16(extra + at);
      const uint16_t length = u16(extra + at + 2);
      if (at + 4 + length > extra_length) break;
      if (id == kZip64ExtraId) {
        const uint8_t* field = extra + at + 4;
        size_t used = 0;
        for (uint64_t* value : {&entry.size, &entry.compressed_size, &entry.header_offset}) {
          if (*value != 0xffffffff) continue;
          if (used + 8 > length) fail(where_, ": ", entry.name, ": short ZIP64 extra field");
          *value = u64(field + used);
          used += 8;
        }
      }
      at += 4 + length;
    }
    entries_.push_back(std::move(entry));
    offset = next;
  }
}

const Entry* Archive::find(std::string_view name) const {
  const auto found = std::find_if(entries_.begin(), entries_.end(),
                                  [&](const Entry& entry) { return entry.name == name; });
  return found == entries_.end() ? nullptr : &*found;
}

std::span<const uint8_t> Archive::data(const Entry& entry) const {
  if (entry.method != 0) {
    fail(where_, ": ", entry.name, " is compressed (ZIP method ", entry.method,
         "); hark reads stored entries only, as torch.save writes them");
  }
  const uint64_t header = entry.header_offset;
  if (header > bytes_.size() || bytes_.size() - header < kLocalSize ||
      u32(bytes_.data() + header) != kLocalSignature) {
    fail(where_, ": ", entry.name, ": no ZIP local header at offset ", header);
  }
  // The local header's own name and extra lengths (the extra field often differs from the
  // central directory's: torch pads it to align the data).
  const uint64_t start =
      header + kLocalSize + u16(bytes_.data() + header + 26) + u16(bytes_.data() + header + 28);
  if (entry.compressed_size != entry.size) {
    fail(where_, ": ", entry.name, ": stored entry with sizes ", entry.compressed_size, " and ",
         entry.size);
  }
  if (start > bytes_.size() || entry.size > bytes_.size() - start) {
    fail(where_, ": ", entry.name, " (", entry.size, " bytes at offset ", start,
         ") lies outside the archive of ", bytes_.size(), " bytes; truncated?");
  }
  return bytes_.subspan(start, entry.size);
}

}  // namespace hark::zip
