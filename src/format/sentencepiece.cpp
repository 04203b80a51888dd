#include "format/sentencepiece.h"

#include <cstring>

#include "base/error.h"

namespace hark::sentencepiece {

namespace {

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

// One protobuf message's fields, in order.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& where, const char* what)
      : bytes_(bytes), where_(where), what_(what) {}

  bool done() const { return position_ == bytes_.size(); }

  // The next field's number and wire type.
  void next(uint64_t& field, int& wire_type) {
    const uint64_t key = varint();
    field = key >> 3;
    wire_type = static_cast<int>(key & 7);
    if (field == 0) error("field number 0");
  }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t byte = take(1)[0];
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    error("a varint longer than 10 bytes");
  }

  std::span<const uint8_t> length_delimited() {
    const uint64_t length = varint();
    return take(length);
  }

  float fixed32_float() {
    const std::span<const uint8_t> bytes = take(4);
    const uint32_t bits =
        bytes[0] | bytes[1] << 8 | bytes[2] << 16 | static_cast<uint32_t>(bytes[3]) << 24;
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
  }

  void skip(int wire_type) {
    switch (wire_type) {
      case kVarint:
        varint();
        break;
      case kFixed64:
        take(8);
        break;
      case kLengthDelimited:
        length_delimited();
        break;
      case kFixed32:
        take(4);
        break;
      default:
        error("wire type ", wire_type, " (groups are not used by SentencePiece)");
    }
  }

  template <class... Parts>
  [[noreturn]] void error(const Parts&... parts) const {
    fail(where_, ": not a SentencePiece model: ", what_, " byte ", position_, ": ", parts...);
  }

 private:
  std::span<const uint8_t> take(uint64_t count) {
    if (count > bytes_.size() - position_) error("truncated (", count, " bytes needed)");
    const std::span<const uint8_t> part = bytes_.subspan(position_, count);
    position_ += count;
    return part;
  }

  std::span<const uint8_t> bytes_;
  const std::string& where_;
  const char* what_;
  size_t position_ = 0;
};

Piece read_piece(std::span<const uint8_t> bytes, const std::string& where) {
  Reader reader(bytes, where, "piece");
  Piece piece;
  while (!reader.done()) {
    uint64_t field;
    int wire_type;
    reader.next(field, wire_type);
    if (field == 1 && wire_type == kLengthDelimited) {
      const std::span<const uint8_t> text = reader.length_delimited();
      piece.text.assign(reinterpret_cast<const char*>(text.data()), text.size());
    } else if (field == 2 && wire_type == kFixed32) {
      piece.score = reader.fixed32_float();
    } else if (field == 3 && wire_type == kVarint) {
      const uint64_t type = reader.varint();
      if (type < 1 || type > 6) reader.error("piece type ", type);
      piece.type = static_cast<PieceType>(type);
    } else {
      reader.skip(wire_type);
    }
  }
  return piece;
}

}  // namespace

std::vector<Piece> read_pieces(std::span<const uint8_t> model, const std::string& where) {
  Reader reader(model, where, "model");
  std::vector<Piece> pieces;
  while (!reader.done()) {
    uint64_t field;
    int wire_type;
    reader.next(field, wire_type);
    if (field == 1 && wire_type == kLengthDelimited) {
      pieces.push_back(read_piece(reader.length_delimited(), where));
    } else {
      reader.skip(wire_type);
    }
  }
  if (pieces.empty()) fail(where, ": the SentencePiece model has no pieces");
  return pieces;
}

}  // namespace hark::sentencepiece
