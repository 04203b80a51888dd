// Reading ZIP archives held in memory, as PyTorch's torch.save writes them (a checkpoint is a ZIP
// of data.pkl and one entry per tensor storage, stored uncompressed). ZIP64 archives, which large
// checkpoints are, are read too. Entries are byte ranges of the archive, never copied; only
// stored (uncompressed) entries can be read.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hark::zip {

struct Entry {
  std::string name;
  uint16_t method = 0;  // 0: stored; anything else is compressed
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t header_offset = 0;  // of the entry's local header
};

class Archive {
 public:
  // Reads the central directory; throws hark::Error naming `where` when `bytes` is not a ZIP
  // archive or any record lies outside it.
  Archive(std::span<const uint8_t> bytes, std::string where);

  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* find(std::string_view name) const;
  // The bytes of a stored entry; throws hark::Error for a compressed one.
  std::span<const uint8_t> data(const Entry& entry) const;

 private:
  std::span<const uint8_t> bytes_;
  std::string where_;
  std::vector<Entry> entries_;
};

}  // namespace hark::zip
