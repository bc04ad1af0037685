// Preemption handling for `zest train`: the first SIGTERM/SIGINT asks the run to stop after the current
// step (it then saves a checkpoint and exits 0); a second one aborts the process at once. Under
// `zest launch`, the launcher's death is a stop request too (never an abort), and output that has
// nowhere to go any more must not kill the rank before its save.
#pragma once

namespace zest {

void install_stop_handlers();
bool stop_requested();       // a stop signal arrived in this process
int stop_signal_number();    // which one (0 if none)
void reset_stop_request();   // tests

// SIGPIPE and SIGXFSZ ignored: a write to a closed pipe (the launcher was killed) or past a file-size
// limit then fails with EPIPE/EFBIG where it happens, and is handled there, instead of killing the rank.
void ignore_write_signals();

// Under `zest launch` (ZEST_LAUNCHER_PID set): the death of this process's parent (the launcher, or a
// wrapper it started that dies with it) delivers SIGHUP, handled as a stop request that never escalates
// to an abort, and a launcher already gone when this is called counts as one. Needs install_stop_handlers.
void stop_when_launcher_exits();

}  // namespace zest
