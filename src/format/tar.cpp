#include "format/tar.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "base/error.h"

namespace hark::tar {

namespace {

constexpr size_t kBlock = 512;

// Header fields: offset and width in the 512-byte block.
struct Field {
  size_t offset;
  size_t width;
};
constexpr Field kName{0, 100};
constexpr Field kSize{124, 12};
constexpr Field kChecksum{148, 8};
constexpr Field kTypeFlag{156, 1};
constexpr Field kMagic{257, 6};
constexpr Field kPrefix{345, 155};

std::string_view text_of(const uint8_t* header, Field field) {
  const char* start = reinterpret_cast<const char*>(header + field.offset);
  const auto* end = static_cast<const char*>(std::memchr(start, '\0', field.width));
  return {start, end ? static_cast<size_t>(end - start) : field.width};
}

// A numeric field: octal digits (space or NUL padded), or GNU's base-256 form for values that do
// not fit (high bit of the first byte set).
bool parse_number(const uint8_t* header, Field field, uint64_t& value) {
  const uint8_t* bytes = header + field.offset;
  value = 0;
  if (bytes[0] & 0x80) {
    if (bytes[0] & 0x40) return false;  // negative
    for (size_t i = 0; i < field.width; ++i) {
      const uint8_t byte = i == 0 ? (bytes[0] & 0x7f) : bytes[i];
      if (value >> 56) return false;
      value = (value << 8) | byte;
    }
    return true;
  }
  size_t i = 0;
  while (i < field.width && bytes[i] == ' ') ++i;
  bool any = false;
  for (; i < field.width && bytes[i] >= '0' && bytes[i] <= '7'; ++i) {
    if (value >> 60) return false;
    value = value * 8 + (bytes[i] - '0');
    any = true;
  }
  for (; i < field.width; ++i) {
    if (bytes[i] != ' ' && bytes[i] != '\0') return false;
  }
  return any;
}

// The header checksum: the sum of its bytes with the checksum field read as spaces.
bool checksum_matches(const uint8_t* header) {
  uint64_t stored = 0;
  if (!parse_number(header, kChecksum, stored)) return false;
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const bool in_field = i >= kChecksum.offset && i < kChecksum.offset + kChecksum.width;
    sum += in_field ? ' ' : header[i];
  }
  return sum == stored;
}

bool all_zero(const uint8_t* block) {
  return std::all_of(block, block + kBlock, [](uint8_t byte) { return byte == 0; });
}

std::string without_dot_slash(std::string name) {
  while (name.starts_with("./")) name.erase(0, 2);
  return name;
}

// The "path" record of a pax extended header ("<length> path=<value>\n" records), or "".
std::string pax_path(std::string_view records, const std::string& where, uint64_t offset) {
  std::string path;
  while (!records.empty()) {
    const size_t space = records.find(' ');
    size_t length = 0;
    bool valid = space != std::string_view::npos && space > 0;
    for (size_t i = 0; valid && i < space; ++i) {
      valid = records[i] >= '0' && records[i] <= '9' && length < (size_t(1) << 40);
      length = length * 10 + (records[i] - '0');
    }
    if (!valid || length <= space + 1 || length > records.size() || records[length - 1] != '\n') {
      fail(where, ": corrupt pax header at offset ", offset);
    }
    const std::string_view record = records.substr(space + 1, length - space - 2);
    if (record.starts_with("path=")) path = std::string(record.substr(5));
    records.remove_prefix(length);
  }
  return path;
}

}  // namespace

bool looks_like_tar(std::span<const uint8_t> bytes) {
  return bytes.size() >= kBlock && checksum_matches(bytes.data());
}

