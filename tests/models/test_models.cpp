// Tests of the model registry (families, embedded built-in configurations) and of `zest models list`
// and `zest models parity`, run in-process through the same CLI11 subcommand the binary registers.
#include "formats/safetensors.h"
#include "common/tensor_close.h"
#include "engine/activation_checkpoint.h"
#include "core/check.h"
#include "models/registry.h"
#include "models/state_dict.h"
#include "cli/commands.h"

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace zest {
namespace {

const std::string kData = ZEST_TEST_DATA;
const std::string kConfigs = std::string(ZEST_SOURCE_DIR) + "/configs/models";

struct CliResult {
  int code = 0;
  std::string out;    // stdout
  std::string error;  // what main() would print for a thrown error
};

// Runs `zest <args>` with the models subcommand, as cli/main.cpp does.
CliResult run_cli(const std::vector<std::string>& args) {
  CLI::App app{"zest"};
  app.require_subcommand(1);
  cli::add_models_command(app);
  cli::exit_code() = 0;
  std::vector<const char*> argv{"zest"};
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  CliResult result;
  ::testing::internal::CaptureStdout();
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    result.code = cli::exit_code();
  } catch (const CLI::ParseError& e) {
    result.error = e.what();
    result.code = e.get_exit_code() == 0 ? 2 : e.get_exit_code();
  } catch (const std::exception& e) {
    result.error = e.what();
    result.code = 1;
  }
  std::cout.flush();
  std::fflush(stdout);
  result.out = ::testing::internal::GetCapturedStdout();
  return result;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A scratch folder per test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir()
      : path_(std::filesystem::temp_directory_path() /
              ("zest_models_" + std::to_string(::getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// ----------------------------------------------------------------------------------------------------
// registry

// The built-ins come first (a test may have registered a family of its own after them:
// tests/models/test_add_a_family.cpp).
TEST(Registry, FamiliesAndLookupErrors) {
  std::vector<std::string> names;
  for (const ModelFamily& family : model_families()) names.push_back(family.name);
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 2), (std::vector<std::string>{"hymotion", "unet"}));
  EXPECT_EQ(model_family("unet").name, "unet");
  try {
    model_family("dit");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model family 'dit' (known: hymotion, unet"), std::string::npos)
        << e.what();
  }
}

TEST(Registry, BuiltinConfigsAreTheConfigFiles) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs)) {
    if (entry.path().extension() == ".toml") files.push_back(entry.path().stem().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> names;
  for (const BuiltinModelConfig& config : builtin_model_configs()) {
    names.push_back(config.name);
    EXPECT_EQ(config.family, config.name.substr(0, config.name.find('_')));
    EXPECT_EQ(config.toml_text, read_text(kConfigs + "/" + config.name + ".toml")) << config.name;
  }
  EXPECT_EQ(names, files);
  EXPECT_EQ(builtin_model_config("unet_sd15").family, "unet");
  try {
    builtin_model_config("unet_sd16");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'unet_sd15'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hymotion_1b"), std::string::npos) << e.what();
  }
}

// ----------------------------------------------------------------------------------------------------
// zest models list

TEST(ModelsList, ShowsExactParameterCounts) {
  const CliResult result = run_cli({"models", "list"});
  ASSERT_EQ(result.code, 0) << result.error;
  const std::vector<std::vector<std::string>> expected{
      {"hymotion_1b", "hymotion", "1,042,868,681"}, {"hymotion_lite", "hymotion", "460,841,673"},
      {"unet_sd15", "unet", "859,520,964"},         {"unet_sdxl", "unet", "2,567,463,684"},
      {"hymotion_tiny", "hymotion", "181,036"},     {"unet_tiny", "unet", "174,236"}};
  const std::vector<std::string> lines = lines_of(result.out);
  for (const auto& row : expected) {
    const bool found = std::any_of(lines.begin(), lines.end(),
                                   [&](const std::string& line) { return words_of(line) == row; });
    EXPECT_TRUE(found) << "no line '" << row[0] << " " << row[1] << " " << row[2] << "' in:\n" << result.out;
  }
  EXPECT_EQ(lines.size(), builtin_model_configs().size() + 1);  // a header, then one line per config
}

// ----------------------------------------------------------------------------------------------------
// zest models parity

CliResult parity(const std::string& family, const std::string& config, const std::string& golden,
                 const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"models", "parity", "--model", family, "--config", config, "--golden", golden};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args);
}

// The summary is the last line; it starts with PASS or FAIL.
std::string summary(const CliResult& result) {
  const auto lines = lines_of(result.out);
  return lines.empty() ? "" : lines.back();
}

TEST(ModelsParity, HyMotionTinyPasses) {
  const CliResult result =
      parity("hymotion", kConfigs + "/hymotion_tiny.toml", kData + "/hymotion_tiny.safetensors");
  ASSERT_EQ(result.code, 0) << result.error << "\n" << result.out;
  EXPECT_EQ(summary(result).rfind("PASS parity hymotion: output ", 0), 0u) << result.out;
  EXPECT_NE(result.out.find("worst gradient: grad."), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("grad.double_blocks.0.motion_mod.linear.weight  max abs err"), std::string::npos);
}

TEST(ModelsParity, UNetTinyPasses) {
  const CliResult result = parity("unet", kConfigs + "/unet_tiny.toml", kData + "/unet_tiny.safetensors");
  ASSERT_EQ(result.code, 0) << result.error << "\n" << result.out;
  EXPECT_EQ(summary(result).rfind("PASS parity unet: output ", 0), 0u) << result.out;
}

// Copies a golden file with `edit` applied to its tensors.
std::string edited_golden(const ScratchDir& dir, const std::string& source,
                          const std::function<void(safetensors::NamedTensors&)>& edit) {
  safetensors::NamedTensors tensors = safetensors::load_file(source);
  edit(tensors);
  const std::string path = dir.file("golden.safetensors");
  safetensors::save_file(path, tensors);
  return path;
}

TEST(ModelsParity, PerturbedParameterFails) {
  const ScratchDir dir;
  const std::string golden = edited_golden(dir, kData + "/hymotion_tiny.safetensors", [](auto& tensors) {
    for (auto& [name, tensor] : tensors) {
      if (name == "param.final_layer.linear.weight") tensor = tensor + 1e-3;
    }
  });
  const CliResult result = parity("hymotion", kConfigs + "/hymotion_tiny.toml", golden);
  EXPECT_EQ(result.code, 1) << result.error << "\n" << result.out;
  EXPECT_EQ(summary(result).rfind("FAIL parity hymotion: output ", 0), 0u) << result.out;
}

TEST(ModelsParity, PerturbedGradientFailsAndIsNamedWorst) {
  const ScratchDir dir;
  const std::string key = "grad.conv_in.bias";
  const std::string golden = edited_golden(dir, kData + "/unet_tiny.safetensors", [&](auto& tensors) {
    for (auto& [name, tensor] : tensors) {
      if (name == key) tensor = tensor.clone().index_put_({0}, tensor[0] + 1e-2);
    }
  });
  const CliResult result = parity("unet", kConfigs + "/unet_tiny.toml", golden);
  EXPECT_EQ(result.code, 1) << result.error << "\n" << result.out;
  EXPECT_NE(result.out.find("worst gradient: " + key + " (max abs err 0.01"), std::string::npos) << result.out;
  EXPECT_NE(summary(result).find("FAIL parity unet"), std::string::npos) << result.out;
  // A looser gradient tolerance accepts it.
  EXPECT_EQ(parity("unet", kConfigs + "/unet_tiny.toml", golden, {"--atol-grad", "0.02"}).code, 0);
}

// Gradients are judged against their own scale: a small gradient (all values below the old absolute
// tolerance of 1e-4) that is zero, or twice the reference, fails; so does one off by 1 % (the port's
// float32 error is ~1e-5 of the scale).
TEST(ModelsParity, SmallGradientThatIsZeroOrWrongFails) {
  const std::string key = "grad.mid_block.attentions.0.transformer_blocks.1.norm2.bias";  // max |g| 4.6e-6
  for (const double factor : {0.0, 0.5, 1.01}) {
    SCOPED_TRACE("golden gradient × " + std::to_string(factor));
    const ScratchDir dir;
    const std::string golden = edited_golden(dir, kData + "/unet_tiny.safetensors", [&](auto& tensors) {
      for (auto& [name, tensor] : tensors) {
        if (name == key) {
          ASSERT_LT(tensor.abs().max().item().toDouble(), 1e-5);
          tensor = tensor * factor;
        }
      }
    });
    const CliResult result = parity("unet", kConfigs + "/unet_tiny.toml", golden);
    EXPECT_EQ(result.code, 1) << result.error << "\n" << result.out;
    EXPECT_NE(result.out.find("worst gradient: " + key), std::string::npos) << result.out;
    EXPECT_EQ(summary(result).rfind("FAIL parity unet", 0), 0u) << result.out;
  }
}

TEST(ModelsParity, MissingGoldenGradientFails) {
  const ScratchDir dir;
  const std::string golden = edited_golden(dir, kData + "/hymotion_tiny.safetensors", [](auto& tensors) {
    std::erase_if(tensors, [](const auto& item) { return item.first == "grad.final_layer.linear.bias"; });
  });
  const CliResult result = parity("hymotion", kConfigs + "/hymotion_tiny.toml", golden);
  EXPECT_EQ(result.code, 1) << result.out;
  EXPECT_NE(result.out.find("grad.final_layer.linear.bias  MISSING"), std::string::npos) << result.out;
}

TEST(ModelsParity, MismatchingConfigFails) {
  const ScratchDir dir;
  // More blocks than the golden file has: their parameters become missing keys.
  std::string text = read_text(kConfigs + "/hymotion_tiny.toml");
  const std::string from = "num_layers = 6";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "num_layers = 9");
  std::ofstream(dir.file("larger.toml")) << text;
  const CliResult larger = parity("hymotion", dir.file("larger.toml"), kData + "/hymotion_tiny.safetensors");
  EXPECT_EQ(larger.code, 1) << larger.out;
  EXPECT_NE(larger.error.find("hymotion_tiny.safetensors"), std::string::npos) << larger.error;
  EXPECT_NE(larger.error.find("missing keys"), std::string::npos) << larger.error;

  // A configuration of the other family.
  const CliResult other = parity("unet", kConfigs + "/hymotion_tiny.toml", kData + "/hymotion_tiny.safetensors");
  EXPECT_NE(other.code, 0) << other.out;
}

