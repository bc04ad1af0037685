// Preemption handling for `zest train`: the first SIGTERM/SIGINT asks the run to stop after the current
// step (it then saves a checkpoint and exits 0); a second one aborts the process at once.
#pragma once

namespace zest {

void install_stop_handlers();
bool stop_requested();       // a stop signal arrived in this process
int stop_signal_number();    // which one (0 if none)
void reset_stop_request();   // tests

}  // namespace zest
