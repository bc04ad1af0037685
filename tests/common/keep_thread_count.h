// KeepThreadCount: puts LibTorch's intra-op thread count back at the end of a scope. run_training sets it for
// the machine (train/trainer.cpp); a test that trains in process keeps the test process's own
// (OMP_NUM_THREADS=1 under CTest), or the suites after it run oversubscribed.
#pragma once

#include <ATen/Parallel.h>

namespace zest::testing {

class KeepThreadCount {
 public:
  KeepThreadCount() : threads_(at::get_num_threads()) {}
  ~KeepThreadCount() { at::set_num_threads(threads_); }
  KeepThreadCount(const KeepThreadCount&) = delete;
  KeepThreadCount& operator=(const KeepThreadCount&) = delete;

 private:
  int threads_;
};

}  // namespace zest::testing
