// Socket interface choice (see net_interface.h): the routing table answers through a connected UDP
// socket (no packet is sent), the interface names come from getifaddrs.
#include "comm/net_interface.h"

#include "core/check.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace zest {
namespace {

std::vector<sockaddr_in> resolve_ipv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  std::vector<sockaddr_in> out;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return out;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) out.push_back(*reinterpret_cast<sockaddr_in*>(a->ai_addr));
  ::freeaddrinfo(found);
  return out;
}

std::string to_text(const in_addr& addr) {
  char text[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &addr, text, sizeof(text));
  return text;
}

bool is_loopback(const std::string& ip) { return ip.rfind("127.", 0) == 0; }

struct Interface {
  std::string name;
  std::string address;
};

std::vector<Interface> ipv4_interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    out.push_back({i->ifa_name, to_text(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr)});
  }
  ::freeifaddrs(list);
  return out;
}

std::string interface_of(const std::string& address) {
  for (const Interface& i : ipv4_interfaces())
    if (i.address == address) return i.name;
  return is_loopback(address) ? "lo" : "?";
}

// NCCL_SOCKET_IFNAME's syntax: "eth" (a prefix), "=eth0" (exact), "^docker" (exclusion), comma lists.
std::optional<Interface> match_nccl_ifname(const std::string& spec) {
  if (spec.empty() || spec[0] == '^') return std::nullopt;
  const bool exact = spec[0] == '=';
  std::string list = exact ? spec.substr(1) : spec;
  for (size_t at = 0; at <= list.size();) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string want = list.substr(at, end - at);
    for (const Interface& i : ipv4_interfaces())
      if (!want.empty() && (exact ? i.name == want : i.name.rfind(want, 0) == 0)) return i;
    at = end + 1;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> route_source_address(const std::string& host) {
  for (const sockaddr_in& target : resolve_ipv4(host)) {
    if (is_loopback(to_text(target.sin_addr))) return "127.0.0.1";
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_in peer = target;
    peer.sin_port = htons(9);  // any port: connect() on UDP only consults the routing table
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    ::close(fd);
    if (ok) return to_text(local.sin_addr);
  }
  return std::nullopt;
}

std::vector<std::string> local_ipv4_addresses() {
  std::vector<std::string> out;
  for (const Interface& i : ipv4_interfaces())
    if (!is_loopback(i.address)) out.push_back(i.address);
  out.push_back("127.0.0.1");
  return out;
}

bool is_local_host(const std::string& host) {
  for (const sockaddr_in& target : resolve_ipv4(host)) {
    const std::string ip = to_text(target.sin_addr);
    if (is_loopback(ip)) return true;
    for (const Interface& i : ipv4_interfaces())
      if (i.address == ip) return true;
  }
  return false;
}

SocketChoice choose_socket_interface(const std::string& master_addr, const std::vector<PeerInfo>& peers, int rank) {
  for (const char* variable : {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') continue;
    const bool gloo = std::string(variable) == "GLOO_SOCKET_IFNAME";
    const auto found = gloo ? match_nccl_ifname(std::string("=") + value) : match_nccl_ifname(value);
    if (!found)
      throw Error(str("[rank ", rank, "] ", variable, "='", value, "' names no interface with an IPv4 address on host ",
                      host_name_of_this_machine(), " (see `ip -4 addr`)"));
    return {found->name, found->address, variable};
  }
  const std::string own = peers.at(static_cast<size_t>(rank)).route_ip;
  if (!is_loopback(own)) return {interface_of(own), own, "the route to the master " + master_addr};
  // The master is this host by a loopback name; if other hosts take part, use the interface they
  // reach us by (Debian's "127.0.1.1 hostname" would give them an address they cannot connect to).
  for (const PeerInfo& p : peers) {
    if (is_loopback(p.route_ip) || p.host == peers[static_cast<size_t>(rank)].host) continue;
    if (const auto via = route_source_address(p.route_ip); via && !is_loopback(*via))
      return {interface_of(*via), *via, str("the route to rank ", p.rank, "'s host ", p.host, " (", p.route_ip, ")")};
  }
  return {"lo", "127.0.0.1", "every rank runs on this host"};
}

}  // namespace zest
