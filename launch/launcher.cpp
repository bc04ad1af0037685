// `zest launch`'s process logic: fork/exec of the ranks, one poll loop over their output pipes and a
// signalfd (so signals, exits and output are handled in order on one thread, with no async handlers),
// line prefixing, signal forwarding and fail-fast shutdown.
#include "launch/launcher.h"

#include "comm/net_interface.h"
#include "core/check.h"
#include "core/fd_write.h"
#include "core/untrusted_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <deque>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace zest {
namespace {

using Clock = std::chrono::steady_clock;

// Writes all of `text` to `fd`; a closed reader (EPIPE) drops the output rather than failing the run.
void write_or_drop(int fd, const std::string& text) { (void)write_all(fd, text); }

void say(const std::string& message) { write_or_drop(STDERR_FILENO, "zest launch: " + message + "\n"); }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGPIPE: return "SIGPIPE";
    default: return "signal " + std::to_string(sig);
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by " + signal_name(WTERMSIG(status));
  return "status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// One output stream of one rank: the pipe's read end and the bytes of a line not yet complete.
struct Stream {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::string prefix;
  bool prefix_unlabelled_only = false;  // a node's output: its ranks' lines carry their own "[node:rank R]"
  std::string pending;
  std::deque<std::string> tail;  // the last lines, where a failed rank's error says whom it waited for
};

// The ranks a rank's error names as never having arrived at a collective ("never arrived: rank 1
// (host a, ...), rank 3 (...)", comm/peer_watch.cpp), from its last lines.
std::vector<int> blamed_ranks(const std::deque<std::string>& tail) {
  std::vector<int> ranks;
  for (const std::string& line : tail) {
    const auto at = line.find("never arrived: ");
    if (at == std::string::npos) continue;
    ranks.clear();
    const std::string rest = line.substr(at);
    for (size_t p = rest.find("rank "); p != std::string::npos; p = rest.find("rank ", p + 5)) {
      // Only "rank N" at the top level of the list, not inside a parenthesis.
      int depth = 0;
      for (size_t i = 0; i < p; ++i) depth += rest[i] == '(' ? 1 : rest[i] == ')' ? -1 : 0;
      if (depth != 0) continue;
      char* end = nullptr;
      const long r = std::strtol(rest.c_str() + p + 5, &end, 10);
      if (end != rest.c_str() + p + 5) ranks.push_back(static_cast<int>(r));
    }
  }
  return ranks;
}

// Whether a process is stopped (state T in /proc/PID/stat).
bool is_stopped(pid_t pid) {
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[512];
  const ssize_t n = ::read(fd, buffer, sizeof(buffer) - 1);
  ::close(fd);
  if (n <= 0) return false;
  buffer[n] = '\0';
  const char* close_paren = std::strrchr(buffer, ')');
  return close_paren != nullptr && close_paren[1] == ' ' && (close_paren[2] == 'T' || close_paren[2] == 't');
}

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  bool was_stopped = false;  // in state T (SIGSTOP) when another rank failed
  Stream out;
  Stream err;
};

// argv/envp as owned strings plus the pointer arrays execvpe wants, built before fork (the child of a
// multi-threaded process may only call async-signal-safe functions).
struct ExecArgs {
  std::vector<std::string> storage;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

std::string self_executable() {
  std::vector<char> path(4096);
  const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  ZEST_CHECK(n > 0, "zest launch: cannot resolve its own executable: ", std::strerror(errno));
  return std::string(path.data(), static_cast<size_t>(n));
}

// Why `path` cannot be executed, or "" when it can.
std::string exec_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "it is a folder";
  if (::access(path.c_str(), X_OK) != 0) return std::string("it is not executable (") + std::strerror(errno) + ")";
  return "";
}

// The command as execvpe will look for it (a path as given, a bare name in PATH), checked before any
// rank starts: one message naming the command and the reason, instead of N ranks failing alike.
void check_command_runnable(const std::string& command) {
  if (command.find('/') != std::string::npos) {
    const std::string problem = exec_problem(command);
    ZEST_CHECK(problem.empty(), "zest launch: cannot run the command '", printable(command), "': ", problem);
    return;
  }
  const char* env_path = std::getenv("PATH");
  const std::string search = env_path != nullptr ? env_path : "/usr/local/bin:/usr/bin:/bin";
  std::stringstream dirs(search);
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (exec_problem((dir.empty() ? "." : dir) + "/" + command).empty()) return;
  ZEST_FAIL("zest launch: cannot run the command '", printable(command), "': no executable of that name in PATH (",
            printable(search, 200), ")");
}

