#include "text/pre_tokenizer.h"

#include <array>
#include <string>

#include "base/error.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace hark::text {
namespace {

enum class CharClass { letter, number, white_space, other };

struct Char {
  CharClass cls = CharClass::other;
  char32_t code_point = 0;
  size_t length = 0;
};

Char char_at(std::string_view text, size_t pos) {
  const Utf8Char decoded = decode_utf8(text, pos);
  Char ch{CharClass::other, decoded.code_point, decoded.length};
  if (!decoded.valid) return ch;  // ill-formed bytes: neither letter, number nor space
  if (is_letter(decoded.code_point)) {
    ch.cls = CharClass::letter;
  } else if (is_number(decoded.code_point)) {
    ch.cls = CharClass::number;
  } else if (is_white_space(decoded.code_point)) {
    ch.cls = CharClass::white_space;
  }
  return ch;
}

// Length of the contraction ('s 't 're 've 'm 'll 'd, case-sensitive) starting at `pos`, or 0.
size_t contraction_length(std::string_view text, size_t pos) {
  static constexpr std::array<std::string_view, 7> kSuffixes = {"s", "t",  "re", "ve",
                                                                "m", "ll", "d"};
  if (text[pos] != '\'') return 0;
  const std::string_view rest = text.substr(pos + 1);
  for (std::string_view suffix : kSuffixes) {
    if (rest.starts_with(suffix)) return 1 + suffix.size();
  }
  return 0;
}

class Gpt2PreTokenizer final : public PreTokenizer {
 public:
  std::string_view name() const override { return "gpt-2"; }
  std::string_view pattern() const override {
    return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  }

  // The regex's alternatives are tried in order at each position; every branch below is the
  // first alternative that can match there.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const override {
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t end = match_at(text, pos);
      pieces.push_back(text.substr(pos, end - pos));
      pos = end;
    }
  }

 private:
  static size_t match_at(std::string_view text, size_t pos) {
    if (size_t n = contraction_length(text, pos)) return pos + n;

    const Char first = char_at(text, pos);
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one optional leading space, then a run.
    size_t run_start = pos;
    CharClass run_class = first.cls;
    if (first.code_point == U' ' && pos + 1 < text.size()) {
      const Char next = char_at(text, pos + 1);
      if (next.cls != CharClass::white_space) {
        run_start = pos + 1;
        run_class = next.cls;
      }
    }
    if (run_class != CharClass::white_space) {
      size_t end = run_start;
      while (end < text.size()) {
        const Char ch = char_at(text, end);
        if (ch.cls != run_class) break;
        end += ch.length;
      }
      return end;
    }

    // White space: "\s+(?!\S)" takes the run but leaves its last character to the next piece when
    // a non-space follows (so " word" keeps its space); a single space before a non-space is "\s+".
    size_t end = pos;
    size_t last_start = pos;
    while (end < text.size()) {
      const Char ch = char_at(text, end);
      if (ch.cls != CharClass::white_space) break;
      last_start = end;
      end += ch.length;
    }
    if (end == text.size()) return end;
    return last_start > pos ? last_start : end;
  }
};

}  // namespace

std::shared_ptr<const PreTokenizer> gpt2_pre_tokenizer() {
  static const auto instance = std::make_shared<const Gpt2PreTokenizer>();
  return instance;
}

std::shared_ptr<const PreTokenizer> pre_tokenizer_by_name(std::string_view name) {
  if (name == "gpt-2" || name == "gpt2" || name == "default" || name == "whisper") {
    return gpt2_pre_tokenizer();
  }
  fail("unsupported pre-tokenizer \"", name, "\" (hark knows: gpt-2)");
}

std::shared_ptr<const PreTokenizer> pre_tokenizer_for_regex(std::string_view regex) {
  auto gpt2 = gpt2_pre_tokenizer();
  if (regex == gpt2->pattern()) return gpt2;
  return nullptr;
}

}  // namespace hark::text
