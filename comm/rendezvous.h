// The rendezvous of a world started without MPI: rank 0 (or torchrun's agent) hosts a TCP store at
// MASTER_ADDR:MASTER_PORT, every rank joins it, and every rank agrees on the world size and the
// configuration before the first collective. It reports while it waits, ends at one deadline
// ([engine] rendezvous_timeout_s) naming the ranks that never came, and honours stop signals.
#pragma once

#include "comm/launch_env.h"

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace c10d {
class Store;
}

namespace zest {

// Process-wide settings, set by `zest train` from its run file before the world communicator exists.
void set_rendezvous_timeout(double seconds);  // > 0; ZEST_RENDEZVOUS_TIMEOUT_S overrides
std::chrono::milliseconds rendezvous_timeout();  // default 300 s
void set_rendezvous_fingerprint(const std::string& fingerprint);  // e.g. a hash of the resolved config
// What says that a stop signal arrived (zest train's handlers); waits check it and end with an error.
void set_interrupt_check(std::function<bool()> interrupted);
bool interrupted();

struct PeerInfo {
  int rank = 0;
  std::string host;      // its host name
  std::string route_ip;  // the local address its packets to the master leave from
  int node_rank = 0;
  long pid = 0;
};

// "rank 3 (host node2)".
std::string describe_peer(const std::vector<PeerInfo>& peers, int rank);

struct Rendezvous {
  c10::intrusive_ptr<c10d::Store> store;  // the TCP store, this attempt's keys under store_prefix
  std::string host;                       // of the store
  int port = 0;
  std::vector<PeerInfo> peers;            // every rank, by rank
};

// Blocks until every rank of `world` has joined and agreed; errors (one line, the same cause on every
// rank that can still hear the store) name the ranks and hosts involved.
Rendezvous join_world(const WorldInfo& world);

// This host's name (gethostname).
std::string host_name_of_this_machine();

}  // namespace zest
