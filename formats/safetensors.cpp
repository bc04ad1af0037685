// safetensors reading and writing: header validation, pread-based byte-range reads, a streaming writer
// and the atomic whole-file helpers (see safetensors.h).
#include "formats/safetensors.h"

#include "formats/json_field.h"
#include "core/check.h"
#include "core/compat.h"
#include "core/untrusted_file.h"
#include "formats/input_limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <tuple>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace zest::safetensors {

// safetensors stores little-endian data; zest copies bytes straight into tensors.
static_assert(std::endian::native == std::endian::little, "zest's safetensors I/O assumes little-endian");

namespace {

using Json = nlohmann::json;

struct DtypeEntry {
  const char* name;
  torch::Dtype dtype;
  size_t size;
};
constexpr DtypeEntry kDtypes[] = {
    {"F64", torch::kFloat64, 8}, {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kInt64, 8}, {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},       {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

std::string errno_text() { return std::strerror(errno); }

// Product of the dims with overflow and sign checks; `what` names the tensor in the message.
int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t numel = 1;
  for (const int64_t dim : shape) {
    ZEST_CHECK(dim >= 0, what, ": negative dimension ", dim, " in shape");
    ZEST_CHECK(!__builtin_mul_overflow(numel, dim, &numel), what, ": shape product overflows int64");
  }
  return numel;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Reads exactly `nbytes` at absolute `offset` (pread: no shared file position, so concurrent readers of
// one Reader are safe).
void pread_exact(int fd, void* dst, uint64_t nbytes, uint64_t offset, const std::string& what) {
  auto* out = static_cast<char*>(dst);
  while (nbytes > 0) {
    const ssize_t got = ::pread(fd, out, nbytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    ZEST_CHECK(got >= 0, what, ": read failed: ", errno_text());
    ZEST_CHECK(got > 0, what, ": unexpected end of file at byte ", offset);
    out += got;
    nbytes -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

// Removes what a failed writer created, and nothing that is not a regular file (a device or FIFO the
// caller named is never unlinked).
void remove_if_regular(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) std::remove(path.c_str());
}

void fwrite_exact(std::FILE* file, const void* src, size_t nbytes, const std::string& path) {
  if (nbytes == 0) return;
  ZEST_CHECK(std::fwrite(src, 1, nbytes, file) == nbytes, path, ": write failed: ", errno_text());
}

// Parses the header JSON; duplicate top-level names are an error (nlohmann would keep the last one).
Json parse_header_json(const std::string& text, const std::string& path) {
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    // {name: {"shape": [..]}} nests three levels; a deeper header is refused before it is built.
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) && depth >= 3)
      throw Error(str(path, ": safetensors header nests deeper than {name: {field: [values]}}"));
    if (depth == 1 && event == Json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, on_event);
  } catch (const Json::exception& e) {
    ZEST_FAIL(path, ": safetensors header is not valid JSON: ", printable(json_error_text(e), 300));
  }
  ZEST_CHECK(duplicate.empty(), path, ": safetensors header names tensor '", printable(duplicate), "' twice");
  ZEST_CHECK(header.is_object(), path, ": safetensors header must be a JSON object, got ", header.type_name());
  return header;
}

Metadata parse_metadata(const Json& entry, const std::string& path) {
  ZEST_CHECK(entry.is_object(), path, ": __metadata__ must be an object of strings");
  Metadata metadata;
  for (const auto& [key, value] : entry.items()) {
    ZEST_CHECK(value.is_string(), path, ": __metadata__.", printable(key), " must be a string, got ", value.type_name());
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

// One tensor entry: {"dtype": str, "shape": [uint...], "data_offsets": [begin, end]}, nothing else.
TensorInfo parse_entry(const std::string& name, const Json& entry, const std::string& path) {
  const std::string what = path + ": tensor '" + printable(name) + "'";
  ZEST_CHECK(entry.is_object(), what, ": entry must be an object, got ", entry.type_name());
  for (const auto& [key, value] : entry.items())
    ZEST_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", what, ": unexpected field '", printable(key),
               "' (expected dtype, shape, data_offsets)");
  ZEST_CHECK(entry.contains("dtype") && entry["dtype"].is_string(), what, ": missing string field 'dtype'");
  ZEST_CHECK(entry.contains("shape") && entry["shape"].is_array(), what, ": missing array field 'shape'");
  const Json& offsets = entry.contains("data_offsets") ? entry["data_offsets"] : Json();
  ZEST_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                 offsets[1].is_number_unsigned(),
             what, ": 'data_offsets' must be [begin, end] with non-negative integers");

  TensorInfo info;
  info.name = name;
  info.dtype = dtype_from_name(printable(entry["dtype"].get<std::string>(), 40), what);
  for (const Json& dim : entry["shape"]) {
    ZEST_CHECK(dim.is_number_unsigned(), what, ": shape entries must be non-negative integers, got ", printable(dim.dump(), 40));
    const auto value = dim.get<uint64_t>();
    ZEST_CHECK(value <= static_cast<uint64_t>(INT64_MAX), what, ": dimension ", value, " is too large");
    info.shape.push_back(static_cast<int64_t>(value));
  }
  info.data_begin = offsets[0].get<uint64_t>();
  info.data_end = offsets[1].get<uint64_t>();
  ZEST_CHECK(info.data_begin <= info.data_end, what, ": data_offsets [", info.data_begin, ", ", info.data_end,
             "] has end before begin");
  const auto numel = static_cast<uint64_t>(checked_numel(info.shape, what));
  uint64_t expected_bytes = 0;
  ZEST_CHECK(!__builtin_mul_overflow(numel, dtype_size(info.dtype), &expected_bytes), what,
             ": byte size overflows");
  ZEST_CHECK(expected_bytes == info.nbytes(), what, ": shape ", shape_text(info.shape), " of ",
             dtype_name(info.dtype), " needs ", expected_bytes, " bytes but data_offsets [", info.data_begin,
             ", ", info.data_end, "] span ", info.nbytes());
  return info;
}

// The data section must be covered exactly: sorted by offset, each tensor starts where the previous
// ended, and the last one ends at the end of the file (no holes, no overlap, no trailing bytes).
void check_layout(const std::vector<TensorInfo>& tensors, uint64_t data_bytes, const std::string& path) {
  uint64_t expected_begin = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : tensors) {
    ZEST_CHECK(t.data_end <= data_bytes, path, ": tensor '", printable(t.name), "' data_offsets [", t.data_begin, ", ",
               t.data_end, "] run past the end of the data section (", data_bytes,
               " bytes); the file is truncated or the header is wrong");
    ZEST_CHECK(t.data_begin >= expected_begin, path, ": tensor '", printable(t.name), "' data_offsets [", t.data_begin,
               ", ", t.data_end, "] overlap tensor '", previous ? printable(previous->name) : "", "' (ends at ",
               expected_begin, ")");
    ZEST_CHECK(t.data_begin == expected_begin, path, ": gap in the data section before tensor '", printable(t.name),
               "' (bytes ", expected_begin, "..", t.data_begin, " are not indexed)");
    expected_begin = t.data_end;
    previous = &t;
  }
  ZEST_CHECK(expected_begin == data_bytes, path, ": the data section has ", data_bytes,
             " bytes but the tensors cover ", expected_begin, " (trailing bytes after the last tensor)");
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// dtypes

int64_t TensorInfo::numel() const { return checked_numel(shape, "tensor '" + name + "'"); }

std::string dtype_name(torch::Dtype dtype) {
  for (const DtypeEntry& entry : kDtypes)
    if (entry.dtype == dtype) return entry.name;
  ZEST_FAIL("dtype ", dtype, " cannot be stored in safetensors (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 "
            "BOOL)");
}

torch::Dtype dtype_from_name(const std::string& name, const std::string& context) {
  for (const DtypeEntry& entry : kDtypes)
    if (name == entry.name) return entry.dtype;
  ZEST_FAIL(context, ": unknown dtype '", name, "' (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
}

size_t dtype_size(torch::Dtype dtype) {
  for (const DtypeEntry& entry : kDtypes)
    if (entry.dtype == dtype) return entry.size;
  ZEST_FAIL("dtype ", dtype, " cannot be stored in safetensors");
}

// ---------------------------------------------------------------------------------------------------
// Reader

Reader::Reader(std::string path) : path_(std::move(path)) {
  // Only a regular file: a FIFO would block the open forever, a device (a link to /dev/zero) never end.
  const int fd = open_regular_file(path_, "safetensors file");
  file_ = ::fdopen(fd, "rb");
  if (file_ == nullptr) ::close(fd);
  ZEST_CHECK(file_ != nullptr, path_, ": cannot open safetensors file: ", errno_text());
  // From here on a failure must close the file: the destructor does not run for a throwing constructor.
  try {
    const int fd = ::fileno(file_);
    struct stat st {};
    ZEST_CHECK(::fstat(fd, &st) == 0, path_, ": stat failed: ", errno_text());
    const auto file_bytes = static_cast<uint64_t>(st.st_size);
    file_bytes_ = file_bytes;
    ZEST_CHECK(file_bytes >= 8, path_, ": file has ", file_bytes,
               " bytes, too short for a safetensors header length (8 bytes)");

    uint64_t header_bytes = 0;
    pread_exact(fd, &header_bytes, 8, 0, path_);
    ZEST_CHECK(header_bytes <= kMaxSafetensorsHeaderBytes, path_, ": header length ", header_bytes,
               " is larger than the 100 MB limit (corrupt file or not safetensors)");
    ZEST_CHECK(header_bytes <= file_bytes - 8, path_, ": header length ", header_bytes,
               " exceeds the file size (", file_bytes, " bytes); the file is truncated or not safetensors");
    std::string text(header_bytes, '\0');
    pread_exact(fd, text.data(), header_bytes, 8, path_);
    data_start_ = 8 + header_bytes;

    const Json header = parse_header_json(text, path_);
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        metadata_ = parse_metadata(entry, path_);
      } else {
        tensors_.push_back(parse_entry(name, entry, path_));
      }
    }
    std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
      return std::tie(a.data_begin, a.data_end) < std::tie(b.data_begin, b.data_end);
    });
    check_layout(tensors_, file_bytes - data_start_, path_);
    for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  } catch (...) {
    std::fclose(file_);
    throw;
  }
}

