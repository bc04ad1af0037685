// error_of: the message of the zest::Error a call throws, "" when it throws none — for tests asserting
// what a refusal says. Shared by every test suite.
#pragma once

#include "core/check.h"

#include <functional>
#include <string>

namespace zest::testing {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace zest::testing
