// The TCP-store rendezvous (see rendezvous.h). Keys, under the world's store prefix:
//   world     rank 0's "<size>\t<fingerprint>\t<host>", what every rank compares itself with
//   join/R    rank R's "<size>\t<fingerprint>\t<host>\t<route ip>\t<node rank>\t<pid>"
//   abort     the reason, posted by the rank that found a mismatch, ending every waiting rank
// Every wait polls (check(), never a blocking wait()), through a StoreWorker whose answers it waits for
// with a bound, so stop signals, aborts and the deadline are seen within a second even when the store
// stops answering.
#include "comm/rendezvous.h"

#include "comm/net_interface.h"
#include "comm/store_text.h"
#include "comm/store_worker.h"
#include "core/check.h"
#include "core/number_text.h"
#include "core/untrusted_file.h"

#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

namespace zest {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int64_t>& rendezvous_timeout_ms() {
  static std::atomic<int64_t> ms{300'000};
  return ms;
}
std::string& fingerprint() {
  static std::string f;
  return f;
}
std::function<bool()>& interrupt_check() {
  static std::function<bool()> check;
  return check;
}


std::vector<std::string> split_tabs(const std::string& s) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, '\t')) out.push_back(item);
  return out;
}

// c10's log level (0 INFO, 1 WARNING, 2 ERROR; c10d's warnings test it): a gflags global in Debian's
// LibTorch, c10::FLAGS_caffe2_log_level in the wheel. The using-directive finds whichever exists.
int& c10_log_level() {
  using namespace c10;
  return FLAGS_caffe2_log_level;
}

// c10d's socket code warns on every failed connection attempt; while zest retries (saying once that it
// waits), its warnings are held back. Errors still print.
class QuietConnectWarnings {
 public:
  QuietConnectWarnings() : saved_(c10_log_level()) {
    c10_log_level() = std::max(saved_, 2);  // 2: ERROR
  }
  ~QuietConnectWarnings() { c10_log_level() = saved_; }
  QuietConnectWarnings(const QuietConnectWarnings&) = delete;
  QuietConnectWarnings& operator=(const QuietConnectWarnings&) = delete;

 private:
  int saved_;
};

void say(const std::string& message) {
  std::fprintf(stderr, "zest: %s\n", message.c_str());
  std::fflush(stderr);
}

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

std::string timeout_text() {
  return str(seconds(rendezvous_timeout()), " s ([engine] rendezvous_timeout_s)");
}

class Joiner {
 public:
  explicit Joiner(const WorldInfo& w)
      : w_(w), where_(str(printable(w.master_addr, 80), ":", w.master_port)), deadline_(Clock::now() + rendezvous_timeout()) {}

  // A failed rendezvous leaves the store this rank hosts running until the process ends: a store stalled
  // by a half request would keep its destructor waiting for it.
  ~Joiner() {
    if (!joined_ && hosts_store()) (void)store_.release();
  }

  Rendezvous run() {
    connect();
    open_reader();
    wait_for_everyone(publish());
    joined_ = true;
    Rendezvous r;
    r.store = store_;
    r.host = w_.master_addr;
    r.port = w_.master_port;
    r.peers = peers_;
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& message) { throw Error(str("[rank ", w_.rank, "] rendezvous: ", message)); }

  // Fails the whole world: every rank still polling the store ends with this message.
  [[noreturn]] void abort_all(const std::string& message) {
    try {
      store_->set(w_.store_prefix + "abort", store_bytes(message));
    } catch (...) {
    }
    // The store lives in rank 0's process: keep it up while the others read the reason.
    if (hosts_store()) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    fail(message);
  }

  void check_interrupt(const char* doing) {
    if (interrupted()) fail(str("stopped by a signal while ", doing, " (store at ", where_, ")"));
  }

  bool hosts_store() const { return w_.rank == 0 && !w_.agent_store; }

