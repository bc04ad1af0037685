// The built `zest` binary, for the tests that run it as a user would.
#pragma once

#include <string>

namespace zest::testing {

inline std::string zest_binary() { return std::string(ZEST_BINARY_DIR) + "/zest"; }

}  // namespace zest::testing
