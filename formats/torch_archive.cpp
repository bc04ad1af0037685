// torch.save zip archives (see torch_archive.h). The zip container is LibTorch's own
// PyTorchStreamReader/Writer (what torch.save and torch.load use); the pickle program is run by
// pickle_reader.cpp and, for writing, emitted here with the same opcodes torch.save uses for a tensor:
// _rebuild_tensor_v2(persistent storage, offset, size, stride, requires_grad, OrderedDict()).
#include "formats/torch_archive.h"

#include "core/check.h"
#include "core/interrupt.h"
#include "core/untrusted_file.h"
#include "formats/input_limits.h"

#include <caffe2/serialize/inline_container.h>

#include <unistd.h>

#include <cstring>
#include <limits>
#include <map>

namespace zest {
namespace {

// LibTorch's zip reader's message, its first line without the request to report it to PyTorch.
std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  const size_t plea = line.find(" (Could this error message be improved?");
  if (plea != std::string::npos) line.erase(plea);
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

// ---- pickle program writer (protocol 2) ----

class PickleWriter {
 public:
  PickleWriter() { out_ += "\x80\x02"; }
  void empty_dict() { out_ += '}'; }
  void mark() { out_ += '('; }
  void tuple() { out_ += 't'; }
  void empty_tuple() { out_ += ')'; }
  void set_item() { out_ += 's'; }
  void set_items() { out_ += 'u'; }
  void reduce() { out_ += 'R'; }
  void persistent_id() { out_ += 'Q'; }
  void boolean(bool v) { out_ += v ? '\x88' : '\x89'; }
  void stop() { out_ += '.'; }
  void global(const std::string& module, const std::string& name) { out_ += "c" + module + "\n" + name + "\n"; }
  void string(const std::string& s) {
    out_ += 'X';
    le(s.size(), 4);
    out_ += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      le(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      out_ += 'M';
      le(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      le(static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
    } else {
      out_ += '\x8a';  // LONG1: 8 bytes of two's complement
      out_ += '\x08';
      le(static_cast<uint64_t>(v), 8);
    }
  }
  void int_tuple(const std::vector<int64_t>& values) {
    if (values.empty()) return empty_tuple();
    mark();
    for (const int64_t v : values) integer(v);
    tuple();
  }
  const std::string& str() const { return out_; }

 private:
  void le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

std::string storage_class(torch::Dtype dtype) {
  static const std::map<torch::Dtype, std::string> kNames = {
      {torch::kFloat32, "FloatStorage"}, {torch::kFloat64, "DoubleStorage"}, {torch::kFloat16, "HalfStorage"},
      {torch::kBFloat16, "BFloat16Storage"}, {torch::kInt64, "LongStorage"}, {torch::kInt32, "IntStorage"},
      {torch::kInt16, "ShortStorage"}, {torch::kInt8, "CharStorage"}, {torch::kUInt8, "ByteStorage"},
      {torch::kBool, "BoolStorage"}};
  const auto it = kNames.find(dtype);
  ZEST_CHECK(it != kNames.end(), "torch.save archive: dtype ", dtype, " has no storage class");
  return it->second;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

// The view a pickled tensor describes must lie inside its storage, and the storage inside its record;
// every product and sum is overflow-checked, so a hostile size or stride gets this message, not LibTorch's.
void check_view(const PickledTensor& p, size_t record_bytes, const std::string& what) {
  const int64_t item = static_cast<int64_t>(c10::elementSize(p.dtype));
  int64_t storage_bytes = 0;
  ZEST_CHECK(p.storage_numel >= 0 && !__builtin_mul_overflow(p.storage_numel, item, &storage_bytes) &&
                 static_cast<uint64_t>(storage_bytes) <= record_bytes,
             what, ": its storage of ", p.storage_numel, " elements needs more than the record's ", record_bytes,
             " bytes");
  ZEST_CHECK(p.shape.size() == p.stride.size() && p.offset >= 0, what, ": a bad view (", p.shape.size(),
             " sizes, ", p.stride.size(), " strides, offset ", p.offset, ")");
  int64_t numel = 1, last = p.offset;  // the furthest element the view touches
  bool ok = true;
  for (size_t i = 0; i < p.shape.size() && ok; ++i) {
    ok = p.shape[i] >= 0 && p.stride[i] >= 0 && !__builtin_mul_overflow(numel, p.shape[i], &numel);
    int64_t reach = 0;
    if (ok && p.shape[i] > 0) ok = !__builtin_mul_overflow(p.shape[i] - 1, p.stride[i], &reach) &&
                                   !__builtin_add_overflow(last, reach, &last);
  }
  ZEST_CHECK(ok, what, ": a size or stride is negative or overflows");
  ZEST_CHECK(numel == 0 || last < p.storage_numel, what, ": the view (offset ", p.offset, ", last element ", last,
             ") reaches outside its storage of ", p.storage_numel, " elements");
}

}  // namespace

// ---- reading ----

TorchArchiveReader::TorchArchiveReader(std::string path) : path_(std::move(path)) {
  const int fd = open_regular_file(path_, "torch.save archive");  // never a FIFO or a device
  std::FILE* probe = ::fdopen(fd, "rb");
  if (probe == nullptr) ::close(fd);
  ZEST_CHECK(probe != nullptr, path_, ": cannot open: ", std::strerror(errno));
  char magic[2] = {0, 0};
  const size_t got = std::fread(magic, 1, 2, probe);
  std::fclose(probe);
  ZEST_CHECK(got == 2 && magic[0] == 'P' && magic[1] == 'K', path_,
             ": not a torch.save zip archive (a legacy torch.save file from PyTorch < 1.6? load it in Python and "
             "torch.save it again)");
  std::string program;
  try {
    zip_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path_);
    ZEST_CHECK(zip_->hasRecord("data.pkl"), path_, ": a zip file without data.pkl, not a torch.save archive");
    directory_ = read_zip_directory(path_);  // every record's size is checked before LibTorch allocates it
    if (zip_->hasRecord("byteorder")) {
      bounded_record(directory_, "byteorder", 16, path_);
      auto [data, size] = zip_->getRecord("byteorder");
      const std::string order(static_cast<const char*>(data.get()), size);
      ZEST_CHECK(order == "little", path_, ": a big-endian archive (byteorder '", printable(order, 20), "') is not supported");
    }
    bounded_record(directory_, "data.pkl", kMaxPickleProgramBytes, path_ + ": data.pkl");
    auto [data, size] = zip_->getRecord("data.pkl");
    ZEST_CHECK(size <= kMaxPickleProgramBytes, path_, ": data.pkl has ", size, " bytes, more than the ",
               kMaxPickleProgramBytes,
               " a state dict's description takes (corrupt or hostile file)");
    program.assign(static_cast<const char*>(data.get()), size);
  } catch (const c10::Error& e) {
    ZEST_FAIL(path_, ": cannot read the torch.save archive (the zip container is damaged or not torch.save's: ",
              printable(first_line(e.what_without_backtrace())), ")");
  } catch (const std::bad_alloc&) {  // a record whose stated size is absurd
    ZEST_FAIL(path_, ": cannot read the torch.save archive: data.pkl states a size that does not fit in memory");
  }
  root_ = unpickle(program, path_);
}

TorchArchiveReader::~TorchArchiveReader() = default;

std::vector<std::string> TorchArchiveReader::top_level_keys() const {
  std::vector<std::string> keys;
  if (root_->kind != PickleValue::Kind::dict) return keys;
  for (const auto& [key, value] : root_->entries)
    if (key->kind == PickleValue::Kind::string) keys.push_back(key->text);
  return keys;
}

std::vector<ArchiveTensor> TorchArchiveReader::state_dict(const std::string& key) const {
  std::string present;
  for (const std::string& k : top_level_keys()) present += (present.empty() ? "" : ", ") + printable(k, 80);
  ZEST_CHECK(root_->kind == PickleValue::Kind::dict, path_, ": the archive holds a ",
             root_->kind == PickleValue::Kind::opaque ? printable(root_->text, 80) : "non-dict value", ", not a dict with '", key, "'");
  const PickleRef dict = dict_get(*root_, key);
  ZEST_CHECK(dict != nullptr, path_, ": no '", key, "' in the archive (top-level keys: ", present, ")");
  ZEST_CHECK(dict->kind == PickleValue::Kind::dict, path_, ": '", key, "' is not a dict of tensors");
  std::vector<ArchiveTensor> tensors;
  for (const auto& [name, value] : dict->entries) {
    if (name->kind == PickleValue::Kind::string && value->kind == PickleValue::Kind::tensor)
      tensors.push_back({name->text, value->tensor});
  }
  return tensors;
}

torch::Tensor TorchArchiveReader::read(const ArchiveTensor& t) const {
  const PickledTensor& p = t.tensor;
  const auto options = torch::TensorOptions().dtype(p.dtype);
  const std::string what = path_ + ": tensor '" + printable(t.name) + "'";
  if (p.storage_numel == 0) {
    check_view(p, 0, what);  // an empty storage holds only empty views
    return torch::empty(p.shape, options);
  }
  const std::string record = "data/" + p.storage_key;
  std::shared_ptr<at::DataPtr> owner;
  size_t size = 0;
  bounded_record(directory_, record, std::numeric_limits<uint64_t>::max(), what);
  try {
    auto [data, bytes] = zip_->getRecord(record);
    owner = std::make_shared<at::DataPtr>(std::move(data));
    size = bytes;
  } catch (const c10::Error& e) {
    ZEST_FAIL(what, ": cannot read record ", printable(record), ": ", printable(first_line(e.what_without_backtrace())));
  } catch (const std::bad_alloc&) {
    ZEST_FAIL(what, ": record ", printable(record), " states a size that does not fit in memory");
  }
  check_view(p, size, what + " (record " + printable(record) + ")");
  // The tensor views the record's buffer, which lives as long as the tensor does.
  const torch::Tensor storage = torch::from_blob(owner->get(), {p.storage_numel}, [owner](void*) {}, options);
  return storage.as_strided(p.shape, p.stride, p.offset);
}

// ---- writing ----

TorchArchiveWriter::TorchArchiveWriter(std::string path) : path_(std::move(path)) {
  const std::string tmp = path_ + ".tmp";
  file_ = std::fopen(tmp.c_str(), "wb");
  ZEST_CHECK(file_ != nullptr, tmp, ": cannot create: ", std::strerror(errno));
  // The writer-function form names the archive folder "archive", as torch.save does for a stream.
  // Short writes are how the zip writer learns of an error (it then throws c10::Error); an abandoned
  // archive's remaining bytes are discarded.
  zip_ = std::make_unique<caffe2::serialize::PyTorchStreamWriter>([this](const void* data, size_t size) {
    return discard_ ? size : std::fwrite(data, 1, size, file_);
  });
}

TorchArchiveWriter::~TorchArchiveWriter() {
  if (finished_) return;
  discard_ = true;  // the zip writer finalises itself on destruction: into nothing
  try {
    if (zip_ && !zip_->finalized()) zip_->writeEndOfFile();
    zip_.reset();
  } catch (...) {
    // After a failed write LibTorch's writer may throw again from its destructor (std::terminate): it is
    // left undestroyed on this error path.
    static_cast<void>(zip_.release());
  }
  if (file_) std::fclose(file_);
  std::remove((path_ + ".tmp").c_str());
}

template <typename Fn>
void TorchArchiveWriter::zip_call(const std::string& what, Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    ZEST_FAIL(path_, ".tmp: writing ", what, " failed (", std::strerror(errno), "): ",
              first_line(e.what_without_backtrace()));
  }
}

void TorchArchiveWriter::add(const std::string& name, const torch::Tensor& tensor) {
  ZEST_CHECK(!finished_, path_, ": tensor '", name, "' added after finish()");
  throw_if_interrupted("writing " + path_);  // the destructor removes the .tmp file
  const torch::Tensor data = tensor.detach().to(torch::kCPU).contiguous();
  Entry entry{name, std::to_string(entries_.size()), data.scalar_type(), data.sizes().vec()};
  storage_class(entry.dtype);  // refuses dtypes torch.load could not name
  zip_call("tensor '" + name + "'", [&] {
    zip_->writeRecord("data/" + entry.storage_key, data.data_ptr(), data.numel() * data.element_size());
  });
  entries_.push_back(std::move(entry));
}

void TorchArchiveWriter::finish(const std::string& key) {
  throw_if_interrupted("writing " + path_);
  PickleWriter p;
  p.empty_dict();
  p.string(key);
  p.empty_dict();
  if (!entries_.empty()) p.mark();
  for (const Entry& e : entries_) {
    p.string(e.name);
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.mark();
    p.mark();  // the persistent id: ('storage', torch.<Type>Storage, key, 'cpu', numel)
    p.string("storage");
    p.global("torch", storage_class(e.dtype));
    p.string(e.storage_key);
    p.string("cpu");
    p.integer(numel_of(e.shape));
    p.tuple();
    p.persistent_id();
    p.integer(0);  // storage offset
    p.int_tuple(e.shape);
    p.int_tuple(contiguous_strides(e.shape));
    p.boolean(false);  // requires_grad
    p.global("collections", "OrderedDict");  // backward hooks: OrderedDict()
    p.empty_tuple();
    p.reduce();
    p.tuple();
    p.reduce();
  }
  if (!entries_.empty()) p.set_items();
  p.set_item();
  p.stop();
  zip_call("data.pkl", [&] {
    zip_->writeRecord("data.pkl", p.str().data(), p.str().size());
    zip_->writeRecord("byteorder", "little", 6);
    zip_->writeEndOfFile();
  });
  zip_.reset();
  ZEST_CHECK(std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0, path_, ".tmp: flush failed: ",
             std::strerror(errno));
  std::fclose(file_);
  file_ = nullptr;
  ZEST_CHECK(std::rename((path_ + ".tmp").c_str(), path_.c_str()) == 0, "cannot rename ", path_, ".tmp: ",
             std::strerror(errno));
  finished_ = true;
}

}  // namespace zest
