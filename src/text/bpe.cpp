#include "text/bpe.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <functional>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"
#include "format/gguf.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace hark::text {
namespace {

// ---------------------------------------------------------------------------------------------
// GPT-2's byte <-> unicode mapping. Vocabularies in tokenizer.json, vocab.json/merges.txt and GGUF
// spell each byte as a printable character: bytes that are printable Latin-1 stand for
// themselves, the others (controls, space, 0x7F-0xA0, 0xAD) are moved to U+0100 and up in order.

bool byte_is_printable(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteUnicodeMap {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 0x180> to_byte{};  // every mapped char is below U+0144

  ByteUnicodeMap() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = byte_is_printable(b) ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteUnicodeMap& byte_unicode() {
  static const ByteUnicodeMap map;
  return map;
}

std::string bytes_to_unicode_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, byte_unicode().to_char[b]);
  return out;
}

// Byte-level text back to bytes; nullopt when a character is not one of the 256 byte characters.
std::optional<std::string> unicode_text_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char ch = decode_utf8(text, pos);
    if (!ch.valid || ch.code_point >= byte_unicode().to_byte.size()) return std::nullopt;
    const int16_t b = byte_unicode().to_byte[ch.code_point];
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
    pos += ch.length;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

// Token bytes -> id, over a token table that no longer changes. Open addressing with 8-byte slots
// whose keys are the table's own strings: a lookup touches one slot and one token, which keeps
// loading (hundreds of thousands of lookups for the merges) and rank-based merging fast.
class TokenIndex {
 public:
  static constexpr int32_t kAbsent = -1;

  void reset(const std::vector<std::string>* tokens, size_t expected) {
    tokens_ = tokens;
    size_t capacity = 16;
    while (capacity < 2 * expected) capacity *= 2;
    slots_.assign(capacity, Slot{0, kAbsent});
    count_ = 0;
  }
  // Adds `id` (keyed by its bytes) and returns kAbsent, or returns the id already holding them.
  int32_t insert(int32_t id) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    const std::string_view key = (*tokens_)[id];
    const uint64_t hash = hash_of(key);
    for (size_t i = hash & mask();; i = (i + 1) & mask()) {
      Slot& slot = slots_[i];
      if (slot.id == kAbsent) {
        slot = Slot{static_cast<uint32_t>(hash >> 32), id};
        ++count_;
        return kAbsent;
      }
      if (slot.tag == static_cast<uint32_t>(hash >> 32) && (*tokens_)[slot.id] == key)
        return slot.id;
    }
  }
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return kAbsent;
    const uint64_t hash = hash_of(key);
    for (size_t i = hash & mask();; i = (i + 1) & mask()) {
      const Slot& slot = slots_[i];
      if (slot.id == kAbsent) return kAbsent;
      if (slot.tag == static_cast<uint32_t>(hash >> 32) && (*tokens_)[slot.id] == key)
        return slot.id;
    }
  }

 private:
  struct Slot {
    uint32_t tag;  // high half of the hash, to skip most string comparisons
    int32_t id;
  };
  static uint64_t hash_of(std::string_view key) { return std::hash<std::string_view>{}(key); }
  size_t mask() const { return slots_.size() - 1; }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reset(tokens_, old.size());
    for (const Slot& slot : old) {
      if (slot.id != kAbsent) insert(slot.id);
    }
  }

  const std::vector<std::string>* tokens_ = nullptr;
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

enum class TokenKind : uint8_t {
  normal,        // produced by BPE
  control,       // special token: matched in text only when asked, skippable in decode
  user_defined,  // added token that is always matched in text as a whole (HF special=false)
};

// GGUF's tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
constexpr int64_t kGgufNormal = 1, kGgufUnknown = 2, kGgufControl = 3, kGgufUserDefined = 4,
                  kGgufUnused = 5, kGgufByte = 6;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

