// Model memory checks (see model_memory.h): the parameter count times the element size, compared with
// /proc/meminfo's MemAvailable or the device's free memory, before a single weight is allocated.
#include "models/model_memory.h"

#include "core/check.h"
#include "core/number_text.h"
#include "core/untrusted_file.h"
#include "engine/preflight.h"

#include <toml++/toml.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace zest {
namespace {

void collect_integers(const toml::table& table, const std::string& prefix,
                      std::vector<std::pair<int64_t, std::string>>& out, int depth) {
  for (auto&& [key, node] : table) {
    const std::string name = prefix + std::string(key.str());
    if (const auto* v = node.as_integer()) {
      out.emplace_back(v->get(), name);
    } else if (const auto* array = node.as_array()) {
      int64_t largest = 0;
      bool any = false;
      for (const toml::node& element : *array)
        if (const auto* e = element.as_integer()) largest = any ? std::max(largest, e->get()) : e->get(), any = true;
      if (any) out.emplace_back(largest, name);
    } else if (const auto* sub = node.as_table(); sub != nullptr && depth < 2) {
      collect_integers(*sub, name + ".", out, depth + 1);
    }
  }
}

}  // namespace

std::string largest_size_fields(const ConfigTable& config, size_t count) {
  std::vector<std::pair<int64_t, std::string>> fields;
  collect_integers(config.raw(), "", fields, 0);
  std::stable_sort(fields.begin(), fields.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (size_t i = 0; i < fields.size() && i < count; ++i)
    out += (i ? ", " : "") + printable(fields[i].second, 60) + " = " + std::to_string(fields[i].first);
  return out;
}

std::string model_memory_problem(const std::string& source, const std::string& fields, int64_t parameters,
                                 int64_t element_bytes, int64_t available_bytes, const std::string& memory) {
  if (available_bytes < 0) return "";
  int64_t bytes = 0;
  const bool overflows = __builtin_mul_overflow(parameters, element_bytes, &bytes);
  if (!overflows && bytes <= available_bytes) return "";
  return str(source, ": this model has ", parameters, " parameters: ",
             overflows ? std::string("more bytes than a 64-bit count holds") : gigabytes_text(bytes), " of weights (",
             element_bytes, " bytes each), more than ", memory, " of ", gigabytes_text(available_bytes),
             "; refused before building it. Its largest size fields: ", fields.empty() ? "(none)" : fields);
}

void check_model_fits_host(const ModelFamily& family, ConfigTable& config) {
  const int64_t parameters = family.count_parameters(config);
  const std::string problem =
      model_memory_problem(config.file(), largest_size_fields(config), parameters, sizeof(float),
                           host_available_bytes(), "the host's available memory (MemAvailable)");
  if (!problem.empty()) throw Error(problem);
}

void check_module_fits_host(const std::string& source, const std::string& fields, const torch::nn::Module& meta_module,
                            int64_t element_bytes) {
  int64_t parameters = 0;
  for (const torch::Tensor& p : meta_module.parameters()) parameters += p.numel();
  const std::string problem = model_memory_problem(source, fields, parameters, element_bytes, host_available_bytes(),
                                                   "the host's available memory (MemAvailable)");
  if (!problem.empty()) throw Error(problem);
}

void check_model_fits_device(const ResolvedModel& model, const torch::Device& device, torch::Dtype dtype) {
  const int64_t available = device_free_bytes(device);
  if (available < 0) return;
  const ConfigTable config = model_config_table(model);
  const std::string problem =
      model_memory_problem(model.source, largest_size_fields(config), count_model_parameters(model),
                           static_cast<int64_t>(c10::elementSize(dtype)), available, "the free memory of " + device.str());
  if (!problem.empty()) throw Error(problem);
}

}  // namespace zest
