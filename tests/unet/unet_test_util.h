// Helpers for the UNet tests: built-in config files, the golden file (params, inputs, outputs, grads,
// debug activations), strict by-name parameter loading and a unit runner that records every unit.
#pragma once

#include "common/golden_file.h"

#include "formats/safetensors.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "models/unet/unet.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace zest::unet::test {

inline std::string data_path(const std::string& name) { return std::string(ZEST_TEST_DATA) + "/" + name; }

inline std::string config_path(const std::string& flavor) {
  return std::string(ZEST_SOURCE_DIR) + "/configs/models/" + flavor + ".toml";
}

inline UNetConfig load_config(const std::string& flavor) {
  auto table = ConfigTable::parse_file(config_path(flavor));
  return UNetConfig::from_toml(table);
}

inline UNetConfig parse_config(const std::string& text) {
  auto table = ConfigTable::parse_string(text, "test.toml");
  return UNetConfig::from_toml(table);
}

// The text of the tiny configuration plus `extra` lines (later keys of the same name are not allowed
// by TOML, so `extra` must only add keys).
inline std::string tiny_config_text(const std::string& extra = "") {
  std::ifstream in(config_path("unet_tiny"));
  EXPECT_TRUE(in.good()) << "cannot open " << config_path("unet_tiny");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str() + "\n" + extra + "\n";
}

// Reference state-dict list: "name\t[d0, d1, ...]" per line, in state-dict order.
inline std::vector<std::pair<std::string, std::vector<int64_t>>> read_state_dict_list(const std::string& file) {
  std::ifstream in(data_path(file));
  EXPECT_TRUE(in.good()) << "cannot open " << data_path(file);
  std::vector<std::pair<std::string, std::vector<int64_t>>> entries;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto tab = line.find('\t');
    std::vector<int64_t> shape;
    std::stringstream dims(line.substr(tab + 2, line.size() - tab - 3));  // inside the brackets
    std::string dim;
    while (std::getline(dims, dim, ',')) shape.push_back(std::stoll(dim));
    entries.emplace_back(line.substr(0, tab), shape);
  }
  return entries;
}

// The golden file (split by key prefix) with this model's input bundles.
struct Golden : ::zest::testing::GoldenFile {
  static Golden load() { return Golden{::zest::testing::GoldenFile::load(data_path("unet_tiny.safetensors"))}; }
  UNetConditioning cond() const {
    return {input("encoder_hidden_states"), input("text_embeds"), input("time_ids")};
  }
};

// Copies every golden param.* into the model by name; fails on missing, extra or mis-shaped tensors.
inline void load_params(torch::nn::Module& model, const std::map<std::string, torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  size_t loaded = 0;
  for (auto& item : model.named_parameters()) {
    const auto it = params.find(item.key());
    ASSERT_NE(it, params.end()) << "golden file lacks " << item.key();
    ASSERT_EQ(it->second.sizes(), item.value().sizes()) << item.key();
    item.value().copy_(it->second);
    ++loaded;
  }
  ASSERT_EQ(loaded, params.size()) << "golden file has parameters the model lacks";
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// Runs units plainly and records their names, inputs and outputs in call order.
class RecordingRunner : public UnitRunner {
 public:
  struct Call {
    std::string unit_name;
    Tensors inputs;
    Tensors outputs;
  };
  Tensors run(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) override {
    auto outputs = fn(inputs);
    calls.push_back({unit_name, inputs, outputs});
    return outputs;
  }
  const Call& call(const std::string& unit_name) const {
    for (const auto& c : calls) {
      if (c.unit_name == unit_name) return c;
    }
    ADD_FAILURE() << "unit " << unit_name << " never ran";
    return calls.front();
  }
  std::vector<Call> calls;
};

}  // namespace zest::unet::test
