// docs/design.md's "The gradient walk" against the code: the walk from the gradient accumulator's hook to
// the optimizer's shard stays within kMostWalkFiles files (issue 39), each file the table names exists and
// starts with the comment saying what it owns, and each name in a row is in that row's file — a
// `Class::member` at its definition — so moving or adding a hop without updating the table fails here.
#include "common/read_text.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace zest::testing {
namespace {

constexpr size_t kMostWalkFiles = 4;

struct WalkStop {
  std::string file;                // relative to the repository
  std::vector<std::string> names;  // the table's last column
};

std::string source_path(const std::string& relative) { return std::string(ZEST_SOURCE_DIR) + "/" + relative; }

// The lines after `heading` up to the next heading of its level or above (a "## " line ends a "### " section).
std::string section_under(const std::string& text, const std::string& heading) {
  const size_t level = heading.find(' ');  // how many '#' it starts with
  std::stringstream in(text);
  std::string line, section;
  bool is_inside = false;
  while (std::getline(in, line)) {
    if (!is_inside) {
      is_inside = line == heading;
      continue;
    }
    const size_t hashes = line.find_first_not_of('#');
    if (hashes > 0 && hashes <= level && line[hashes] == ' ') break;
    section += line + "\n";
  }
  return section;
}

// The `backticked` pieces of a table cell, in order.
std::vector<std::string> backticked(const std::string& cell) {
  std::vector<std::string> pieces;
  const std::regex code("`([^`]+)`");
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), code); it != std::sregex_iterator(); ++it) {
    pieces.push_back((*it)[1].str());
  }
  return pieces;
}

std::vector<std::string> cells_of(const std::string& row) {
  std::vector<std::string> cells;
  std::stringstream in(row);
  std::string cell;
  std::getline(in, cell, '|');  // before the first bar
  while (std::getline(in, cell, '|')) cells.push_back(cell);
  if (!cells.empty() && cells.back().find_first_not_of(" \t\r") == std::string::npos) cells.pop_back();
  return cells;
}

// The table's rows past its header and separator: | stop | file | what happens there | names |.
std::vector<WalkStop> walk_stops(const std::string& section) {
  std::vector<WalkStop> stops;
  std::stringstream in(section);
  std::string line;
  int table_line = 0;
  while (std::getline(in, line)) {
    if (line.rfind("|", 0) != 0) continue;
    if (++table_line <= 2) continue;  // the header and the | --- | line
    const std::vector<std::string> cells = cells_of(line);
    if (cells.size() != 4) {
      ADD_FAILURE() << "a row of the gradient walk without its 4 cells: " << line;
      continue;
    }
    const std::vector<std::string> file = backticked(cells[1]);
    EXPECT_EQ(file.size(), 1u) << "the file cell names one `file`: " << line;
    stops.push_back({file.empty() ? "" : file.front(), backticked(cells[3])});
  }
  return stops;
}

std::vector<WalkStop> documented_walk() {
  const std::string design = read_text(source_path("docs/design.md"));
  const std::string section = section_under(design, "### The gradient walk");
  EXPECT_FALSE(section.empty()) << "docs/design.md has no \"### The gradient walk\" section";
  return walk_stops(section);
}

// Where `name` is written in `source`: a `Class::member` only where it is defined (its out-of-class
// definition "Class::member(", or "class Class::member" / "struct Class::member"); any other name anywhere.
bool holds_name(const std::string& source, const std::string& name) {
  const bool is_qualified = std::regex_match(name, std::regex(R"(\w+(::\w+)+)"));
  if (!is_qualified) return source.find(name) != std::string::npos;
  for (const std::string& form : {name + "(", "class " + name, "struct " + name}) {
    if (source.find(form) != std::string::npos) return true;
  }
  return false;
}

TEST(GradientWalkDoc, StaysWithinFourFiles) {
  const std::vector<WalkStop> stops = documented_walk();
  ASSERT_FALSE(stops.empty()) << "the gradient walk's table has no rows";
  std::set<std::string> files;
  for (const WalkStop& stop : stops) files.insert(stop.file);
  EXPECT_EQ(files.size(), stops.size()) << "a file appears in two rows of the gradient walk";
  EXPECT_LE(files.size(), kMostWalkFiles) << "the gradient walk crosses " << files.size()
                                          << " files; issue 39 keeps it within " << kMostWalkFiles;
}

TEST(GradientWalkDoc, EveryFileExistsAndSaysWhatItOwns) {
  for (const WalkStop& stop : documented_walk()) {
    const std::string source = read_text(source_path(stop.file));
    ASSERT_FALSE(source.empty()) << stop.file << " (docs/design.md, the gradient walk) is missing or empty";
    EXPECT_EQ(source.rfind("// ", 0), 0u) << stop.file << " does not start with the comment saying what it owns";
  }
}

TEST(GradientWalkDoc, EveryNameIsWhereTheDocSays) {
  for (const WalkStop& stop : documented_walk()) {
    const std::string source = read_text(source_path(stop.file));
    EXPECT_FALSE(stop.names.empty()) << stop.file << ": the gradient walk lists no names to search for";
    for (const std::string& name : stop.names) {
      EXPECT_TRUE(holds_name(source, name))
          << "docs/design.md's gradient walk says " << name << " is in " << stop.file
          << ", but it is not (moved? update the table, and keep the walk within " << kMostWalkFiles << " files)";
    }
  }
}

}  // namespace
}  // namespace zest::testing
