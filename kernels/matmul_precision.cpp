// The training products' precision setting (see matmul_precision.h).
#include "kernels/matmul_precision.h"

#include <atomic>

namespace zest {
namespace {

std::atomic<bool>& fp8_on() {
  static std::atomic<bool> on{false};
  return on;
}

}  // namespace

void set_fp8_training_products(bool on) { fp8_on().store(on); }
bool fp8_training_products() { return fp8_on().load(std::memory_order_relaxed); }

}  // namespace zest
