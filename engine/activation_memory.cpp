// Activation bytes of a micro-batch from a family's per-unit profile (see activation_memory.h).
#include "engine/activation_memory.h"

#include "engine/activation_checkpoint.h"

#include <algorithm>
#include <cmath>

namespace zest {

int64_t activation_bytes(const ActivationProfile& profile, int64_t batch, CheckpointPolicy policy, int every) {
  // Backward visits the units last to first, releasing each one's activations (or, checkpointed, its
  // inputs) once done. While it is at unit u: everything units before u keep, what u holds then (all it
  // saved; checkpointed, its inputs and its recomputed activations) and backward's workspace.
  double before = profile.outside_bytes;
  double peak = 0;
  for (size_t u = 0; u < profile.units.size(); ++u) {
    const UnitActivations& unit = profile.units[u];
    const bool recomputed = is_checkpointed_unit(policy, every, u);
    peak = std::max(peak, before + unit.saved_bytes + (recomputed ? unit.input_bytes : 0.0));
    before += recomputed ? unit.input_bytes : unit.saved_bytes;
  }
  peak = std::max(peak, before);
  return static_cast<int64_t>(std::ceil(static_cast<double>(batch) * (peak + profile.workspace_bytes)));
}

}  // namespace zest
