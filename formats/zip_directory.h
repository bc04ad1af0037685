// The central directory of a zip file (the table of contents at its end), read by zest with explicit
// limits before LibTorch's zip reader allocates a record: a record's stated size is what that reader
// allocates, so an archive that states more bytes than it holds is refused here, by name.
#pragma once

#include "formats/input_limits.h"

#include <cstdint>
#include <map>
#include <string>

namespace zest {

struct ZipRecord {
  uint16_t method = 0;          // 0: stored, 8: deflated
  uint64_t stored_bytes = 0;    // bytes in the file (compressed size)
  uint64_t size = 0;            // bytes once read (uncompressed size): what a reader allocates
};

struct ZipDirectory {
  uint64_t file_bytes = 0;
  std::map<std::string, ZipRecord> records;  // by name without the archive's top folder ("data.pkl", "data/0")
};

// Reads the directory of the zip file `path` (zip64 included). Errors name the file and what is wrong
// (no directory, a directory outside the file, too many entries, a name or size that overflows).
ZipDirectory read_zip_directory(const std::string& path);

// The record `name` of `dir`, refused unless it states at most `max_bytes` and at most the archive's own
// size (torch.save stores records uncompressed: a record larger than its file is a damaged or hostile
// archive, e.g. a deflate bomb). `what` names the reader for messages.
const ZipRecord& bounded_record(const ZipDirectory& dir, const std::string& name, uint64_t max_bytes,
                                const std::string& what);

}  // namespace zest
