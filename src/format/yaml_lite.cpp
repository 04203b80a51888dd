#include "format/yaml_lite.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "base/error.h"

namespace hark::yaml {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t';
}

void append_utf8(std::string& out, uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xc0 | code >> 6);
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xe0 | code >> 12);
    out += static_cast<char>(0x80 | (code >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | code >> 18);
    out += static_cast<char>(0x80 | (code >> 12 & 0x3f));
    out += static_cast<char>(0x80 | (code >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  }
}

// Underscores are digit separators in YAML 1.1 numbers.
std::string without_underscores(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c != '_') out += c;
  }
  return out;
}

}  // namespace

class Parser {
 public:
  Parser(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  Node document() {
    Node root;
    const int column = first_content();
    if (column >= 0 && block_at(column, root) >= 0) error("content after the document's end");
    resolve(root, root, 0);
    return root;
  }

 private:
  template <class... Parts>
  [[noreturn]] void error(const Parts&... parts) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    fail(where_, ":", line, ":", column, ": ", parts...);
  }

  bool end() const { return pos_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  int column() const { return static_cast<int>(pos_ - line_start_); }

  // Skips spaces; true when the rest of the line is empty or a comment.
  bool at_line_end() {
    while (!end() && is_space(peek())) ++pos_;
    return end() || peek() == '\n' || peek() == '\r' || peek() == '#';
  }

  // From the start of a line: the column of its first content, with pos_ there, skipping blank,
  // comment-only, directive and document-marker lines; -1 at the end.
  int content_from_line_start() {
    while (!end()) {
      line_start_ = pos_;
      while (peek() == ' ') ++pos_;
      if (peek() == '\t' && !at_line_end()) error("a tab in indentation");
      const bool marker = column() == 0 && (s_.substr(pos_).starts_with("---") ||
                                            s_.substr(pos_).starts_with("..."));
      if (!at_line_end() && !marker && !(column() == 0 && peek() == '%')) return column();
      while (!end() && peek() != '\n') ++pos_;
      if (!end()) ++pos_;
    }
    return -1;
  }
  int first_content() { return content_from_line_start(); }

  // After a value: the rest of the line must be empty; then the next content line's column.
  int next_content() {
    if (!at_line_end()) error("unexpected '", std::string(1, peek()), "'");
    while (!end() && peek() != '\n') ++pos_;
    if (end()) return -1;
    ++pos_;
    return content_from_line_start();
  }

  bool is_sequence_entry() const {
    return peek() == '-' && (peek(1) == ' ' || peek(1) == '\n' || peek(1) == '\r' ||
                             peek(1) == '\0' || peek(1) == '\t');
  }

  // Whether the line from pos_ is "key: ..." (a plain or quoted key, then a colon and a space or
  // the line's end).
  bool is_mapping_key() const {
    size_t i = pos_;
    const char first = peek();
    if (first == '"' || first == '\'') {
      for (++i; i < s_.size() && s_[i] != '\n'; ++i) {
        if (first == '"' && s_[i] == '\\') {
          ++i;
        } else if (s_[i] == first) {
          if (first == '\'' && i + 1 < s_.size() && s_[i + 1] == '\'') {
            ++i;
            continue;
          }
          ++i;
          while (i < s_.size() && is_space(s_[i])) ++i;
          return i < s_.size() && s_[i] == ':';
        }
      }
      return false;
    }
    if (first == '[' || first == '{' || first == '#' || is_sequence_entry()) return false;
    for (; i < s_.size() && s_[i] != '\n'; ++i) {
      if (s_[i] == '#' && i > pos_ && is_space(s_[i - 1])) return false;
      if (s_[i] == ':' &&
          (i + 1 == s_.size() || is_space(s_[i + 1]) || s_[i + 1] == '\n' || s_[i + 1] == '\r')) {
        return true;
      }
    }
    return false;
  }

  // Parses the node whose first content is at pos_, in column `column`, into `out`; returns the
  // column of the next content line (-1 at the end), with pos_ there.
  int block_at(int column, Node& out) {
    if (is_sequence_entry()) return sequence(column, out);
    if (is_mapping_key()) return mapping(column, out);
    out = inline_value(column - 1);
    return next_content();
  }

  int sequence(int column, Node& out) {
    out.kind_ = Node::Kind::sequence;
    while (true) {
      ++pos_;  // '-'
      Node item;
      int next;
      if (at_line_end()) {
        next = next_content();
        if (next > column) next = block_at(next, item);
      } else {
        next = block_at(this->column(), item);
      }
      out.items_.push_back(std::move(item));
      if (next == column && is_sequence_entry()) continue;
      if (next > column) error("bad indentation in a sequence");
      return next;
    }
  }

  int mapping(int column, Node& out) {
    out.kind_ = Node::Kind::mapping;
    while (true) {
      if (!is_mapping_key()) error("expected 'key: value'");
      std::string key = this->key();
      Node value;
      int next;
      if (at_line_end()) {
        next = next_content();
        if (next > column) {
          next = block_at(next, value);
        } else if (next == column && is_sequence_entry()) {
          next = sequence(column, value);  // PyYAML writes a key's list at the key's indentation
        }
      } else {
        value = inline_value(column);
        next = next_content();
      }
      out.entries_.emplace_back(std::move(key), std::move(value));
      if (next != column) {
        if (next > column) error("bad indentation in a mapping");
        return next;
      }
    }
  }

  std::string key() {
    std::string key;
    if (peek() == '"' || peek() == '\'') {
      key = quoted(peek());
      while (is_space(peek())) ++pos_;
    } else if (peek() == '?' && is_space(peek(1))) {
      error("complex keys ('? ') are not supported");
    } else {
      const size_t start = pos_;
      while (!(peek() == ':' &&
               (is_space(peek(1)) || peek(1) == '\n' || peek(1) == '\r' || peek(1) == '\0'))) {
        ++pos_;
      }
      key = std::string(s_.substr(start, pos_ - start));
      while (!key.empty() && is_space(key.back())) key.pop_back();
    }
    ++pos_;  // ':'
    return key;
  }

  // A value starting on this line; `parent` is the column of its key or dash: continuation lines
  // of a plain or block scalar are indented further.
  Node inline_value(int parent) {
    const char c = peek();
    if (c == '&' || c == '*' || c == '!') {
      error("anchors, aliases and tags are not supported");
    }
    Node node;
    node.kind_ = Node::Kind::scalar;
    if (c == '"' || c == '\'') {
      node.text_ = quoted(c);
      node.quoted_ = true;
    } else if (c == '[' || c == '{') {
      node = flow();
    } else if (c == '|' || c == '>') {
      node.text_ = block_scalar(parent);
      node.quoted_ = true;
    } else {
      node.text_ = plain(parent);
      if (node.text_.empty()) node.kind_ = Node::Kind::null;
    }
    return node;
  }

  // Folding of a line break inside a quoted or plain scalar: trailing blanks dropped, the break
  // becomes a space, or n newlines when n empty lines follow; the next line's indentation goes.
  void fold(std::string& out) {
    while (!out.empty() && is_space(out.back())) out.pop_back();
    int empty_lines = 0;
    ++pos_;  // '\n'
    while (true) {
      while (!end() && is_space(peek())) ++pos_;
      if (peek() == '\r') ++pos_;
      if (peek() != '\n') break;
      ++empty_lines;
      ++pos_;
    }
    line_start_ = pos_;
    out += empty_lines == 0 ? std::string(" ") : std::string(empty_lines, '\n');
  }

  std::string quoted(char quote) {
    ++pos_;
    std::string out;
    while (true) {
      if (end()) error("unterminated quoted string");
      const char c = peek();
      if (c == quote) {
        if (quote == '\'' && peek(1) == '\'') {
          out += '\'';
          pos_ += 2;
          continue;
        }
        ++pos_;
        return out;
      }
      if (c == '\r' && peek(1) == '\n') {
        ++pos_;
        continue;
      }
      if (c == '\n') {
        fold(out);
        continue;
      }
      if (quote == '"' && c == '\\') {
        escape(out);
        continue;
      }
      out += c;
      ++pos_;
    }
  }

  void escape(std::string& out) {
    ++pos_;  // '\'
    const char c = peek();
    ++pos_;
    auto hex = [&](int digits) {
      uint32_t code = 0;
      for (int i = 0; i < digits; ++i) {
        const char h = peek();
        int value;
        if (h >= '0' && h <= '9') {
          value = h - '0';
        } else if (h >= 'a' && h <= 'f') {
          value = h - 'a' + 10;
        } else if (h >= 'A' && h <= 'F') {
          value = h - 'A' + 10;
        } else {
          error("bad escape digit");
        }
        code = code * 16 + value;
        ++pos_;
      }
      if (code > 0x10ffff) error("escape beyond Unicode");
      append_utf8(out, code);
    };
    switch (c) {
      case '0':
        out += '\0';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 't':
      case '\t':
        out += '\t';
        break;
      case 'n':
        out += '\n';
        break;
      case 'v':
        out += '\v';
        break;
      case 'f':
        out += '\f';
        break;
      case 'r':
        out += '\r';
        break;
      case 'e':
        out += '\x1b';
        break;
      case ' ':
        out += ' ';
        break;
      case '"':
        out += '"';
        break;
      case '/':
        out += '/';
        break;
      case '\\':
        out += '\\';
        break;
      case 'N':
        append_utf8(out, 0x85);
        break;
      case '_':
        append_utf8(out, 0xa0);
        break;
      case 'L':
        append_utf8(out, 0x2028);
        break;
      case 'P':
        append_utf8(out, 0x2029);
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      case '\r':
      case '\n':
        // An escaped line break joins the lines without a space.
        if (c == '\r' && peek() == '\n') ++pos_;
        while (!end() && is_space(peek())) ++pos_;
        line_start_ = pos_;
        break;
      default:
        --pos_;
        error("unknown escape '\\", std::string(1, c), "'");
    }
  }

  // The rest of the line up to a comment, without trailing blanks: a plain scalar's text, in
  // which ": " cannot appear (it would be a key under a wrongly indented mapping).
  std::string plain_line() {
    std::string text = line_text();
    if (text.find(": ") != std::string::npos || text.ends_with(":")) {
      error("': ' inside a plain value (bad indentation?)");
    }
    return text;
  }

  std::string line_text() {
    const size_t start = pos_;
    while (!end() && peek() != '\n' && !(peek() == '#' && pos_ > start && is_space(s_[pos_ - 1]))) {
      ++pos_;
    }
    size_t stop = pos_;
    while (stop > start && (is_space(s_[stop - 1]) || s_[stop - 1] == '\r')) --stop;
    return std::string(s_.substr(start, stop - start));
  }

  std::string plain(int parent) {
    std::string out = plain_line();
    // Continuation lines: indented past the parent, and not a comment.
    while (!end() && peek() == '\n') {
      const size_t saved_pos = pos_, saved_line = line_start_;
      ++pos_;
      int empty_lines = 0;
      int indent = -1;
      while (!end()) {
        line_start_ = pos_;
        while (peek() == ' ') ++pos_;
        if (peek() == '\n' || (peek() == '\r' && peek(1) == '\n')) {
          ++empty_lines;
          pos_ += peek() == '\r' ? 2 : 1;
          continue;
        }
        if (!end()) indent = column();
        break;
      }
      if (indent <= parent || peek() == '#' || end()) {
        pos_ = saved_pos;
        line_start_ = saved_line;
        break;
      }
      out += empty_lines == 0 ? std::string(" ") : std::string(empty_lines, '\n');
      out += plain_line();
    }
    return out;
  }

  std::string block_scalar(int parent) {
    const bool literal = peek() == '|';
    ++pos_;
    char chomping = ' ';
    int explicit_indent = 0;
    while (!end() && peek() != '\n' && !is_space(peek()) && peek() != '#') {
      if (peek() == '-' || peek() == '+') {
        chomping = peek();
      } else if (peek() >= '1' && peek() <= '9') {
        explicit_indent = peek() - '0';
      } else {
        error("bad block scalar header");
      }
      ++pos_;
    }
    if (!at_line_end()) error("text after a block scalar header");
    while (!end() && peek() != '\n') ++pos_;
    std::vector<std::string> lines;
    int indent = explicit_indent > 0 ? parent + explicit_indent : -1;
    size_t last_pos = pos_, last_line = line_start_;
    while (!end()) {
      ++pos_;  // '\n'
      line_start_ = pos_;
      int spaces = 0;
      while (peek() == ' ' && (indent < 0 || spaces < indent)) ++pos_, ++spaces;
      const bool blank = end() || peek() == '\n' || (peek() == '\r' && peek(1) == '\n');
      if (!blank && indent < 0) {
        if (spaces <= parent) break;
        indent = spaces;
      }
      if (!blank && spaces < indent) break;
      const size_t start = pos_;
      while (!end() && peek() != '\n') ++pos_;
      std::string text(s_.substr(start, pos_ - start));
      if (!text.empty() && text.back() == '\r') text.pop_back();
      lines.push_back(blank ? std::string() : text);
      last_pos = pos_;
      last_line = line_start_;
    }
    pos_ = last_pos;
    line_start_ = last_line;
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      out += lines[i];
      if (i + 1 == lines.size()) break;
      const bool join =
          !literal && !lines[i].empty() && !lines[i + 1].empty() && !is_space(lines[i + 1][0]);
      out += join ? ' ' : '\n';
    }
    if (chomping == '-') return std::string(out.substr(0, out.find_last_not_of('\n') + 1));
    while (!out.empty() && out.back() == '\n') out.pop_back();
    if (!out.empty() || chomping == '+') out += '\n';
    return out;
  }

