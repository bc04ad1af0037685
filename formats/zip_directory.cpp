// The zip central directory (see zip_directory.h): the end record is found in the file's last 64 KiB,
// zip64's end record is followed where a field is saturated, and every offset and length is checked
// against the file's size with overflow-safe arithmetic before it is used.
#include "formats/zip_directory.h"

#include "core/check.h"
#include "core/untrusted_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <sys/stat.h>

namespace zest {
namespace {

constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kEntrySignature = 0x02014b50;
constexpr size_t kEndBytes = 22;
constexpr size_t kMaxComment = 65535;
constexpr size_t kEntryBytes = 46;

uint64_t le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// The file's descriptor and size; reads that fall outside the file are refused by name.
class ZipFile {
 public:
  explicit ZipFile(const std::string& path)
      : path_(path), fd_(open_regular_file(path, "torch.save archive")) {
    struct stat st {};
    ZEST_CHECK(::fstat(fd_, &st) == 0, path_, ": cannot stat: ", std::strerror(errno));
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~ZipFile() { ::close(fd_); }
  ZipFile(const ZipFile&) = delete;
  ZipFile& operator=(const ZipFile&) = delete;

  uint64_t size() const { return size_; }
  std::string read(uint64_t offset, uint64_t bytes, const char* what) const {
    uint64_t end = 0;
    ZEST_CHECK(!__builtin_add_overflow(offset, bytes, &end) && end <= size_, path_, ": the zip ", what,
               " (", bytes, " bytes at offset ", offset, ") lies outside the file of ", size_, " bytes");
    std::string out(bytes, '\0');
    size_t done = 0;
    while (done < bytes) {
      const ssize_t got = ::pread(fd_, out.data() + done, bytes - done, static_cast<off_t>(offset + done));
      ZEST_CHECK(got > 0, path_, ": cannot read the zip ", what, ": ",
                 got == 0 ? "unexpected end of file" : std::strerror(errno));
      done += static_cast<size_t>(got);
    }
    return out;
  }

 private:
  std::string path_;
  int fd_;
  uint64_t size_ = 0;
};

struct Directory {
  uint64_t entries = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

Directory find_directory(const ZipFile& file, const std::string& path) {
  ZEST_CHECK(file.size() >= kEndBytes, path, ": not a zip archive (", file.size(), " bytes, no directory)");
  const uint64_t tail_bytes = std::min<uint64_t>(file.size(), kEndBytes + kMaxComment);
  const uint64_t tail_start = file.size() - tail_bytes;
  const std::string tail = file.read(tail_start, tail_bytes, "end of file");
  const auto* t = reinterpret_cast<const unsigned char*>(tail.data());
  for (size_t at = tail_bytes - kEndBytes + 1; at-- > 0;) {
    if (le(t + at, 4) != kEndSignature) continue;
    Directory d{le(t + at + 10, 2), le(t + at + 16, 4), le(t + at + 12, 4)};
    const bool zip64 = d.entries == 0xffff || d.offset == 0xffffffff || d.bytes == 0xffffffff;
    const uint64_t end_at = tail_start + at;
    if (zip64 && end_at >= 20) {
      const std::string loc = file.read(end_at - 20, 20, "zip64 locator");
      const auto* l = reinterpret_cast<const unsigned char*>(loc.data());
      ZEST_CHECK(le(l, 4) == kZip64LocatorSignature, path, ": a zip64 archive without its zip64 locator");
      const std::string end64 = file.read(le(l + 8, 8), 56, "zip64 end record");
      const auto* e = reinterpret_cast<const unsigned char*>(end64.data());
      ZEST_CHECK(le(e, 4) == kZip64EndSignature, path, ": the zip64 locator points at no zip64 end record");
      d = {le(e + 32, 8), le(e + 48, 8), le(e + 40, 8)};
    }
    return d;
  }
  ZEST_FAIL(path, ": not a zip archive (no end-of-directory record in its last ", tail_bytes, " bytes)");
}

// Zip64's extra field holds, in this order, the sizes and offset whose 32-bit fields are saturated.
void read_zip64_sizes(const std::string& extra, ZipRecord& r, uint64_t comp32, uint64_t size32) {
  const auto* x = reinterpret_cast<const unsigned char*>(extra.data());
  for (size_t at = 0; at + 4 <= extra.size();) {
    const uint64_t id = le(x + at, 2), len = le(x + at + 2, 2);
    if (at + 4 + len > extra.size()) return;
    if (id == 1) {
      size_t field = at + 4;
      if (size32 == 0xffffffff && field + 8 <= at + 4 + len) r.size = le(x + field, 8), field += 8;
      if (comp32 == 0xffffffff && field + 8 <= at + 4 + len) r.stored_bytes = le(x + field, 8);
      return;
    }
    at += 4 + len;
  }
}

}  // namespace

ZipDirectory read_zip_directory(const std::string& path) {
  const ZipFile file(path);
  const Directory d = find_directory(file, path);
  ZEST_CHECK(d.entries <= kMaxZipRecords, path, ": the zip directory lists ", d.entries, " records, more than the ",
             kMaxZipRecords, " zest accepts");
  const std::string table = file.read(d.offset, d.bytes, "directory");
  const auto* p = reinterpret_cast<const unsigned char*>(table.data());
  ZipDirectory dir;
  dir.file_bytes = file.size();
  size_t at = 0;
  for (uint64_t i = 0; i < d.entries; ++i) {
    ZEST_CHECK(at + kEntryBytes <= table.size() && le(p + at, 4) == kEntrySignature, path, ": zip directory entry ",
               i, " at byte ", d.offset + at, " is damaged");
    const uint64_t name_len = le(p + at + 28, 2), extra_len = le(p + at + 30, 2), comment_len = le(p + at + 32, 2);
    const size_t next = at + kEntryBytes + name_len + extra_len + comment_len;  // each at most 65535: no overflow
    ZEST_CHECK(next <= table.size(), path, ": zip directory entry ", i, " runs past the directory's end");
    ZipRecord r;
    r.method = static_cast<uint16_t>(le(p + at + 10, 2));
    const uint64_t comp32 = le(p + at + 20, 4), size32 = le(p + at + 24, 4);
    r.stored_bytes = comp32;
    r.size = size32;
    read_zip64_sizes(table.substr(at + kEntryBytes + name_len, extra_len), r, comp32, size32);
    std::string name = table.substr(at + kEntryBytes, name_len);
    const size_t slash = name.find('/');  // torch.save puts every record under one top folder
    dir.records[slash == std::string::npos ? name : name.substr(slash + 1)] = r;
    at = next;
  }
  return dir;
}

const ZipRecord& bounded_record(const ZipDirectory& dir, const std::string& name, uint64_t max_bytes,
                                const std::string& what) {
  const auto found = dir.records.find(name);
  ZEST_CHECK(found != dir.records.end(), what, ": the archive has no record ", printable(name));
  const ZipRecord& r = found->second;
  ZEST_CHECK(r.method == 0 || r.method == 8, what, ": record ", printable(name), " uses zip compression method ",
             r.method, "; torch.save archives store records (0) or deflate them (8)");
  ZEST_CHECK(r.size <= max_bytes, what, ": record ", printable(name), " states ", r.size, " bytes, more than the ",
             max_bytes, " it may hold");
  ZEST_CHECK(r.size <= dir.file_bytes, what, ": record ", printable(name), " states ", r.size,
             " bytes, more than the whole archive's ", dir.file_bytes, " (torch.save stores records uncompressed; "
             "a damaged or hostile archive)");
  return r;
}

}  // namespace zest