std::string read_file(const std::string& path) {
  MappedFile file(path);
  return std::string(reinterpret_cast<const char*>(file.data()), file.size());
}

nlohmann::json parse_json(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::optional<std::string> decode_base64(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    const int v = base64_value(c);
    if (v < 0) return std::nullopt;
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xFF);
    }
  }
  if (bits >= 6) return std::nullopt;  // one stray character cannot encode a byte
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct BpeTokenizer::Impl {
  std::string source;               // file the vocabulary came from, for error messages
  std::vector<std::string> tokens;  // id -> bytes (added tokens: their UTF-8 text)
  std::vector<TokenKind> kinds;
  std::vector<bool> present;  // ids given by the source; all must be, once loaded
  TokenIndex normal_ids;      // BPE tokens only, so merging never produces an added token
  TokenIndex added_ids;       // control and user-defined tokens
  std::array<int32_t, 256> byte_ids{};

  // tiktoken: a pair's priority is the rank (= id) of its concatenation, whichever split formed
  // it. Otherwise the pair must be listed in the merges, earlier entries first.
  bool rank_merges = false;
  struct Merge {
    int32_t priority;
    int32_t result;
  };
  std::unordered_map<uint64_t, Merge> merges;
  std::vector<std::pair<int32_t, int32_t>> merge_list;  // in priority order, for writing
  // tiktoken (and HF's ignore_merges): a piece that is itself a token is taken whole.
  bool whole_piece_first = false;

  std::shared_ptr<const PreTokenizer> pre_tokenizer;
  bool add_prefix_space = false;

  // Added tokens are found in text by trying, at each position whose byte starts one, each
  // distinct length, longest first (leftmost-longest, as HF and tiktoken match them).
  struct AddedMatcher {
    std::array<bool, 256> starts{};
    std::vector<size_t> lengths;  // descending
  };
  AddedMatcher control_matcher, user_matcher;

  void add_token(int32_t id, std::string bytes, TokenKind kind);
  void add_vocab(const nlohmann::json& vocab,
                 const std::unordered_map<int32_t, std::string>& added);
  void add_added_token(int64_t id, const std::string& content, bool special);
  void finish();
  void add_merge(std::string_view left_text, std::string_view right_text, size_t line);
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  std::vector<std::pair<int32_t, int32_t>> canonical_merges() const;
};

void BpeTokenizer::Impl::add_token(int32_t id, std::string bytes, TokenKind kind) {
  if (id < 0) fail(source, ": negative token id ", id);
  if (static_cast<size_t>(id) >= tokens.size()) {
    tokens.resize(static_cast<size_t>(id) + 1);
    kinds.resize(static_cast<size_t>(id) + 1, TokenKind::normal);
    present.resize(static_cast<size_t>(id) + 1, false);
  }
  tokens[id] = std::move(bytes);
  kinds[id] = kind;
  present[id] = true;
}

// Builds the lookup tables once every token is in place and checks the vocabulary is usable.
void BpeTokenizer::Impl::finish() {
  if (tokens.empty()) fail(source, ": the vocabulary is empty");
  normal_ids.reset(&tokens, tokens.size());
  added_ids.reset(&tokens, 64);
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!present[id]) fail(source, ": token id ", id, " is missing (ids must be 0..n-1)");
    // An empty token (multilingual.tiktoken's rank 50256) is a placeholder: it keeps its id but
    // can never be produced by merging nor matched in text.
    if (tokens[id].empty()) continue;
    TokenIndex& index = kinds[id] == TokenKind::normal ? normal_ids : added_ids;
    if (int32_t other = index.insert(static_cast<int32_t>(id)); other != TokenIndex::kAbsent) {
      fail(source, ": token id ", id, " duplicates token id ", other);
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    byte_ids[b] = normal_ids.find(std::string_view(&byte, 1));
    if (byte_ids[b] == TokenIndex::kAbsent) {
      fail(source, ": no token for the single byte ", b, "; not a byte-level BPE vocabulary");
    }
  }
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& text = tokens[id];
    if (kinds[id] == TokenKind::normal || text.empty()) continue;
    AddedMatcher& matcher = kinds[id] == TokenKind::control ? control_matcher : user_matcher;
    matcher.starts[static_cast<unsigned char>(text[0])] = true;
    if (std::find(matcher.lengths.begin(), matcher.lengths.end(), text.size()) ==
        matcher.lengths.end()) {
      matcher.lengths.push_back(text.size());
    }
  }
  for (AddedMatcher* matcher : {&control_matcher, &user_matcher}) {
    std::sort(matcher->lengths.rbegin(), matcher->lengths.rend());
  }
  if (!pre_tokenizer) pre_tokenizer = gpt2_pre_tokenizer();  // tiktoken files, vocab.json
}

