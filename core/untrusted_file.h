// Files that come from strangers (datasets, downloaded weights, their configs): a path one file names is
// confined to that file's folder, only regular files are opened (a FIFO or a device would block or never
// end), text is read with a size limit, and names from files are printed escaped. (JSON text is parsed
// with its nesting limit by formats/json_text.h; every format's limits are in formats/input_limits.h.)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zest {

// Where a path came from, for messages: `listing` is the file that names it (e.g. "ds/dataset.json"),
// `field` the entry in it (e.g. "shards[3].file").
struct PathEntry {
  std::string listing;
  std::string field;
};

// `folder`/`name` for a `name` read from inside a file of `folder`, refusing (with one message naming
// the listing, the field and the name) an empty or absolute name, one that leaves the folder with "..",
// one whose symbolic links lead outside the folder, and anything that exists but is not a regular file.
// With `must_exist`, a missing file is refused too. The result is lexically normal ("./a" → "DIR/a").
std::string confined_path(const std::string& folder, const std::string& name, const PathEntry& entry,
                          bool must_exist = true);

// The lexically normal spelling of a relative name ("./shard-0" and "shard-0" are the same file).
std::string normal_name(const std::string& name);

// Throws zest::Error unless `path` exists and is (or links to) a regular file: a FIFO, a device, a
// folder or a socket is named as such ("a character device, via a symbolic link to /dev/zero").
// `what` says what the file is for, e.g. "pretrained weights".
void require_regular_file(const std::string& path, const std::string& what);

// "a FIFO", "a character device", "a folder", ... for what `path` is (following links); "" for a
// regular file, "nothing" when it does not exist.
std::string file_kind(const std::string& path);

// Opens `path` read-only without ever blocking (O_NONBLOCK, cleared after the check) and refuses what is
// not a regular file. Returns the descriptor (the caller closes it).
int open_regular_file(const std::string& path, const std::string& what);

// The whole of a regular text file of at most `max_bytes` (errors name the file and the limit).
std::string read_text_file(const std::string& path, const std::string& what, uint64_t max_bytes = 64ull << 20);

// `text` made safe for a terminal: control bytes (escape sequences included), backslashes and invalid
// bytes become \xNN, and at most `max_chars` characters are kept (then "... (N characters left out)").
std::string printable(std::string_view text, size_t max_chars = 200);

}  // namespace zest
