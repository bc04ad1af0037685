// PeerWatch: each rank's heartbeat and collective count, published in the rendezvous store by a
// thread of its own, so that a collective that fails or times out names the rank(s) that never
// arrived (stopped, hung, killed, or elsewhere in the program) and their hosts.
#pragma once

#include "comm/rendezvous.h"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace c10d {
class TCPStore;
}

namespace zest {

class PeerWatch {
 public:
  // Connects its own client to the store at host:port (the collectives' store is not shared across
  // threads) and starts beating.
  PeerWatch(const Rendezvous& rendezvous, const std::string& prefix, int rank);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  int64_t next_sequence() { return issued_.fetch_add(1) + 1; }  // numbers an issued collective

  // The ranks that kept collective `sequence` (0: any) from completing, as "never arrived: rank 1 (host
  // h, not answering: stopped, hung or killed)". Watches the heartbeats for about two seconds.
  std::string never_arrived(int64_t sequence);
  // Ranks whose heartbeat has not moved for `quiet`, described; "" if none (observes once).
  std::string silent_peers(std::chrono::milliseconds quiet);

  // After a failed collective: says so in the store; rank 0 (whose process hosts the store) then waits
  // up to `limit` for the other live ranks to have said so too, so that their diagnosis can still read.
  void post_failure();
  void linger_for_others(std::chrono::milliseconds limit);

 private:
  struct Beat {
    int64_t counter = -1;
    int64_t issued = -1;
    std::chrono::steady_clock::time_point changed;
  };
  void beat_loop();
  bool observe();  // false: the store could not be read
  std::string describe(int r) const;

  std::vector<PeerInfo> peers_;
  std::string prefix_;
  int rank_;
  c10::intrusive_ptr<c10d::Store> keep_store_;  // a store this rank hosts lives as long as the watch
  std::unique_ptr<c10d::TCPStore> store_;
  std::mutex store_mutex_;
  std::map<int, Beat> seen_;
  std::atomic<int64_t> issued_{0};
  std::atomic<bool> stopping_{false};
  std::thread beater_;
};

}  // namespace zest