// One merge, its two tokens in byte-level text.
void BpeTokenizer::Impl::add_merge(std::string_view left_text, std::string_view right_text,
                                   size_t line) {
  auto side = [&](std::string_view text) {
    const auto bytes = unicode_text_to_bytes(text);
    const int32_t id = bytes ? normal_ids.find(*bytes) : TokenIndex::kAbsent;
    if (id == TokenIndex::kAbsent) {
      fail(source, ": merge ", line, " names unknown token \"", text, "\"");
    }
    return id;
  };
  const int32_t left = side(left_text);
  const int32_t right = side(right_text);
  std::string joined = tokens[left];
  joined += tokens[right];
  const int32_t result = normal_ids.find(joined);
  if (result == TokenIndex::kAbsent) {
    fail(source, ": merge ", line, " joins \"", left_text, "\" and \"", right_text,
         "\" into a token that is not in the vocabulary");
  }
  const auto priority = static_cast<int32_t>(merge_list.size());
  // A pair listed twice keeps its first (highest) priority, as HF does.
  if (merges.emplace(pair_key(left, right), Merge{priority, result}).second) {
    merge_list.emplace_back(left, right);
  }
}

// Byte-pair merging of one piece: start from single bytes and repeatedly merge the adjacent pair
// of lowest priority, the leftmost among equals. A heap of candidate pairs keeps this O(n log n)
// for long pieces; entries made stale by an earlier merge are recognised and dropped.
void BpeTokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out.push_back(byte_ids[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (whole_piece_first) {
    if (const int32_t id = normal_ids.find(piece); id != TokenIndex::kAbsent) {
      out.push_back(id);
      return;
    }
  }

  struct Part {
    uint32_t start, end;
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  std::vector<Part> parts(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    parts[i] = Part{static_cast<uint32_t>(i),
                    static_cast<uint32_t>(i + 1),
                    byte_ids[static_cast<unsigned char>(piece[i])],
                    static_cast<int32_t>(i) - 1,
                    i + 1 < piece.size() ? static_cast<int32_t>(i + 1) : -1,
                    true};
  }

  struct Candidate {
    int32_t priority;
    uint32_t start;
    int32_t left, right;        // part indices
    int32_t left_id, right_id;  // what the parts held when the candidate was made
    int32_t result;
    bool operator>(const Candidate& other) const {
      return priority != other.priority ? priority > other.priority : start > other.start;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Part& a = parts[left];
    const Part& b = parts[right];
    if (rank_merges) {
      const int32_t id = normal_ids.find(piece.substr(a.start, b.end - a.start));
      if (id == TokenIndex::kAbsent) return;
      heap.push({id, a.start, left, right, a.id, b.id, id});
    } else {
      auto it = merges.find(pair_key(a.id, b.id));
      if (it == merges.end()) return;
      heap.push({it->second.priority, a.start, left, right, a.id, b.id, it->second.result});
    }
  };
  for (size_t i = 0; i + 1 < piece.size(); ++i) {
    consider(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));
  }

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Part& left = parts[c.left];
    const Part& right = parts[c.right];
    if (!left.alive || !right.alive || left.next != c.right || left.id != c.left_id ||
        right.id != c.right_id) {
      continue;  // one of the parts has been merged since
    }
    left.end = right.end;
    left.id = c.result;
    left.next = right.next;
    if (right.next >= 0) parts[right.next].prev = c.left;
    parts[c.right].alive = false;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = parts[i].next) out.push_back(parts[i].id);
}

// Plain text (no added tokens inside) to ids.
void BpeTokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string prefixed;
  if (add_prefix_space && text.front() != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed += ' ';
    prefixed.append(text);
    text = prefixed;
  }
  std::vector<std::string_view> pieces;
  pre_tokenizer->split(text, pieces);
  for (std::string_view piece : pieces) bpe(piece, out);
}

