// The README's code blocks as the tests that run them read them: README.md's text, and the first fenced block
// of a language under a heading (before the next heading of the same or a higher level).
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace zest::testing {

inline std::string readme_markdown() {
  std::ifstream in(std::filesystem::path(ZEST_SOURCE_DIR) / "README.md");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The body of the first ```<language> block after the line `heading` (e.g. "### LoRA: ..."), with its final
// newline; "" when the heading is missing or its section (up to the next heading of its level or above, outside
// code blocks: a shell comment is no heading) has no such block.
inline std::string fenced_block_under(const std::string& markdown, const std::string& heading,
                                      const std::string& language) {
  const size_t level = heading.find_first_not_of('#');
  std::istringstream lines(markdown);
  std::string line, body;
  bool in_section = false, in_fence = false, in_wanted = false;
  while (std::getline(lines, line)) {
    if (!in_section) {
      in_section = line == heading;
      continue;
    }
    if (line.rfind("```", 0) == 0) {
      if (in_wanted) return body;
      in_fence = !in_fence;
      in_wanted = in_fence && line == "```" + language;
      continue;
    }
    if (in_wanted) {
      body += line + "\n";
      continue;
    }
    if (!in_fence && !line.empty() && line[0] == '#') {
      const size_t hashes = line.find_first_not_of('#');
      if (hashes != std::string::npos && hashes <= level && line[hashes] == ' ') return "";
    }
  }
  return "";
}

}  // namespace zest::testing
