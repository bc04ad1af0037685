// Step traces: `[profile] steps = [a, b]` in a run and `zest bench --profile DIR` record a timeline of
// optimizer steps a..b on every rank and write it as Chrome-trace JSON (formats/chrome_trace.h) named as
// torch.profiler's tensorboard_trace_handler names its files, `<host>_<pid>.<epoch ms>.pt.trace.json`, so
// that TensorBoard's PyTorch-profiler tab finds them in RUN_DIR/tensorboard/ beside the event files (it
// takes every folder holding *.pt.trace.json as a run, each file as a worker) and Perfetto opens them.
// The host phases (ProfilerStep#N, data wait, forward, backward and optimizer step or the CUDA-graph
// replay, checkpoint, validation samples, logging) are recorded here; on CUDA builds the kernels, copies
// and operators of the same steps come from LibTorch's Kineto recorder (profiling/kernel_profile.h), each
// kernel on its stream.
#pragma once

#include "formats/chrome_trace.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zest {

class ConfigTable;
class ConfigWriter;
class KernelProfile;

// The [profile] table.
struct ProfileConfig {
  std::vector<int64_t> steps;  // [] (none) or [first, last]: optimizer steps counted from 1, both recorded

  static ProfileConfig from_toml(ConfigTable& table);
  bool enabled() const { return !steps.empty(); }
};

void to_toml(const ProfileConfig& config, ConfigWriter& out);
template <typename C>
class FieldTable;
const FieldTable<ProfileConfig>& profile_fields();  // the [profile] table (core/field_table.h)

// torch.profiler.tensorboard_trace_handler's file name: "<host>_<pid>.<epoch_ms>.pt.trace.json".
std::string trace_file_name(int64_t epoch_ms);

class StepTrace {
 public:
  // A host phase on the calling thread, from construction to destruction; nothing when not recording.
  class Phase {
   public:
    Phase() = default;
    Phase(StepTrace* trace, size_t index) : trace_(trace), index_(index) {}
    Phase(Phase&& other) noexcept : trace_(other.trace_), index_(other.index_) { other.trace_ = nullptr; }
    Phase& operator=(Phase&&) = delete;
    ~Phase() { end(); }
    void end();               // ends it now (idempotent)
    bool active() const { return trace_ != nullptr; }
    size_t index() const { return index_; }  // of its event in the trace (while active)

   private:
    StepTrace* trace_ = nullptr;
    size_t index_ = 0;
  };

  // Records optimizer steps first..last (counted from 1) into DIR/<trace_file_name>. `device_kernels`:
  // also the device's kernels (a CUDA device; CUDA builds only).
  StepTrace(std::string dir, int rank, int world_size, int64_t first, int64_t last, bool device_kernels);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  // Around each optimizer step `step`: recording starts with the first step in [first, last] and the trace is
  // written after `last`. The step's phases nest in a "ProfilerStep#<step>" span, as torch.profiler's do.
  void begin_step(int64_t step);
  void end_step(int64_t step);
  [[nodiscard]] Phase phase(std::string name);
  bool recording() const { return recording_; }

  // The body of a training step (StepGraphs::step) and the forward of each micro-batch inside it. An eager
  // step runs each micro-batch's backward right after its forward and the optimizer after the last
  // backward, so end_step_body() adds those spans in the gaps; a captured or replayed CUDA graph is named so.
  enum class StepKind { eager, graph_capture, graph_replay };
  [[nodiscard]] Phase step_body();
  [[nodiscard]] Phase forward_phase(int micro_batch);
  void end_step_body(Phase& body, StepKind kind);

  // CUDA only (`zest bench --profile`): at finish() also write the kernel tables (profiling/kernel_profile.h);
  // their summary is kernel_summary() afterwards.
  void keep_kernel_tables(std::string table_path, int top);
  const nlohmann::json& kernel_summary() const { return kernel_summary_; }

  // Writes the trace when it is recording; end_step() of the last step calls it, and a run that ends
  // inside the range (a stop signal) does. written(): the trace's path, once written.
  void finish();
  const std::string& written() const { return written_; }

  static int64_t now_ns();  // the trace's clock: nanoseconds since the epoch, as the profiler's events

 private:
  void start();

  std::string dir_;
  int rank_;
  int world_size_;
  int64_t first_;
  int64_t last_;
  bool device_kernels_;
  bool recording_ = false;
  bool done_ = false;
  int64_t recorded_steps_ = 0;
  ChromeTrace trace_;
  std::vector<size_t> open_steps_;  // the ProfilerStep span of the running step
  std::vector<size_t> forwards_;    // the forward spans of the running step body
  std::unique_ptr<KernelProfile> kernels_;
  std::string table_path_;
  int top_ = 0;
  nlohmann::json kernel_summary_;
  std::string written_;
};

}  // namespace zest