// The merges list that reproduces rank-based (tiktoken) merging: for each token, the two parts
// that merging its own bytes with only lower ranks ends at, as Hugging Face's converter derives
// them. Every token of a proper rank file ends at exactly two parts.
std::vector<std::pair<int32_t, int32_t>> BpeTokenizer::Impl::canonical_merges() const {
  std::vector<std::pair<int32_t, int32_t>> result;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& bytes = tokens[id];
    if (kinds[id] != TokenKind::normal || bytes.size() < 2) continue;
    std::vector<std::string_view> parts;
    for (size_t i = 0; i < bytes.size(); ++i) parts.push_back(std::string_view(bytes).substr(i, 1));
    while (parts.size() > 2) {
      size_t best = parts.size();
      int32_t best_rank = static_cast<int32_t>(id);
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        const std::string_view joined(parts[i].data(), parts[i].size() + parts[i + 1].size());
        const int32_t rank = normal_ids.find(joined);
        if (rank != TokenIndex::kAbsent && rank < best_rank) best_rank = rank, best = i;
      }
      if (best == parts.size()) break;
      parts[best] =
          std::string_view(parts[best].data(), parts[best].size() + parts[best + 1].size());
      parts.erase(parts.begin() + static_cast<ptrdiff_t>(best) + 1);
    }
    const int32_t left = normal_ids.find(parts[0]);
    const int32_t right = parts.size() == 2 ? normal_ids.find(parts[1]) : TokenIndex::kAbsent;
    if (parts.size() != 2 || left == TokenIndex::kAbsent || right == TokenIndex::kAbsent) {
      fail(source, ": token ", id,
           " cannot be reached by merging lower-ranked tokens, so the "
           "vocabulary cannot be written as a merges list");
    }
    result.emplace_back(left, right);
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Loaders

BpeTokenizer BpeTokenizer::from_tiktoken(const std::string& path,
                                         const std::vector<std::string>& specials) {
  auto impl = std::make_shared<Impl>();
  impl->source = path;
  impl->rank_merges = true;
  impl->whole_piece_first = true;

  const MappedFile file(path);
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  size_t line_number = 0;
  size_t count = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;

    const size_t space = line.find(' ');
    if (space == std::string_view::npos) {
      fail(path, ":", line_number, ": expected \"<base64 token> <rank>\"");
    }
    auto bytes = decode_base64(line.substr(0, space));
    if (!bytes) fail(path, ":", line_number, ": invalid base64 token");
    const std::string_view rank_text = line.substr(space + 1);
    int64_t rank = -1;
    auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || end != rank_text.data() + rank_text.size() || rank < 0 ||
        rank > (int64_t{1} << 24)) {
      fail(path, ":", line_number, ": invalid rank \"", rank_text, "\"");
    }
    if (static_cast<size_t>(rank) < impl->present.size() && impl->present[rank]) {
      fail(path, ":", line_number, ": rank ", rank, " appears twice");
    }
    impl->add_token(static_cast<int32_t>(rank), std::move(*bytes), TokenKind::normal);
    ++count;
  }
  if (count != impl->tokens.size()) {
    fail(path, ": ranks are not 0..", count - 1, " (highest is ", impl->tokens.size() - 1, ")");
  }
  for (const std::string& special : specials) {
    if (special.empty()) fail(path, ": empty special token");
    impl->add_token(static_cast<int32_t>(impl->tokens.size()), special, TokenKind::control);
  }
  impl->finish();
  BpeTokenizer tokenizer;
  tokenizer.impl_ = std::move(impl);
  return tokenizer;
}

