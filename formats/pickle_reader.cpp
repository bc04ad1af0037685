// A pickle virtual machine for torch.save archives (see pickle_reader.h): a value stack, a mark stack
// and a memo, one case per opcode; REDUCE knows the few callables torch.save uses for tensors and
// ordered dicts and turns every other call into an opaque value.
#include "formats/pickle_reader.h"

#include "core/check.h"
#include "core/untrusted_file.h"

#include <charconv>
#include <cstring>
#include <map>

namespace zest {
namespace {

using Kind = PickleValue::Kind;

PickleRef make(Kind kind) {
  auto value = std::make_shared<PickleValue>();
  value->kind = kind;
  return value;
}

// "torch.FloatStorage" → float32 (torch.save names a tensor's storage by its legacy typed class).
bool storage_dtype(const std::string& name, torch::Dtype& dtype) {
  static const std::map<std::string, torch::Dtype> kTypes = {
      {"torch.FloatStorage", torch::kFloat32},  {"torch.DoubleStorage", torch::kFloat64},
      {"torch.HalfStorage", torch::kFloat16},   {"torch.BFloat16Storage", torch::kBFloat16},
      {"torch.LongStorage", torch::kInt64},     {"torch.IntStorage", torch::kInt32},
      {"torch.ShortStorage", torch::kInt16},    {"torch.CharStorage", torch::kInt8},
      {"torch.ByteStorage", torch::kUInt8},     {"torch.BoolStorage", torch::kBool}};
  const auto it = kTypes.find(name);
  if (it == kTypes.end()) return false;
  dtype = it->second;
  return true;
}

class Machine {
 public:
  Machine(const std::string& program, std::string source, size_t max_values)
      : data_(program), source_(std::move(source)), max_values_(max_values) {}

  PickleRef run() {
    while (true) {
      opcode_at_ = pos_;
      const uint8_t op = u8();
      if (op == '.') {
        check(stack_.size() == 1, "the program stops with ", stack_.size(), " values on the stack");
        return stack_.back();
      }
      step(op);
    }
  }

 private:
  template <typename... Args>
  void check(bool ok, const Args&... args) const {
    if (!ok)
      ZEST_FAIL(source_, ": data.pkl byte ", opcode_at_, " (opcode 0x",
                opcode_at_ < data_.size() ? hex(data_[opcode_at_]) : std::string("--"), "): ", args...);
  }
  static std::string hex(char c) {
    const char* digits = "0123456789abcdef";
    const auto v = static_cast<uint8_t>(c);
    return {digits[v >> 4], digits[v & 15]};
  }

