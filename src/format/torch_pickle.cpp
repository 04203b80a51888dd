#include "format/torch_pickle.h"

#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "format/zip.h"

namespace hark::torch {

namespace {

using safetensors::ElementType;

// The storage classes torch.save names, by their Python name.
constexpr std::pair<std::string_view, ElementType> kStorageTypes[] = {
    {"torch.DoubleStorage", ElementType::F64}, {"torch.FloatStorage", ElementType::F32},
    {"torch.HalfStorage", ElementType::F16},   {"torch.BFloat16Storage", ElementType::BF16},
    {"torch.LongStorage", ElementType::I64},   {"torch.IntStorage", ElementType::I32},
    {"torch.ShortStorage", ElementType::I16},  {"torch.CharStorage", ElementType::I8},
    {"torch.ByteStorage", ElementType::U8},    {"torch.BoolStorage", ElementType::BOOL},
};

constexpr std::string_view kOrderedDict = "collections.OrderedDict";
constexpr std::string_view kRebuildTensor = "torch._utils._rebuild_tensor_v2";
constexpr std::string_view kRebuildParameter = "torch._utils._rebuild_parameter";

// Dimensions and element counts beyond these are a corrupt file, not a model.
constexpr int64_t kMaxDimension = int64_t(1) << 40;
constexpr size_t kMaxRank = 16;

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// One object of the pickle machine. Containers are shared, as Python objects are: the memo and
// the stack may hold the same dict while SETITEMS fills it.
struct Value {
  enum class Kind {
    none,
    boolean,
    integer,
    floating,
    text,
    bytes,
    tuple,
    list,
    dict,
    global,
    storage,
    tensor
  };
  Kind kind = Kind::none;
  int64_t integer = 0;                                 // boolean, integer
  double floating = 0;                                 // floating
  std::string text;                                    // text, bytes, global "module.name"
  std::vector<ValuePtr> items;                         // tuple, list
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  // dict
  ElementType storage_type = ElementType::F32;         // storage
  std::string storage_key;                             // storage
  TensorRecord tensor;                                 // tensor (without its name)
};

ValuePtr make(Value::Kind kind) {
  auto value = std::make_shared<Value>();
  value->kind = kind;
  return value;
}

std::string_view kind_name(Value::Kind kind) {
  static constexpr std::string_view kNames[] = {"None", "bool",   "int",     "float",
                                                "str",  "bytes",  "tuple",   "list",
                                                "dict", "global", "storage", "tensor"};
  return kNames[static_cast<size_t>(kind)];
}

// The pickle virtual machine, for the opcodes of protocols 2 to 4 that state dicts need.
class Machine {
 public:
  Machine(std::span<const uint8_t> bytes, const std::string& where)
      : bytes_(bytes), where_(where) {}