namespace {

// "a b": two byte-level tokens (which never contain a space) separated by one space.
std::pair<std::string_view, std::string_view> split_merge_text(std::string_view text,
                                                               const std::string& source,
                                                               size_t line) {
  const size_t space = text.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == text.size() ||
      text.find(' ', space + 1) != std::string_view::npos) {
    fail(source, ": merge ", line, " is not two tokens separated by a space: \"", text, "\"");
  }
  return {text.substr(0, space), text.substr(space + 1)};
}

}  // namespace

// Vocabulary entries are byte-level strings, except that some files also list added tokens
// (like "<|endoftext|>") there; those are placed with the added tokens.
void BpeTokenizer::Impl::add_vocab(const nlohmann::json& vocab,
                                   const std::unordered_map<int32_t, std::string>& added) {
  if (!vocab.is_object()) fail(source, ": the vocabulary is not an object of token: id");
  for (const auto& [text, id_json] : vocab.items()) {
    if (!id_json.is_number_integer()) fail(source, ": token \"", text, "\" has no integer id");
    const auto id = id_json.get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 24)) fail(source, ": token \"", text, "\" has id ", id);
    auto bytes = unicode_text_to_bytes(text);
    if (!bytes) {
      auto it = added.find(static_cast<int32_t>(id));
      if (it == added.end() || it->second != text) {
        fail(source, ": vocabulary token \"", text, "\" is not byte-level text");
      }
      continue;
    }
    if (static_cast<size_t>(id) < present.size() && present[id]) {
      fail(source, ": id ", id, " is given to two vocabulary tokens");
    }
    add_token(static_cast<int32_t>(id), std::move(*bytes), TokenKind::normal);
  }
}

