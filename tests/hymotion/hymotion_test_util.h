// Helpers for the HY-Motion tests: built-in config files, the golden file (params, inputs, outputs,
// grads, debug activations) and strict by-name parameter loading.
#pragma once

#include "common/golden_file.h"

#include "formats/safetensors.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "models/hymotion/hymotion.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace zest::hymotion::test {

inline std::string data_path(const std::string& name) { return std::string(ZEST_TEST_DATA) + "/" + name; }

inline std::string config_path(const std::string& flavor) {
  return std::string(ZEST_SOURCE_DIR) + "/configs/models/" + flavor + ".toml";
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline HyMotionConfig load_config(const std::string& flavor) {
  auto table = ConfigTable::parse_file(config_path(flavor));
  return HyMotionConfig::from_toml(table);
}

// The golden file (split by key prefix) with this model's input bundles.
struct Golden : ::zest::testing::GoldenFile {
  static Golden load() { return Golden{::zest::testing::GoldenFile::load(data_path("hymotion_tiny.safetensors"))}; }

  HyMotionInputs inputs() const {
    return {input("x"),         input("ctxt_input"),      input("vtxt_input"),
            input("timesteps"), input("x_mask_temporal"), input("ctxt_mask_temporal")};
  }
};

// Copies every named tensor into the model's parameter of the same name; the sets of names and every
// shape must match exactly (strict loading).
inline void load_params(torch::nn::Module& model, const std::map<std::string, torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  const auto named = model.named_parameters();
  ASSERT_EQ(named.size(), params.size());
  for (const auto& p : named) {
    const auto it = params.find(p.key());
    ASSERT_NE(it, params.end()) << "golden file has no param." << p.key();
    ASSERT_EQ(p.value().sizes(), it->second.sizes()) << p.key();
    p.value().copy_(it->second);
  }
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// A model with the golden parameters.
inline std::shared_ptr<HyMotionModel> golden_model(const Golden& golden) {
  auto model = std::make_shared<HyMotionModel>(load_config("hymotion_tiny"));
  load_params(*model, golden.params());
  return model;
}

}  // namespace zest::hymotion::test
