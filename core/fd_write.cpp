// Whole writes to a file descriptor (see fd_write.h).
#include "core/fd_write.h"

#include <unistd.h>

#include <cerrno>

namespace zest {

bool write_all(int fd, std::string_view text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {  // a regular file takes no byte of a nonempty write only when its device is full
      errno = ENOSPC;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace zest
