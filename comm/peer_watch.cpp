// PeerWatch (see peer_watch.h): "beat/R" = "<counter> <issued>" every 250 ms; a rank whose counter
// stands still is not answering, one whose issued count is below the late collective's never issued it.
#include "comm/peer_watch.h"

#include "comm/store_text.h"
#include "core/check.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <sstream>

namespace zest {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kBeatEvery = std::chrono::milliseconds(250);


}  // namespace

PeerWatch::PeerWatch(const Rendezvous& rendezvous, const std::string& prefix, int rank)
    : peers_(rendezvous.peers), prefix_(prefix), rank_(rank), keep_store_(rendezvous.store) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(rendezvous.port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(3);  // diagnostics only: never block for long
  store_ = std::make_unique<c10d::TCPStore>(rendezvous.host, options);
  beater_ = std::thread([this] { beat_loop(); });
}

PeerWatch::~PeerWatch() {
  stopping_ = true;
  if (beater_.joinable()) beater_.join();
}

void PeerWatch::beat_loop() {
  const std::string key = prefix_ + "beat/" + std::to_string(rank_);
  for (int64_t counter = 0; !stopping_; ++counter) {
    try {
      std::lock_guard<std::mutex> lock(store_mutex_);
      store_->set(key, store_bytes(std::to_string(counter) + " " + std::to_string(issued_.load())));
    } catch (...) {  // the store's host is gone: the diagnosis will say so
    }
    std::this_thread::sleep_for(kBeatEvery);
  }
}

bool PeerWatch::observe() {
  const auto now = Clock::now();
  try {
    std::lock_guard<std::mutex> lock(store_mutex_);
    for (const PeerInfo& p : peers_) {
      if (p.rank == rank_) continue;
      Beat& b = seen_[p.rank];
      if (b.counter < 0 && b.changed == Clock::time_point{}) b.changed = now;
      const std::string key = prefix_ + "beat/" + std::to_string(p.rank);
      if (!store_->check({key})) continue;
      const auto value = store_->get(key);
      std::istringstream in(store_text(value));
      int64_t counter = -1, issued = -1;
      in >> counter >> issued;
      if (counter != b.counter) b.changed = now;
      b.counter = counter;
      b.issued = issued;
    }
    return true;
  } catch (...) {
    return false;
  }
}

std::string PeerWatch::describe(int r) const { return describe_peer(peers_, r); }

std::string PeerWatch::silent_peers(std::chrono::milliseconds quiet) {
  if (!observe()) return describe(0) + ", which hosts the rendezvous store, is gone";
  std::string out;
  for (const auto& [r, b] : seen_) {
    if (Clock::now() - b.changed < quiet) continue;
    const double s = std::chrono::duration<double>(Clock::now() - b.changed).count();
    out += str(out.empty() ? "" : ", ", describe(r), " has not answered for ", static_cast<int>(s), " s");
  }
  return out;
}

std::string PeerWatch::never_arrived(int64_t sequence) {
  const bool first = observe();
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // eight beats
  if (!first || !observe())
    return "never arrived: " + describe(0) + " (it hosts the rendezvous store, which is gone: rank 0 exited or its host is "
           "unreachable)";
  std::string out;
  const auto now = Clock::now();
  for (const auto& [r, b] : seen_) {
    const bool silent = now - b.changed > std::chrono::milliseconds(1500);
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
  try {
    std::lock_guard<std::mutex> lock(store_mutex_);
    store_->set(prefix_ + "failed/" + std::to_string(rank_), store_bytes("1"));
  } catch (...) {
  }
}

void PeerWatch::linger_for_others(std::chrono::milliseconds limit) {
  if (rank_ != 0) return;
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    observe();
    bool waiting = false;
    try {
      std::lock_guard<std::mutex> lock(store_mutex_);
      for (const PeerInfo& p : peers_) {
        if (p.rank == rank_ || Clock::now() - seen_[p.rank].changed > std::chrono::milliseconds(1500)) continue;
        if (!store_->check({prefix_ + "failed/" + std::to_string(p.rank)})) waiting = true;
      }
    } catch (...) {
      return;
    }
    if (!waiting) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace zest
