// Stopping a command that writes files (zest merge, zest data synth) at the first SIGINT/SIGTERM: the
// handler only sets a flag; the writer checks it between pieces and throws, so the RAII owners of its
// temporary files remove them on the way out and the command ends with one message (exit status 1).
// A second signal ends the process at once (status 128 + signo), as for `zest train`.
#pragma once

#include <string>

namespace zest {

// Installs the SIGINT/SIGTERM handlers for the lifetime of the guard (the previous ones come back after).
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

// The signal that asked the command to stop (0: none, or no guard installed).
int interrupt_signal();

// Throws zest::Error "stopped by SIGTERM while <what>; ..." when a stop signal has arrived.
void throw_if_interrupted(const std::string& what);

// Tests: forget a signal that arrived.
void reset_interrupt();

}  // namespace zest
