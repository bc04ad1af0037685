// Streaming, strict loading of pretrained weights and the trainer's start-from-pretrained step
// (see pretrained_load.h).
#include "models/pretrained_load.h"

#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"
#include "checkpoint/rank_agreement.h"
#include "formats/json_field.h"
#include "formats/safetensors.h"
#include "models/pretrained_source.h"
#include "core/check.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace zest {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Every mismatch, each kind on its own line with every name (the user fixes them all at once).
std::string mismatch_lines(const PretrainedReport& r) {
  std::ostringstream os;
  if (!r.missing.empty())
    os << "\n  " << r.missing.size() << " missing (in the model, not in the file): " << joined(r.missing);
  if (!r.unexpected.empty())
    os << "\n  " << r.unexpected.size() << " unexpected (in the file, not in the model): " << joined(r.unexpected);
  if (!r.wrong_shape.empty())
    os << "\n  " << r.wrong_shape.size() << " of the wrong shape: " << joined(r.wrong_shape);
  return os.str();
}

// The model's parameters and buffers by state-dict name, in registration order.
std::vector<std::pair<std::string, torch::Tensor>> model_tensors(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : model.named_parameters()) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers()) tensors.emplace_back(item.key(), item.value());
  return tensors;
}

// The model_source record a checkpoint was saved with (null for one saved before zest kept it).
nlohmann::json saved_model_source(const std::string& step_dir) {
  const checkpoint::Manifest manifest = checkpoint::read_manifest(step_dir);
  const JsonDocument extra =
      checkpoint::extra_record(manifest.extra_json, (std::filesystem::path(step_dir) / checkpoint::kManifestName).string());
  const JsonField record = extra.root().null_as_absent().at("model_source");
  if (!record.exists()) return nlohmann::json();
  check_model_source_record(record);
  return extra.value().at("model_source");
}

void say(const Communicator& comm, const std::string& line) {
  if (comm.rank() != 0) return;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

PretrainedReport load_pretrained_weights(torch::nn::Module& model, const PretrainedWeights& weights, bool strict) {
  std::map<std::string, const SourceTensor*> by_name;
  for (const SourceTensor& t : weights.tensors()) by_name[t.name] = &t;
  PretrainedReport report;
  std::vector<std::pair<torch::Tensor, const SourceTensor*>> plan;
  std::set<std::string> in_model;
  for (const auto& [name, tensor] : model_tensors(model)) {
    in_model.insert(name);
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      report.missing.push_back(name);
    } else if (tensor.sizes().vec() != it->second->shape) {
      report.wrong_shape.push_back(it->second->stored_name + " (file " + shape_text(it->second->shape) + ", model " +
                                   shape_text(tensor.sizes().vec()) + ")");
    } else {
      plan.emplace_back(tensor, it->second);
    }
  }
  for (const SourceTensor& t : weights.tensors())
    if (!in_model.count(t.name)) report.unexpected.push_back(t.stored_name);
  const bool mismatched = !report.missing.empty() || !report.unexpected.empty() || !report.wrong_shape.empty();
  if (strict && mismatched)
    ZEST_FAIL(weights.path(), " does not match the model (strict loading; nothing was loaded):", mismatch_lines(report),
              "\n  (set [model] strict = false to load the matching tensors and keep the others as initialised)");

  const torch::NoGradGuard no_grad;
  std::set<std::string> dtypes;
  for (const auto& [tensor, source] : plan) {
    tensor.copy_(weights.read(*source));  // one stored tensor at a time; converted to the parameter's dtype
    dtypes.insert(safetensors::dtype_name(source->dtype));
    ++report.loaded;
  }
  report.dtypes.assign(dtypes.begin(), dtypes.end());
  return report;
}

nlohmann::json start_from_pretrained(torch::nn::Module& model, const ResolvedModel& resolved,
                                     const ModelSelection& selection, const std::string& resume_from,
                                     Communicator& comm) {
  for (const std::string& note : resolved.notes) say(comm, "pretrained: " + note);
  const bool resuming = !resume_from.empty();
  nlohmann::json record;
  PretrainedReport report;
  std::string source;
  const std::string error = checkpoint::capture_error([&] {
    if (resuming) {
      record = saved_model_source(resume_from);
      if (!record.is_null()) return;
    }
    record = model_source_record(resolved);
    if (resolved.pretrained.empty() || resuming) return;
    const auto weights = PretrainedWeights::open(find_pretrained_layout(resolved.pretrained));
    source = weights->path();
    report = load_pretrained_weights(model, *weights, selection.strict);
  });
  checkpoint::raise_if_any(comm, error);
  if (resolved.pretrained.empty()) return record;
  if (resuming) {
    say(comm, "pretrained: " + resolved.pretrained + " not loaded: the run resumes from its checkpoint");
    return record;
  }
  say(comm, str("pretrained: loaded ", report.loaded, " tensors from ", source, " (stored as ", joined(report.dtypes),
                ", converted to the model's dtype)"));
  if (!report.missing.empty() || !report.unexpected.empty() || !report.wrong_shape.empty())
    say(comm, "pretrained: strict = false, so these were skipped:" + mismatch_lines(report));
  return record;
}

}  // namespace zest