  void skip_flow_space() {
    while (!end()) {
      if (is_space(peek()) || peek() == '\n' || peek() == '\r') {
        ++pos_;
      } else if (peek() == '#') {
        while (!end() && peek() != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  Node flow() {
    const char open = peek();
    const char close = open == '[' ? ']' : '}';
    ++pos_;
    Node node;
    node.kind_ = open == '[' ? Node::Kind::sequence : Node::Kind::mapping;
    while (true) {
      skip_flow_space();
      if (end()) error("unterminated flow collection");
      if (peek() == close) {
        ++pos_;
        return node;
      }
      Node first = flow_scalar_or_collection();
      skip_flow_space();
      if (open == '{') {
        if (peek() != ':') error("expected ':' in a flow mapping");
        ++pos_;
        skip_flow_space();
        Node value;
        if (peek() != ',' && peek() != '}') value = flow_scalar_or_collection();
        node.entries_.emplace_back(first.text_, std::move(value));
      } else {
        node.items_.push_back(std::move(first));
      }
      skip_flow_space();
      if (end()) error("unterminated flow collection");
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != close) {
        error("expected ',' or '", std::string(1, close), "'");
      }
    }
  }

  Node flow_scalar_or_collection() {
    const char c = peek();
    if (c == '[' || c == '{') return flow();
    if (c == '&' || c == '*' || c == '!') error("anchors, aliases and tags are not supported");
    Node node;
    node.kind_ = Node::Kind::scalar;
    if (c == '"' || c == '\'') {
      node.text_ = quoted(c);
      node.quoted_ = true;
      return node;
    }
    const size_t start = pos_;
    while (!end() && peek() != ',' && peek() != ']' && peek() != '}' && peek() != '\n' &&
           !(peek() == ':' && (is_space(peek(1)) || peek(1) == ',' || peek(1) == ']' ||
                               peek(1) == '}' || peek(1) == '\n'))) {
      ++pos_;
    }
    std::string text(s_.substr(start, pos_ - start));
    while (!text.empty() && (is_space(text.back()) || text.back() == '\r')) text.pop_back();
    node.text_ = std::move(text);
    if (node.text_.empty()) node.kind_ = Node::Kind::null;
    return node;
  }

  // Replaces every scalar that is exactly "${path}" by a copy of the node at that path from the
  // root (interpolations inside it resolved too, to a small depth); others stay as they are.
  static void resolve(Node& node, const Node& root, int depth) {
    const std::string& text = node.text_;
    if (node.kind_ == Node::Kind::scalar && text.starts_with("${") &&
        text.find('}') == text.size() - 1) {
      const Node* target = root.find_path(std::string_view(text).substr(2, text.size() - 3));
      if (target == nullptr || target == &node || depth >= 8) return;
      Node copy = *target;
      resolve(copy, root, depth + 1);
      node = std::move(copy);
      return;
    }
    for (Node& item : node.items_) resolve(item, root, depth);
    for (auto& entry : node.entries_) resolve(entry.second, root, depth);
  }

  std::string_view s_;
  const std::string& where_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
};

bool Node::is_null() const {
  if (kind_ == Kind::null) return true;
  if (kind_ != Kind::scalar || quoted_) return false;
  return text_ == "~" || text_ == "null" || text_ == "Null" || text_ == "NULL";
}

const Node* Node::find(std::string_view key) const {
  for (const auto& [name, value] : entries_) {
    if (name == key) return &value;
  }
  return nullptr;
}

const Node* Node::find_path(std::string_view path) const {
  const Node* node = this;
  while (node != nullptr && !path.empty()) {
    const size_t dot = path.find('.');
    node = node->find(path.substr(0, dot));
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return node;
}

std::optional<int64_t> Node::as_int() const {
  if (kind_ != Kind::scalar || quoted_ || text_.empty()) return std::nullopt;
  const std::string digits = without_underscores(text_);
  int base = 10;
  size_t start = digits[0] == '-' || digits[0] == '+' ? 1 : 0;
  if (digits.compare(start, 2, "0x") == 0) {
    base = 16;
  } else if (digits.compare(start, 2, "0o") == 0) {
    base = 8;
  }
  const std::string body = digits.substr(start + (base == 10 ? 0 : 2));
  if (body.empty()) return std::nullopt;
  for (char c : body) {
    const bool digit = base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) != 0
                                  : c >= '0' && c <= (base == 8 ? '7' : '9');
    if (!digit) return std::nullopt;
  }
  errno = 0;
  const long long magnitude = std::strtoll(body.c_str(), nullptr, base);
  if (errno == ERANGE) return std::nullopt;
  return digits[0] == '-' ? -magnitude : magnitude;
}

std::optional<double> Node::as_float() const {
  if (kind_ != Kind::scalar || quoted_ || text_.empty()) return std::nullopt;
  if (const auto integer = as_int()) return static_cast<double>(*integer);
  std::string text = without_underscores(text_);
  const bool negative = text[0] == '-';
  const std::string magnitude = text.substr(text[0] == '-' || text[0] == '+' ? 1 : 0);
  if (magnitude == ".inf" || magnitude == ".Inf" || magnitude == ".INF") {
    return negative ? -HUGE_VAL : HUGE_VAL;
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") return std::nan("");
  // Digits, one optional point, an optional exponent: what strtod reads, minus hex, inf and nan.
  for (char c : magnitude) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
          c == '-' || c == '+')) {
      return std::nullopt;
    }
  }
  char* stop = nullptr;
  const double value = std::strtod(text.c_str(), &stop);
  if (stop != text.c_str() + text.size()) return std::nullopt;
  return value;
}

std::optional<bool> Node::as_bool() const {
  if (kind_ != Kind::scalar || quoted_) return std::nullopt;
  for (std::string_view yes : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"}) {
    if (text_ == yes) return true;
  }
  for (std::string_view no : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"}) {
    if (text_ == no) return false;
  }
  return std::nullopt;
}

std::string Node::describe() const {
  switch (kind_) {
    case Kind::null:
      return "null";
    case Kind::scalar:
      return quoted_ ? "'" + text_ + "'" : text_;
    case Kind::sequence: {
      std::string text = "[";
      for (size_t i = 0; i < items_.size(); ++i) text += (i ? ", " : "") + items_[i].describe();
      return text + "]";
    }
    case Kind::mapping: {
      std::string text = "{";
      for (size_t i = 0; i < entries_.size(); ++i) {
        text += (i ? ", " : "") + entries_[i].first + ": " + entries_[i].second.describe();
      }
      return text + "}";
    }
  }
  return "?";
}

Node parse(std::string_view text, const std::string& where) {
  return Parser(text, where).document();
}

}  // namespace hark::yaml
