// PeerWatch (see peer_watch.h): "beat/R" = "<counter> <issued> <failed>" every 250 ms; a rank whose
// counter stands still is not answering, one whose issued count is below the late collective's never
// issued it, and failed = 1 says its own collective failed. The store is read on request, by the same
// thread, and the caller waits for the reading with a deadline: LibTorch 1.13's store serves its
// clients one request at a time, so a rank stopped in the middle of a request (kill -STOP during a
// beat) leaves every other client's next call waiting for as long as it stays stopped.
#include "comm/peer_watch.h"

#include "comm/store_text.h"
#include "core/check.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <condition_variable>
#include <map>
#include <mutex>
#include <sstream>

namespace zest {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kBeatEvery = std::chrono::milliseconds(250);
constexpr auto kSilentAfter = std::chrono::milliseconds(1500);  // six beats missed: not answering
// How long a reading of the store may take before the store counts as not answering: far above a busy
// store's answer, far below any deadline the caller reports against.
constexpr auto kAnswerWithin = std::chrono::seconds(3);
constexpr auto kLetGoAfter = std::chrono::seconds(2);  // a thread not back from the store by then stays behind

}  // namespace

struct PeerWatch::State {
  struct Beat {
    int64_t counter = -1;
    int64_t issued = -1;
    bool failed = false;
    Clock::time_point changed;  // when the counter last moved (or the first reading)
  };

  // Set before the thread starts; then the thread's alone.
  c10::intrusive_ptr<c10d::Store> keep_store;  // a store this rank hosts lives as long as the thread
  std::unique_ptr<c10d::TCPStore> store;
  std::string prefix;
  int rank = 0;
  std::vector<int> peer_ranks;  // every rank but this one
  std::atomic<int64_t> issued{0};

  std::mutex mutex;
  std::condition_variable wake;      // to the thread: stop, beat now, or read the store
  std::condition_variable observed;  // from the thread: a reading is done, or it has stopped
  bool stopping = false;
  bool finished = false;
  bool failed = false;
  bool beat_now = false;
  int64_t readings_asked = 0;
  int64_t readings_done = 0;
  bool lost = false;  // the last reading failed: the store's host is gone
  std::map<int, Beat> seen;
};

namespace {

void publish_beat(PeerWatch::State& s, int64_t counter, bool failed) {
  try {
    s.store->set(s.prefix + "beat/" + std::to_string(s.rank),
                 store_bytes(str(counter, " ", s.issued.load(), " ", failed ? 1 : 0)));
  } catch (...) {  // the store's host is gone: the next reading says so
  }
}

// Reads every peer's beat; `ticket` is the last reading asked for when it began.
void read_beats(PeerWatch::State& s, int64_t ticket) {
  std::map<int, PeerWatch::State::Beat> read;
  bool lost = false;
  try {
    for (const int r : s.peer_ranks) {
      const std::string key = s.prefix + "beat/" + std::to_string(r);
      if (!s.store->check({key})) continue;  // not beating yet: get() would wait for it
      std::istringstream in(store_text(s.store->get(key)));
      PeerWatch::State::Beat& b = read[r];
      int failed = 0;
      in >> b.counter >> b.issued >> failed;
      b.failed = failed != 0;
    }
  } catch (...) {
    lost = true;
  }
  const auto now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    for (const int r : s.peer_ranks) {
      PeerWatch::State::Beat& b = s.seen[r];
      if (b.changed == Clock::time_point{}) b.changed = now;
      const auto fresh = read.find(r);
      if (fresh == read.end()) continue;
      if (fresh->second.counter != b.counter) b.changed = now;
      b.counter = fresh->second.counter;
      b.issued = fresh->second.issued;
      b.failed = fresh->second.failed;
    }
    s.lost = lost;
    s.readings_done = ticket;
  }
  s.observed.notify_all();
}

void watch(const std::shared_ptr<PeerWatch::State>& s) {
  auto next_beat = Clock::now();
  for (int64_t counter = 0;;) {
    bool beat = false, failed = false;
    int64_t ticket = 0;
    {
      std::unique_lock<std::mutex> lock(s->mutex);
      s->wake.wait_until(lock, next_beat,
                         [&] { return s->stopping || s->beat_now || s->readings_asked > s->readings_done; });
      if (s->stopping) break;
      beat = s->beat_now || Clock::now() >= next_beat;
      s->beat_now = false;
      failed = s->failed;
      if (s->readings_asked > s->readings_done) ticket = s->readings_asked;
    }
    if (beat) {
      publish_beat(*s, counter++, failed);
      next_beat = Clock::now() + kBeatEvery;
    }
    if (ticket > 0) read_beats(*s, ticket);
  }
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->finished = true;
  }
  s->observed.notify_all();
}

}  // namespace

