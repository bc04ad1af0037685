// Chrome trace-event JSON (see chrome_trace.h).
#include "formats/chrome_trace.h"

#include <algorithm>

namespace zest {
namespace {

// Microseconds as a JSON number with the nanoseconds as decimals. Since the epoch they would need 19
// digits, more than a double holds, and rounding could make nested events overlap; so timestamps count
// from a whole second before the first event, written as "baseTimeNanoseconds" (as torch >= 2.1 does).
nlohmann::json microseconds(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

int64_t base_time_ns(const std::vector<TraceEvent>& events) {
  if (events.empty()) return 0;
  int64_t first = events.front().start_ns;
  for (const TraceEvent& e : events) first = std::min(first, e.start_ns);
  constexpr int64_t kSecond = 1'000'000'000;
  return first / kSecond * kSecond;
}

nlohmann::json metadata_event(const char* what, int64_t pid, int64_t tid, const std::string& name) {
  return {{"name", what}, {"ph", "M"}, {"ts", 0}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

std::string chrome_trace_json(const ChromeTrace& trace) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& [pid, name] : trace.process_names) events.push_back(metadata_event("process_name", pid, 0, name));
  for (const auto& [ids, name] : trace.thread_names)
    events.push_back(metadata_event("thread_name", ids.first, ids.second, name));
  const int64_t base_ns = base_time_ns(trace.events);
  for (const TraceEvent& e : trace.events) {
    events.push_back({{"ph", "X"},
                      {"cat", e.category},
                      {"name", e.name},
                      {"pid", e.pid},
                      {"tid", e.tid},
                      {"ts", microseconds(e.start_ns - base_ns)},
                      {"dur", microseconds(e.duration_ns)},
                      {"args", e.args}});
  }
  nlohmann::json top = trace.top_level;
  top["schemaVersion"] = 1;
  top["displayTimeUnit"] = "ms";
  top["baseTimeNanoseconds"] = base_ns;
  top["traceEvents"] = std::move(events);
  // Replaces invalid UTF-8 (a kernel name is a stranger's text) instead of refusing to write the trace.
  return top.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace zest
