// Writing a whole text to a file descriptor through short writes and interrupted calls.
#pragma once

#include <string_view>

namespace zest {

// Writes all of `text` to `fd`, retrying short writes and EINTR; false (errno set) when a write fails.
bool write_all(int fd, std::string_view text);

}  // namespace zest
