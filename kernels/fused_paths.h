// Which fused kernel paths this process took on the GPU and which fell back to the op-by-op form, with
// why: each kernel family's coverage check records its decision here, `zest bench` lists the paths in its
// JSON and `zest bench` / `zest train` print one line for each path that fell back, so no config loses a
// fast path silently. CPU tensors are not recorded (the CPU path is the op-by-op form by design).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zest {

struct FusedPathUse {
  std::string path;      // "qk_norm_rope", "rms_norm", ...
  int64_t taken = 0;     // coverage checks that chose the kernels
  int64_t fell_back = 0;  // checks that chose the op-by-op form
  std::string why_not;   // the first reason a check gave for falling back
};

// Records one coverage decision on a CUDA tensor; `why_not` (empty when taken) is kept the first time.
void note_fused_path(std::string_view path, bool taken, std::string_view why_not = {});

// Every path recorded since the start (or the last reset), in the order first seen.
std::vector<FusedPathUse> fused_path_uses();
void reset_fused_path_uses();

// One line per path that fell back at least once: "fused path qk_norm_rope not used (N of M calls): why".
std::vector<std::string> fused_path_fallback_lines();

}  // namespace zest