// Added tokens take their ids as given; one that repeats a vocabulary entry replaces it, so it is
// matched whole in text and never produced by merging.
void BpeTokenizer::Impl::add_added_token(int64_t id, const std::string& content, bool special) {
  if (id < 0 || id >= (int64_t{1} << 24)) fail(source, ": added token has id ", id);
  if (content.empty()) fail(source, ": added token ", id, " is empty");
  add_token(static_cast<int32_t>(id), content,
            special ? TokenKind::control : TokenKind::user_defined);
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(const std::string& path) {
  const nlohmann::json root = parse_json(path);
  auto impl = std::make_shared<Impl>();
  impl->source = path;
  try {
    const auto& model = root.at("model");
    if (model.value("type", std::string("BPE")) != "BPE") {
      fail(path, ": model.type is \"", model.value("type", std::string()), "\", not \"BPE\"");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
        fail(path, ": model.", key, " is set; only byte-level BPE is supported");
      }
    }
    impl->whole_piece_first = model.value("ignore_merges", false);

    if (root.contains("normalizer") && !root["normalizer"].is_null()) {
      fail(path, ": normalizer \"", root["normalizer"].value("type", std::string("?")),
           "\" is not supported yet");
    }
    // Pre-tokenizer: ByteLevel with its GPT-2 regex, or Split(regex) followed by ByteLevel.
    const nlohmann::json pre = root.value("pre_tokenizer", nlohmann::json());
    std::vector<nlohmann::json> steps;
    if (pre.is_object() && pre.value("type", std::string()) == "Sequence") {
      for (const auto& step : pre.at("pretokenizers")) steps.push_back(step);
    } else if (!pre.is_null()) {
      steps.push_back(pre);
    }
    bool byte_level = false;
    for (const auto& step : steps) {
      const std::string type = step.value("type", std::string());
      if (type == "ByteLevel") {
        byte_level = true;
        impl->add_prefix_space = step.value("add_prefix_space", false);
        if (step.value("use_regex", true)) {
          if (impl->pre_tokenizer) fail(path, ": two regex splits in the pre-tokenizer");
          impl->pre_tokenizer = gpt2_pre_tokenizer();
        }
      } else if (type == "Split") {
        const auto& pattern = step.at("pattern");
        const std::string regex = pattern.value("Regex", std::string());
        auto found = pre_tokenizer_for_regex(regex);
        if (!found) fail(path, ": pre-tokenizer regex is not one hark implements: ", regex);
        if (step.value("behavior", std::string("Isolated")) != "Isolated" ||
            step.value("invert", false)) {
          fail(path, ": Split pre-tokenizer must be behavior Isolated, not inverted");
        }
        if (impl->pre_tokenizer) fail(path, ": two regex splits in the pre-tokenizer");
        impl->pre_tokenizer = std::move(found);
      } else {
        fail(path, ": pre-tokenizer \"", type, "\" is not supported");
      }
    }
    if (!byte_level) fail(path, ": not a byte-level BPE tokenizer (no ByteLevel pre-tokenizer)");
    if (!impl->pre_tokenizer) fail(path, ": the pre-tokenizer does not split with a regex");

    std::unordered_map<int32_t, std::string> added;
    const nlohmann::json added_tokens = root.value("added_tokens", nlohmann::json::array());
    for (const auto& token : added_tokens) {
      added[token.at("id").get<int32_t>()] = token.at("content").get<std::string>();
    }
    impl->add_vocab(model.at("vocab"), added);
    for (const auto& token : added_tokens) {
      impl->add_added_token(token.at("id").get<int64_t>(), token.at("content").get<std::string>(),
                            token.value("special", false));
    }
    impl->finish();
    const nlohmann::json merges = model.value("merges", nlohmann::json::array());
    if (!merges.is_array()) fail(path, ": model.merges is not a list");
    size_t line = 0;
    for (const auto& entry : merges) {
      ++line;
      if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
        impl->add_merge(entry[0].get_ref<const std::string&>(),
                        entry[1].get_ref<const std::string&>(), line);
      } else if (entry.is_string()) {
        auto [left, right] = split_merge_text(entry.get_ref<const std::string&>(), path, line);
        impl->add_merge(left, right, line);
      } else {
        fail(path, ": merge ", line, " is not a pair of tokens: ", entry.dump());
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": unexpected tokenizer.json structure: ", e.what());
  }
  BpeTokenizer tokenizer;
  tokenizer.impl_ = std::move(impl);
  return tokenizer;
}

BpeTokenizer BpeTokenizer::from_vocab_merges(const std::string& vocab_json,
                                             const std::string& merges_txt,
                                             const std::string& added_tokens_json) {
  auto impl = std::make_shared<Impl>();
  impl->source = vocab_json;
  std::unordered_map<int32_t, std::string> added;
  nlohmann::json added_json = nlohmann::json::object();
  if (!added_tokens_json.empty()) {
    added_json = parse_json(added_tokens_json);
    if (!added_json.is_object()) fail(added_tokens_json, ": expected an object of token: id");
    for (const auto& [content, id] : added_json.items()) {
      if (!id.is_number_integer()) fail(added_tokens_json, ": \"", content, "\" has no integer id");
      added[id.get<int32_t>()] = content;
    }
  }
  impl->add_vocab(parse_json(vocab_json), added);
  // added_tokens.json does not say which tokens are special; the slow tokenizers' added tokens
  // (Whisper's <|...|>) are.
  for (const auto& [id, content] : added) impl->add_added_token(id, content, true);
  impl->finish();

  impl->source = merges_txt;
  const std::string text = read_file(merges_txt);
  size_t line_number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line = std::string_view(text).substr(pos, eol - pos);
    pos = eol + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.starts_with("#version")) continue;
    auto [left, right] = split_merge_text(line, merges_txt, line_number);
    impl->add_merge(left, right, line_number);
  }
  impl->source = vocab_json;
  BpeTokenizer tokenizer;
  tokenizer.impl_ = std::move(impl);
  return tokenizer;
}

