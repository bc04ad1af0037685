// Helpers for the safetensors tests: a self-removing temporary folder, raw file crafting and an
// "error mentions all of these" assertion.
#pragma once

#include "common/temp_dir.h"

#include "core/check.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace zest::safetensors::test {

using ::zest::testing::TempDir;

// Writes `length` (little-endian u64) + `header` + `data` verbatim, for corrupt-file tests.
inline void write_raw(const std::string& path, uint64_t length, const std::string& header,
                      const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header << data;
}
inline void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  write_raw(path, header.size(), header, data);
}

// Runs `fn`, expecting zest::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << (parts.empty() ? "" : parts.front()) << "'";
  } catch (const zest::Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "': " << message;
  }
}

}  // namespace zest::safetensors::test
