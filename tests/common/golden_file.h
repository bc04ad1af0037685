// GoldenFile: a reference-vector file (param.*, input.*, output.*, grad.*, debug.*) split by key
// prefix, shared by the model parity suites.
#pragma once

#include "formats/safetensors.h"

#include <torch/torch.h>

#include <map>
#include <string>

namespace zest::testing {

struct GoldenFile {
  std::map<std::string, std::map<std::string, torch::Tensor>> groups;  // prefix → name → tensor

  static GoldenFile load(const std::string& path) {
    GoldenFile g;
    const safetensors::Reader reader(path);
    for (const auto& info : reader.tensors()) {
      const auto dot = info.name.find('.');
      g.groups[info.name.substr(0, dot)][info.name.substr(dot + 1)] = reader.read(info.name);
    }
    return g;
  }
  const std::map<std::string, torch::Tensor>& params() const { return groups.at("param"); }
  const std::map<std::string, torch::Tensor>& grads() const { return groups.at("grad"); }
  const std::map<std::string, torch::Tensor>& debug() const { return groups.at("debug"); }
  const torch::Tensor& input(const std::string& name) const { return groups.at("input").at(name); }
  const torch::Tensor& output(const std::string& name) const { return groups.at("output").at(name); }
};

}  // namespace zest::testing