  // A master address that does not resolve fails at once, naming the variable (retrying it until the
  // rendezvous timeout cannot help); a temporary failure of name service is retried for a few seconds
  // only (an offline machine answers every unknown name so).
  void check_master_resolves() {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const auto give_up = std::min(deadline_, Clock::now() + std::chrono::seconds(5));
    for (;;) {
      addrinfo* found = nullptr;
      const int rc = ::getaddrinfo(w_.master_addr.c_str(), nullptr, &hints, &found);
      if (rc == 0) {
        ::freeaddrinfo(found);
        return;
      }
      if (rc != EAI_AGAIN || Clock::now() >= give_up)
        fail(str("MASTER_ADDR '", printable(w_.master_addr, 80), "' (the host of rank 0) does not resolve: ",
                 ::gai_strerror(rc), ". Set MASTER_ADDR (zest launch --master-addr) to the host name or IP address "
                 "of the machine that runs rank 0"));
      check_interrupt("resolving MASTER_ADDR");
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }

  void connect() {
    check_master_resolves();
    if (hosts_store()) {
      // Rank 0 must run where the others will look for it: a node started with the wrong rank, or a
      // single-node launcher on each node, would otherwise host a second world of its own.
      if (!is_local_host(w_.master_addr))
        fail(str("rank 0 must run on the master host ", w_.master_addr, ", but this host (", host_name_of_this_machine(),
                 ") has no such address. On several nodes, start the node holding rank 0 with --node-rank 0 and give "
                 "every node the same --master-addr (zest launch --nnodes N --node-rank R --master-addr HOST)"));
      c10d::TCPStoreOptions o;
      o.port = static_cast<uint16_t>(w_.master_port);
      o.isServer = true;
      o.waitWorkers = false;
      o.timeout = std::chrono::seconds(30);
      try {
        store_ = c10::make_intrusive<c10d::TCPStore>(w_.master_addr, o);
      } catch (const std::exception& e) {
        fail(str("rank 0 cannot host the store on port ", w_.master_port, " of ", host_name_of_this_machine(), ": ",
                 first_line(e.what()),
                 ". Another job may be using the port (choose another --master-port / MASTER_PORT)",
                 std::getenv("TORCHELASTIC_RUN_ID") ? "; under torchrun, TORCHELASTIC_USE_AGENT_STORE=True makes zest join "
                                                      "the agent's store instead"
                                                    : ""));
      }
      return;
    }
    std::string last_error;
    const auto report_at = Clock::now() + std::chrono::seconds(5);
    bool reported = false;
    const QuietConnectWarnings quiet;
    for (;;) {
      check_interrupt("connecting to the rendezvous store");
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
      if (left.count() <= 0)
        fail(str("rank ", w_.rank, " on ", host_name_of_this_machine(), " could not reach the store at ", where_,
                 w_.agent_store ? " (the torchrun agent's)" : " (hosted by rank 0)", " within ", timeout_text(),
                 ": ", last_error.empty() ? "no answer" : last_error,
                 ". Is rank 0 running, is MASTER_ADDR the address of its host, and is the port open?"));
      c10d::TCPStoreOptions o;
      o.port = static_cast<uint16_t>(w_.master_port);
      o.isServer = false;
      o.waitWorkers = false;
      o.timeout = std::min<std::chrono::milliseconds>(left, std::chrono::seconds(2));
      try {
        store_ = c10::make_intrusive<c10d::TCPStore>(w_.master_addr, o);
        store_->setTimeout(std::chrono::seconds(30));
        return;
      } catch (const std::exception& e) {
        last_error = first_line(e.what());
      }
      if (!reported && Clock::now() > report_at && w_.local_rank == 0) {  // one line, then quiet retries
        say(str("[rank ", w_.rank, "] rendezvous: waiting for the store at ", where_, " (", last_error,
                "); retrying until ", timeout_text(), " have passed"));
        reported = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // The wait's own connection, opened while the store is fresh (a stalled store may not take a new one).
  void open_reader() {
    try {
      reader_ = std::make_unique<StoreWorker>(w_.master_addr, w_.master_port,
                                              hosts_store() ? store_ : c10::intrusive_ptr<c10d::Store>());
    } catch (const std::exception& e) {
      fail(str("could not open a second connection to the store at ", where_, ": ", first_line(e.what())));
    }
  }

  static std::string first_line(const std::string& s) {
    std::string line = s.substr(0, s.find('\n'));
    while (!line.empty() && (line.back() == '.' || line.back() == ' ')) line.pop_back();
    return line;
  }

  std::string key(const std::string& name) const { return w_.store_prefix + name; }

  // Writes this rank's join record (and rank 0 the world's) and returns the record.
  std::string publish() {
    const std::string host = host_name_of_this_machine();
    const std::string route = route_source_address(w_.master_addr).value_or("127.0.0.1");
    const std::string fp = fingerprint().empty() ? "-" : fingerprint();
    if (w_.rank == 0) store_->set(key("world"), store_bytes(str(w_.size, "\t", fp, "\t", host)));
    std::string record = str(w_.size, "\t", fp, "\t", host, "\t", route, "\t", w_.node_rank, "\t", ::getpid());
    store_->set(key(str("join/", w_.rank)), store_bytes(record));
    return record;
  }

  // A peer's joined record, checked against ours (rank 0 checks everyone; the others check rank 0).
  PeerInfo parse_and_check(int r, const std::string& value) {
    const auto f = split_tabs(value);
    if (f.size() < 6) abort_all(str("rank ", r, " sent an unreadable join record '", value, "'"));
    PeerInfo p;
    p.rank = r;
    p.host = f[2];
    p.route_ip = f[3];
    p.node_rank = std::atoi(f[4].c_str());
    p.pid = std::atol(f[5].c_str());
    const std::string me = str("rank ", w_.rank, " (host ", host_name_of_this_machine(), ")");
    const std::string them = str("rank ", r, " (host ", p.host, ")");
    if (std::atoi(f[0].c_str()) != w_.size)
      abort_all(str("the ranks disagree on the world size: ", me, " has ", w_.size, " but ", them, " has ", f[0],
                    " (every node must be started with the same number of nodes and ranks per node)"));
    const std::string fp = fingerprint().empty() ? "-" : fingerprint();
    if (f[1] != fp)
      abort_all(str("the ranks run different configurations: ", me, " has configuration ", fp, " but ", them, " has ",
                    f[1], " (every node must use the same run file and --set overrides; compare `zest config check` on "
                    "each)"));
    return p;
  }

  std::string waiting_list(const std::vector<bool>& joined) const {
    std::string out;
    int listed = 0;
    for (int r = 0; r < w_.size; ++r) {
      if (joined[static_cast<size_t>(r)]) continue;
      if (++listed > 8) {
        out += ", ...";
        break;
      }
      // Its host: that of a joined rank of the same node (ranks are numbered node by node).
      std::string host;
      for (const PeerInfo& p : peers_)
        if (!p.host.empty() && p.node_rank == r / std::max(1, w_.local_size)) host = p.host;
      out += str(out.empty() ? "" : ", ", r, " (", host.empty() ? str("node ", r / std::max(1, w_.local_size)) : host, ")");
    }
    return out;
  }

  // What one reading of the store found: the keys present, with their values.
  using KeyValues = std::map<std::string, std::string>;

  // The keys the wait still looks for: the abort, rank 0's world record until checked, the joins not seen.
  std::vector<std::string> keys_to_read(const std::vector<bool>& joined, bool checked_world) const {
    std::vector<std::string> keys{key("abort")};
    if (!checked_world) keys.push_back(key("world"));
    for (int r = 0; r < w_.size; ++r)
      if (!joined[static_cast<size_t>(r)]) keys.push_back(key(str("join/", r)));
    return keys;
  }

  // Reads through the reader's thread: a store that stops answering (a rank stopped or cut off in the
  // middle of a request stalls LibTorch 1.13's store) leaves this wait to its deadline instead of hanging
  // it. nullopt while the reading has not come back; the next call waits for the same one.
  std::optional<KeyValues> read_keys(const std::vector<std::string>& keys) {
    if (!pending_) {
      auto result = std::make_shared<KeyValues>();
      const int64_t ticket = reader_->post([result, keys](c10d::Store& store) {
        for (const std::string& k : keys)
          if (store.check({k})) (*result)[k] = store_text(store.get(k));
      });
      pending_ = Pending{ticket, result};
    }
    std::string error;
    const auto outcome = reader_->wait_for(pending_->ticket, std::chrono::milliseconds(500), &error);
    if (outcome == StoreWorker::Outcome::no_answer) return std::nullopt;
    const std::shared_ptr<KeyValues> result = pending_->result;
    pending_.reset();
    if (outcome == StoreWorker::Outcome::failed)
      fail(str("lost the store at ", where_, " while waiting for the other ranks (", first_line(error),
               "): rank 0 or its host is gone"));
    last_answer_ = Clock::now();
    return *result;
  }

  void wait_for_everyone(const std::string& own_record) {
    peers_.assign(static_cast<size_t>(w_.size), PeerInfo{});
    std::vector<bool> joined(static_cast<size_t>(w_.size), false);
    bool checked_world = w_.rank == 0;
    // This rank has joined: it is counted from its own record, not from the store, so a store that stalls
    // before answering never reports this rank itself as missing.
    joined[static_cast<size_t>(w_.rank)] = true;
    peers_[static_cast<size_t>(w_.rank)] = parse_unchecked(w_.rank, own_record);
    int count = 1;
    const auto started = Clock::now();
    last_answer_ = started;
    auto report_at = started + std::chrono::seconds(3);
    for (;;) {
      check_interrupt("waiting for the other ranks to join");
      if (const auto read = read_keys(keys_to_read(joined, checked_world))) {
        const auto value = [&](const std::string& name) -> const std::string* {
          const auto it = read->find(key(name));
          return it == read->end() ? nullptr : &it->second;
        };
        if (const std::string* reason = value("abort")) fail(*reason);
        if (const std::string* world = value("world"); world && !checked_world) {
          const auto f = split_tabs(*world);
          parse_and_check(0, f.size() >= 3 ? str(f[0], "\t", f[1], "\t", f[2], "\t-\t0\t0") : "");
          checked_world = true;
        }
        for (int r = 0; r < w_.size; ++r) {
          const std::string* record = joined[static_cast<size_t>(r)] ? nullptr : value(str("join/", r));
          if (record == nullptr) continue;
          peers_[static_cast<size_t>(r)] = w_.rank == 0 ? parse_and_check(r, *record) : parse_unchecked(r, *record);
          joined[static_cast<size_t>(r)] = true;
          ++count;
        }
      }
      if (count == w_.size && checked_world) return;
      const auto now = Clock::now();
      // Rank 0 gives the verdict at its deadline (every rank then ends with it); the others wait a
      // moment longer for it, and fail on their own only if it never comes.
      if (now > deadline_ + (w_.rank == 0 ? std::chrono::seconds(0) : std::chrono::seconds(3))) {
        std::string why = str(count, " of ", w_.size, " ranks joined within ", timeout_text(),
                              "; never came: rank(s) ", waiting_list(joined));
        if (now - last_answer_ > std::chrono::seconds(2))
          why += str("; but the store at ", where_, " has not answered for ",
                     static_cast<int>(std::chrono::duration<double>(now - last_answer_).count()),
                     " s (a rank stopped or cut off in the middle of a request to it stalls it), so some of them "
                     "may have joined unseen");
        if (w_.rank == 0) abort_all(why);
        fail(why);
      }
      if (now > report_at && (w_.rank == 0 || (w_.local_rank == 0 && w_.rank != 0 && count == 0))) {
        say(str("[rank ", w_.rank, "] rendezvous: ", count, " of ", w_.size, " ranks joined; waiting for rank(s) ",
                waiting_list(joined), " (",
                static_cast<int>(std::chrono::duration<double>(now - started).count()), " s of ",
                static_cast<int>(seconds(rendezvous_timeout())), ")"));
        report_at = now + std::chrono::seconds(10);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  static PeerInfo parse_unchecked(int r, const std::string& value) {
    const auto f = split_tabs(value);
    PeerInfo p;
    p.rank = r;
    if (f.size() >= 6) {
      p.host = f[2];
      p.route_ip = f[3];
      p.node_rank = std::atoi(f[4].c_str());
      p.pid = std::atol(f[5].c_str());
    }
    return p;
  }

  struct Pending {
    int64_t ticket = 0;
    std::shared_ptr<KeyValues> result;
  };

  const WorldInfo& w_;
  const std::string where_;
  const Clock::time_point deadline_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<PeerInfo> peers_;
  std::unique_ptr<StoreWorker> reader_;  // the wait's reads (read_keys)
  std::optional<Pending> pending_;
  Clock::time_point last_answer_;
  bool joined_ = false;
};

}  // namespace

void set_rendezvous_timeout(double s) {
  ZEST_CHECK(s > 0, "rendezvous timeout must be > 0 seconds, got ", s);
  rendezvous_timeout_ms() = static_cast<int64_t>(s * 1000.0);
}

std::chrono::milliseconds rendezvous_timeout() {
  if (const auto ms = env_seconds_in_ms("ZEST_RENDEZVOUS_TIMEOUT_S")) return std::chrono::milliseconds(*ms);
  return std::chrono::milliseconds(rendezvous_timeout_ms().load());
}

void set_rendezvous_fingerprint(const std::string& f) { fingerprint() = f; }
void set_interrupt_check(std::function<bool()> check) { interrupt_check() = std::move(check); }
bool interrupted() { return interrupt_check() && interrupt_check()(); }

std::string describe_peer(const std::vector<PeerInfo>& peers, int rank) {
  if (rank < 0 || rank >= static_cast<int>(peers.size()) || peers[static_cast<size_t>(rank)].host.empty())
    return str("rank ", rank);
  return str("rank ", rank, " (host ", peers[static_cast<size_t>(rank)].host, ")");
}

Rendezvous join_world(const WorldInfo& world) { return Joiner(world).run(); }

std::string host_name_of_this_machine() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

}  // namespace zest