bool is_overridden(const std::string& entry, const std::vector<std::string>& names) {
  for (const std::string& name : names)
    if (entry.rfind(name + "=", 0) == 0) return true;
  // A stale MPI, Horovod or torchrun-agent environment would contradict the one given here.
  for (const char* stale : {"OMPI_COMM_WORLD_", "HOROVOD_", "TORCHELASTIC_"})
    if (entry.rfind(stale, 0) == 0) return true;
  return false;
}

ExecArgs make_exec_args(const LaunchOptions& o, int local_rank, int port) {
  const int rank = o.node_rank * o.nprocs + local_rank;
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(rank)},             {"WORLD_SIZE", std::to_string(o.nnodes * o.nprocs)},
      {"LOCAL_RANK", std::to_string(local_rank)}, {"LOCAL_WORLD_SIZE", std::to_string(o.nprocs)},
      {"GROUP_RANK", std::to_string(o.node_rank)}, {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(port)},      {"ZEST_LAUNCHER_PID", std::to_string(::getpid())}};
  // N ranks each using every core would oversubscribe the machine many times over.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    vars.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1u, cores / static_cast<unsigned>(o.nprocs))));
  }
  std::vector<std::string> names;
  for (const auto& [name, value] : vars) names.push_back(name);

  ExecArgs a;
  a.storage.reserve(o.command.size() + vars.size() + 256);
  std::vector<size_t> argv_at, envp_at;
  for (size_t i = 0; i < o.command.size(); ++i) {
    argv_at.push_back(a.storage.size());
    a.storage.push_back(i == 0 && o.command[0] == "zest" ? self_executable() : o.command[i]);
  }
  for (char** e = environ; *e != nullptr; ++e) {
    if (is_overridden(*e, names)) continue;
    envp_at.push_back(a.storage.size());
    a.storage.emplace_back(*e);
  }
  for (const auto& [name, value] : vars) {
    envp_at.push_back(a.storage.size());
    a.storage.push_back(name + "=" + value);
  }
  for (size_t i : argv_at) a.argv.push_back(a.storage[i].data());
  for (size_t i : envp_at) a.envp.push_back(a.storage[i].data());
  a.argv.push_back(nullptr);
  a.envp.push_back(nullptr);
  return a;
}

class Launch {
 public:
  explicit Launch(const LaunchOptions& options)
      : options_(options), ranks_(options.hosts.empty() ? static_cast<size_t>(options.nprocs) : options.hosts.size()) {}
  ~Launch();
  int run();

 private:
  void block_signals();
  void spawn(int child, ExecArgs args);
  void pump(Stream& s);
  void emit_lines(Stream& s, bool at_eof);
  void handle_signals();
  void reap();
  void signal_running(int sig);
  int running_count() const;
  int poll_once(Clock::time_point now);
  int result() const;
  int global_rank(size_t local) const { return options_.node_rank * options_.nprocs + static_cast<int>(local); }
  bool node_mode() const { return !options_.hosts.empty(); }
  std::string child_name(size_t i) const;
  ExecArgs node_exec_args(size_t node, int port) const;
  std::string blame_report() const;
  std::string stopped_ranks_report(const std::deque<std::string>& tail) const;

  LaunchOptions options_;
  std::vector<Rank> ranks_;
  sigset_t handled_{};
  sigset_t original_mask_{};
  int signal_fd_ = -1;
  int dev_null_ = -1;
  int user_signals_ = 0;
  int first_user_signal_ = 0;
  std::optional<int> failed_rank_;
  std::optional<Clock::time_point> kill_at_;   // SIGKILL the survivors of a failure then
  std::optional<Clock::time_point> drain_until_;  // stop waiting for output of exited ranks then
};

Launch::~Launch() {
  for (Rank& r : ranks_) {
    if (r.out.fd >= 0) ::close(r.out.fd);
    if (r.err.fd >= 0) ::close(r.err.fd);
  }
  if (signal_fd_ >= 0) ::close(signal_fd_);
  if (dev_null_ >= 0) ::close(dev_null_);
  ::sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
}

// Signals arrive through a signalfd, read in the poll loop; children get the original mask back.
void Launch::block_signals() {
  sigemptyset(&handled_);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&handled_, sig);
  sigset_t block = handled_;
  sigaddset(&block, SIGPIPE);  // a closed stdout gives EPIPE from write instead of killing us
  ZEST_CHECK(::sigprocmask(SIG_BLOCK, &block, &original_mask_) == 0, "zest launch: sigprocmask failed");
  signal_fd_ = ::signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK);
  ZEST_CHECK(signal_fd_ >= 0, "zest launch: signalfd failed: ", std::strerror(errno));
}

