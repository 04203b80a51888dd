// Reading the vocabulary of a SentencePiece model (the `tokenizer.model` protobuf, a ModelProto)
// without the protobuf library: the pieces (field 1), each with its text (1), score (2) and type
// (3). The trainer and normalizer settings are skipped.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hark::sentencepiece {

// ModelProto.SentencePiece.Type.
enum class PieceType : int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

struct Piece {
  std::string text;
  float score = 0.0f;
  PieceType type = PieceType::normal;
};

// The pieces in id order; throws hark::Error naming `where` on a malformed protobuf, or on a model
// with no pieces.
std::vector<Piece> read_pieces(std::span<const uint8_t> model, const std::string& where);

}  // namespace hark::sentencepiece
