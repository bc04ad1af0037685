// StepTrace (see step_trace.h): host phases as complete events on their thread, the Kineto events of a
// CUDA device added at the end, one JSON file per rank written all-or-nothing.
#include "profiling/step_trace.h"

#include "checkpoint/output_path.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"
#include "profiling/kernel_profile.h"

#include <ATen/record_function.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>

namespace zest {
namespace {

constexpr int64_t kMaxProfiledSteps = 100;  // a trace is for looking at a few steps; each can hold 10^4 kernels

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "host";
  std::string name;
  for (const char* c = host; *c != '\0'; ++c) name += (*c == '/' ? '_' : *c);
  return name;
}

// The thread id LibTorch's profiler gives its operator events, so the host phases share their lane.
int64_t trace_thread_id() { return static_cast<int64_t>(at::RecordFunction::currentThreadId()); }

}  // namespace

const FieldTable<ProfileConfig>& profile_fields() {
  static const FieldTable<ProfileConfig> table = [] {
    using C = ProfileConfig;
    const std::string steps_hint = "zest records the steps of [profile] steps = [first, last]";
    FieldTable<C> t("profile", "step traces (Chrome-trace JSON per rank in RUN_DIR/tensorboard)",
                    {{"schedule", steps_hint},
                     {"wait", steps_hint},
                     {"warmup", steps_hint},
                     {"active", steps_hint},
                     {"dir", "traces go to train.run_dir/tensorboard, where TensorBoard finds them"}});
    t.list("steps", &C::steps, "[first, last] optimizer steps to record ([]: none)")
        .check([](const C& c) { return c.steps.empty() || c.steps.size() == 2; },
               "expected [first, last] (two optimizer steps, counted from 1), or []")
        .check([](const C& c) { return c.steps.empty() || c.steps[0] >= 1; }, "the first step must be >= 1 (steps count from 1)")
        .check([](const C& c) { return c.steps.empty() || c.steps[1] >= c.steps[0]; },
               "expected [first, last] with first <= last")
        .check([](const C& c) { return c.steps.empty() || c.steps[1] - c.steps[0] + 1 <= kMaxProfiledSteps; },
               "at most " + std::to_string(kMaxProfiledSteps) + " steps in one trace (a few show the timeline)")
        .type("[int, int] or []")
        .reference("`[first, last]`: every rank records optimizer steps first..last (counted from 1, at most 100) as "
                   "a Chrome trace in `<run_dir>/tensorboard/`, for TensorBoard's profile tab and Perfetto; `first` "
                   "must not pass `train.max_steps`");
    return t;
  }();
  return table;
}

ProfileConfig ProfileConfig::from_toml(ConfigTable& t) { return profile_fields().read(t); }

void to_toml(const ProfileConfig& c, ConfigWriter& out) { profile_fields().write(c, out); }

std::string trace_file_name(int64_t epoch_ms) {
  return host_name() + "_" + std::to_string(::getpid()) + "." + std::to_string(epoch_ms) + ".pt.trace.json";
}

int64_t StepTrace::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void StepTrace::Phase::end() {
  if (trace_ == nullptr) return;
  TraceEvent& e = trace_->trace_.events[index_];
  e.duration_ns = std::max<int64_t>(0, now_ns() - e.start_ns);
  trace_ = nullptr;
}

StepTrace::StepTrace(std::string dir, int rank, int world_size, int64_t first, int64_t last, bool device_kernels)
    : dir_(std::move(dir)),
      rank_(rank),
      world_size_(world_size),
      first_(first),
      last_(last),
      device_kernels_(device_kernels) {
  const int64_t pid = ::getpid();
  trace_.process_names.push_back({pid, "rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                                           " (" + host_name() + ", pid " + std::to_string(pid) + ")"});
  trace_.thread_names.push_back({{pid, trace_thread_id()}, "step loop"});
}

StepTrace::~StepTrace() = default;

void StepTrace::start() {
  recording_ = true;
  if (device_kernels_) kernels_ = std::make_unique<KernelProfile>();  // Kineto: kernels, copies, operators
}

void StepTrace::begin_step(int64_t step) {
  if (done_ || step > last_ || step < first_) return;
  if (!recording_) start();
  const TraceEvent span{"ProfilerStep#" + std::to_string(step), "user_annotation", now_ns(), 0, ::getpid(),
                        trace_thread_id(), {{"step", step}, {"rank", rank_}}};
  trace_.events.push_back(span);
  open_steps_.push_back(trace_.events.size() - 1);
}

void StepTrace::end_step(int64_t step) {
  if (!recording_ || open_steps_.empty()) return;
  Phase(this, open_steps_.back()).end();
  open_steps_.pop_back();
  ++recorded_steps_;
  if (step >= last_) finish();
}

StepTrace::Phase StepTrace::phase(std::string name) {
  if (!recording_) return {};
  trace_.events.push_back({std::move(name), "user_annotation", now_ns(), 0, ::getpid(), trace_thread_id(), {}});
  return Phase(this, trace_.events.size() - 1);
}

StepTrace::Phase StepTrace::step_body() {
  forwards_.clear();
  return phase("forward, backward, optimizer step");
}

StepTrace::Phase StepTrace::forward_phase(int micro_batch) {
  Phase forward = phase("forward (micro-batch " + std::to_string(micro_batch) + ")");
  if (recording_) forwards_.push_back(trace_.events.size() - 1);
  return forward;
}

void StepTrace::end_step_body(Phase& body, StepKind kind) {
  if (!body.active()) return;
  const size_t body_index = body.index();
  body.end();
  std::string& name = trace_.events[body_index].name;
  if (kind == StepKind::graph_capture) name = "CUDA graph capture (forward, backward, optimizer step)";
  if (kind == StepKind::graph_replay) name = "CUDA graph replay (forward, backward, optimizer step)";
  if (kind != StepKind::eager || forwards_.empty()) return;
  const int64_t body_end = trace_.events[body_index].start_ns + trace_.events[body_index].duration_ns;
  const std::vector<size_t> forwards = forwards_;  // push_back below may move the events
  for (size_t i = 0; i < forwards.size(); ++i) {
    const TraceEvent& forward = trace_.events[forwards[i]];
    const int64_t start = forward.start_ns + forward.duration_ns;
    const bool last = i + 1 == forwards.size();
    const int64_t end = last ? body_end : trace_.events[forwards[i + 1]].start_ns;
    std::string label = "backward (micro-batch " + std::to_string(i) + ")" + (last ? " and optimizer step" : "");
    trace_.events.push_back({std::move(label), "user_annotation", start, std::max<int64_t>(0, end - start), ::getpid(),
                             trace_thread_id(), {{"inferred", "the time between forwards"}}});
  }
  forwards_.clear();
}

void StepTrace::keep_kernel_tables(std::string table_path, int top) {
  table_path_ = std::move(table_path);
  top_ = top;
}

void StepTrace::finish() {
  if (!recording_) return;
  recording_ = false;
  done_ = true;
  for (const size_t open : open_steps_) Phase(this, open).end();  // a run stopped inside a step
  open_steps_.clear();
  if (kernels_) {
    kernel_summary_ =
        kernels_->finish(static_cast<int>(std::max<int64_t>(1, recorded_steps_)), table_path_, top_, &trace_);
    kernels_.reset();
  }
  const std::string path = (std::filesystem::path(dir_) / trace_file_name(now_ns() / 1'000'000)).string();
  checkpoint::write_output_file(path, chrome_trace_json(trace_));
  written_ = path;
  trace_ = ChromeTrace{};
}

}  // namespace zest
