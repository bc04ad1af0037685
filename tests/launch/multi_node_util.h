// Helpers of the several-machine tests: processes run in the background with a time bound (their
// output merged, their whole process group killed when the bound passes), and two "machines" made of
// Linux network namespaces joined by a veth pair, each with its own host name and /etc/hosts.
#pragma once

#include "common/spawned_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace zest::testing {

// A process in its own process group, stdout and stderr on one pipe.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    start_ = std::chrono::steady_clock::now();
    const SpawnedProcess spawned = spawn_process(argv, env, /*own_group=*/true);
    pid_ = spawned.pid;
    fd_ = spawned.output_fd;
    if (fd_ >= 0) ::fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  ~Background() {
    if (pid_ > 0 && !reaped_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  // Reads until `text` appeared (true) or `seconds` passed or the output ended (false).
  bool wait_for(const std::string& text, double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (output_.find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > until || !read_some(100)) return output_.find(text) != std::string::npos;
    }
    return true;
  }
  // Reads to EOF and reaps within `seconds`; the raw wait status, or -1 after killing it on time out.
  int finish(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until) {
      if (!read_some(100)) break;
    }
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        elapsed_ = std::chrono::steady_clock::now() - start_;
        read_some(0);
        return status;
      }
      ::usleep(20000);
    }
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    elapsed_ = std::chrono::steady_clock::now() - start_;
    output_ += "\n[test: killed after " + std::to_string(seconds) + " s]\n";
    return -1;
  }
  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }
  double seconds() const { return elapsed_.count(); }

 private:
  // false at EOF (or when a poll of `ms` had nothing and the process is gone).
  bool read_some(int ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return true;
    char buffer[65536];
    const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
    if (n > 0) {
      output_.append(buffer, static_cast<size_t>(n));
      return true;
    }
    return n < 0 && errno == EAGAIN;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  std::string output_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::duration<double> elapsed_{0};
};

inline std::string ip_tool() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (std::filesystem::exists(p)) return p;
  return "";
}

// Two hosts, "zhosta" (10.211.0.1) and "zhostb" (10.211.0.2), in namespaces named after this process.
// Each has the Debian-style /etc/hosts line "127.0.1.1 <own name>". Everything started in them is
// killed, and they are deleted, by the destructor.
class TwoHosts {
 public:
  TwoHosts() {
    const std::string tag = std::to_string(::getpid() % 100000);
    ns_ = {"zest_a" + tag, "zest_b" + tag};
    ip_ = ip_tool();
    if (ip_.empty()) {
      error_ = "the ip tool (iproute2) is missing: scripts/setup installs it";
      return;
    }
    const std::string va = "zva" + tag, vb = "zvb" + tag;
    const std::vector<std::string> steps = {
        ip_ + " netns add " + ns_[0],
        ip_ + " netns add " + ns_[1],
        ip_ + " link add " + va + " type veth peer name " + vb,
        ip_ + " link set " + va + " netns " + ns_[0],
        ip_ + " link set " + vb + " netns " + ns_[1],
        ip_ + " -n " + ns_[0] + " addr add 10.211.0.1/24 dev " + va,
        ip_ + " -n " + ns_[1] + " addr add 10.211.0.2/24 dev " + vb,
        ip_ + " -n " + ns_[0] + " link set " + va + " up",
        ip_ + " -n " + ns_[1] + " link set " + vb + " up",
        ip_ + " -n " + ns_[0] + " link set lo up",
        ip_ + " -n " + ns_[1] + " link set lo up",
    };
    for (const std::string& step : steps) {
      if (std::system((step + " 2>&1").c_str()) != 0) {
        error_ = "'" + step + "' failed: these tests need root and network namespaces (ip netns)";
        return;
      }
    }
    for (int h = 0; h < 2; ++h) {
      const std::filesystem::path dir = std::filesystem::path("/etc/netns") / ns_[h];
      std::filesystem::create_directories(dir);
      std::ofstream(dir / "hosts") << "127.0.0.1 localhost\n127.0.1.1 " << name(h) << "\n"
                                   << address(1 - h) << " " << name(1 - h) << "\n";
    }
    ready_ = true;
  }
  ~TwoHosts() {
    for (const std::string& ns : ns_) {
      // Only what this test started lives in its namespaces.
      std::system((ip_ + " netns pids " + ns + " 2>/dev/null | xargs -r kill -9 2>/dev/null").c_str());
    }
    ::usleep(100000);
    for (const std::string& ns : ns_) {
      std::system((ip_ + " netns del " + ns + " 2>/dev/null").c_str());
      std::error_code ignored;
      std::filesystem::remove_all(std::filesystem::path("/etc/netns") / ns, ignored);
    }
  }
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  bool ready() const { return ready_; }
  const std::string& error() const { return error_; }
  static std::string name(int h) { return h == 0 ? "zhosta" : "zhostb"; }
  static std::string address(int h) { return h == 0 ? "10.211.0.1" : "10.211.0.2"; }

  // `command` on host h, under its own host name; `bind` = {from, onto}: a folder of its own mounted
  // over a path (a filesystem the other host does not share).
  std::vector<std::string> on(int h, const std::vector<std::string>& command,
                              const std::pair<std::string, std::string>& bind = {}) const {
    std::string script = "hostname " + name(h);
    if (!bind.first.empty()) script += " && mkdir -p '" + bind.second + "' && mount --bind '" + bind.first + "' '" + bind.second + "'";
    script += " && exec \"$@\"";
    std::vector<std::string> argv{ip_, "netns", "exec", ns_[static_cast<size_t>(h)], "/usr/bin/unshare", "-u", "-m",
                                  "/bin/sh", "-c", script, "sh"};
    argv.insert(argv.end(), command.begin(), command.end());
    return argv;
  }

 private:
  std::string ip_;
  std::vector<std::string> ns_;
  bool ready_ = false;
  std::string error_;
};

}  // namespace zest::testing