// ----------------------------------------------------------------------------------------------------
// activation checkpointing on the real models

// Gradients of loss = mean(out²) on a golden file's parameters and inputs, with units run through `policy`.
std::map<std::string, torch::Tensor> golden_grads(const std::string& flavor, CheckpointPolicy policy) {
  const BuiltinModelConfig& builtin = builtin_model_config(flavor);
  const ModelFamily& family = model_family(builtin.family);
  ConfigTable config = ConfigTable::parse_string(builtin.toml_text, flavor);
  const std::shared_ptr<UnitModule> model = family.build(config);
  const safetensors::Reader golden(kData + "/" + flavor + ".safetensors");
  LoadOptions load;
  load.prefix = "param.";
  load_state_dict(*model, golden, load);
  std::vector<std::string> units;
  for (const UnitDecl& decl : model->unit_decls()) units.push_back(decl.name);
  model->set_unit_runner(std::make_shared<CheckpointRunner>(policy, 2, units));

  TensorMap inputs;
  for (const auto& info : golden.tensors()) {
    if (info.name.rfind("input.", 0) == 0) inputs[info.name.substr(6)] = golden.read(info.name);
  }
  model->train();
  family.forward(*model, inputs).pow(2).mean().backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad();
  return grads;
}

// Per tensor, relative to its own scale (see tests/common/tensor_close.h); summation-order rounding only.
constexpr testing::TensorTolerance kCheckpointedGrads{1e-5, 1e-10};

