// What the ranks ask the rendezvous store, in one process over a real store. PeerWatch
// (comm/peer_watch.h): a rank whose beat stops is named as not answering and one that has not issued
// the collective as elsewhere in the program; rank 0 lingers until the live ranks have posted their
// failure. And a store that stops answering (a client stopped half-way through a request stalls
// LibTorch 1.13's store for every client) bounds every call of the watch and the rendezvous' wait
// (comm/rendezvous.h), instead of hanging them.
#include "comm/peer_watch.h"
#include "comm/rendezvous.h"
#include "core/check.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

namespace zest::testing {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A store hosted here, and a world of `ranks` on hosts host0, host1, ...
Rendezvous hosted_world(int ranks) {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(10);
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  Rendezvous r;
  r.port = server->getPort();
  r.store = server;
  r.host = "127.0.0.1";
  for (int rank = 0; rank < ranks; ++rank) {
    PeerInfo peer;
    peer.rank = rank;
    peer.host = "host" + std::to_string(rank);
    r.peers.push_back(peer);
  }
  return r;
}

// A client of the store at 127.0.0.1:port.
std::unique_ptr<c10d::TCPStore> store_client(int port, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  return std::make_unique<c10d::TCPStore>("127.0.0.1", options);
}

// Whether another client's call to the store at `port` gets no answer within a second and a half. The
// asking thread stays behind until the store answers.
bool store_stalls(int port) {
  auto answered = std::make_shared<std::atomic<bool>>(false);
  std::thread([answered, port] {
    try {
      store_client(port, std::chrono::seconds(3))->check({"probe"});
    } catch (...) {
    }
    *answered = true;
  }).detach();
  for (int i = 0; i < 30 && !*answered; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return !*answered;
}

// A client that sent the first byte of a request (SET) and no more, as a rank stopped in the middle of
// one does; closing it ends the stall.
class HalfRequest {
 public:
  explicit HalfRequest(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const unsigned char set_query = 0;
    sent_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 &&
            ::send(fd_, &set_query, 1, 0) == 1;
  }
  ~HalfRequest() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool sent() const { return sent_; }

 private:
  int fd_;
  bool sent_ = false;
};

TEST(PeerWatch, NamesTheSilentRankAndTheRankElsewhere) {
  const Rendezvous world = hosted_world(3);
  PeerWatch rank0(world, "names/", 0);
  auto rank1 = std::make_unique<PeerWatch>(world, "names/", 1);
  PeerWatch rank2(world, "names/", 2);
  for (int i = 0; i < 5; ++i) {
    rank0.next_sequence();
    rank1->next_sequence();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // beats with 5 issued
  rank1.reset();                                                  // its beat stops
  const auto start = Clock::now();
  const std::string who = rank0.never_arrived(5);
  EXPECT_LT(seconds_since(start), 4.0);
  EXPECT_EQ(who,
            "never arrived: rank 1 (host host1) (not answering: stopped, hung or killed), rank 2 (host host2) "
            "(alive, but it issued only 0 of 5 collectives: it is elsewhere in the program)");
  const std::string silent = rank0.silent_peers(std::chrono::milliseconds(1000));
  EXPECT_NE(silent.find("rank 1 (host host1) has not answered for "), std::string::npos) << silent;
  EXPECT_EQ(silent.find("rank 2"), std::string::npos) << silent;
}

TEST(PeerWatch, RankZeroLingersUntilTheLiveRanksHavePostedTheirFailure) {
  const Rendezvous world = hosted_world(2);
  PeerWatch rank0(world, "linger/", 0);
  PeerWatch rank1(world, "linger/", 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto start = Clock::now();
  rank0.linger_for_others(std::chrono::milliseconds(1500));  // rank 1 answers and has not failed
  EXPECT_GE(seconds_since(start), 1.4);
  rank1.post_failure();
  start = Clock::now();
  rank0.linger_for_others(std::chrono::seconds(10));
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(PeerWatch, AStoreThatStopsAnsweringBoundsEveryCall) {
  const Rendezvous world = hosted_world(2);
  auto rank0 = std::make_unique<PeerWatch>(world, "stall/", 0);
  auto rank1 = std::make_unique<PeerWatch>(world, "stall/", 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  HalfRequest half(world.port);
  ASSERT_TRUE(half.sent());
  const bool stalled = store_stalls(world.port);

  auto start = Clock::now();
  const std::string who = rank0->never_arrived(1);
  EXPECT_LT(seconds_since(start), 5.0);
  if (stalled) {  // LibTorch 1.13's store, reading the rest of the half request
    EXPECT_EQ(who, "the late rank(s) cannot be named: the rendezvous store at 127.0.0.1:" + std::to_string(world.port) +
                       " stopped answering too (a rank was stopped or frozen in the middle of a request to it, or "
                       "rank 0 (host host0), which hosts it, is stopped or unreachable)");
    start = Clock::now();
    EXPECT_NE(rank1->silent_peers(std::chrono::seconds(5)).find("does not answer"), std::string::npos);
    EXPECT_LT(seconds_since(start), 5.0);
  } else {  // a store that serves each client on its own (LibTorch 2.x)
    EXPECT_EQ(who, "every rank issued it and answers: a rank is stuck inside it, or the network failed");
  }
  rank0->post_failure();
  start = Clock::now();
  rank0->linger_for_others(std::chrono::seconds(10));
  EXPECT_LT(seconds_since(start), 5.0);
  start = Clock::now();
  rank0.reset();
  rank1.reset();
  EXPECT_LT(seconds_since(start), 6.0);
}

// A port nothing listens on now, below the ephemeral range (as the multi-node tests choose theirs).
int unused_port() {
  for (int port = 21000 + (::getpid() % 1000) * 7;; ++port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool taken = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0;
    ::close(fd);
    if (!taken) return port;
  }
}

// Rank 0 of two waits for rank 1, which never comes, while a client's half request stalls the store:
// the wait still ends at its deadline, and says that the store stopped answering.
TEST(RendezvousStall, AStoreThatStopsAnsweringEndsTheWaitAtItsDeadline) {
  WorldInfo world;
  world.launcher = Launcher::torchrun;
  world.size = 2;
  world.local_size = 1;
  world.master_addr = "127.0.0.1";
  world.master_port = unused_port();
  set_rendezvous_timeout(3.0);
  auto message = std::make_shared<std::string>();
  auto ended = std::make_shared<std::atomic<bool>>(false);
  const auto start = Clock::now();
  std::thread([world, message, ended] {
    try {
      join_world(world);
      *message = "joined";
    } catch (const Error& e) {
      *message = e.what();
    }
    *ended = true;
  }).detach();  // a hang would be the failure: the thread is left to it
  // Once rank 0 waits (its join record is in the store), a half request stalls the store.
  bool waiting = false;
  while (!waiting && seconds_since(start) < 2.0) {
    try {
      waiting = store_client(world.master_port, std::chrono::seconds(1))->check({"zest/join/0"});
    } catch (...) {
    }
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(waiting) << "rank 0 did not host the store";
  auto half = std::make_unique<HalfRequest>(world.master_port);
  ASSERT_TRUE(half->sent());
  const bool stalled = store_stalls(world.master_port);
  while (!*ended && seconds_since(start) < 20.0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  set_rendezvous_timeout(300.0);
  ASSERT_TRUE(*ended) << "the wait did not end at its deadline";
  EXPECT_LT(seconds_since(start), 9.0);
  EXPECT_NE(message->find("[rank 0] rendezvous: "), std::string::npos) << *message;
  EXPECT_NE(message->find("of 2 ranks joined within 3 s ([engine] rendezvous_timeout_s); never came: rank(s) 1"),
            std::string::npos)
      << *message;
  const bool says_stalled = message->find("; but the store at 127.0.0.1:" + std::to_string(world.master_port) +
                                          " has not answered for ") != std::string::npos;
  EXPECT_EQ(says_stalled, stalled) << *message;
  half.reset();  // the store answers again, and the left threads end
}

}  // namespace
}  // namespace zest::testing
