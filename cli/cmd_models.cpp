// `zest models list` (built-in configurations with their exact parameter counts) and `zest models
// parity` (a port checked against a reference golden file: output, loss = mean(out²) and every gradient;
// models/parity.h runs it).
#include "cli/commands.h"

#include "core/config_reader.h"
#include "models/parity.h"
#include "models/registry.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace zest::cli {
namespace {

// 1042868681 → "1,042,868,681" (counts are never negative).
std::string with_thousands(int64_t value) {
  const std::string digits = std::to_string(value);
  std::string text;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text += ',';
    text += digits[i];
  }
  return text;
}

void list_models() {
  std::printf("%-16s %-10s %15s\n", "name", "family", "parameters");
  for (const BuiltinModelConfig& config : builtin_model_configs()) {
    const std::string source = "configs/models/" + config.name + ".toml";
    ConfigTable table = ConfigTable::parse_string(config.toml_text, source);
    const int64_t count = model_family(config.family).count_parameters(table);
    std::printf("%-16s %-10s %15s\n", config.name.c_str(), config.family.c_str(),
                with_thousands(count).c_str());
  }
}

}  // namespace

void add_models_command(CLI::App& app) {
  CLI::App* models =
      app.add_subcommand("models", "Built-in model configurations and reference parity checks");
  models->require_subcommand(1);

  CLI::App* list =
      models->add_subcommand("list", "List the built-in configurations with their exact parameter counts");
  list->callback([] { list_models(); });

  CLI::App* parity = models->add_subcommand(
      "parity",
      "Run a model on a golden file's parameters and inputs; compare output, loss = mean(out^2) and gradients");
  auto options = std::make_shared<ParityOptions>();  // outlives this function: the callback runs later
  parity->add_option("--model", options->family, "model family (hymotion, unet)")->required();
  parity->add_option("--config", options->config_path, "model configuration (TOML, reference field names)")
      ->required()
      ->check(CLI::ExistingFile);
  parity
      ->add_option("--golden", options->golden_path,
                   "golden file (safetensors with param.*, input.*, output.*, grad.*)")
      ->required()
      ->check(CLI::ExistingFile);
  parity->add_option("--atol-out", options->atol_out, "tolerance on the output and the loss")
      ->capture_default_str();
  parity->add_option("--rtol-grad", options->rtol_grad, "gradient tolerance relative to max |golden| of each tensor")
      ->capture_default_str();
  parity->add_option("--atol-grad", options->atol_grad, "absolute floor added to every gradient's tolerance")
      ->capture_default_str();
  parity->callback(
      [options] { exit_code() = check_parity(*options) ? 0 : 1; });
}

}  // namespace zest::cli
