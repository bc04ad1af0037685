// error_of: the message of the zest::Error a call throws, "" when it throws none — for tests asserting
// what a refusal says; exception_text: the same for any std::exception. Shared by every test suite.
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

// The message of any std::exception a call throws (LibTorch's and the standard library's too), "" when none.
inline std::string exception_text(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace zest::testing
