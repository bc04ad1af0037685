// Async-signal-safe stop flag (see stop_signal.h).
#include "tools/stop_signal.h"

#include <atomic>
#include <csignal>
#include <unistd.h>

namespace zest {
namespace {

std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int signo) {
  if (g_signal.exchange(signo) != 0) {
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
void reset_stop_request() { g_signal.store(0); }

}  // namespace zest
