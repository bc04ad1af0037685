// StoreWorker: a client of a c10d TCP store with a thread of its own, which runs the jobs given to it
// (reads, writes, a periodic beat) while the caller waits with a deadline. LibTorch 1.13's store serves
// its clients one request at a time and waits for a request's last byte, so one client stopped or cut off
// in the middle of a request leaves every other client's next call waiting without end: through a
// StoreWorker, such a store costs the caller its deadline, never a hang.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
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
  // A job may throw: the store's own timeout stalls the worker (below); any other error fails the job.
  using Job = std::function<void(c10d::Store&)>;

  // Connects its own client to the store at host:port (throws when it cannot) and starts the thread.
  // `hosted`: the store when this process hosts it, kept as long as the thread (a server stopped under a
  // thread still waiting on it would wait for that thread, and the thread for it).
  StoreWorker(const std::string& host, int port, c10::intrusive_ptr<c10d::Store> hosted = {});
  // Stops the thread; one stuck in the store is left behind (it owns what it uses).
  ~StoreWorker();
  StoreWorker(const StoreWorker&) = delete;
  StoreWorker& operator=(const StoreWorker&) = delete;

  // What became of a job: it ran; it threw (the connection is lost, or the store refused: `error` says);
  // or it has not run within the bound. The last: the store is slow, or not answering (stalled, or its
  // host unreachable): a call stuck in it, or one that timed out. After a timeout the client is out of
  // step with the store (the late answer may come to its next request), so the worker runs nothing more.
  enum class Outcome { ran, failed, no_answer };

  // Queues `job` after the jobs before it; its ticket says when it has run. A job may run after its
  // caller stopped waiting (when the store answers again), so it must own (not borrow) what it touches.
  int64_t post(Job job);
  // Waits at most `within` for the job of `ticket` (waiting again for the same ticket is fine); `error`,
  // when given, receives a failed job's error.
  Outcome wait_for(int64_t ticket, std::chrono::milliseconds within, std::string* error = nullptr);
  // post() and wait_for().
  Outcome call(Job job, std::chrono::milliseconds within, std::string* error = nullptr) {
    return wait_for(post(std::move(job)), within, error);
  }
  // Runs `job` every `period` from now on, between the other jobs (replaces an earlier one).
  void every(std::chrono::milliseconds period, Job job);

  struct State;  // shared with the thread (comm/store_worker.cpp)

 private:
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace zest
