// Tests of state-dict loading and saving: round trips, prefixes, dtype conversion, and the strict
// error that lists every missing, unexpected and wrong-shape key.
#include "models/state_dict.h"

#include "core/check.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>

namespace zest {
namespace {

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t width = 4) {
    fc = register_module("fc", torch::nn::Linear(3, width));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    steps = register_buffer("steps", torch::arange(3, torch::kInt64));
  }
  torch::nn::Linear fc{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::Tensor steps;
};
TORCH_MODULE(Net);

class StateDictTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("zest_state_dict_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

Net randomized_net(int seed) {
  torch::manual_seed(seed);
  Net net;
  const torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.normal_();
  return net;
}

void expect_same_state(const Net& a, const Net& b) {
  const auto pa = a->named_parameters();
  for (const auto& item : b->named_parameters()) {
    EXPECT_TRUE(torch::equal(pa[item.key()], item.value())) << item.key();
  }
  EXPECT_TRUE(torch::equal(a->steps, b->steps));
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a zest::Error";
  return "";
}

TEST_F(StateDictTest, RoundTripKeepsNamesAndValues) {
  const Net saved = randomized_net(1);
  save_state_dict(*saved, path("net.safetensors"));
  const safetensors::Reader reader(path("net.safetensors"));
  std::vector<std::string> names;
  for (const auto& info : reader.tensors()) names.push_back(info.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"fc.bias", "fc.weight", "norm.bias", "norm.weight", "steps"}));

  Net loaded = randomized_net(2);
  loaded->steps.zero_();
  const LoadReport report = load_state_dict(*loaded, reader);
  EXPECT_EQ(report.loaded.size(), 5u);
  EXPECT_TRUE(report.missing.empty());
  EXPECT_TRUE(report.unexpected.empty());
  expect_same_state(saved, loaded);
  EXPECT_TRUE(loaded->fc->weight.requires_grad());
}

TEST_F(StateDictTest, SavesInDtypeAndConvertsOnLoad) {
  const Net saved = randomized_net(1);
  save_state_dict(*saved, path("bf16.safetensors"), torch::kBFloat16);
  const safetensors::Reader reader(path("bf16.safetensors"));
  EXPECT_EQ(reader.info("fc.weight").dtype, torch::kBFloat16);
  EXPECT_EQ(reader.info("steps").dtype, torch::kInt64);  // non-floating tensors keep their dtype

  Net loaded = randomized_net(2);
  load_state_dict(*loaded, reader);
  EXPECT_EQ(loaded->fc->weight.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(loaded->fc->weight, saved->fc->weight.to(torch::kBFloat16).to(torch::kFloat32)));
  EXPECT_FALSE(torch::equal(loaded->fc->weight, saved->fc->weight));

  LoadOptions exact;
  exact.convert_dtype = false;
  const std::string message = error_of([&] { load_state_dict(*loaded, reader, exact); });
  EXPECT_NE(message.find("fc.weight (file BF16, module F32)"), std::string::npos) << message;
}

TEST_F(StateDictTest, PrefixSelectsTheStateDict) {
  const Net saved = randomized_net(1);
  safetensors::NamedTensors golden{{"input.x", torch::ones({2, 3})}, {"grad.fc.weight", torch::ones({4, 3})}};
  for (const auto& item : saved->named_parameters()) golden.emplace_back("param." + item.key(), item.value());
  golden.emplace_back("param.steps", saved->steps);
  safetensors::save_file(path("golden.safetensors"), golden);

  Net loaded = randomized_net(2);
  LoadOptions options;
  options.prefix = "param.";
  const LoadReport report = load_state_dict(*loaded, safetensors::Reader(path("golden.safetensors")), options);
  EXPECT_TRUE(report.unexpected.empty());
  expect_same_state(saved, loaded);
}

TEST_F(StateDictTest, StrictErrorListsEveryKindOfMismatch) {
  // The file: fc.weight of the wrong shape, norm.* absent, two extra tensors.
  safetensors::save_file(path("bad.safetensors"), {{"fc.weight", torch::zeros({5, 3})},
                                                    {"fc.bias", torch::zeros({4})},
                                                    {"steps", torch::zeros({3}, torch::kInt64)},
                                                    {"extra.a", torch::zeros({1})},
                                                    {"extra.b", torch::zeros({1})}});
  Net net = randomized_net(2);
  const torch::Tensor before = net->fc->bias.clone();
  const std::string message =
      error_of([&] { load_state_dict(*net, safetensors::Reader(path("bad.safetensors"))); });
  EXPECT_NE(message.find(path("bad.safetensors")), std::string::npos) << message;
  EXPECT_NE(message.find("2 missing keys"), std::string::npos) << message;
  EXPECT_NE(message.find("norm.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("norm.bias"), std::string::npos) << message;
  EXPECT_NE(message.find("2 unexpected keys"), std::string::npos) << message;
  EXPECT_NE(message.find("extra.a, extra.b"), std::string::npos) << message;
  EXPECT_NE(message.find("1 keys of the wrong shape: fc.weight (file [5, 3], module [4, 3])"),
            std::string::npos)
      << message;
  EXPECT_TRUE(torch::equal(before, net->fc->bias));  // nothing copied
}

TEST_F(StateDictTest, LongListsShowFirstFewAndCount) {
  safetensors::NamedTensors many;
  for (int i = 0; i < 12; ++i) many.emplace_back("extra." + std::to_string(i), torch::zeros({1}));
  safetensors::save_file(path("many.safetensors"), many);
  Net net;
  const std::string message =
      error_of([&] { load_state_dict(*net, safetensors::Reader(path("many.safetensors"))); });
  EXPECT_NE(message.find("12 unexpected keys"), std::string::npos) << message;
  EXPECT_NE(message.find(": extra.0, extra.1, extra.10, extra.11, extra.2, ... (7 more)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("5 missing keys"), std::string::npos) << message;
}

TEST_F(StateDictTest, NonStrictSkipsKeysButNotShapes) {
  const Net saved = randomized_net(1);
  safetensors::save_file(path("partial.safetensors"),
                         {{"fc.weight", saved->fc->weight}, {"unrelated", torch::zeros({2})}});
  Net net = randomized_net(2);
  LoadOptions lenient;
  lenient.strict = false;
  const LoadReport report = load_state_dict(*net, safetensors::Reader(path("partial.safetensors")), lenient);
  EXPECT_EQ(report.loaded, std::vector<std::string>{"fc.weight"});
  EXPECT_EQ(report.missing.size(), 4u);
  EXPECT_EQ(report.unexpected, std::vector<std::string>{"unrelated"});
  EXPECT_TRUE(torch::equal(net->fc->weight, saved->fc->weight));

  safetensors::save_file(path("shape.safetensors"), {{"fc.weight", torch::zeros({4, 4})}});
  const std::string message =
      error_of([&] { load_state_dict(*net, safetensors::Reader(path("shape.safetensors")), lenient); });
  EXPECT_NE(message.find("fc.weight (file [4, 4], module [4, 3])"), std::string::npos) << message;
}

}  // namespace
}  // namespace zest
