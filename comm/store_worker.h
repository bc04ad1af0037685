// StoreWorker: a client of a c10d TCP store with a thread of its own, which runs the jobs given to it
// (reads, writes, a periodic beat) while the caller waits with a deadline. LibTorch 1.13's store serves
// its clients one request at a time and waits for a request's last byte, so one client stopped or cut off
// in the middle of a request leaves every other client's next call waiting without end: through a
// StoreWorker, such a store costs the caller its deadline, never a hang.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace c10d {
class Store;
}

namespace zest {

class StoreWorker {
 public:
  using Job = std::function<void(c10d::Store&)>;  // catches what it expects; the worker drops the rest

  // Connects its own client to the store at host:port (throws when it cannot) and starts the thread.
  // `hosted`: the store when this process hosts it, kept as long as the thread (a server stopped under a
  // thread still waiting on it would wait for that thread, and the thread for it).
  StoreWorker(const std::string& host, int port, c10::intrusive_ptr<c10d::Store> hosted = {});
  // Stops the thread; one stuck in the store is left behind (it owns what it uses).
  ~StoreWorker();
  StoreWorker(const StoreWorker&) = delete;
  StoreWorker& operator=(const StoreWorker&) = delete;

  // Queues `job` after the jobs before it; its ticket says when it has run. A job may run after its
  // caller stopped waiting (when the store answers again), so it must own (not borrow) what it touches.
  int64_t post(Job job);
  // Waits at most `within` for the job of `ticket`: false when it has not run by then (the store is not
  // answering, or is slow; waiting again for the same ticket is fine).
  bool wait_for(int64_t ticket, std::chrono::milliseconds within);
  // post() and wait_for().
  bool call(Job job, std::chrono::milliseconds within) { return wait_for(post(std::move(job)), within); }
  // Runs `job` every `period` from now on, between the other jobs (replaces an earlier one).
  void every(std::chrono::milliseconds period, Job job);

  struct State;  // shared with the thread (comm/store_worker.cpp)

 private:
  std::shared_ptr<State> state_;
  std::thread thread_;
};

// Whether a store call failed by its own timeout (the store did not answer in time: stalled, or its host
// unreachable) rather than by a lost connection. After one, that client is out of step with the store
// (the late answer may come to its next request): it is not asked again.
bool is_store_timeout(const std::exception& e);

}  // namespace zest
