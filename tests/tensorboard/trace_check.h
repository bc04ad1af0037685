// Checks of a Chrome-trace JSON file for the tests: the fields every complete event needs (as Perfetto
// and TensorBoard's profile plugin read them) and proper nesting of the events on each (pid, tid) lane.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace zest::testing {

inline nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);  // throws on invalid JSON
}

// The *.pt.trace.json files of a folder, named as torch.profiler's tensorboard_trace_handler names them.
inline std::vector<std::string> trace_files(const std::string& dir) {
  static const std::regex kName(R"(^(.+)_(\d+)\.(\d+)\.pt\.trace\.json$)");
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".pt.trace.json") == std::string::npos) continue;
    EXPECT_TRUE(std::regex_match(name, kName)) << name;
    files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Every event has a name; complete ones a category, numeric ts/dur >= 0, pid and tid; on each lane two
// events either nest or do not overlap (1 ns of rounding allowed). Returns the complete events' names.
inline std::vector<std::string> check_trace_events(const nlohmann::json& trace) {
  std::vector<std::string> names;
  EXPECT_EQ(trace.at("schemaVersion"), 1);
  struct Span {
    double start, end;
    std::string name;
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<Span>> lanes;
  for (const auto& e : trace.at("traceEvents")) {
    EXPECT_TRUE(e.contains("name") && e["name"].is_string()) << e.dump();
    if (e.at("ph") != "X") continue;
    EXPECT_TRUE(e.contains("cat") && e["cat"].is_string()) << e.dump();
    EXPECT_TRUE(e.at("ts").is_number() && e.at("dur").is_number()) << e.dump();
    EXPECT_GE(e.at("dur").get<double>(), 0.0) << e.dump();
    const double ts = e.at("ts").get<double>();
    lanes[{e.at("pid").get<int64_t>(), e.at("tid").get<int64_t>()}].push_back(
        {ts, ts + e.at("dur").get<double>(), e.at("name").get<std::string>()});
    names.push_back(e.at("name").get<std::string>());
  }
  constexpr double kSlackUs = 1e-3;
  for (auto& [lane, spans] : lanes) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;  // parents before their children
    });
    std::vector<Span> open;
    for (const Span& s : spans) {
      while (!open.empty() && open.back().end <= s.start + kSlackUs) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(s.end, open.back().end + kSlackUs) << "'" << s.name << "' overlaps the end of '" << open.back().name
                                                     << "' on lane " << lane.first << "/" << lane.second;
      }
      open.push_back(s);
    }
  }
  return names;
}

inline bool has_name(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace zest::testing