void Launch::spawn(int rank, ExecArgs args) {
  int out_pipe[2], err_pipe[2];
  ZEST_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0,
             "zest launch: pipe failed: ", std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  ZEST_CHECK(pid >= 0, "zest launch: fork failed for rank ", rank, ": ", std::strerror(errno));
  if (pid == 0) {  // child: async-signal-safe calls only
    ::setpgid(0, 0);  // terminal signals reach the launcher only; it forwards them once
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(dev_null_, STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
    ::signal(SIGXFSZ, SIG_DFL);  // zest itself ignores it; the command gets the usual default
    ::execvpe(args.argv[0], args.argv.data(), args.envp.data());
    const int exec_error = errno;
    const char message[] = "zest launch: cannot execute ";
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, message, sizeof(message) - 1);
    n = ::write(STDERR_FILENO, args.argv[0], std::strlen(args.argv[0]));
    const char* reason = exec_error == ENOENT ? ": no such file\n" : exec_error == EACCES ? ": permission denied\n" : "\n";
    n = ::write(STDERR_FILENO, reason, std::strlen(reason));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so that the group exists before we ever signal it
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  Rank& r = ranks_[rank];
  r.pid = pid;
  r.running = true;
  const std::string prefix =
      node_mode() ? "[" + options_.hosts[static_cast<size_t>(rank)].first + "] "
                  : "[" + (options_.node_label.empty() ? "" : options_.node_label + ":") + "rank " +
                        std::to_string(global_rank(static_cast<size_t>(rank))) + "] ";
  r.out = Stream{out_pipe[0], STDOUT_FILENO, prefix, node_mode(), {}, {}};
  r.err = Stream{err_pipe[0], STDERR_FILENO, prefix, node_mode(), {}, {}};
  ::fcntl(r.out.fd, F_SETFL, O_NONBLOCK);
  ::fcntl(r.err.fd, F_SETFL, O_NONBLOCK);
}

// Writes every complete line with its prefix (and, at EOF, the unterminated rest). A line is written
// with one write() so that lines of different ranks never interleave mid-line.
void Launch::emit_lines(Stream& s, bool at_eof) {
  size_t start = 0;
  for (size_t nl = s.pending.find('\n'); nl != std::string::npos; nl = s.pending.find('\n', start)) {
    std::string line = s.pending.substr(start, nl + 1 - start);
    if (s.prefix_unlabelled_only) {
      if (line.size() >= 2 && line[line.size() - 2] == '\r') line.erase(line.size() - 2, 1);  // a remote pty's
      write_or_drop(s.target, (line.rfind('[', 0) == 0 ? "" : s.prefix) + line);
    } else {
      write_or_drop(s.target, s.prefix + line);
    }
    s.tail.push_back(s.pending.substr(start, std::min<size_t>(nl - start, 4096)));
    if (s.tail.size() > 20) s.tail.pop_front();
    start = nl + 1;
  }
  s.pending.erase(0, start);
  constexpr size_t kMaxLine = 1 << 20;  // a runaway line without '\n' is cut rather than buffered forever
  if ((at_eof && !s.pending.empty()) || s.pending.size() > kMaxLine) {
    write_or_drop(s.target, s.prefix + s.pending + "\n");
    s.pending.clear();
  }
}

void Launch::pump(Stream& s) {
  char buffer[65536];
  while (s.fd >= 0) {
    const ssize_t n = ::read(s.fd, buffer, sizeof(buffer));
    if (n > 0) {
      s.pending.append(buffer, static_cast<size_t>(n));
      emit_lines(s, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    emit_lines(s, true);  // EOF (or a read error): the stream is done
    ::close(s.fd);
    s.fd = -1;
  }
}

void Launch::signal_running(int sig) {
  for (const Rank& r : ranks_) {
    if (!r.running) continue;
    ::kill(-r.pid, sig);  // the rank's whole process group (e.g. a shell and its child)
    if (sig != SIGKILL) ::kill(-r.pid, SIGCONT);  // a stopped rank handles it only once continued
  }
}

int Launch::running_count() const {
  int n = 0;
  for (const Rank& r : ranks_) n += r.running ? 1 : 0;
  return n;
}

void Launch::handle_signals() {
  signalfd_siginfo info{};
  while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reap() runs every iteration
    if (++user_signals_ == 1) {
      first_user_signal_ = sig;
      say("got " + signal_name(sig) + ", forwarding it to the ranks (send it again to kill them)");
      signal_running(sig);
    } else {
      say("got " + signal_name(sig) + " again, killing the ranks");
      signal_running(SIGKILL);
    }
  }
}

void Launch::reap() {
  int status = 0;
  for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& r = ranks_[i];
      if (r.pid != pid || !r.running) continue;
      r.running = false;
      r.status = status;
      ::kill(-r.pid, SIGKILL);  // leftovers in the rank's group (it is gone; they would hold its pipes)
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (ok || failed_rank_ || user_signals_ > 0) continue;
      failed_rank_ = static_cast<int>(i);
      for (Rank& other : ranks_)
        if (other.running && is_stopped(other.pid)) other.was_stopped = true;
      say(child_name(i) + " failed (" + describe_status(status) + "); stopping the other " +
          (node_mode() ? "nodes" : "ranks"));
      signal_running(SIGTERM);
      kill_at_ = Clock::now() + options_.grace;
    }
  }
}

