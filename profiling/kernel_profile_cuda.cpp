// The Kineto recording behind KernelProfile (see kernel_profile.h): CPU and CUDA activities, then the
// device kernels summed two ways — by kernel name, and by the operator that launched them (the outermost
// operator on the launching thread, e.g. an autograd node in backward, and the innermost one).
#include "core/check.h"
#include "core/compat.h"
#include "formats/chrome_trace.h"

#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace zest {
namespace {

namespace kineto = torch::profiler::impl;
using torch::autograd::profiler::KinetoEvent;

const std::set<kineto::ActivityType>& activities() {
  static const std::set<kineto::ActivityType> kinds{kineto::ActivityType::CPU, kineto::ActivityType::CUDA};
  return kinds;
}

struct Total {
  std::string name;
  double ms = 0.0;
  int64_t launches = 0;
};

// CPU operators ("aten::mm", "autograd::engine::evaluate_function: MmBackward0"; runtime calls such as
// cudaLaunchKernel have no "::") by the correlation id their kernels link to, each with the outermost
// operator enclosing it on its thread.
class OperatorIndex {
 public:
  explicit OperatorIndex(const std::vector<KinetoEvent>& events) {
    std::map<uint64_t, std::vector<const KinetoEvent*>> by_thread;
    for (const auto& e : events) {
      if (e.deviceType() == c10::DeviceType::CPU && e.name().find("::") != std::string::npos) {
        by_thread[e.startThreadId()].push_back(&e);
      }
    }
    for (auto& [thread, ops] : by_thread) {
      std::sort(ops.begin(), ops.end(), [](const KinetoEvent* a, const KinetoEvent* b) {
        const uint64_t a_start = compat::event_start_ns(*a), b_start = compat::event_start_ns(*b);
        return a_start != b_start ? a_start < b_start : compat::event_end_ns(*a) > compat::event_end_ns(*b);
      });
      std::vector<const KinetoEvent*> open;  // the enclosing operators of the current one, outermost first
      for (const KinetoEvent* op : ops) {
        while (!open.empty() && compat::event_end_ns(*open.back()) < compat::event_start_ns(*op)) open.pop_back();
        const std::string outermost = open.empty() ? op->name() : open.front()->name();
        by_correlation_[op->correlationId()] = outermost == op->name() ? outermost : outermost + " > " + op->name();
        open.push_back(op);
      }
    }
  }
  std::string launcher_of(const KinetoEvent& kernel) const {
    const auto it = by_correlation_.find(kernel.linkedCorrelationId());
    return it == by_correlation_.end() ? "(no operator)" : it->second;
  }

 private:
  std::unordered_map<uint64_t, std::string> by_correlation_;
};

std::vector<Total> sorted(std::map<std::string, Total> totals) {
  std::vector<Total> list;
  for (auto& [name, total] : totals) list.push_back(std::move(total));
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  return list;
}

void write_table(const std::string& path, const char* what, const std::vector<Total>& totals, int steps) {
  std::ofstream table(path);
  ZEST_CHECK(table, "bench: cannot write the kernel table ", path);
  table << "ms_per_step\tlaunches_per_step\t" << what << '\n';
  for (const auto& t : totals) table << t.ms << '\t' << static_cast<double>(t.launches) / steps << '\t' << t.name << '\n';
  ZEST_CHECK(table.flush(), "bench: writing the kernel table ", path, " failed");
}

nlohmann::json heaviest(const std::vector<Total>& totals, const char* what, int top, int steps) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < totals.size() && static_cast<int>(i) < top; ++i) {
    list.push_back({{what, totals[i].name.substr(0, 160)},
                    {"ms", totals[i].ms},
                    {"launches", static_cast<double>(totals[i].launches) / steps}});
  }
  return list;
}

