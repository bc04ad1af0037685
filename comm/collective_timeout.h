// The collective timeout: how long any collective may take before the job ends with an error naming the
// operation instead of hanging (engine.collective_timeout_s sets it; ZEST_COMM_TIMEOUT_S overrides it for
// tools and tests). Process-wide, since a communicator outlives any one engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace zest {

std::chrono::milliseconds collective_timeout();
// Sets the timeout in seconds (> 0) unless ZEST_COMM_TIMEOUT_S is set, which wins.
void set_collective_timeout(double seconds);

// What the collectives issued now are for, for the timeout's report: a label for the calling thread
// (e.g. "units blocks.3..blocks.5") while a CollectiveLabel lives, and the training step process-wide.
class CollectiveLabel {
 public:
  explicit CollectiveLabel(std::string label);
  ~CollectiveLabel();
  CollectiveLabel(const CollectiveLabel&) = delete;
  CollectiveLabel& operator=(const CollectiveLabel&) = delete;
  static const std::string& current();  // "" outside any label

 private:
  std::string previous_;
};
void set_collective_step(int64_t step);
int64_t collective_step();

}  // namespace zest