Reader::~Reader() {
  if (file_) std::fclose(file_);
}

Reader::Reader(Reader&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, nullptr)),
      data_start_(other.data_start_),
      file_bytes_(other.file_bytes_),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

Reader& Reader::operator=(Reader&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
    data_start_ = other.data_start_;
    file_bytes_ = other.file_bytes_;
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

bool Reader::contains(const std::string& name) const { return index_.count(name) > 0; }

const TensorInfo& Reader::info(const std::string& name) const {
  const auto it = index_.find(name);
  ZEST_CHECK(it != index_.end(), path_, ": no tensor named '", printable(name), "' (the file has ", tensors_.size(),
             " tensors)");
  return tensors_[it->second];
}

torch::Tensor Reader::read(const std::string& name) const {
  const TensorInfo& t = info(name);
  torch::Tensor out = torch::empty(t.shape, torch::TensorOptions().dtype(t.dtype));
  read_bytes(name, 0, t.nbytes(), compat::mutable_data(out));
  return out;
}

torch::Tensor Reader::read_flat_range(const std::string& name, int64_t elem_offset, int64_t numel) const {
  const TensorInfo& t = info(name);
  const int64_t total = t.numel();
  ZEST_CHECK(elem_offset >= 0 && numel >= 0 && elem_offset <= total && numel <= total - elem_offset, path_,
             ": tensor '", name, "': element range [", elem_offset, ", ", elem_offset + numel,
             ") is outside its ", total, " elements");
  const uint64_t elem_bytes = dtype_size(t.dtype);
  torch::Tensor out = torch::empty({numel}, torch::TensorOptions().dtype(t.dtype));
  read_bytes(name, static_cast<uint64_t>(elem_offset) * elem_bytes, static_cast<uint64_t>(numel) * elem_bytes,
             compat::mutable_data(out));
  return out;
}

void Reader::read_bytes(const std::string& name, uint64_t byte_offset, uint64_t nbytes, void* dst) const {
  const TensorInfo& t = info(name);
  ZEST_CHECK(byte_offset <= t.nbytes() && nbytes <= t.nbytes() - byte_offset, path_, ": tensor '", name,
             "': byte range [", byte_offset, ", ", byte_offset + nbytes, ") is outside its ", t.nbytes(),
             " bytes");
  pread_exact(::fileno(file_), dst, nbytes, data_start_ + t.data_begin + byte_offset,
              path_ + ": tensor '" + name + "'");
}

void Reader::read_file_range(uint64_t offset, uint64_t nbytes, void* dst) const {
  ZEST_CHECK(offset <= file_bytes_ && nbytes <= file_bytes_ - offset, path_, ": byte range [", offset, ", ",
             offset + nbytes, ") is outside the file's ", file_bytes_, " bytes");
  pread_exact(::fileno(file_), dst, nbytes, offset, path_);
}

// ---------------------------------------------------------------------------------------------------
// Writer

Writer::Writer(std::string path, std::vector<TensorDecl> decls, const Metadata& metadata)
    : path_(std::move(path)), decls_(std::move(decls)) {
  // Names in declaration order (ordered_json), so the file lists tensors the way the caller wrote them.
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorDecl& decl : decls_) {
    const std::string what = path_ + ": tensor '" + decl.name + "'";
    ZEST_CHECK(decl.name != "__metadata__", path_, ": '__metadata__' is reserved and cannot name a tensor");
    ZEST_CHECK(names.insert(decl.name).second, path_, ": tensor '", decl.name, "' is declared twice");
    const uint64_t nbytes = static_cast<uint64_t>(checked_numel(decl.shape, what)) * dtype_size(decl.dtype);
    header[decl.name] = {{"dtype", dtype_name(decl.dtype)},
                         {"shape", decl.shape},
                         {"data_offsets", {offset, offset + nbytes}}};
    sizes_.push_back(nbytes);
    offset += nbytes;
  }
  std::string text = header.empty() ? std::string("{}") : header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  const uint64_t header_bytes = text.size();

  // Never through a symbolic link (a planted NAME.tmp link must not redirect the write), never into a
  // FIFO or device (O_NONBLOCK: opening a FIFO without a reader fails instead of blocking).
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  ZEST_CHECK(fd >= 0, path_, ": cannot create safetensors file: ",
             errno == ELOOP ? std::string("it is a symbolic link, and zest does not write through links")
                            : errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ZEST_FAIL(path_, ": cannot create safetensors file: it exists and is not a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) ::close(fd);
  ZEST_CHECK(file_ != nullptr, path_, ": cannot create safetensors file: ", errno_text());
  try {
    fwrite_exact(file_, &header_bytes, 8, path_);
    fwrite_exact(file_, text.data(), text.size(), path_);
  } catch (...) {  // the destructor does not run for a throwing constructor
    std::fclose(file_);
    remove_if_regular(path_);
    throw;
  }
}

Writer::~Writer() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  // An unfinished file is invalid; removing it keeps readers from ever seeing a half-written shard.
  if (!finished_) remove_if_regular(path_);
}

// A piece may span several tensors; each part is converted to the dtype of the tensor it lands in.
void Writer::append(const torch::Tensor& piece) {
  ZEST_CHECK(file_ != nullptr && !finished_, path_, ": append after finish()");
  const torch::Tensor flat = piece.detach().reshape({-1});
  int64_t consumed = 0;
  while (consumed < flat.numel()) {
    while (current_ < decls_.size() && sizes_[current_] == 0) ++current_;  // zero-byte tensors are complete
    ZEST_CHECK(current_ < decls_.size(), path_, ": ", flat.numel() - consumed,
               " elements appended past the last declared tensor");
    const TensorDecl& decl = decls_[current_];
    const uint64_t elem_bytes = dtype_size(decl.dtype);
    const auto remaining = static_cast<int64_t>((sizes_[current_] - written_in_current_) / elem_bytes);
    const int64_t take = std::min(remaining, flat.numel() - consumed);
    const torch::Tensor part =
        flat.slice(0, consumed, consumed + take).to(torch::kCPU, decl.dtype).contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(take) * elem_bytes;
    fwrite_exact(file_, compat::const_data(part), nbytes, path_ + ": tensor '" + decl.name + "'");
    consumed += take;
    written_in_current_ += nbytes;
    bytes_written_ += nbytes;
    if (written_in_current_ == sizes_[current_]) {
      written_in_current_ = 0;
      ++current_;
    }
  }
}

void Writer::write(const std::string& name, const torch::Tensor& tensor) {
  // Zero-byte tensors need no data, so writing them is optional.
  while (current_ < decls_.size() && sizes_[current_] == 0 && decls_[current_].name != name) ++current_;
  ZEST_CHECK(current_ < decls_.size(), path_, ": write('", name, "') after every declared tensor was written");
  const TensorDecl& decl = decls_[current_];
  ZEST_CHECK(decl.name == name && written_in_current_ == 0, path_, ": write('", name,
             "') out of order: the next tensor to write is '", decl.name, "'");
  const int64_t numel = checked_numel(decl.shape, path_ + ": tensor '" + name + "'");
  ZEST_CHECK(tensor.numel() == numel, path_, ": tensor '", name, "' declared with shape ", shape_text(decl.shape),
             " (", numel, " elements) but written with ", tensor.numel(), " elements");
  if (sizes_[current_] == 0) {
    ++current_;
    return;
  }
  append(tensor);
}

void Writer::finish() {
  ZEST_CHECK(file_ != nullptr && !finished_, path_, ": finish() called twice");
  while (current_ < decls_.size() && sizes_[current_] == 0) ++current_;
  ZEST_CHECK(current_ == decls_.size(), path_, ": finish() before all data was written: tensor '",
             current_ < decls_.size() ? decls_[current_].name : "", "' has ", written_in_current_, " of ",
             current_ < decls_.size() ? sizes_[current_] : 0, " bytes");
  ZEST_CHECK(std::fflush(file_) == 0, path_, ": flush failed: ", errno_text());
  ZEST_CHECK(::fsync(::fileno(file_)) == 0, path_, ": fsync failed: ", errno_text());
  const int rc = std::fclose(std::exchange(file_, nullptr));
  finished_ = true;
  ZEST_CHECK(rc == 0, path_, ": close failed: ", errno_text());
}

// ---------------------------------------------------------------------------------------------------
// whole-file helpers

void save_file(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  std::vector<TensorDecl> decls;
  decls.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors)
    decls.push_back({name, tensor.scalar_type(), tensor.sizes().vec()});
  const std::string tmp = path + ".tmp";
  {
    Writer writer(tmp, std::move(decls), metadata);
    for (const auto& [name, tensor] : tensors) writer.write(name, tensor);
    writer.finish();
  }
  ZEST_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path, ": ",
             errno_text());
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  fsync_dir(parent.empty() ? "." : parent.string());
}

NamedTensors load_file(const std::string& path) {
  const Reader reader(path);
  NamedTensors out;
  out.reserve(reader.tensors().size());
  for (const TensorInfo& t : reader.tensors()) out.emplace_back(t.name, reader.read(t.name));
  return out;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ZEST_CHECK(fd >= 0, dir, ": cannot open directory to fsync it: ", errno_text());
  const int rc = ::fsync(fd);
  const std::string error = rc == 0 ? "" : errno_text();
  ::close(fd);
  ZEST_CHECK(rc == 0, dir, ": fsync of directory failed: ", error);
}

}  // namespace zest::safetensors