std::vector<Member> list_members(std::span<const uint8_t> archive, const std::string& where) {
  std::vector<Member> members;
  std::string long_name;  // from a GNU 'L' entry or a pax 'x' header, for the next entry
  uint64_t offset = 0;
  while (true) {
    if (archive.size() - offset < kBlock) {
      // Archivers end with two zero blocks, but readers (GNU tar, Python) accept a missing end.
      if (offset == archive.size()) break;
      fail(where, ": truncated tar archive (a partial header at offset ", offset, ")");
    }
    const uint8_t* header = archive.data() + offset;
    if (all_zero(header)) break;
    if (!checksum_matches(header)) {
      fail(where, ": not a tar archive, or corrupt: bad header checksum at offset ", offset);
    }
    uint64_t size = 0;
    if (!parse_number(header, kSize, size)) {
      fail(where, ": bad size field in the tar header at offset ", offset);
    }
    const uint64_t data = offset + kBlock;
    if (size > archive.size() - data) {
      fail(where, ": truncated tar archive: '", text_of(header, kName), "' at offset ", offset,
           " needs ", size, " bytes, ", archive.size() - data, " remain");
    }
    const char type = static_cast<char>(header[kTypeFlag.offset]);
    const std::string_view contents(reinterpret_cast<const char*>(archive.data() + data), size);
    if (type == 'L') {
      // GNU long name: the contents (NUL-terminated) name the next entry.
      long_name = std::string(contents.substr(0, contents.find('\0')));
    } else if (type == 'x') {
      long_name = pax_path(contents, where, offset);
    } else if (type == '0' || type == '\0' || type == '7') {
      std::string name = std::move(long_name);
      long_name.clear();
      if (name.empty()) {
        name = std::string(text_of(header, kName));
        const std::string_view prefix = text_of(header, kPrefix);
        if (text_of(header, kMagic).starts_with("ustar") && !prefix.empty()) {
          name = std::string(prefix) + "/" + name;
        }
      }
      members.push_back({without_dot_slash(std::move(name)), data, size});
    } else {
      long_name.clear();  // directories, links, pax globals ('g') and the like
    }
    const uint64_t padded = (size + kBlock - 1) / kBlock * kBlock;
    offset = data + std::min<uint64_t>(padded, archive.size() - data);
  }
  return members;
}

bool is_gzip(std::span<const uint8_t> bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

std::vector<uint8_t> gunzip(std::span<const uint8_t> compressed, const std::string& where) {
  z_stream stream{};
  // 16 + MAX_WBITS: expect a gzip header and trailer.
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) fail(where, ": cannot start zlib");
  std::vector<uint8_t> out(std::max<size_t>(compressed.size() * 2, 1 << 16));
  size_t produced = 0;
  size_t consumed = 0;
  int status = Z_OK;
  while (true) {
    if (produced == out.size()) out.resize(out.size() * 2);
    // zlib counts in uInt; feed at most 1 GiB at a time.
    const size_t in_chunk = std::min<size_t>(compressed.size() - consumed, 1u << 30);
    const size_t out_chunk = std::min<size_t>(out.size() - produced, 1u << 30);
    stream.next_in = const_cast<Bytef*>(compressed.data() + consumed);
    stream.avail_in = static_cast<uInt>(in_chunk);
    stream.next_out = out.data() + produced;
    stream.avail_out = static_cast<uInt>(out_chunk);
    status = inflate(&stream, Z_NO_FLUSH);
    consumed += in_chunk - stream.avail_in;
    produced += out_chunk - stream.avail_out;
    if (status == Z_STREAM_END) {
      // A multi-member stream continues with another gzip header.
      if (consumed < compressed.size() && is_gzip(compressed.subspan(consumed))) {
        inflateReset(&stream);
        continue;
      }
      break;
    }
    if (status == Z_BUF_ERROR && consumed == compressed.size()) {
      inflateEnd(&stream);
      fail(where, ": truncated gzip stream (", compressed.size(), " bytes read)");
    }
    if (status != Z_OK && status != Z_BUF_ERROR) {
      const std::string message = stream.msg ? stream.msg : "error " + std::to_string(status);
      inflateEnd(&stream);
      fail(where, ": corrupt gzip stream (", message, ")");
    }
  }
  inflateEnd(&stream);
  out.resize(produced);
  return out;
}

}  // namespace hark::tar
