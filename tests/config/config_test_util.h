// Helpers for config tests: read one table of a TOML string through its component's from_toml, and
// assert that an error message contains every expected part.
#pragma once

#include "core/check.h"
#include "core/config_reader.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace zest::test {

// Parses `text` as "cfg.toml" and runs T::from_toml on table `section`.
template <typename T>
T read_section(const std::string& text, const std::string& section) {
  ConfigTable root = ConfigTable::parse_string(text, "cfg.toml");
  ConfigTable table = root.table(section);
  return T::from_toml(table);
}

// Runs `fn`, expecting zest::Error whose message contains every one of `parts`; returns the message.
inline std::string expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const zest::Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "':\n  " << message;
    return message;
  }
  ADD_FAILURE() << "expected an error mentioning '" << (parts.empty() ? "" : parts.front()) << "'";
  return "";
}

}  // namespace zest::test
