// The stop flag of file-writing commands (see interrupt.h).
#include "core/interrupt.h"

#include "core/check.h"

#include <atomic>
#include <csignal>
#include <cstring>

#include <unistd.h>

namespace zest {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_previous_int {}, g_previous_term {};

extern "C" void on_interrupt(int signo) {
  if (g_signal.exchange(signo) != 0) {
    const char msg[] = "zest: second stop signal, stopping at once (temporary files may be left)\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(128 + signo);
  }
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

int interrupt_signal() { return g_signal.load(); }

void throw_if_interrupted(const std::string& what) {
  const int signo = g_signal.load();
  if (signo == 0) return;
  throw Error(str("stopped by ", signo == SIGINT ? "SIGINT" : signo == SIGTERM ? "SIGTERM" : strsignal(signo),
                  " while ", what, "; its temporary files were removed and nothing was replaced"));
}

void reset_interrupt() { g_signal.store(0); }

}  // namespace zest
