// A whole file's bytes as a string ("" when it cannot be read).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace zest::testing {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace zest::testing
