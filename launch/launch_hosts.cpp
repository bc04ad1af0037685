// Host lists, hostfiles and a free port for `zest launch` (see launch_hosts.h).
#include "launch/launch_hosts.h"

#include "core/check.h"
#include "core/untrusted_file.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace zest {

std::vector<std::pair<std::string, int>> parse_host_list(const std::string& list) {
  std::vector<std::pair<std::string, int>> hosts;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    const auto colon = item.rfind(':');
    int slots = 1;
    if (colon != std::string::npos) {
      try {
        size_t used = 0;
        slots = std::stoi(item.substr(colon + 1), &used);
        if (used != item.size() - colon - 1 || slots < 1) throw std::invalid_argument(item);
      } catch (const std::exception&) {
        throw Error("zest launch -H: '" + printable(item, 80) + "' is not HOST or HOST:SLOTS with SLOTS >= 1");
      }
    }
    hosts.emplace_back(item.substr(0, colon), slots);
  }
  if (hosts.empty()) throw Error("zest launch -H: no hosts in '" + list + "'");
  return hosts;
}

std::vector<std::pair<std::string, int>> read_hostfile(const std::string& path) {
  std::istringstream in(read_text_file(path, "hostfile (zest launch --hostfile)", 1 << 20));
  std::string list;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    std::stringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;
    int slots = 1;
    if (host.find(':') != std::string::npos) {
      list += (list.empty() ? "" : ",") + host;
      continue;
    }
    while (words >> word) {
      if (word.rfind("slots=", 0) != 0) continue;
      try {
        slots = std::stoi(word.substr(6));
      } catch (const std::exception&) {
        slots = 0;
      }
      if (slots < 1)
        throw Error(printable(path) + ":" + std::to_string(line_no) + ": '" + printable(word, 40) +
                    "' must be slots=N with N >= 1");
    }
    list += (list.empty() ? "" : ",") + host + ":" + std::to_string(slots);
  }
  if (list.empty()) throw Error("zest launch --hostfile: " + path + " names no host");
  return parse_host_list(list);
}

int find_free_port(const std::string& addr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ZEST_CHECK(fd >= 0, "zest launch: socket failed: ", std::strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(sa);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  ::close(fd);
  ZEST_CHECK(ok, "zest launch: cannot find a free TCP port on ", addr, ": ", std::strerror(errno));
  return ntohs(sa.sin_port);
}

}  // namespace zest