// The category torch's own traces give a device event, from Kineto's names ("Memcpy HtoD (...)", "Memset (...)").
const char* device_category(const std::string& name) {
  if (name.rfind("Memcpy", 0) == 0) return "gpu_memcpy";
  if (name.rfind("Memset", 0) == 0) return "gpu_memset";
  return "kernel";
}

// Every event into `trace`: device events on (device, stream), host events on (this process, thread).
// Operators have "::" in their names (aten::mm, autograd::engine::...); the rest are CUDA runtime calls.
void add_trace_events(const std::vector<KinetoEvent>& events, ChromeTrace& trace) {
  const int64_t pid = ::getpid();
  std::set<std::pair<int64_t, int64_t>> streams;
  for (const auto& e : events) {
    const auto start = static_cast<int64_t>(compat::event_start_ns(e));
    const auto duration = static_cast<int64_t>(compat::event_duration_ns(e));
    if (e.deviceType() == c10::DeviceType::CUDA) {
      const int64_t device = e.deviceIndex(), stream = e.deviceResourceId();
      streams.insert({device, stream});
      trace.events.push_back({e.name(), device_category(e.name()), start, duration, device, stream,
                              {{"device", device}, {"stream", stream}}});
    } else {
      const bool op = e.name().find("::") != std::string::npos;
      trace.events.push_back({e.name(), op ? "cpu_op" : "cuda_runtime", start, duration, pid,
                              static_cast<int64_t>(e.startThreadId()), nlohmann::json::object()});
    }
  }
  std::set<int64_t> devices;
  for (const auto& [device, stream] : streams) {
    devices.insert(device);
    trace.thread_names.push_back({{device, stream}, "stream " + std::to_string(stream)});
  }
  for (const int64_t device : devices) trace.process_names.push_back({device, "GPU " + std::to_string(device)});
}

}  // namespace

void start_cuda_kernel_profile() {
  const kineto::ProfilerConfig config(kineto::ProfilerState::KINETO);
  torch::autograd::profiler::prepareProfiler(config, activities());
  torch::autograd::profiler::enableProfiler(config, activities());
}

void stop_cuda_kernel_profile() { (void)torch::autograd::profiler::disableProfiler(); }

nlohmann::json finish_cuda_kernel_profile(int steps, const std::string& table_path, int top, ChromeTrace* trace) {
  const auto result = torch::autograd::profiler::disableProfiler();
  const auto& events = result->events();
  if (trace != nullptr) add_trace_events(events, *trace);
  const OperatorIndex operators(events);
  std::map<std::string, Total> by_kernel, by_operator;
  double compute_ms = 0.0, nccl_ms = 0.0;  // NCCL's kernels run on their own stream, overlapped
  int64_t launches = 0;
  for (const auto& event : events) {
    if (event.deviceType() != c10::DeviceType::CUDA) continue;
    const double ms = static_cast<double>(compat::event_duration_ns(event)) / 1e6 / steps;
    const std::string kernel = event.name();
    const std::string launcher = operators.launcher_of(event);
    const auto add = [ms](Total& total, const std::string& name) {
      total.name = name;
      total.ms += ms;
      total.launches += 1;
    };
    add(by_kernel[kernel], kernel);
    add(by_operator[launcher], launcher);
    (kernel.rfind("nccl", 0) == 0 ? nccl_ms : compute_ms) += ms;
    ++launches;
  }
  const auto kernels = sorted(std::move(by_kernel));
  const auto launchers = sorted(std::move(by_operator));
  if (!table_path.empty()) {
    write_table(table_path, "kernel", kernels, steps);
    write_table(table_path + ".operators.tsv", "operator", launchers, steps);
  }
  return {{"steps", steps},
          {"kernel_ms_per_step", compute_ms},
          {"nccl_kernel_ms_per_step", nccl_ms},
          {"launches_per_step", static_cast<double>(launches) / steps},
          {"table", table_path},
          {"top", heaviest(kernels, "kernel", top, steps)},
          {"top_operators", heaviest(launchers, "operator", top, steps)}};
}

}  // namespace zest
