// The save-phase hook (see save_phase.h).
#include "checkpoint/save_phase.h"

#include <atomic>

namespace zest::checkpoint {
namespace {

std::atomic<SavePhaseHook>& hook() {
  static std::atomic<SavePhaseHook> current{nullptr};
  return current;
}

}  // namespace

const char* to_string(SavePhase phase) {
  switch (phase) {
    case SavePhase::tmp_created: return "tmp_created";
    case SavePhase::rank_file_partial: return "rank_file_partial";
    case SavePhase::rank_file_written: return "rank_file_written";
    case SavePhase::manifest_written: return "manifest_written";
    case SavePhase::old_step_moved: return "old_step_moved";
    case SavePhase::step_renamed: return "step_renamed";
    case SavePhase::latest_tmp_written: return "latest_tmp_written";
    case SavePhase::latest_renamed: return "latest_renamed";
    case SavePhase::retention_moved: return "retention_moved";
  }
  return "unknown";
}

void set_save_phase_hook(SavePhaseHook h) { hook().store(h); }

void reach_save_phase(SavePhase phase, int rank, int64_t step) {
  if (const SavePhaseHook h = hook().load()) h(phase, rank, step);
}

}  // namespace zest::checkpoint
