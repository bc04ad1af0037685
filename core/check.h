// zest::Error and the ZEST_CHECK family: every invariant and every foreign call reports file:line,
// the failing expression and (where known) the rank, then throws; the top level turns it into a message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace zest {

// The one exception type zest throws for user-facing failures (bad config, bad checkpoint, failed rank).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Rank used to prefix error messages; set once by the communicator at start-up (-1 = unknown).
inline int& error_rank() {
  static int rank = -1;
  return rank;
}

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
template <typename... Args>
[[noreturn]] void fail(const char* file, int line, const char* expr, const Args&... args) {
  std::ostringstream os;
  if (error_rank() >= 0) os << "[rank " << error_rank() << "] ";
  append(os, args...);
  os << " (" << file << ":" << line;
  if (expr && *expr) os << ", check `" << expr << "`";
  os << ")";
  throw Error(os.str());
}
}  // namespace detail

// Concatenates its message arguments with operator<<, e.g. zest::str("unit ", idx, " has ", n).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

}  // namespace zest

// ZEST_CHECK(cond, "message parts", ...): invariant; throws zest::Error naming the rank and location.
#define ZEST_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) ::zest::detail::fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)

// ZEST_FAIL("message parts", ...): unconditional failure with location.
#define ZEST_FAIL(...) ::zest::detail::fail(__FILE__, __LINE__, "", __VA_ARGS__)

// ZEST_MPI_CHECK(MPI_Call(...)): turns a non-success MPI return code into zest::Error with MPI's text.
#define ZEST_MPI_CHECK(call)                                                           \
  do {                                                                                 \
    const int zest_mpi_rc_ = (call);                                                   \
    if (zest_mpi_rc_ != MPI_SUCCESS) {                                                 \
      char zest_mpi_msg_[MPI_MAX_ERROR_STRING];                                        \
      int zest_mpi_len_ = 0;                                                           \
      MPI_Error_string(zest_mpi_rc_, zest_mpi_msg_, &zest_mpi_len_);                   \
      ::zest::detail::fail(__FILE__, __LINE__, #call, "MPI error: ",                  \
                           std::string(zest_mpi_msg_, zest_mpi_len_));                 \
    }                                                                                  \
  } while (0)