  ValuePtr run() {
    while (true) {
      op_offset_ = position_;
      const uint8_t op = byte();
      switch (op) {
        case 0x80:
          byte();
          break;  // PROTO
        case 0x95:
          read(8);
          break;   // FRAME: a length hint only
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty()) error("STOP with ", stack_.size(), " values");
          return stack_.back();
        case '(':
          marks_.push_back(stack_.size());
          break;  // MARK
        case '0':
          pop();
          break;  // POP
        case '1':
          pop_to_mark();
          break;  // POP_MARK
        case '2':
          push(top());
          break;  // DUP
        case 'N':
          push(make(Value::Kind::none));
          break;
        case 0x88:
          push_bool(true);
          break;  // NEWTRUE
        case 0x89:
          push_bool(false);
          break;  // NEWFALSE
        case 'J':
          push_int(static_cast<int32_t>(little(4)));
          break;  // BININT
        case 'K':
          push_int(little(1));
          break;  // BININT1
        case 'M':
          push_int(little(2));
          break;  // BININT2
        case 0x8a:
          push_long(little(1));
          break;  // LONG1
        case 0x8b:
          push_long(little(4));
          break;  // LONG4
        case 'G':
          push_float();
          break;  // BINFLOAT
        case 'X':
          push_text(Value::Kind::text, little(4));
          break;  // BINUNICODE
        case 0x8c:
          push_text(Value::Kind::text, little(1));
          break;  // SHORT_BINUNICODE
        case 0x8d:
          push_text(Value::Kind::text, little(8));
          break;  // BINUNICODE8
        case 'T':
          push_text(Value::Kind::text, little(4));
          break;  // BINSTRING
        case 'U':
          push_text(Value::Kind::text, little(1));
          break;  // SHORT_BINSTRING
        case 'B':
          push_text(Value::Kind::bytes, little(4));
          break;  // BINBYTES
        case 'C':
          push_text(Value::Kind::bytes, little(1));
          break;  // SHORT_BINBYTES
        case 0x8e:
          push_text(Value::Kind::bytes, little(8));
          break;  // BINBYTES8
        case ')':
          push(make(Value::Kind::tuple));
          break;  // EMPTY_TUPLE
        case 't':
          push_tuple(pop_to_mark());
          break;  // TUPLE
        case 0x85:
          push_tuple(pop_n(1));
          break;  // TUPLE1
        case 0x86:
          push_tuple(pop_n(2));
          break;  // TUPLE2
        case 0x87:
          push_tuple(pop_n(3));
          break;  // TUPLE3
        case ']':
          push(make(Value::Kind::list));
          break;     // EMPTY_LIST
        case 'l': {  // LIST
          auto list = make(Value::Kind::list);
          list->items = pop_to_mark();
          push(list);
          break;
        }
        case 'a':
          append(pop_n(1));
          break;  // APPEND
        case 'e':
          append(pop_to_mark());
          break;  // APPENDS
        case '}':
          push(make(Value::Kind::dict));
          break;     // EMPTY_DICT
        case 'd': {  // DICT
          auto dict = make(Value::Kind::dict);
          push(dict);
          set_items(dict, pop_to_mark_below_top());
          break;
        }
        case 's':
          set_items_on_top(pop_n(2));
          break;  // SETITEM
        case 'u':
          set_items_on_top(pop_to_mark());
          break;     // SETITEMS
        case 'c': {  // GLOBAL
          std::string module = line();
          push_global(module + "." + line());
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const ValuePtr name = pop();
          const ValuePtr module = pop();
          if (name->kind != Value::Kind::text || module->kind != Value::Kind::text) {
            error("STACK_GLOBAL needs two strings");
          }
          push_global(module->text + "." + name->text);
          break;
        }
        case 'R':
          reduce();
          break;  // REDUCE
        case 'b':
          build();
          break;  // BUILD
        case 'Q':
          persistent_load();
          break;  // BINPERSID
        case 'q':
          memo_[little(1)] = top();
          break;  // BINPUT
        case 'r':
          memo_[little(4)] = top();
          break;  // LONG_BINPUT
        case 0x94:
          memo_[memo_.size()] = top();
          break;  // MEMOIZE
        case 'h':
          push(memo(little(1)));
          break;  // BINGET
        case 'j':
          push(memo(little(4)));
          break;  // LONG_BINGET
        default:
          error("unknown or unsupported pickle opcode 0x", hex(op),
                " (a PyTorch state dict does not use it)");
      }
    }
  }

 private:
  template <class... Parts>
  [[noreturn]] void error(const Parts&... parts) const {
    fail(where_, ": pickle byte ", op_offset_, ": ", parts...);
  }

  static std::string hex(uint8_t byte) {
    constexpr char kDigits[] = "0123456789abcdef";
    return {kDigits[byte >> 4], kDigits[byte & 15]};
  }

  const uint8_t* read(uint64_t count) {
    if (count > bytes_.size() - position_) error("truncated pickle (", count, " bytes needed)");
    const uint8_t* start = bytes_.data() + position_;
    position_ += count;
    return start;
  }
  uint8_t byte() { return *read(1); }
  uint64_t little(size_t count) {
    const uint8_t* p = read(count);
    uint64_t value = 0;
    for (size_t i = count; i-- > 0;) value = value << 8 | p[i];
    return value;
  }
  std::string line() {
    const size_t start = position_;
    while (byte() != '\n') {
    }
    return std::string(reinterpret_cast<const char*>(bytes_.data() + start), position_ - start - 1);
  }

