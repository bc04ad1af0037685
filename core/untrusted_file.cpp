// Confinement, regular-file checks, bounded text reads, escaped names (see untrusted_file.h).
#include "core/untrusted_file.h"

#include "core/check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace zest {
namespace {

namespace fs = std::filesystem;

const char* type_phrase(fs::file_type type) {
  switch (type) {
    case fs::file_type::regular: return "";
    case fs::file_type::directory: return "a folder";
    case fs::file_type::block: return "a block device";
    case fs::file_type::character: return "a character device";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::not_found: return "nothing";
    default: return "not a regular file";
  }
}

const char* mode_phrase(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Absolute, with "..", "." and the symbolic links of the part that exists resolved.
fs::path resolved(const fs::path& path) {
  std::error_code ec;
  fs::path out = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) out = fs::absolute(path, ec).lexically_normal();
  return out;
}

bool is_within(const fs::path& inner, const fs::path& outer) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

// " (a symbolic link to TARGET)" when `path` is one, else "".
std::string link_note(const std::string& path) {
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) return "";
  const fs::path target = fs::read_symlink(path, ec);
  return ec ? " (a symbolic link)" : " (a symbolic link to " + printable(target.string()) + ")";
}

}  // namespace

std::string normal_name(const std::string& name) { return fs::path(name).lexically_normal().string(); }

std::string file_kind(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  return type_phrase(status.type());
}

std::string confined_path(const std::string& folder, const std::string& name, const PathEntry& entry,
                          bool must_exist) {
  const std::string where = str(entry.listing, ": ", entry.field, " = \"", printable(name), "\"");
  const std::string within = printable(folder.empty() ? "." : folder);
  ZEST_CHECK(!name.empty(), where, ": an empty file name");
  ZEST_CHECK(name.find('\0') == std::string::npos, where, ": a file name with a NUL byte");
  const fs::path given(name);
  ZEST_CHECK(!given.has_root_directory() && !given.has_root_name(), where,
             ": an absolute path; a file listed here must lie inside ", within, " (give it relative to that folder)");
  const fs::path normal = given.lexically_normal();
  ZEST_CHECK(normal.empty() || *normal.begin() != "..", where, ": leaves the folder ", within,
             " (\"..\"); a file listed here must lie inside it");
  ZEST_CHECK(!normal.empty() && normal != ".", where, ": names the folder itself, not a file in it");
  const fs::path path = fs::path(folder.empty() ? "." : folder) / normal;
  ZEST_CHECK(is_within(resolved(path), resolved(folder.empty() ? "." : folder)), where, ": resolves to ",
             printable(resolved(path).string()), ", outside the folder ", within,
             " (through a symbolic link); a file listed here must lie inside it");
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    ZEST_CHECK(!must_exist, where, ": ", printable(path.string()), " does not exist", link_note(path.string()));
    return path.string();
  }
  ZEST_CHECK(fs::is_regular_file(status), where, ": ", printable(path.string()), " is ", type_phrase(status.type()),
             link_note(path.string()), ", not a regular file");
  return path.string();
}

void require_regular_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::is_regular_file(status)) return;
  if (!fs::exists(status)) {
    ZEST_CHECK(!fs::is_symlink(fs::symlink_status(path, ec)), printable(path), ": cannot open ", what,
               link_note(path), ": the link's target does not exist");
    ZEST_FAIL(printable(path), ": cannot open ", what, ": no such file");
  }
  ZEST_FAIL(printable(path), ": cannot open ", what, ": it is ", type_phrase(status.type()), link_note(path),
            ", not a regular file (zest reads files only: a pipe or a device would block or never end)");
}

int open_regular_file(const std::string& path, const std::string& what) {
  require_regular_file(path, what);  // before open(): opening some devices has effects of its own
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ZEST_CHECK(fd >= 0, printable(path), ": cannot open ", what, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // replaced between the check and the open
    ::close(fd);
    ZEST_FAIL(printable(path), ": cannot open ", what, ": it is ", mode_phrase(st.st_mode), ", not a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string read_text_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const int fd = open_regular_file(path, what);
  struct stat st {};
  ::fstat(fd, &st);
  const auto bytes = static_cast<uint64_t>(st.st_size);
  if (bytes > max_bytes) {
    ::close(fd);
    ZEST_FAIL(printable(path), ": ", bytes, " bytes, more than the ", max_bytes, " a ", what,
              " may have (the file is not one, or is corrupt)");
  }
  std::string text(bytes, '\0');
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::read(fd, text.data() + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int error = errno;
  ::close(fd);
  ZEST_CHECK(done == bytes, printable(path), ": cannot read ", what, ": ",
             done < bytes && error ? std::strerror(error) : "the file shrank while being read");
  return text;
}

namespace {

// UTF-8 characters in `text`: every byte that does not continue a sequence starts one.
size_t characters_in(std::string_view text) {
  size_t count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return count;
}

}  // namespace

std::string printable(std::string_view text, size_t max_chars) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  size_t chars = 0;
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (size_t i = 0; i < text.size(); ++chars) {
    if (chars == max_chars) return out + "... (" + std::to_string(characters_in(text.substr(i))) + " characters left out)";
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f || c == '\\') escape(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // UTF-8: a well-formed sequence is kept, except C1 controls (U+0080..U+009F, e.g. CSI); a bad byte is escaped.
    const size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    bool ok = len > 0 && i + len <= text.size() && c >= 0xc2 && c <= 0xf4;
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (ok && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0) ok = false;
    if (!ok) {
      escape(c);
      ++i;
      continue;
    }
    out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace zest