int Launch::poll_once(Clock::time_point now) {
  std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
  std::vector<Stream*> streams;
  for (Rank& r : ranks_) {
    for (Stream* s : {&r.out, &r.err}) {
      if (s->fd < 0) continue;
      fds.push_back({s->fd, POLLIN, 0});
      streams.push_back(s);
    }
  }
  int timeout_ms = 100;  // also bounds the delay of reaping and of the kill deadline
  if (kill_at_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - now).count();
    timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, timeout_ms));
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR)
    ZEST_FAIL("zest launch: poll failed: ", std::strerror(errno));
  if (fds[0].revents != 0) handle_signals();
  for (size_t i = 0; i < streams.size(); ++i)
    if (fds[i + 1].revents != 0) pump(*streams[i]);
  return static_cast<int>(streams.size());
}

int Launch::result() const {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const int status = ranks_[i].status;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (!failed_rank_ && user_signals_ > 0)
      say(child_name(i) + " ended with " + describe_status(status) + " after " +
          signal_name(first_user_signal_));
  }
  if (failed_rank_) {
    const int status = ranks_[*failed_rank_].status;
    say(child_name(static_cast<size_t>(*failed_rank_)) + " failed with " + describe_status(status));
    const std::string blame = blame_report();
    if (!blame.empty()) say(blame);
    return exit_code_of(status);
  }
  for (const Rank& r : ranks_)
    if (!(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0)) return exit_code_of(r.status);
  return 0;
}

std::string Launch::child_name(size_t i) const {
  if (!node_mode()) return "rank " + std::to_string(global_rank(i));
  const int slots = options_.hosts[i].second;
  const int first = static_cast<int>(i) * slots;
  return "node " + options_.hosts[i].first + " (rank" +
         (slots == 1 ? " " + std::to_string(first) : "s " + std::to_string(first) + "-" + std::to_string(first + slots - 1)) +
         ")";
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// One node's `zest launch --nnodes`: run here, or through the remote shell with the settings that
// matter to the ranks (ZEST_*, the socket interfaces, OMP_NUM_THREADS) passed along.
ExecArgs Launch::node_exec_args(size_t node, int port) const {
  const auto& [name, slots] = options_.hosts[node];
  std::vector<std::string> inner{self_executable(), "launch", "--nnodes", std::to_string(options_.hosts.size()),
                                 "--node-rank", std::to_string(node), "--master-addr", options_.hosts.front().first,
                                 "--master-port", std::to_string(port), "-n", std::to_string(slots), "--grace",
                                 std::to_string(static_cast<double>(options_.grace.count()) / 1000.0), "--node-label",
                                 name, "--"};
  inner.insert(inner.end(), options_.command.begin(), options_.command.end());
  std::vector<std::string> argv;
  if (is_local_host(name)) {
    argv = inner;
  } else {
    std::string remote = "cd " + shell_quote(std::filesystem::current_path().string()) + " && exec env";
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      for (const char* keep : {"ZEST_", "GLOO_SOCKET_IFNAME=", "NCCL_SOCKET_IFNAME=", "OMP_NUM_THREADS="})
        if (entry.rfind(keep, 0) == 0 && entry.rfind("ZEST_LAUNCHER_PID=", 0) != 0) remote += " " + shell_quote(entry);
    }
    for (const std::string& a : inner) remote += " " + shell_quote(a);
    argv = options_.rsh;
    argv.push_back(name);
    argv.push_back(remote);
  }
  ExecArgs a;
  a.storage = argv;
  for (char** e = environ; *e != nullptr; ++e) a.storage.emplace_back(*e);
  for (size_t i = 0; i < argv.size(); ++i) a.argv.push_back(a.storage[i].data());
  for (size_t i = argv.size(); i < a.storage.size(); ++i) a.envp.push_back(a.storage[i].data());
  a.argv.push_back(nullptr);
  a.envp.push_back(nullptr);
  return a;
}

