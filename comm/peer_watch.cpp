// PeerWatch (see peer_watch.h): "beat/R" = "<counter> <issued> <failed>" every 250 ms; a rank whose
// counter stands still is not answering, one whose issued count is below the late collective's never
// issued it, and failed = 1 says its own collective failed. Beats and readings are jobs of one
// StoreWorker; a caller waits for a reading with a deadline.
#include "comm/peer_watch.h"

#include "comm/store_text.h"
#include "core/check.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace zest {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kBeatEvery = std::chrono::milliseconds(250);
constexpr auto kSilentAfter = std::chrono::milliseconds(1500);  // six beats missed: not answering
// How long a reading of the store may take before the store counts as not answering: far above a busy
// store's answer, far below any deadline the caller reports against.
constexpr auto kAnswerWithin = std::chrono::seconds(3);

}  // namespace

struct PeerWatch::Seen {
  struct Beat {
    int64_t counter = -1;
    int64_t issued = -1;
    bool failed = false;
    Clock::time_point changed;  // when the counter last moved (or the first reading)
  };
  std::atomic<int64_t> issued{0};  // this rank's collectives
  std::atomic<int64_t> beats{0};
  std::atomic<bool> failed{false};  // this rank's collective failed
  std::mutex mutex;                 // guards what follows
  std::map<int, Beat> peers;
};

namespace {

void publish_beat(PeerWatch::Seen& seen, c10d::Store& store, const std::string& key) {
  store.set(key, store_bytes(str(seen.beats++, " ", seen.issued.load(), " ", seen.failed ? 1 : 0)));
}

// One reading: every peer's beat, merged into `seen` once all are read (a store call that throws ends it).
void read_beats(PeerWatch::Seen& seen, c10d::Store& store, const std::string& prefix, const std::vector<int>& ranks) {
  std::map<int, PeerWatch::Seen::Beat> read;
  for (const int r : ranks) {
    const std::string key = prefix + "beat/" + std::to_string(r);
    if (!store.check({key})) continue;  // not beating yet: get() would wait for it
    std::istringstream in(store_text(store.get(key)));
    PeerWatch::Seen::Beat& b = read[r];
    int failed = 0;
    in >> b.counter >> b.issued >> failed;
    b.failed = failed != 0;
  }
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(seen.mutex);
  for (const int r : ranks) {
    PeerWatch::Seen::Beat& b = seen.peers[r];
    if (b.changed == Clock::time_point{}) b.changed = now;
    const auto fresh = read.find(r);
    if (fresh == read.end()) continue;
    if (fresh->second.counter != b.counter) b.changed = now;
    b.counter = fresh->second.counter;
    b.issued = fresh->second.issued;
    b.failed = fresh->second.failed;
  }
}

}  // namespace

PeerWatch::PeerWatch(const Rendezvous& rendezvous, const std::string& prefix, int rank)
    : peers_(rendezvous.peers), rank_(rank), prefix_(prefix),
      store_address_(str(rendezvous.host, ":", rendezvous.port)), seen_(std::make_shared<Seen>()),
      worker_(std::make_unique<StoreWorker>(rendezvous.host, rendezvous.port, rendezvous.store)) {
  worker_->every(kBeatEvery, beat_job());
}

StoreWorker::Job PeerWatch::beat_job() const {
  return [seen = seen_, key = prefix_ + "beat/" + std::to_string(rank_)](c10d::Store& store) {
    publish_beat(*seen, store, key);
  };
}

PeerWatch::~PeerWatch() = default;

int64_t PeerWatch::next_sequence() { return seen_->issued.fetch_add(1) + 1; }

PeerWatch::Reading PeerWatch::refresh(std::chrono::milliseconds within) {
  std::vector<int> ranks;
  for (const PeerInfo& p : peers_)
    if (p.rank != rank_) ranks.push_back(p.rank);
  switch (worker_->call(
      [seen = seen_, prefix = prefix_, ranks](c10d::Store& store) { read_beats(*seen, store, prefix, ranks); }, within)) {
    case StoreWorker::Outcome::ran: return Reading::answered;
    case StoreWorker::Outcome::failed: return Reading::lost;
    case StoreWorker::Outcome::no_answer: break;
  }
  return Reading::silent;
}

std::string PeerWatch::describe(int r) const { return describe_peer(peers_, r); }

std::string PeerWatch::silent_peers(std::chrono::milliseconds quiet) {
  const Reading reading = refresh(kAnswerWithin);
  if (reading == Reading::lost) return describe(0) + ", which hosts the rendezvous store, is gone";
  if (reading == Reading::silent)
    return str("the rendezvous store at ", store_address_, " (", describe(0), " hosts it) does not answer");
  std::lock_guard<std::mutex> lock(seen_->mutex);
  std::string out;
  const auto now = Clock::now();
  for (const auto& [r, b] : seen_->peers) {
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
  std::lock_guard<std::mutex> lock(seen_->mutex);
  std::string out;
  const auto now = Clock::now();
  for (const auto& [r, b] : seen_->peers) {
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
  seen_->failed = true;
  worker_->post(beat_job());
}

void PeerWatch::linger_for_others(std::chrono::milliseconds limit) {
  if (rank_ != 0) return;
  const auto until = Clock::now() + limit;
  for (auto now = Clock::now(); now < until; now = Clock::now()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
    if (refresh(std::min<std::chrono::milliseconds>(kAnswerWithin, left)) != Reading::answered) return;
    bool waiting = false;
    {
      std::lock_guard<std::mutex> lock(seen_->mutex);
      for (const auto& [r, b] : seen_->peers)
        if (Clock::now() - b.changed <= kSilentAfter && !b.failed) waiting = true;
    }
    if (!waiting) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace zest
