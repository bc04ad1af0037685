// `zest config check FILE [--set section.key=value ...]`: validates a run file with the overrides
// applied and prints the resolved config with every default; any error is thrown (main prints it and
// exits non-zero). `zest config diff A B`: the keys whose resolved values differ. `zest config reference
// [--update DOCS]` (hidden): the key table of docs/config_reference.md, generated from the field tables.
#include "cli/commands.h"

#include "core/check.h"
#include "core/field_table.h"
#include "core/untrusted_file.h"
#include "train/run_config.h"
#include "train/run_folder.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace zest::cli {

namespace {

struct ConfigCheckOptions {
  std::string file;
  std::vector<std::string> overrides;
};

struct ConfigDiffOptions {
  std::string a, b;
  std::vector<std::string> overrides;
};

std::string shown(const std::optional<std::string>& value) { return value ? *value : "(absent)"; }

}  // namespace

void add_config_command(CLI::App& app) {
  CLI::App* config = app.add_subcommand("config", "Check run configuration files");
  config->require_subcommand(1);
  CLI::App* check = config->add_subcommand(
      "check", "Validate a run file (with --set overrides) and print the resolved config with every default");
  auto options = std::make_shared<ConfigCheckOptions>();  // outlives this function: the callback runs later
  check->add_option("file", options->file, "run configuration file (TOML)")->required();
  // One value per --set, so that a following positional FILE is never taken as a second override.
  check->add_option("--set", options->overrides, "override section.key=value (a TOML value); repeatable")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  check->callback([options] {
    const RunConfig config = parse_run_config(options->file, options->overrides);
    check_run_model(config);  // what train refuses about the model, refused here too
    std::cout << to_toml(config);
  });

  CLI::App* diff = config->add_subcommand(
      "diff", "Print the keys whose resolved values differ between two run files (defaults written out)");
  auto diff_options = std::make_shared<ConfigDiffOptions>();
  diff->add_option("a", diff_options->a, "run file (TOML)")->required();
  diff->add_option("b", diff_options->b, "run file (TOML)")->required();
  diff->add_option("--set", diff_options->overrides, "override section.key=value in both; repeatable")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  diff->callback([diff_options] {
    const RunConfig a = parse_run_config(diff_options->a, diff_options->overrides);
    const RunConfig b = parse_run_config(diff_options->b, diff_options->overrides);
    const std::vector<FieldDifference> differences = run_fields().diff(a, b);
    for (const FieldDifference& d : differences) std::cout << d.key << ": " << shown(d.a) << " → " << shown(d.b) << "\n";
    if (differences.empty()) std::cout << "no differences\n";
  });

  // Hidden: for whoever edits a table (tests/config/test_field_tables.cpp fails while the docs differ).
  CLI::App* reference = config->add_subcommand(
      "reference", "Print the key table of docs/config_reference.md, generated from the config tables");
  reference->group("");
  auto docs = std::make_shared<std::string>();
  reference->add_option("--update", *docs, "rewrite the generated table in this docs file (docs/config_reference.md)");
  reference->callback([docs] {
    if (docs->empty()) {
      std::cout << config_reference_markdown();
      return;
    }
    const std::string text = read_text_file(*docs, "docs file", uint64_t{16} << 20);
    const std::string updated = with_config_reference(text);
    if (updated != text) write_file_atomically(*docs, updated);
    std::cout << *docs << (updated == text ? ": up to date\n" : ": key table updated\n");
  });
}

}  // namespace zest::cli
