// HY-Motion's text as its release feeds Qwen3 (hymotion/network/text_encoders/text_encoder.py of the release):
// the system prompt, the chat text Qwen3's chat template renders for [system, user] with
// add_generation_prompt=False and enable_thinking=False, and where the caption starts in its tokens.
// The template is not interpreted (zest has no Jinja): its rendering for exactly these two messages is written
// out here, "<|im_start|>system\n{prompt}<|im_end|>\n<|im_start|>user\n{caption}<|im_end|>\n", which is what
// Qwen3's template gives for them (the golden test compares it with transformers' apply_chat_template).
#pragma once

#include "models/qwen3/qwen_tokenizer.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace zest::hytext {

// PROMPT_TEMPLATE_ENCODE_HUMAN_MOTION of the release's model_constants.py, verbatim (new lines and indentation).
extern const char* const kMotionSystemPrompt;

// The chat text of one caption (the caption as given: the release neither strips nor escapes it).
std::string motion_chat_text(std::string_view caption);

// The release's _compute_crop_start: the position of the tokens of "<BOC>" inside the tokens of the chat text
// of "<BOC>" (the first occurrence), or, when absent, the token count less one (at least 0).
int64_t motion_crop_start(const qwen3::QwenTokenizer& tokenizer);

}  // namespace zest::hytext
