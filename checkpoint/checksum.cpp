// xxHash64 over files and byte ranges (header-only xxhash, inlined into this TU only).
#include "checkpoint/checksum.h"

#include "core/check.h"
#include "core/untrusted_file.h"

#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace zest::checkpoint {

uint64_t xxh64_file(const std::string& path) {
  // A regular file only: a FIFO planted under a rank file's name would block the hash forever.
  const int fd = open_regular_file(path, "file to checksum");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(::fdopen(fd, "rb"), &std::fclose);
  if (file == nullptr) ::close(fd);
  ZEST_CHECK(file != nullptr, path, ": cannot open to compute its checksum: ", std::strerror(errno));
  Xxh64Stream hash;
  std::vector<char> buffer(8 << 20);  // fixed: hashing never holds more than this of the file
  while (true) {
    const size_t got = std::fread(buffer.data(), 1, buffer.size(), file.get());
    hash.update(buffer.data(), got);
    if (got < buffer.size()) break;
  }
  ZEST_CHECK(!std::ferror(file.get()), path, ": read failed while computing its checksum");
  return hash.digest();
}

struct Xxh64Stream::State {
  XXH64_state_t xxh;
};

Xxh64Stream::Xxh64Stream() : state_(std::make_unique<State>()) { XXH64_reset(&state_->xxh, 0); }
Xxh64Stream::~Xxh64Stream() = default;
Xxh64Stream::Xxh64Stream(Xxh64Stream&&) noexcept = default;
Xxh64Stream& Xxh64Stream::operator=(Xxh64Stream&&) noexcept = default;

void Xxh64Stream::update(const void* data, size_t nbytes) { XXH64_update(&state_->xxh, data, nbytes); }
uint64_t Xxh64Stream::digest() const { return XXH64_digest(&state_->xxh); }

uint64_t xxh64_bytes(const void* data, size_t nbytes) { return XXH64(data, nbytes, 0); }

std::string to_hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

uint64_t from_hex(const std::string& text, const std::string& what) {
  ZEST_CHECK(text.size() == 16 && text.find_first_not_of("0123456789abcdef") == std::string::npos, what,
             ": expected 16 lowercase hex digits, got '", text, "'");
  return std::stoull(text, nullptr, 16);
}

}  // namespace zest::checkpoint