  void push(ValuePtr value) { stack_.push_back(std::move(value)); }
  ValuePtr pop() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) {
      error("pop from an empty stack");
    }
    ValuePtr value = std::move(stack_.back());
    stack_.pop_back();
    return value;
  }
  const ValuePtr& top() const {
    if (stack_.empty()) error("the stack is empty");
    return stack_.back();
  }
  std::vector<ValuePtr> pop_n(size_t count) {
    std::vector<ValuePtr> values(count);
    for (size_t i = count; i-- > 0;) values[i] = pop();
    return values;
  }
  std::vector<ValuePtr> pop_to_mark() {
    if (marks_.empty()) error("no MARK");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> values(std::make_move_iterator(stack_.begin() + mark),
                                 std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return values;
  }
  // DICT: the values above the mark, with the new dict (just pushed) set aside.
  std::vector<ValuePtr> pop_to_mark_below_top() {
    ValuePtr dict = pop();
    std::vector<ValuePtr> values = pop_to_mark();
    push(std::move(dict));
    return values;
  }
  ValuePtr memo(uint64_t index) const {
    const auto found = memo_.find(index);
    if (found == memo_.end()) error("memo entry ", index, " was never stored");
    return found->second;
  }

  void push_bool(bool value) {
    auto v = make(Value::Kind::boolean);
    v->integer = value;
    push(v);
  }
  void push_int(int64_t value) {
    auto v = make(Value::Kind::integer);
    v->integer = value;
    push(v);
  }
  void push_long(uint64_t count) {
    if (count > 8) error("integer of ", count, " bytes");
    const uint8_t* p = read(count);
    uint64_t value = 0;
    for (size_t i = count; i-- > 0;) value = value << 8 | p[i];
    // Two's complement of `count` bytes.
    if (count > 0 && count < 8 && (p[count - 1] & 0x80)) value -= uint64_t(1) << (8 * count);
    push_int(static_cast<int64_t>(value));
  }
  void push_float() {
    const uint8_t* p = read(8);
    uint64_t bits = 0;
    for (size_t i = 0; i < 8; ++i) bits = bits << 8 | p[i];  // big-endian
    auto v = make(Value::Kind::floating);
    std::memcpy(&v->floating, &bits, 8);
    push(v);
  }
  void push_text(Value::Kind kind, uint64_t length) {
    auto v = make(kind);
    const uint8_t* p = read(length);
    v->text.assign(reinterpret_cast<const char*>(p), length);
    push(v);
  }
  void push_tuple(std::vector<ValuePtr> items) {
    auto v = make(Value::Kind::tuple);
    v->items = std::move(items);
    push(v);
  }
  void push_global(std::string name) {
    bool known = name == kOrderedDict || name == kRebuildTensor || name == kRebuildParameter;
    for (const auto& [storage, type] : kStorageTypes) known = known || name == storage;
    if (!known) {
      error("the pickle names ", name,
            ", which a PyTorch state dict does not use (hark never runs pickled code)");
    }
    auto v = make(Value::Kind::global);
    v->text = std::move(name);
    push(v);
  }

  void append(std::vector<ValuePtr> values) {
    const ValuePtr& list = top();
    if (list->kind != Value::Kind::list) error("APPEND to a ", kind_name(list->kind));
    for (ValuePtr& value : values) list->items.push_back(std::move(value));
  }
  void set_items(const ValuePtr& dict, std::vector<ValuePtr> values) {
    if (values.size() % 2 != 0) error("SETITEMS with an odd number of values");
    for (size_t i = 0; i < values.size(); i += 2) {
      dict->entries.emplace_back(std::move(values[i]), std::move(values[i + 1]));
    }
  }
  void set_items_on_top(std::vector<ValuePtr> values) {
    const ValuePtr dict = top();
    if (dict->kind != Value::Kind::dict) error("SETITEMS on a ", kind_name(dict->kind));
    set_items(dict, std::move(values));
  }

  // ('storage', torch.<Type>Storage, key, location, numel): a storage the ZIP archive holds.
  void persistent_load() {
    const ValuePtr id = pop();
    const auto& parts = id->items;
    if (id->kind != Value::Kind::tuple || parts.size() != 5 ||
        parts[0]->kind != Value::Kind::text || parts[0]->text != "storage" ||
        parts[1]->kind != Value::Kind::global || parts[2]->kind != Value::Kind::text) {
      error("a persistent id other than ('storage', type, key, location, size)");
    }
    auto storage = make(Value::Kind::storage);
    bool known = false;
    for (const auto& [name, type] : kStorageTypes) {
      if (parts[1]->text == name) storage->storage_type = type, known = true;
    }
    if (!known) error("storage of type ", parts[1]->text);
    storage->storage_key = parts[2]->text;
    push(storage);
  }

  void reduce() {
    const ValuePtr arguments = pop();
    const ValuePtr callable = pop();
    if (callable->kind != Value::Kind::global || arguments->kind != Value::Kind::tuple) {
      error("REDUCE of a ", kind_name(callable->kind), " with a ", kind_name(arguments->kind));
    }
    const std::vector<ValuePtr>& args = arguments->items;
    if (callable->text == kOrderedDict) {
      if (!args.empty()) error("OrderedDict built from arguments");
      push(make(Value::Kind::dict));
    } else if (callable->text == kRebuildTensor) {
      push(rebuild_tensor(args));
    } else if (callable->text == kRebuildParameter) {
      // (tensor, requires_grad, backward_hooks): a Parameter is its tensor.
      if (args.empty() || args[0]->kind != Value::Kind::tensor) error("_rebuild_parameter of ?");
      push(args[0]);
    } else {
      error("calling ", callable->text);
    }
  }

  // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]).
  ValuePtr rebuild_tensor(const std::vector<ValuePtr>& args) {
    if (args.size() < 4 || args[0]->kind != Value::Kind::storage ||
        args[1]->kind != Value::Kind::integer || args[2]->kind != Value::Kind::tuple ||
        args[3]->kind != Value::Kind::tuple) {
      error("_rebuild_tensor_v2 without (storage, offset, size, stride)");
    }
    auto tensor = make(Value::Kind::tensor);
    TensorRecord& record = tensor->tensor;
    record.type = args[0]->storage_type;
    record.storage_key = args[0]->storage_key;
    record.storage_offset = args[1]->integer;
    if (record.storage_offset < 0 || record.storage_offset > kMaxDimension) {
      error("storage offset ", record.storage_offset);
    }
    if (args[2]->items.size() != args[3]->items.size() || args[2]->items.size() > kMaxRank) {
      error("a tensor of ", args[2]->items.size(), " dimensions with ", args[3]->items.size(),
            " strides");
    }
    for (size_t i = 0; i < args[2]->items.size(); ++i) {
      const ValuePtr& size = args[2]->items[i];
      const ValuePtr& stride = args[3]->items[i];
      if (size->kind != Value::Kind::integer || stride->kind != Value::Kind::integer ||
          size->integer < 0 || size->integer > kMaxDimension || stride->integer < 0 ||
          stride->integer > kMaxDimension) {
        error("a tensor size or stride that is not a sensible integer");
      }
      record.shape.push_back(size->integer);
      record.strides.push_back(stride->integer);
    }
    return tensor;
  }

  // BUILD sets an object's state: the _metadata of a state dict, or a tensor's Python attributes;
  // neither matters here.
  void build() {
    pop();
    const Value::Kind kind = top()->kind;
    if (kind != Value::Kind::dict && kind != Value::Kind::tensor) {
      error("BUILD on a ", kind_name(kind));
    }
  }

  std::span<const uint8_t> bytes_;
  const std::string& where_;
  size_t position_ = 0;
  size_t op_offset_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, ValuePtr> memo_;
};

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim != 0 && count > kMaxDimension / dim) return -1;
    count *= dim;
  }
  return count;
}

