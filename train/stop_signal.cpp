// Async-signal-safe stop flag and the launcher-death notice (see stop_signal.h).
#include "train/stop_signal.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <string>
#include <sys/prctl.h>
#include <unistd.h>

namespace zest {
namespace {

std::atomic<int> g_signal{0};        // the latest stop signal (0: none)
std::atomic<int> g_user_signals{0};  // SIGTERM/SIGINT received: the second one aborts

// SIGHUP means "the launcher is gone" here: it stops the run but, unlike a second SIGTERM, never aborts
// it (the launcher's own SIGTERM, forwarded first, and its death after a timeout must not add up).
extern "C" void on_stop_signal(int signo) {
  g_signal.store(signo);
  if (signo == SIGHUP) return;
  if (g_user_signals.fetch_add(1) != 0) {
    // Second signal: give up now, with the conventional 128 + signo status.
    const char msg[] = "zest: second stop signal, aborting\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(128 + signo);
  }
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

bool stop_requested() { return g_signal.load() != 0; }
int stop_signal_number() { return g_signal.load(); }
void reset_stop_request() {
  g_signal.store(0);
  g_user_signals.store(0);
}

void ignore_write_signals() {
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
}

void stop_when_launcher_exits() {
  const char* launcher = std::getenv("ZEST_LAUNCHER_PID");
  if (launcher == nullptr) return;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &action, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGHUP);  // replaces the launcher's SIGTERM, which would count as a user signal
  // The launcher may have died before the line above: then no notice will come, so raise it here.
  const pid_t pid = static_cast<pid_t>(std::atol(launcher));
  if (pid > 1 && ::kill(pid, 0) != 0 && errno == ESRCH) g_signal.store(SIGHUP);
}

}  // namespace zest
