// The pre-tokenizer split rule of Qwen2/Qwen3's tokenizer.json (a Split with the regex below, "isolated"),
// written out as a scanner over code points instead of a regex engine:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Each alternative is tried in order at the current position, with the regex's greedy and backtracking
// semantics (\s is Unicode White_Space, \p{L} and \p{N} the general categories).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zest::qwen3 {

// The pattern as tokenizer.json spells it (a file with another pattern is refused: this scanner is that regex).
extern const char* const kQwenSplitPattern;

// The pieces of `text` (code points), in order; their concatenation is `text`. Every position starts a match.
std::vector<std::u32string_view> qwen_pretokenize(std::u32string_view text);

}  // namespace zest::qwen3