PeerWatch::PeerWatch(const Rendezvous& rendezvous, const std::string& prefix, int rank)
    : peers_(rendezvous.peers), rank_(rank), store_address_(str(rendezvous.host, ":", rendezvous.port)),
      state_(std::make_shared<State>()) {
  State& s = *state_;
  s.keep_store = rendezvous.store;
  s.prefix = prefix;
  s.rank = rank;
  for (const PeerInfo& p : peers_)
    if (p.rank != rank) s.peer_ranks.push_back(p.rank);
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(rendezvous.port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(3);  // diagnostics only: never block for long
  s.store = std::make_unique<c10d::TCPStore>(rendezvous.host, options);
  watcher_ = std::thread([state = state_] { watch(state); });
}

PeerWatch::~PeerWatch() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stopping = true;
  state_->wake.notify_all();
  const bool finished = state_->observed.wait_for(lock, kLetGoAfter, [this] { return state_->finished; });
  lock.unlock();
  if (finished) {
    watcher_.join();
  } else {
    watcher_.detach();  // stuck in the store: it owns its state, and the process is about to end
  }
}

int64_t PeerWatch::next_sequence() { return state_->issued.fetch_add(1) + 1; }

PeerWatch::Reading PeerWatch::refresh(std::chrono::milliseconds within) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  const int64_t ticket = ++state_->readings_asked;
  state_->wake.notify_all();
  const bool done = state_->observed.wait_for(
      lock, within, [&] { return state_->readings_done >= ticket || state_->finished; });
  if (!done || state_->readings_done < ticket) return Reading::silent;
  return state_->lost ? Reading::lost : Reading::answered;
}

std::string PeerWatch::describe(int r) const { return describe_peer(peers_, r); }

std::string PeerWatch::silent_peers(std::chrono::milliseconds quiet) {
  const Reading reading = refresh(kAnswerWithin);
  if (reading == Reading::lost) return describe(0) + ", which hosts the rendezvous store, is gone";
  if (reading == Reading::silent)
    return str("the rendezvous store at ", store_address_, " (", describe(0), " hosts it) does not answer");
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::string out;
  const auto now = Clock::now();
  for (const auto& [r, b] : state_->seen) {
    if (now - b.changed < quiet) continue;
    const double s = std::chrono::duration<double>(now - b.changed).count();
    out += str(out.empty() ? "" : ", ", describe(r), " has not answered for ", static_cast<int>(s), " s");
  }
  return out;
}

std::string PeerWatch::never_arrived(int64_t sequence) {
  Reading reading = refresh(kAnswerWithin);
  if (reading == Reading::answered) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // eight beats
    reading = refresh(kAnswerWithin);
  }
  if (reading == Reading::lost)
    return "never arrived: " + describe(0) + " (it hosts the rendezvous store, which is gone: rank 0 exited or its host is "
           "unreachable)";
  if (reading == Reading::silent)
    return str("the late rank(s) cannot be named: the rendezvous store at ", store_address_,
               " stopped answering too (a rank was stopped or frozen in the middle of a request to it, or ",
               describe(0), ", which hosts it, is stopped or unreachable)");
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::string out;
  const auto now = Clock::now();
  for (const auto& [r, b] : state_->seen) {
    const bool silent = now - b.changed > kSilentAfter;
    const bool behind = sequence > 0 && b.issued >= 0 && b.issued < sequence;
    if (!silent && !behind) continue;
    out += str(out.empty() ? "" : ", ", describe(r), silent ? " (not answering: stopped, hung or killed)"
                                                   : str(" (alive, but it issued only ", b.issued, " of ", sequence,
                                                         " collectives: it is elsewhere in the program)"));
  }
  if (out.empty()) return "every rank issued it and answers: a rank is stuck inside it, or the network failed";
  return "never arrived: " + out;
}

void PeerWatch::post_failure() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->failed = true;
    state_->beat_now = true;
  }
  state_->wake.notify_all();
}

void PeerWatch::linger_for_others(std::chrono::milliseconds limit) {
  if (rank_ != 0) return;
  const auto until = Clock::now() + limit;
  for (auto now = Clock::now(); now < until; now = Clock::now()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
    if (refresh(std::min<std::chrono::milliseconds>(kAnswerWithin, left)) != Reading::answered) return;
    bool waiting = false;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      for (const auto& [r, b] : state_->seen)
        if (Clock::now() - b.changed <= kSilentAfter && !b.failed) waiting = true;
    }
    if (!waiting) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace zest
