// xxHash64 checksums of checkpoint files (manifest "files" entries) and of configuration text, with
// their 16-digit hex spelling.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zest::checkpoint {

// xxh64 (seed 0) of a whole file, read in fixed 8 MiB pieces; errors name the file.
uint64_t xxh64_file(const std::string& path);
uint64_t xxh64_bytes(const void* data, size_t nbytes);
inline uint64_t xxh64_string(const std::string& text) { return xxh64_bytes(text.data(), text.size()); }

// xxh64 (seed 0) of bytes fed in pieces: update() in file order, then digest() equals xxh64 of the whole.
class Xxh64Stream {
 public:
  Xxh64Stream();
  ~Xxh64Stream();
  Xxh64Stream(Xxh64Stream&&) noexcept;
  Xxh64Stream& operator=(Xxh64Stream&&) noexcept;

  void update(const void* data, size_t nbytes);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string to_hex(uint64_t value);  // 16 lowercase hex digits
// Parses to_hex's spelling; `what` names the field in the error.
uint64_t from_hex(const std::string& text, const std::string& what);

}  // namespace zest::checkpoint