// Whether the strides are those of a row-major tensor of `shape` (dimensions of size 1 may have
// any stride: nothing steps along them).
bool is_contiguous(const TensorRecord& tensor) {
  int64_t expected = 1;
  for (size_t i = tensor.shape.size(); i-- > 0;) {
    if (tensor.shape[i] != 1 && tensor.strides[i] != expected) return false;
    expected *= tensor.shape[i];
  }
  return true;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

}  // namespace

std::vector<TensorRecord> read_state_dict_pickle(std::span<const uint8_t> pickle,
                                                 const std::string& where) {
  const ValuePtr root = Machine(pickle, where).run();
  if (root->kind != Value::Kind::dict) {
    fail(where, ": the pickle holds a ", kind_name(root->kind), ", not a state dict");
  }
  std::vector<TensorRecord> tensors;
  for (const auto& [key, value] : root->entries) {
    if (key->kind != Value::Kind::text) {
      fail(where, ": a state dict key is a ", kind_name(key->kind), ", not a string");
    }
    if (value->kind != Value::Kind::tensor) {
      if (key->text.ends_with("_extra_state")) continue;
      fail(where, ": state dict entry ", key->text, " is a ", kind_name(value->kind),
           ", not a tensor");
    }
    TensorRecord record = value->tensor;
    record.name = key->text;
    if (element_count(record.shape) < 0) fail(where, ": tensor ", record.name, " is too large");
    if (!is_contiguous(record)) {
      fail(where, ": tensor ", record.name, " is not contiguous (shape ", dims_text(record.shape),
           ", strides ", dims_text(record.strides), "); save the state dict of contiguous tensors");
    }
    tensors.push_back(std::move(record));
  }
  return tensors;
}