// The rank(s) the first failed rank's error says never arrived: the rank at fault, not the first to exit.
std::string Launch::blame_report() const {
  const Rank& failed = ranks_[static_cast<size_t>(*failed_rank_)];
  const std::vector<int> blamed = blamed_ranks(failed.err.tail);
  if (node_mode()) return "";
  if (blamed.empty()) return stopped_ranks_report(failed.err.tail);
  std::string who;
  for (int r : blamed) {
    who += (who.empty() ? "rank " : ", rank ") + std::to_string(r);
    const int local = r - options_.node_rank * options_.nprocs;
    if (local >= 0 && local < options_.nprocs && ranks_[static_cast<size_t>(local)].was_stopped)
      who += " (it was stopped, e.g. by SIGSTOP)";
  }
  return "the fault is with " + who + ": it never arrived at the collective rank " +
         std::to_string(global_rank(static_cast<size_t>(*failed_rank_))) + " waited in (see its error above)";
}

// When the failed rank's collective timed out but it could not name the late ranks (the store it asks
// stopped answering too, which a rank stopped in the middle of a request to it causes): the ranks
// found stopped when it failed.
std::string Launch::stopped_ranks_report(const std::deque<std::string>& tail) const {
  const bool timed_out = std::any_of(tail.begin(), tail.end(), [](const std::string& line) {
    return line.find("(engine.collective_timeout_s)") != std::string::npos;
  });
  std::string who;
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i].was_stopped) who += (who.empty() ? "rank " : ", rank ") + std::to_string(global_rank(i));
  if (!timed_out || who.empty()) return "";
  return "the fault is with " + who + " (it was stopped, e.g. by SIGSTOP, when rank " +
         std::to_string(global_rank(static_cast<size_t>(*failed_rank_))) +
         " gave up waiting in a collective; see its error above)";
}

int Launch::run() {
  ZEST_CHECK(options_.nprocs >= 1, "zest launch: -n must be >= 1, got ", options_.nprocs);
  ZEST_CHECK(options_.nnodes >= 1 && options_.node_rank >= 0 && options_.node_rank < options_.nnodes,
             "zest launch: --node-rank ", options_.node_rank, " is outside [0, --nnodes ", options_.nnodes, ")");
  ZEST_CHECK(!options_.command.empty(), "zest launch: no command to run (zest launch -n N [--] CMD ARGS...)");
  // Several nodes must agree on the port without talking: torchrun's default then.
  const int port = options_.master_port > 0                   ? options_.master_port
                   : options_.nnodes > 1 || node_mode()       ? 29500
                                                              : find_free_port(options_.master_addr);
  if (node_mode()) {
    for (const auto& [name, slots] : options_.hosts)
      ZEST_CHECK(slots == options_.hosts.front().second, "zest launch: every node needs the same number of ranks, but ",
                 options_.hosts.front().first, " has ", options_.hosts.front().second, " and ", name, " has ", slots);
  }
  if (!node_mode() && options_.command[0] != "zest") check_command_runnable(options_.command[0]);
  dev_null_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ZEST_CHECK(dev_null_ >= 0, "zest launch: cannot open /dev/null");
  block_signals();
  for (size_t i = 0; i < ranks_.size(); ++i)
    spawn(static_cast<int>(i), node_mode() ? node_exec_args(i, port) : make_exec_args(options_, static_cast<int>(i), port));
  for (;;) {
    reap();
    const auto now = Clock::now();
    if (kill_at_ && now >= *kill_at_) {
      say("killing the ranks still running after " + std::to_string(options_.grace.count()) + " ms");
      signal_running(SIGKILL);
      kill_at_.reset();
    }
    if (running_count() == 0) {
      if (!drain_until_) drain_until_ = now + std::chrono::seconds(2);
      if (now >= *drain_until_) break;
    }
    const int open_streams = poll_once(now);
    if (running_count() == 0 && open_streams == 0) break;
  }
  reap();
  return result();
}

}  // namespace

int run_ranks(const LaunchOptions& options) {
  Launch launch(options);
  return launch.run();
}

}  // namespace zest
