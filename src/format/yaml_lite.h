// A reader for the subset of YAML that configuration dumps use, such as the model_config.yaml
// that NeMo writes into a `.nemo` archive (OmegaConf, through PyYAML): block mappings and
// sequences (a sequence under a key may sit at the key's own indentation), plain, single- and
// double-quoted scalars (escapes, and lines folded as YAML folds them), flow collections
// ([a, b], {k: v}), literal and folded block scalars, comments and a leading `---`. Anchors,
// aliases, tags and complex (`?`) keys are refused with an error. A scalar that is a whole
// OmegaConf interpolation, "${a.b}", is replaced by the node at that path from the root.
//
// Scalars stay text; as_int, as_float and as_bool read them as YAML 1.1 does (PyYAML's rules for
// plain scalars), and a quoted scalar is always a string.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hark::yaml {

class Node {
 public:
  enum class Kind { null, scalar, sequence, mapping };

  Kind kind() const { return kind_; }
  bool is_null() const;  // an empty value, or the plain scalar null / ~
  bool is_scalar() const { return kind_ == Kind::scalar; }
  bool is_sequence() const { return kind_ == Kind::sequence; }
  bool is_mapping() const { return kind_ == Kind::mapping; }

  const std::string& text() const { return text_; }  // a scalar's value
  bool quoted() const { return quoted_; }
  const std::vector<Node>& items() const { return items_; }
  const std::vector<std::pair<std::string, Node>>& entries() const { return entries_; }
  // The value of `key` in a mapping (the first, if repeated); null for other kinds.
  const Node* find(std::string_view key) const;
  // The node at a dotted path ("decoder.prednet.pred_hidden"), or null.
  const Node* find_path(std::string_view path) const;

  // A plain scalar read as YAML 1.1 would; nullopt for anything else.
  std::optional<int64_t> as_int() const;
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;

  // The value as it would be written back (for messages): text, [..] or {..}.
  std::string describe() const;

 private:
  friend class Parser;
  Kind kind_ = Kind::null;
  std::string text_;
  bool quoted_ = false;
  std::vector<Node> items_;
  std::vector<std::pair<std::string, Node>> entries_;
};

// Parses one document; throws hark::Error naming `where`, the line and the column on anything
// outside the subset.
Node parse(std::string_view text, const std::string& where);

}  // namespace hark::yaml
