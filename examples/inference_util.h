// What the inference examples share: the model from a configuration plus merged weights (strict load),
// one sample's cached features (data/sample_features.h), and the result as .npy or safetensors.
#pragma once

#include "checkpoint/output_path.h"
#include "core/check.h"
#include "data/sample_features.h"
#include "formats/safetensors.h"
#include "engine/unit_module.h"
#include "formats/npy.h"
#include "models/model_memory.h"
#include "models/model_resolve.h"
#include "models/state_dict.h"

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace zest::examples {

struct ModelArgs {
  std::string name;          // built-in configuration, e.g. "hymotion_1b"
  std::string config;        // or a model TOML file
  std::string weights;       // merged safetensors file (`zest merge`, checkpoint.merge_at_end)
  std::string device = "cpu";
  std::string dtype = "fp32";
};

inline void add_model_options(CLI::App& app, ModelArgs& args) {
  auto* name = app.add_option("--model", args.name, "built-in model configuration (see `zest models list`)");
  auto* config = app.add_option("--model-config", args.config, "model configuration TOML file")
                     ->check(CLI::ExistingFile);
  name->excludes(config);
  app.add_option("--weights", args.weights, "merged model weights (safetensors, state-dict names)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--device", args.device, "cpu, cuda, cuda:1, ...")->capture_default_str();
  app.add_option("--dtype", args.dtype, "compute dtype")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
}

inline torch::Dtype parse_dtype(const std::string& name) {
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  return torch::kFloat32;
}

struct LoadedModel {
  ResolvedModel resolved;
  std::shared_ptr<UnitModule> module;
};

// Builds the configured model of `family` and loads the weights strictly: every state-dict name must be
// in the file with its shape, and the file must hold nothing else.
inline LoadedModel load_model(const ModelArgs& args, const std::string& family) {
  ZEST_CHECK(args.name.empty() != args.config.empty(), "give exactly one of --model NAME and --model-config FILE");
  ModelSelection selection;
  selection.name = args.name;
  selection.config_path = args.config;
  if (!args.config.empty()) selection.family = family;  // any file name will do
  LoadedModel loaded{resolve_model(selection), nullptr};
  ZEST_CHECK(loaded.resolved.family->name == family, loaded.resolved.source, " is a ",
             loaded.resolved.family->name, " configuration; this example needs a ", family, " one");
  check_model_fits_device(loaded.resolved, torch::Device(args.device), parse_dtype(args.dtype));
  loaded.module = build_model(loaded.resolved);  // refused first when its weights exceed the host's memory
  const safetensors::Reader reader(args.weights);
  LoadOptions strict;
  strict.strict = true;
  const LoadReport report = load_state_dict(*loaded.module, reader, strict);
  std::fprintf(stderr, "loaded %zu tensors from %s into %s\n", report.loaded.size(), args.weights.c_str(),
               loaded.resolved.description.c_str());
  loaded.module->to(torch::Device(args.device), parse_dtype(args.dtype));
  loaded.module->eval();
  return loaded;
}

inline bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Checked before any work, so that a typo does not cost a whole sampling run.
inline void check_output_path(const std::string& path) {
  ZEST_CHECK(ends_with(path, ".npy") || ends_with(path, ".safetensors"), "--out ", path,
             ": the file name must end in .npy or .safetensors");
}

// Writes `result` (as float32) to PATH.npy or to PATH.safetensors under `key`.
inline void write_result(const std::string& path, const std::string& key, const torch::Tensor& result) {
  check_output_path(path);
  const torch::Tensor out = result.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  if (ends_with(path, ".safetensors")) {
    safetensors::save_file(path, {{key, out}});
  } else {
    checkpoint::write_output_file(path, npy::encode(out));
  }
  std::fprintf(stderr, "wrote %s %s to %s\n", key.c_str(), c10::str(out.sizes()).c_str(), path.c_str());
}

}  // namespace zest::examples
