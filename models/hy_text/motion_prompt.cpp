// HY-Motion's chat text and crop position (see motion_prompt.h).
#include "models/hy_text/motion_prompt.h"

#include <algorithm>
#include <vector>

namespace zest::hytext {

const char* const kMotionSystemPrompt =
    "\n    Summarize human motion only from the user text for representation: action categories, key body-part "
    "movements, order/transitions, trajectory/direction, posture; include style/emotion/speed only if present. "
    "Explicitly capture laterality (left/right) when mentioned; do not guess. If multiple actions are described, "
    "indicate the count of distinct actions (e.g., actions=3) and their order. Do not invent missing info. Keep one "
    "concise paragraph.\n";

std::string motion_chat_text(std::string_view caption) {
  std::string text = "<|im_start|>system\n";
  text += kMotionSystemPrompt;
  text += "<|im_end|>\n<|im_start|>user\n";
  text += caption;
  text += "<|im_end|>\n";
  return text;
}

int64_t motion_crop_start(const qwen3::QwenTokenizer& tokenizer) {
  const std::string marker = "<BOC>";
  const std::vector<int64_t> full = tokenizer.encode(motion_chat_text(marker));
  const std::vector<int64_t> marker_ids = tokenizer.encode(marker);
  const auto found = std::search(full.begin(), full.end(), marker_ids.begin(), marker_ids.end());
  // The release's search returns 0 for an empty marker (a tokenizer that drops it) and -1 when absent.
  if (found != full.end() || marker_ids.empty()) return marker_ids.empty() ? 0 : found - full.begin();
  return std::max<int64_t>(0, static_cast<int64_t>(full.size()) - 1);
}

}  // namespace zest::hytext
