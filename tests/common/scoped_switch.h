// ScopedSwitch: sets one of zest's process-wide implementation switches (a fused path, an epilogue) for a
// scope and puts back what it was at the scope's end, so a test compares both sides without leaving its
// choice to the tests after it. Shared by the GPU suites.
#pragma once

namespace zest::testing {

class ScopedSwitch {
 public:
  ScopedSwitch(bool (*enabled)(), void (*set)(bool), bool on) : set_(set), was_(enabled()) { set_(on); }
  ~ScopedSwitch() { set_(was_); }
  ScopedSwitch(const ScopedSwitch&) = delete;
  ScopedSwitch& operator=(const ScopedSwitch&) = delete;

 private:
  void (*set_)(bool);
  bool was_;
};

}  // namespace zest::testing