  // ---- reading the program ----
  // Compared against the bytes left, so a length near 2^64 cannot wrap the check.
  void need(uint64_t n) const {
    check(n <= data_.size() - pos_, "a length of ", n, " bytes runs past the end of the program (",
          data_.size() - pos_, " bytes left)");
  }
  uint8_t u8() {
    need(1);
    return static_cast<uint8_t>(data_[pos_++]);
  }
  uint64_t le(size_t n) {
    need(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += n;
    return v;
  }
  std::string bytes(uint64_t n) {
    need(n);
    std::string out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  std::string line() {
    const size_t end = data_.find('\n', pos_);
    check(end != std::string::npos, "a text argument without its newline");
    std::string out = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  // A decimal argument (protocol 0 INT, PUT, GET), checked: the error names the byte offset.
  template <typename T>
  T decimal(const std::string& text) {
    T value{};
    const char* begin = text.data();
    if (!text.empty() && text[0] == '+') ++begin;
    const auto [end, ec] = std::from_chars(begin, text.data() + text.size(), value);
    check(ec == std::errc() && end == text.data() + text.size() && begin != end, "'", printable(text, 40),
          "' is not an integer the reader accepts");
    return value;
  }
  int64_t signed_le(size_t n) {
    check(n <= 8, "an integer of ", n, " bytes is too large");
    if (n == 0) return 0;
    const uint64_t v = le(n);
    if (n < 8 && (v >> (8 * n - 1)) & 1) return static_cast<int64_t>(v | (~uint64_t{0} << (8 * n)));
    return static_cast<int64_t>(v);
  }

  // ---- the stacks ----
  void push(PickleRef v) { stack_.push_back(std::move(v)); }
  PickleRef make(Kind kind) {
    check(++made_ <= max_values_, "the program creates more than ", max_values_,
          " values; no torch.save state dict needs so many (corrupt or hostile file)");
    return zest::make(kind);
  }
  PickleRef make_text(Kind kind, std::string text) {
    PickleRef value = make(kind);
    value->text = std::move(text);
    return value;
  }
  PickleRef make_int(int64_t v, Kind kind = Kind::integer) {
    PickleRef value = make(kind);
    value->integer = v;
    return value;
  }
  PickleRef pop() {
    check(stack_.size() > (marks_.empty() ? 0 : marks_.back()), "pop from an empty stack");
    PickleRef v = stack_.back();
    stack_.pop_back();
    return v;
  }
  PickleRef& top() {
    check(!stack_.empty(), "empty stack");
    return stack_.back();
  }
  std::vector<PickleRef> pop_mark() {
    check(!marks_.empty(), "no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }
  PickleRef tuple(std::vector<PickleRef> items) {
    PickleRef t = make(Kind::tuple);
    t->items = std::move(items);
    return t;
  }
  void set_items(PickleValue& dict, const std::vector<PickleRef>& flat) {
    check(flat.size() % 2 == 0, "SETITEMS with an odd number of values");
    if (dict.kind != Kind::dict) return;  // items of an opaque mapping: not needed
    for (size_t i = 0; i < flat.size(); i += 2) dict.entries.emplace_back(flat[i], flat[i + 1]);
  }

  // ---- calls ----
  PickleRef call(const PickleRef& callable, const PickleRef& args, int depth = 0) {
    check(depth < kMaxPickleCallDepth, "calls nested more than ", kMaxPickleCallDepth,
          " deep (_rebuild_from_type_v2 whose arguments refer to themselves?)");
    const std::string name = callable->kind == Kind::global ? callable->text : "";
    check(args->kind == Kind::tuple, "a call's arguments are not a tuple");
    const auto& a = args->items;
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") return rebuild_tensor(a);
    if ((name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") &&
        !a.empty())
      return a[0];
    if (name == "torch._tensor._rebuild_from_type_v2" && a.size() >= 3 && a[2]->kind == Kind::tuple)
      return call(a[0], a[2], depth + 1);
    if (name == "collections.OrderedDict" || name == "builtins.dict") {
      PickleRef dict = make(Kind::dict);
      if (!a.empty() && (a[0]->kind == Kind::list || a[0]->kind == Kind::tuple)) {
        for (const PickleRef& pair : a[0]->items)
          if (pair->items.size() == 2) dict->entries.emplace_back(pair->items[0], pair->items[1]);
      }
      return dict;
    }
    return make_text(Kind::opaque, name.empty() ? "<call>" : name);
  }

  PickleRef rebuild_tensor(const std::vector<PickleRef>& a) {
    check(a.size() >= 4 && a[0]->kind == Kind::storage && a[1]->kind == Kind::integer &&
              a[2]->kind == Kind::tuple && a[3]->kind == Kind::tuple,
          "_rebuild_tensor_v2 called with arguments other than (storage, offset, size, stride, ...)");
    PickleRef t = make(Kind::tensor);
    t->tensor = a[0]->tensor;
    t->tensor.offset = a[1]->integer;
    check(a[2]->items.size() <= kMaxTensorDims, "a tensor with ", a[2]->items.size(), " dimensions (at most ",
          kMaxTensorDims, ")");
    for (const PickleRef& d : a[2]->items) {
      check(d->kind == Kind::integer && d->integer >= 0, "a tensor size that is not a non-negative integer");
      t->tensor.shape.push_back(d->integer);
    }
    for (const PickleRef& d : a[3]->items) {
      check(d->kind == Kind::integer && d->integer >= 0, "a tensor stride that is not a non-negative integer");
      t->tensor.stride.push_back(d->integer);
    }
    check(t->tensor.shape.size() == t->tensor.stride.size(), "a tensor's size and stride differ in length");
    check(t->tensor.offset >= 0, "a negative storage offset ", t->tensor.offset);
    return t;
  }

  // ('storage', torch.<Type>Storage, key, location, numel)
  PickleRef persistent(const PickleRef& pid) {
    const auto& a = pid->items;
    check(pid->kind == Kind::tuple && a.size() >= 5 && a[0]->text == "storage" && a[1]->kind == Kind::global &&
              a[2]->kind == Kind::string && a[4]->kind == Kind::integer,
          "a persistent id other than ('storage', type, key, location, numel)");
    PickleRef s = make(Kind::storage);
    check(storage_dtype(a[1]->text, s->tensor.dtype), "storage type ", printable(a[1]->text, 80), " is not supported");
    check(a[4]->integer >= 0, "a storage of ", a[4]->integer, " elements");
    s->tensor.storage_key = a[2]->text;
    s->tensor.storage_numel = a[4]->integer;
    return s;
  }

  void step(uint8_t op);
  bool push_scalar(uint8_t op);

  const std::string& data_;
  std::string source_;
  size_t pos_ = 0;
  size_t opcode_at_ = 0;
  std::vector<PickleRef> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PickleRef> memo_;
  size_t max_values_;
  size_t made_ = 0;  // values created so far (bounded by max_values_)
};

// Opcodes that push one scalar or string; false for every other opcode.
bool Machine::push_scalar(uint8_t op) {
  switch (op) {
    case 'N': push(make(Kind::none)); return true;
    case 0x88: push(make_int(1, Kind::boolean)); return true;
    case 0x89: push(make_int(0, Kind::boolean)); return true;
    case 'J': push(make_int(static_cast<int32_t>(le(4)))); return true;
    case 'K': push(make_int(u8())); return true;
    case 'M': push(make_int(static_cast<int64_t>(le(2)))); return true;
    case 0x8a: push(make_int(signed_le(u8()))); return true;
    case 0x8b: push(make_int(signed_le(le(4)))); return true;
    case 'I': {  // INT (protocol 0): "01"/"00" are booleans
      const std::string text = line();
      push(text == "01" || text == "00" ? make_int(text == "01", Kind::boolean) : make_int(decimal<int64_t>(text)));
      return true;
    }
    case 'G': {  // BINFLOAT: big-endian double
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = bits << 8 | u8();
      PickleRef v = make(Kind::floating);
      std::memcpy(&v->floating, &bits, sizeof(bits));
      push(v);
      return true;
    }
    case 'X': push(make_text(Kind::string, bytes(le(4)))); return true;
    case 0x8c: push(make_text(Kind::string, bytes(u8()))); return true;
    case 0x8d: push(make_text(Kind::string, bytes(le(8)))); return true;
    case 'T': push(make_text(Kind::string, bytes(le(4)))); return true;
    case 'U': push(make_text(Kind::string, bytes(u8()))); return true;
    case 'B': push(make_text(Kind::bytes, bytes(le(4)))); return true;
    case 'C': push(make_text(Kind::bytes, bytes(u8()))); return true;
    case 0x8e: push(make_text(Kind::bytes, bytes(le(8)))); return true;
    default: return false;
  }
}

void Machine::step(uint8_t op) {
  if (push_scalar(op)) return;
  switch (op) {
    case 0x80: u8(); break;      // PROTO
    case 0x95: le(8); break;     // FRAME
    case '(': marks_.push_back(stack_.size()); break;
    case ')': push(make(Kind::tuple)); break;
    case 0x85: { PickleRef a = pop(); push(tuple({a})); break; }
    case 0x86: { PickleRef b = pop(), a = pop(); push(tuple({a, b})); break; }
    case 0x87: { PickleRef c = pop(), b = pop(), a = pop(); push(tuple({a, b, c})); break; }
    case 't': push(tuple(pop_mark())); break;
    case ']': push(make(Kind::list)); break;
    case 'l': { PickleRef l = make(Kind::list); l->items = pop_mark(); push(l); break; }
    case 'a': { PickleRef v = pop(); top()->items.push_back(v); break; }
    case 'e': { auto items = pop_mark(); for (auto& v : items) top()->items.push_back(v); break; }
    case '}': push(make(Kind::dict)); break;
    case 'd': { PickleRef d = make(Kind::dict); set_items(*d, pop_mark()); push(d); break; }
    case 's': { PickleRef v = pop(), k = pop(); set_items(*top(), {k, v}); break; }
    case 'u': { auto items = pop_mark(); set_items(*top(), items); break; }
    case 0x8f: push(make_text(Kind::opaque, "builtins.set")); break;
    case 0x90: pop_mark(); break;  // ADDITEMS: set members are not needed
    case 0x91: pop_mark(); push(make_text(Kind::opaque, "builtins.frozenset")); break;
    case 'q': memo_[u8()] = top(); break;
    case 'r': memo_[le(4)] = top(); break;
    case 0x94: memo_[memo_.size()] = top(); break;
    case 'p': { const auto key = decimal<uint64_t>(line()); memo_[key] = top(); break; }
    case 'h': case 'j': case 'g': {
      const uint64_t key = op == 'h' ? u8() : op == 'j' ? le(4) : decimal<uint64_t>(line());
      const auto it = memo_.find(key);
      check(it != memo_.end(), "memo entry ", key, " is not set");
      push(it->second);
      break;
    }
    case 'c': { const std::string module = line(); push(make_text(Kind::global, module + "." + line())); break; }
    case 0x93: {
      PickleRef name = pop(), module = pop();
      check(module->kind == Kind::string && name->kind == Kind::string, "STACK_GLOBAL of values that are not strings");
      push(make_text(Kind::global, module->text + "." + name->text));
      break;
    }
    case 'R': { PickleRef args = pop(), callable = pop(); push(call(callable, args)); break; }
    case 0x81: { PickleRef args = pop(), cls = pop(); push(call(cls, args)); break; }
    case 0x92: { pop(); PickleRef args = pop(), cls = pop(); push(call(cls, args)); break; }
    case 'b': pop(); break;  // BUILD: object state (e.g. a state dict's _metadata) is not needed
    case 'Q': push(persistent(pop())); break;
    case '0': pop(); break;
    case '1': pop_mark(); break;
    case '2': push(top()); break;
    default: check(false, "unsupported pickle opcode");
  }
}

}  // namespace

PickleValue::~PickleValue() {
  // Children whose last owner is this value are emptied into a work list before they are released, so
  // a deeply nested value is destroyed in a loop instead of one recursive destructor call per level.
  std::vector<PickleRef> pending = std::move(items);
  for (auto& [key, value] : entries) {
    pending.push_back(std::move(key));
    pending.push_back(std::move(value));
  }
  entries.clear();
  while (!pending.empty()) {
    PickleRef value = std::move(pending.back());
    pending.pop_back();
    if (!value || value.use_count() != 1) continue;
    for (PickleRef& item : value->items) pending.push_back(std::move(item));
    for (auto& [key, item] : value->entries) {
      pending.push_back(std::move(key));
      pending.push_back(std::move(item));
    }
    value->items.clear();
    value->entries.clear();
  }
}

PickleRef unpickle(const std::string& program, const std::string& source, size_t max_values) {
  return Machine(program, source, max_values).run();
}

PickleRef dict_get(const PickleValue& dict, const std::string& key) {
  for (const auto& [k, v] : dict.entries)
    if (k->kind == Kind::string && k->text == key) return v;
  return nullptr;
}

}  // namespace zest
