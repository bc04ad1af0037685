// Helpers for the hytext suite: where the golden files of scripts/golden/make_hy_text_goldens.py live
// (tests/data/hy_text) and reading them.
#pragma once

#include "core/untrusted_file.h"
#include "formats/json_text.h"
#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <string>

namespace zest::hytext::test {

inline std::filesystem::path golden_dir() { return std::filesystem::path(ZEST_TEST_DATA) / "hy_text"; }

inline bool goldens_present() { return std::filesystem::exists(golden_dir() / "hy_text_golden.json"); }

#define ZEST_REQUIRE_HY_TEXT_GOLDENS()                                                                       \
  if (!::zest::hytext::test::goldens_present())                                                              \
  GTEST_SKIP() << ::zest::hytext::test::golden_dir().string()                                                \
               << " is absent: run scripts/golden/make_hy_text_goldens.py where transformers is installed"

inline nlohmann::json golden_json() {
  const std::string path = (golden_dir() / "hy_text_golden.json").string();
  return parse_json(read_text_file(path, "golden"), path);
}

inline torch::Tensor golden_tensor(const std::string& name) {
  static const safetensors::Reader reader((golden_dir() / "hy_text_golden.safetensors").string());
  return reader.read(name);
}

}  // namespace zest::hytext::test
