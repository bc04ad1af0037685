// Writing a whole text to a file descriptor through short writes and interrupted calls.
#pragma once

#include <string_view>

namespace zest {

// Writes all of `text` to `fd`, retrying short writes and EINTR; false when a write fails, with errno
// set (ENOSPC when a write took nothing without an error).
bool write_all(int fd, std::string_view text);

}  // namespace zest
