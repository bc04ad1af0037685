// Exposed communication: how long the computation waited for collectives — the host blocked in a CPU
// backend's wait(), or the compute stream held by an NCCL handle's stream wait (measured with timing
// events around the wait). Off unless a benchmark turns it on: the events cost a little per wait.
#pragma once

#include <functional>

namespace zest {

void start_exposure_timing();
bool is_exposure_timing();
// Ends the measurement and returns the waited milliseconds (waits for the device's events).
double stop_exposure_timing_ms();

void add_host_wait_ms(double ms);
// A device wait measured later: `resolve` returns its milliseconds once its events are done.
void add_device_wait(std::function<double()> resolve);

}  // namespace zest
