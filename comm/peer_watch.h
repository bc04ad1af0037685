// PeerWatch: each rank's heartbeat and collective count, published in the rendezvous store by a
// thread of its own, so that a collective that fails or times out names the rank(s) that never
// arrived (stopped, hung, killed, or elsewhere in the program) and their hosts. Only that thread
// talks to the store (a StoreWorker's): a store that stops answering bounds the diagnosis, it never
// hangs the rank.
#pragma once

#include "comm/rendezvous.h"
#include "comm/store_worker.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace zest {

class PeerWatch {
 public:
  // Connects its own client to the store at host:port (the collectives' store is not shared across
  // threads) and starts beating.
  PeerWatch(const Rendezvous& rendezvous, const std::string& prefix, int rank);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  int64_t next_sequence();  // numbers an issued collective

  // The ranks that kept collective `sequence` (0: any) from completing, as "never arrived: rank 1 (host
  // h, not answering: stopped, hung or killed)". Watches the heartbeats for about two seconds.
  std::string never_arrived(int64_t sequence);
  // Ranks whose heartbeat has not moved for `quiet`, described; "" if none (observes once).
  std::string silent_peers(std::chrono::milliseconds quiet);

  // After a failed collective: says so in this rank's beat; rank 0 (whose process hosts the store) then
  // waits up to `limit` for the other live ranks to have said so too, so that their diagnosis can still read.
  void post_failure();
  void linger_for_others(std::chrono::milliseconds limit);

  struct Seen;  // what the store said, shared with the worker's jobs (comm/peer_watch.cpp)

 private:
  enum class Reading { answered, lost, silent };  // the store answered, is gone, or did not answer in time
  Reading refresh(std::chrono::milliseconds within);
  StoreWorker::Job beat_job() const;  // publishes this rank's beat
  std::string describe(int r) const;

  std::vector<PeerInfo> peers_;
  int rank_;
  std::string prefix_;
  std::string store_address_;
  std::shared_ptr<Seen> seen_;
  std::unique_ptr<StoreWorker> worker_;  // last: stops before the rest goes
};

}  // namespace zest
