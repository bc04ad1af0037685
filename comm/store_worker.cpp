// StoreWorker (see store_worker.h): a queue of jobs and an optional periodic one, run by one thread on
// the worker's own client; callers wait on a ticket with a deadline.
#include "comm/store_worker.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cctype>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

namespace zest {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kLetGoAfter = std::chrono::seconds(2);  // a thread not back from the store by then stays behind

}  // namespace

struct StoreWorker::State {
  c10::intrusive_ptr<c10d::Store> hosted;  // declared first: outlives the client
  std::unique_ptr<c10d::TCPStore> store;   // the thread's alone once it runs

  std::mutex mutex;
  std::condition_variable wake;  // to the thread: a job, a new periodic job, or stop
  std::condition_variable ran;   // from the thread: a job has run, or it has stopped
  std::deque<Job> jobs;
  int64_t posted = 0;  // jobs queued so far; the n-th has ticket n
  int64_t done = 0;    // jobs run so far
  Job periodic;
  std::chrono::milliseconds period{0};
  Clock::time_point next_periodic;
  std::map<int64_t, std::string> errors;  // by ticket, the failed jobs' errors not yet asked for
  bool stalled = false;                    // a call timed out: nothing more runs
  bool stopping = false;
  bool finished = false;
};

namespace {

// Whether a store call failed by its own timeout (the store did not answer in time) rather than by a
// lost connection. LibTorch 1.13 says "Socket Timeout"; 2.x "... timeout ..." or "timed out".
bool is_store_timeout(const std::exception& e) {
  std::string what = e.what();
  for (char& c : what) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return what.find("timeout") != std::string::npos || what.find("timed out") != std::string::npos;
}

// Runs `job`: "" when it ran, its error when it threw; `timed_out` when a store call timed out.
std::string run_job(const StoreWorker::Job& job, c10d::Store& store, bool& timed_out) {
  try {
    job(store);
    return "";
  } catch (const std::exception& e) {
    timed_out = is_store_timeout(e);
    return e.what();
  } catch (...) {
    return "an unknown error";
  }
}

// The next thing to run: the periodic job when due (so that a stream of calls cannot starve the beat),
// else the oldest queued job; false when stopping.
bool next_job(StoreWorker::State& s, StoreWorker::Job& job, bool& periodic) {
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    if (s.stopping) return false;
    if (s.stalled) {
      s.wake.wait(lock);
      continue;
    }
    if (s.periodic && Clock::now() >= s.next_periodic) {
      job = s.periodic;
      periodic = true;
      s.next_periodic = Clock::now() + s.period;
      return true;
    }
    if (!s.jobs.empty()) {
      job = std::move(s.jobs.front());
      s.jobs.pop_front();
      periodic = false;
      return true;
    }
    if (s.periodic) {
      s.wake.wait_until(lock, s.next_periodic);
    } else {
      s.wake.wait(lock);
    }
  }
}

void work(const std::shared_ptr<StoreWorker::State>& s) {
  StoreWorker::Job job;
  bool periodic = false;
  while (next_job(*s, job, periodic)) {
    bool timed_out = false;
    const std::string error = run_job(job, *s->store, timed_out);
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      if (timed_out) {
        s->stalled = true;  // this job, and every later one, never counts as run
      } else if (!periodic) {
        ++s->done;
        if (!error.empty()) s->errors[s->done] = error;
      }
    }
    s->ran.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->finished = true;
  }
  s->ran.notify_all();
}

}  // namespace

StoreWorker::StoreWorker(const std::string& host, int port, c10::intrusive_ptr<c10d::Store> hosted)
    : state_(std::make_shared<State>()) {
  state_->hosted = std::move(hosted);
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(3);  // a get()'s wait for a missing key; callers check() first
  state_->store = std::make_unique<c10d::TCPStore>(host, options);
  thread_ = std::thread([state = state_] { work(state); });
}

StoreWorker::~StoreWorker() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stopping = true;
  state_->wake.notify_all();
  const bool finished = state_->ran.wait_for(lock, kLetGoAfter, [this] { return state_->finished; });
  lock.unlock();
  if (finished) {
    thread_.join();
  } else {
    thread_.detach();  // stuck in the store: it owns its state, and the process is about to end
  }
}

int64_t StoreWorker::post(Job job) {
  int64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->jobs.push_back(std::move(job));
    ticket = ++state_->posted;
  }
  state_->wake.notify_all();
  return ticket;
}

StoreWorker::Outcome StoreWorker::wait_for(int64_t ticket, std::chrono::milliseconds within, std::string* error) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->ran.wait_for(lock, within, [&] { return state_->done >= ticket || state_->finished; });
  if (state_->done < ticket) return Outcome::no_answer;
  const auto failed = state_->errors.find(ticket);
  const bool ran = failed == state_->errors.end();
  if (!ran && error != nullptr) *error = failed->second;
  state_->errors.erase(state_->errors.begin(), state_->errors.upper_bound(ticket));  // asked for, or never will be
  return ran ? Outcome::ran : Outcome::failed;
}

void StoreWorker::every(std::chrono::milliseconds period, Job job) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->periodic = std::move(job);
    state_->period = period;
    state_->next_periodic = Clock::now();
  }
  state_->wake.notify_all();
}

}  // namespace zest
