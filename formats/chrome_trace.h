// Chrome trace-event JSON (the "JSON Object Format" that Perfetto, chrome://tracing and TensorBoard's
// PyTorch profiler plugin read): complete events (ph "X": name, cat, ts and dur in microseconds, pid, tid,
// args) and the metadata events that name processes and threads (ph "M"). Written the way torch.profiler
// exports a trace: {"schemaVersion": 1, "traceEvents": [...]}, every event with a name and, for "X", a cat.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

struct TraceEvent {
  std::string name;
  std::string category;   // "user_annotation" (host phases), "cpu_op", "kernel", "gpu_memcpy", ...
  int64_t start_ns = 0;   // since the epoch (every clock of one trace must agree)
  int64_t duration_ns = 0;
  int64_t pid = 0;        // the process (host events) or the device index (GPU events), as torch writes them
  int64_t tid = 0;        // the thread, or the CUDA stream
  nlohmann::json args = nlohmann::json::object();
};

struct ChromeTrace {
  std::vector<TraceEvent> events;
  std::vector<std::pair<int64_t, std::string>> process_names;                // pid → name
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> thread_names;  // (pid, tid) → name
  nlohmann::json top_level = nlohmann::json::object();  // further keys of the top object (e.g. deviceProperties)
};

// The JSON text: metadata events first, then the complete events in `events` order. Timestamps are
// microseconds with nanosecond decimals, counted from "baseTimeNanoseconds" (a whole second since the
// epoch, before the first event).
std::string chrome_trace_json(const ChromeTrace& trace);

}  // namespace zest
