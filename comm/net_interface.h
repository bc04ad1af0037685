// Which network interface the ranks' sockets (Gloo, and NCCL's bootstrap) use: GLOO_SOCKET_IFNAME or
// NCCL_SOCKET_IFNAME when set, else the interface that routes to the master address — never the
// loopback address a Debian /etc/hosts gives the host's own name ("127.0.1.1 node1") when the world
// spans several hosts.
#pragma once

#include "comm/rendezvous.h"

#include <optional>
#include <string>
#include <vector>

namespace zest {

// The local IPv4 address the kernel would send packets to `host` from ("127.0.0.1" for a loopback
// host); nullopt when `host` does not resolve or is unreachable.
std::optional<std::string> route_source_address(const std::string& host);

// This host's IPv4 addresses, the loopback one last.
std::vector<std::string> local_ipv4_addresses();

// True if `host` resolves to an address of this machine.
bool is_local_host(const std::string& host);

struct SocketChoice {
  std::string interface;  // "eth0", "lo"
  std::string address;    // its IPv4 address, what Gloo binds to
  std::string reason;     // "GLOO_SOCKET_IFNAME", "the route to the master 10.0.0.1", ...
};

// For `rank` once all peers are known (their route addresses tell a loopback-routed master host which
// interface the other hosts reach it by).
SocketChoice choose_socket_interface(const std::string& master_addr, const std::vector<PeerInfo>& peers, int rank);

}  // namespace zest
