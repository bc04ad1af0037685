// State-dict loading (checked, then copied) and saving through safetensors (see state_dict.h).
#include "models/state_dict.h"

#include "core/check.h"

#include <map>
#include <sstream>

namespace zest {
namespace {

// The module's parameters and buffers by state-dict name, in registration order.
std::vector<std::pair<std::string, torch::Tensor>> module_tensors(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : module.named_parameters()) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) tensors.emplace_back(item.key(), item.value());
  return tensors;
}

std::string shape_text(c10::IntArrayRef shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

// "3 missing keys: a, b, c" with at most `shown` names, then "… (N more)".
void append_list(std::ostringstream& os, const std::string& what, const std::vector<std::string>& items) {
  constexpr size_t shown = 5;
  if (items.empty()) return;
  os << "\n  " << items.size() << " " << what << ": ";
  for (size_t i = 0; i < items.size() && i < shown; ++i) os << (i ? ", " : "") << items[i];
  if (items.size() > shown) os << ", ... (" << items.size() - shown << " more)";
}

}  // namespace

LoadReport load_state_dict(torch::nn::Module& module, const safetensors::Reader& reader,
                           const LoadOptions& options) {
  // File tensors of the state dict, by name without the prefix.
  std::map<std::string, const safetensors::TensorInfo*> file_tensors;
  for (const safetensors::TensorInfo& info : reader.tensors()) {
    if (info.name.rfind(options.prefix, 0) == 0) {
      file_tensors[info.name.substr(options.prefix.size())] = &info;
    }
  }

  LoadReport report;
  std::vector<std::string> wrong;  // shape (or, without conversion, dtype) mismatches, described
  const auto tensors = module_tensors(module);
  std::map<std::string, bool> in_module;
  for (const auto& [name, tensor] : tensors) {
    in_module[name] = true;
    const auto it = file_tensors.find(name);
    if (it == file_tensors.end()) {
      report.missing.push_back(options.prefix + name);
      continue;
    }
    const safetensors::TensorInfo& info = *it->second;
    if (tensor.sizes().vec() != info.shape) {
      wrong.push_back(info.name + " (file " + shape_text(info.shape) + ", module " +
                      shape_text(tensor.sizes()) + ")");
    } else if (!options.convert_dtype && info.dtype != tensor.scalar_type()) {
      wrong.push_back(info.name + " (file " + safetensors::dtype_name(info.dtype) + ", module " +
                      safetensors::dtype_name(tensor.scalar_type()) + ")");
    }
  }
  for (const auto& [name, info] : file_tensors) {
    if (!in_module.count(name)) report.unexpected.push_back(info->name);
  }

  const bool key_errors = options.strict && (!report.missing.empty() || !report.unexpected.empty());
  if (key_errors || !wrong.empty()) {
    std::ostringstream os;
    os << reader.path() << " does not match the module's state dict" << (options.strict ? " (strict)" : "")
       << ", nothing was loaded:";
    if (options.strict) {
      append_list(os, "missing keys (in the module, not in the file)", report.missing);
      append_list(os, "unexpected keys (in the file, not in the module)", report.unexpected);
    }
    append_list(os, options.convert_dtype ? "keys of the wrong shape" : "keys of the wrong shape or dtype",
                wrong);
    ZEST_FAIL(os.str());
  }

  const torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : tensors) {
    const auto it = file_tensors.find(name);
    if (it == file_tensors.end()) continue;
    tensor.copy_(reader.read(it->second->name));  // converts dtype and device
    report.loaded.push_back(name);
  }
  return report;
}

void save_state_dict(const torch::nn::Module& module, const std::string& path,
                     std::optional<torch::Dtype> dtype) {
  safetensors::NamedTensors named;
  for (const auto& [name, tensor] : module_tensors(module)) {
    const bool convert = dtype && at::isFloatingType(tensor.scalar_type());
    named.emplace_back(name, tensor.detach().to(torch::kCPU, convert ? *dtype : tensor.scalar_type())
                                 .contiguous());
  }
  safetensors::save_file(path, named);
}

}  // namespace zest
