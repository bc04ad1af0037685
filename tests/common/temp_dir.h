// TempDir: a fresh folder under the system temp directory for one test, removed with everything in it
// when the test ends. Shared by every test suite.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace zest::testing {

class TempDir {
 public:
  // `tag` names the suite in the folder name, so leftovers are easy to attribute.
  explicit TempDir(const std::string& tag = "test") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("zest_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path() const { return path_.string(); }
  // A path inside the folder (file or sub-folder; nothing is created).
  std::string sub(const std::string& name) const { return (path_ / name).string(); }
  std::string file(const std::string& name) const { return sub(name); }

 private:
  std::filesystem::path path_;
};

}  // namespace zest::testing