BpeTokenizer BpeTokenizer::from_gguf(const gguf::File& file) {
  auto impl = std::make_shared<Impl>();
  impl->source = file.path();
  const std::string model = file.get_string_or("tokenizer.ggml.model", "gpt2");
  if (model != "gpt2") {
    fail(file.path(), ": tokenizer.ggml.model is \"", model,
         "\"; hark reads byte-level BPE (gpt2)");
  }
  impl->pre_tokenizer = pre_tokenizer_by_name(file.get_string_or("tokenizer.ggml.pre", "gpt-2"));
  if (file.has("tokenizer.ggml.add_space_prefix")) {
    impl->add_prefix_space = file.get_bool("tokenizer.ggml.add_space_prefix");
  }

  const std::vector<std::string> tokens = file.get_strings("tokenizer.ggml.tokens");
  std::vector<int64_t> types(tokens.size(), kGgufNormal);
  if (file.has("tokenizer.ggml.token_type")) {
    types = file.get_ints("tokenizer.ggml.token_type");
    if (types.size() != tokens.size()) {
      fail(file.path(), ": tokenizer.ggml.token_type has ", types.size(), " entries for ",
           tokens.size(), " tokens");
    }
  }
  for (size_t id = 0; id < tokens.size(); ++id) {
    switch (types[id]) {
      case kGgufNormal: {
        auto bytes = unicode_text_to_bytes(tokens[id]);
        if (!bytes)
          fail(file.path(), ": token ", id, " \"", tokens[id], "\" is not byte-level text");
        impl->add_token(static_cast<int32_t>(id), std::move(*bytes), TokenKind::normal);
        break;
      }
      case kGgufControl:
      case kGgufUnknown:
      case kGgufUnused:
        impl->add_token(static_cast<int32_t>(id), tokens[id], TokenKind::control);
        break;
      case kGgufUserDefined:
        impl->add_token(static_cast<int32_t>(id), tokens[id], TokenKind::user_defined);
        break;
      case kGgufByte:
      default:
        fail(file.path(), ": token ", id, " has tokenizer.ggml.token_type ", types[id],
             ", which byte-level BPE does not use");
    }
  }
  impl->finish();
  if (!file.has("tokenizer.ggml.merges")) fail(file.path(), ": tokenizer.ggml.merges is missing");
  size_t line = 0;
  for (const std::string& merge : file.get_strings("tokenizer.ggml.merges")) {
    ++line;
    auto [left, right] = split_merge_text(merge, file.path(), line);
    impl->add_merge(left, right, line);
  }
  BpeTokenizer tokenizer;
  tokenizer.impl_ = std::move(impl);
  return tokenizer;
}