// Not bitwise: a unit input used several times inside the unit (HY-Motion's adapter feeds both
// modulations of a double block; UNet's time embedding feeds every resnet) gets its gradient summed per
// unit under checkpointing but per use without it, and fp32 addition is not associative. Units whose
// inputs are used once give bitwise-equal gradients (tests/engine/test_activation_checkpoint.cpp); here
// the differences must stay at rounding level.
void expect_checkpointing_matches(const std::string& flavor) {
  const auto plain = golden_grads(flavor, CheckpointPolicy::none);
  for (const CheckpointPolicy policy : {CheckpointPolicy::all, CheckpointPolicy::every_k}) {
    const auto checkpointed = golden_grads(flavor, policy);
    ASSERT_EQ(plain.size(), checkpointed.size());
    for (const auto& [name, grad] : plain) {
      const torch::Tensor& other = checkpointed.at(name);
      ASSERT_TRUE(grad.defined() && other.defined()) << name;
      const auto c = testing::closeness(other, grad, kCheckpointedGrads);
      EXPECT_TRUE(c.ok) << flavor << " " << name << " (policy " << to_string(policy) << "): " << c.describe();
    }
  }
}

TEST(ActivationCheckpointModels, HyMotionTinyGradientsMatch) { expect_checkpointing_matches("hymotion_tiny"); }

TEST(ActivationCheckpointModels, UNetTinyGradientsMatch) { expect_checkpointing_matches("unet_tiny"); }

}  // namespace
}  // namespace zest