std::vector<safetensors::TensorView> read_checkpoint(std::span<const uint8_t> checkpoint,
                                                     const std::string& where) {
  // Before PyTorch 1.6, torch.save wrote a bare pickle stream (starting with PROTO 2).
  if (checkpoint.size() >= 2 && checkpoint[0] == 0x80 && checkpoint[1] <= 5) {
    fail(where,
         ": a legacy (pre-1.6, non-ZIP) torch.save file, which hark does not read; "
         "re-save it with a current PyTorch");
  }
  const zip::Archive archive(checkpoint, where);
  // Every entry sits under one folder, whose name torch.save takes from the file name.
  const zip::Entry* pickle = nullptr;
  for (const zip::Entry& entry : archive.entries()) {
    if (entry.name == "data.pkl" || entry.name.ends_with("/data.pkl")) {
      if (pickle == nullptr || entry.name.size() < pickle->name.size()) pickle = &entry;
    }
  }
  if (pickle == nullptr) fail(where, ": no data.pkl (not a torch.save checkpoint)");
  const std::string prefix = pickle->name.substr(0, pickle->name.size() - 8);
  if (const zip::Entry* order = archive.find(prefix + "byteorder")) {
    const std::span<const uint8_t> text = archive.data(*order);
    if (std::string_view(reinterpret_cast<const char*>(text.data()), text.size()) != "little") {
      fail(where, ": a big-endian checkpoint, which hark does not read");
    }
  }

  std::vector<safetensors::TensorView> views;
  for (const TensorRecord& record : read_state_dict_pickle(archive.data(*pickle), where)) {
    const zip::Entry* storage = archive.find(prefix + "data/" + record.storage_key);
    if (storage == nullptr) {
      fail(where, ": tensor ", record.name, " refers to storage ", record.storage_key,
           ", which the archive lacks");
    }
    const std::span<const uint8_t> bytes = archive.data(*storage);
    const uint64_t element = safetensors::element_size(record.type);
    const auto count = static_cast<uint64_t>(element_count(record.shape));
    const auto offset = static_cast<uint64_t>(record.storage_offset);
    if ((offset + count) * element > bytes.size()) {
      fail(where, ": tensor ", record.name, " (", count, " elements from element ", offset,
           ") overruns its storage of ", bytes.size(), " bytes");
    }
    safetensors::TensorView view;
    view.name = record.name;
    view.type = record.type;
    view.shape = record.shape;
    view.data = bytes.data() + offset * element;
    view.nbytes = count * element;
    views.push_back(std::move(view));
  }
  return views;
}

}  // namespace hark::torch
