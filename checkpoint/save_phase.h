// Named moments inside a checkpoint save, and a process-wide hook called at each of them. Crash tests
// install a hook that stops the saving process at one exact moment, then kill it there; production
// code never sets one (the call is then one atomic load).
#pragma once

#include <cstdint>

namespace zest::checkpoint {

enum class SavePhase {
  tmp_created,         // rank 0: DIR/step_N.tmp/ exists, empty
  rank_file_partial,   // a rank's file is half written (header and the first half of its tensors)
  rank_file_written,   // a rank's file is complete and fsynced; the ranks have not confirmed yet
  manifest_written,    // rank 0: manifest.json is in step_N.tmp/, which is not yet renamed
  old_step_moved,      // rank 0: an existing step_N/ (the same step saved again) was renamed step_N.old/
  step_renamed,        // rank 0: step_N.tmp/ is now step_N/; `latest` still names the previous checkpoint
  latest_tmp_written,  // rank 0: latest.tmp names step_N and is fsynced, not yet renamed over `latest`
  latest_renamed,      // rank 0: `latest` names step_N; replaced and retired folders not yet removed
  retention_moved,     // rank 0: an old checkpoint was renamed step_M.del/, not yet removed (step: the latest)
};
inline constexpr SavePhase kAllSavePhases[] = {
    SavePhase::tmp_created,    SavePhase::rank_file_partial,  SavePhase::rank_file_written,
    SavePhase::manifest_written, SavePhase::old_step_moved,   SavePhase::step_renamed,
    SavePhase::latest_tmp_written, SavePhase::latest_renamed, SavePhase::retention_moved};

const char* to_string(SavePhase phase);

// Called on the thread that reached the phase (a rank's thread, or its asynchronous writer).
using SavePhaseHook = void (*)(SavePhase phase, int rank, int64_t step);
void set_save_phase_hook(SavePhaseHook hook);  // nullptr removes it

// Calls the hook, if one is set.
void reach_save_phase(SavePhase phase, int rank, int64_t step);

}  // namespace zest::checkpoint