void BpeTokenizer::write_gguf(gguf::Writer& writer) const {
  const Impl& impl = *impl_;
  if (impl.whole_piece_first && !impl.rank_merges) {
    fail(impl.source, ": tokenizers with ignore_merges cannot be stored in GGUF yet");
  }
  std::vector<std::string> tokens(impl.tokens.size());
  std::vector<int32_t> types(impl.tokens.size());
  for (size_t id = 0; id < impl.tokens.size(); ++id) {
    switch (impl.kinds[id]) {
      case TokenKind::normal:
        tokens[id] = bytes_to_unicode_text(impl.tokens[id]);
        types[id] = kGgufNormal;
        break;
      case TokenKind::control:
      case TokenKind::user_defined:
        if (!is_valid_utf8(impl.tokens[id])) {
          fail(impl.source, ": added token ", id, " is not UTF-8 and cannot be stored in GGUF");
        }
        tokens[id] = impl.tokens[id];
        types[id] = impl.kinds[id] == TokenKind::control ? kGgufControl : kGgufUserDefined;
        break;
    }
  }
  const auto pairs = impl.rank_merges ? impl.canonical_merges() : impl.merge_list;
  std::vector<std::string> merges;
  merges.reserve(pairs.size());
  for (auto [left, right] : pairs) {
    merges.push_back(bytes_to_unicode_text(impl.tokens[left]) + " " +
                     bytes_to_unicode_text(impl.tokens[right]));
  }
  writer.set_string("tokenizer.ggml.model", "gpt2");
  writer.set_string("tokenizer.ggml.pre", std::string(impl.pre_tokenizer->name()));
  writer.set_strings("tokenizer.ggml.tokens", tokens);
  writer.set_i32s("tokenizer.ggml.token_type", types);
  writer.set_strings("tokenizer.ggml.merges", merges);
  if (impl.add_prefix_space) writer.set_bool("tokenizer.ggml.add_space_prefix", true);
}

// ---------------------------------------------------------------------------------------------
// Encoding and decoding

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool allow_special) const {
  const Impl& impl = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);

  // Added tokens split the text; what lies between them goes through the pre-tokenizer and BPE.
  const bool match_control = allow_special && !impl.control_matcher.lengths.empty();
  const bool match_user = !impl.user_matcher.lengths.empty();
  auto added_at = [&](size_t pos) -> std::pair<int32_t, size_t> {
    const auto b = static_cast<unsigned char>(text[pos]);
    size_t best_length = 0;
    int32_t best_id = -1;
    for (const Impl::AddedMatcher* matcher : {&impl.control_matcher, &impl.user_matcher}) {
      if (matcher == &impl.control_matcher ? !match_control : !match_user) continue;
      if (!matcher->starts[b]) continue;
      for (size_t length : matcher->lengths) {
        if (length <= best_length || pos + length > text.size()) continue;
        const int32_t id = impl.added_ids.find(text.substr(pos, length));
        if (id == TokenIndex::kAbsent) continue;
        const bool is_control = impl.kinds[id] == TokenKind::control;
        if (is_control != (matcher == &impl.control_matcher)) continue;
        best_length = length, best_id = id;
        break;
      }
    }
    return {best_id, best_length};
  };

  size_t segment_start = 0;
  if (match_control || match_user) {
    for (size_t pos = 0; pos < text.size();) {
      auto [id, length] = added_at(pos);
      if (id < 0) {
        ++pos;
        continue;
      }
      impl.encode_text(text.substr(segment_start, pos - segment_start), ids);
      ids.push_back(id);
      pos += length;
      segment_start = pos;
    }
  }
  impl.encode_text(text.substr(segment_start), ids);
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& impl = *impl_;
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl.tokens.size()) {
      fail("decode: token id ", id, " is outside the vocabulary of ", impl.tokens.size());
    }
    if (skip_special && impl.kinds[id] == TokenKind::control) continue;
    bytes += impl.tokens[id];
  }
  return repair_utf8(bytes);
}

int32_t BpeTokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->tokens.size());
}

std::optional<int32_t> BpeTokenizer::find(std::string_view token) const {
  if (int32_t id = impl_->normal_ids.find(token); id != TokenIndex::kAbsent) return id;
  if (int32_t id = impl_->added_ids.find(token); id != TokenIndex::kAbsent) return id;
  return std::nullopt;
}

int32_t BpeTokenizer::id(std::string_view token) const {
  if (auto found = find(token)) return *found;
  fail(impl_->source, ": token \"", token, "\" is not in the vocabulary");
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->tokens.size()) {
    fail("token id ", id, " is outside the vocabulary of ", impl_->tokens.size());
  }
  return impl_->tokens[id];
}

bool BpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->tokens.size() &&
         impl_->kinds[id] == TokenKind::control;
}

}  // namespace hark::text
