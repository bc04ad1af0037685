// Output path checks for merged model files (see output_path.h).
#include "checkpoint/output_path.h"

#include "checkpoint/directory.h"
#include "core/check.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace zest::checkpoint {
namespace fs = std::filesystem;
namespace {

const char* kind_of(fs::file_type type) {
  switch (type) {
    case fs::file_type::directory: return "a folder";
    case fs::file_type::symlink: return "a symbolic link";
    case fs::file_type::block: return "a block device";
    case fs::file_type::character: return "a character device";
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

// Absolute, with "..", "." and every symbolic link of the existing part resolved.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path out = fs::weakly_canonical(fs::absolute(path), ec);
  if (ec) out = fs::absolute(path).lexically_normal();
  return out;
}

}  // namespace

void check_output_target(const std::string& path) {
  ZEST_CHECK(!path.empty(), "merge: no output path given");
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(path, ec);
  if (!fs::exists(status) || fs::is_regular_file(status)) return;
  ZEST_FAIL(path, ": the merge output would replace ", kind_of(status.type()),
            "; give the path of a new or existing regular file (e.g. DIR/model.safetensors)");
}

void check_output_outside(const std::string& out_path, const std::string& folder) {
  ZEST_CHECK(!out_path.empty(), "merge: no output path given");
  const fs::path out = resolved(out_path);
  const fs::path inside = resolved(folder);
  const auto [end, _] = std::mismatch(inside.begin(), inside.end(), out.begin(), out.end());
  // Trailing empty components (a folder path ending in '/') do not count.
  const bool within = std::all_of(end, inside.end(), [](const fs::path& part) { return part.empty(); });
  ZEST_CHECK(!within, out_path, ": is inside the checkpoint folder ", folder,
             " (resolved: ", out.string(), "); the merge must not write into the checkpoint it reads. Choose an "
             "output outside it");
}

void create_output_folder(const std::string& out_path) {
  const fs::path parent = fs::path(out_path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  ZEST_CHECK(!ec, parent.string(), ": cannot create the output folder: ", ec.message());
}

void write_output_file(const std::string& path, const std::string& bytes) {
  check_output_target(path);
  create_output_folder(path);
  const std::string tmp = path + ".tmp";
  try {
    write_file_synced(tmp, bytes);
  } catch (...) {
    fs::remove(tmp);
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    fs::remove(tmp);
    ZEST_FAIL("cannot write ", path, ": ", reason);
  }
}

}  // namespace zest::checkpoint
