// Loading a Qwen3 folder (see qwen3_load.h): the memory check, then one stored tensor at a time into the
// parameters (so the host never holds more than one tensor beside the model).
#include "models/qwen3/qwen3_load.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "engine/preflight.h"
#include "models/model_memory.h"
#include "models/pretrained_weights.h"

#include <map>
#include <set>
#include <vector>

namespace zest::qwen3 {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStackPrefix = "model.";

bool passed_over(const std::string& stored) {
  return stored == "lm_head.weight" || stored.ends_with("rotary_emb.inv_freq");
}

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", " : "") + printable(names[i], 100);
  return out + (names.size() > 5 ? str(", ... (", names.size(), " in all)") : std::string());
}

void check_memory(const Qwen3Config& config, const std::string& source, torch::Device device, torch::Dtype dtype) {
  const int64_t available = device.is_cuda() ? device_free_bytes(device) : host_available_bytes();
  const std::string memory = device.is_cuda() ? "the free memory of " + device.str() : "the host's available memory (MemAvailable)";
  const std::string fields = str("hidden_size = ", config.hidden_size, ", num_hidden_layers = ", config.num_hidden_layers,
                                 ", vocab_size = ", config.vocab_size);
  const std::string problem = model_memory_problem(source, fields, config.parameter_count(),
                                                   static_cast<int64_t>(c10::elementSize(dtype)), available, memory);
  if (!problem.empty()) throw Error(problem);
}

}  // namespace

std::string qwen3_weights_file(const fs::path& folder) {
  ZEST_CHECK(fs::is_directory(folder), printable(folder.string()), ": no such folder (a Qwen3 model folder holds "
             "config.json and model.safetensors, or model-0000N-of-0000M.safetensors with model.safetensors.index.json)");
  ZEST_CHECK(fs::exists(folder / "config.json"), printable(folder.string()), ": no config.json (not a Qwen3 model folder, "
             "e.g. Qwen3-8B as the hub ships it)");
  for (const char* name : {"model.safetensors.index.json", "model.safetensors"}) {
    if (fs::exists(folder / name)) return (folder / name).string();
  }
  ZEST_FAIL(printable(folder.string()), ": holds config.json but neither model.safetensors nor "
            "model.safetensors.index.json (zest reads the safetensors form of the weights)");
}

Qwen3Model load_qwen3_model(const fs::path& folder, torch::Device device, torch::Dtype dtype) {
  const std::string weights_file = qwen3_weights_file(folder);
  const std::string config_path = (folder / "config.json").string();
  const Qwen3Config config = Qwen3Config::from_file(config_path);
  check_memory(config, config_path, device, dtype);
  PretrainedLayout layout;
  layout.weights_file = weights_file;
  const auto weights = PretrainedWeights::open(layout);  // headers only

  Qwen3Model model(config, torch::TensorOptions().dtype(dtype).device(device));
  model->eval();
  std::map<std::string, torch::Tensor> targets;
  for (const auto& item : model->named_parameters()) targets[kStackPrefix + item.key()] = item.value();
  std::vector<std::string> unexpected, mis_shaped;
  std::set<std::string> loaded;
  torch::NoGradGuard no_grad;
  for (const SourceTensor& stored : weights->tensors()) {
    const auto target = targets.find(stored.name);
    if (target == targets.end()) {
      if (!passed_over(stored.name)) unexpected.push_back(stored.name);
      continue;
    }
    if (stored.shape != target->second.sizes().vec()) {
      mis_shaped.push_back(zest::str(stored.name, " ", torch::IntArrayRef(stored.shape), " (the config gives ",
                               target->second.sizes(), ")"));
      continue;
    }
    target->second.copy_(weights->read(stored));
    loaded.insert(stored.name);
  }
  std::vector<std::string> missing;
  for (const auto& [name, tensor] : targets)
    if (!loaded.count(name)) missing.push_back(name);
  if (missing.empty() && unexpected.empty() && mis_shaped.empty()) return model;
  std::string message = str(printable(weights_file), ": does not match the Qwen3 model of ", printable(config_path), ":");
  if (!missing.empty()) message += str(" ", missing.size(), " missing (", name_list(missing), ")");
  if (!unexpected.empty()) message += str(" ", unexpected.size(), " unexpected (", name_list(unexpected), ")");
  if (!mis_shaped.empty()) message += str(" ", mis_shaped.size(), " of another shape (", name_list(mis_shaped), ")");
  throw Error(message);
}

}  // namespace zest::qwen3
