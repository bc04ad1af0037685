// Qwen's pre-tokenizer split rule (see qwen_pretokenize.h): one function per alternative, each returning the
// length it matches at the position (0: no match), tried in the regex's order.
#include "models/qwen3/qwen_pretokenize.h"

#include "models/clip/unicode_text.h"

namespace zest::qwen3 {

const char* const kQwenSplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

namespace {

using clip::is_letter;
using clip::is_number;
using clip::is_unicode_white_space;

bool is_newline(char32_t c) { return c == U'\r' || c == U'\n'; }
// [^\s\p{L}\p{N}]
bool is_symbol(char32_t c) { return !is_unicode_white_space(c) && !is_letter(c) && !is_number(c); }

char32_t fold(char32_t c) {
  if (c >= U'A' && c <= U'Z') return c - U'A' + U'a';
  if (c == 0x017F) return U's';  // LATIN SMALL LETTER LONG S folds to s under (?i)
  if (c == 0x212A) return U'k';  // KELVIN SIGN (no contraction uses k; kept for completeness)
  return c;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)
size_t contraction(std::u32string_view t, size_t p) {
  if (t[p] != U'\'' || p + 1 >= t.size()) return 0;
  const char32_t a = fold(t[p + 1]);
  const char32_t b = p + 2 < t.size() ? fold(t[p + 2]) : 0;
  if (a == U's' || a == U't') return 2;
  if ((a == U'r' || a == U'v') && b == U'e') return 3;
  if (a == U'm') return 2;
  if (a == U'l' && b == U'l') return 3;
  if (a == U'd') return 2;
  return 0;
}

size_t letters_from(std::u32string_view t, size_t p) {
  size_t q = p;
  while (q < t.size() && is_letter(t[q])) ++q;
  return q - p;
}

// [^\r\n\p{L}\p{N}]?\p{L}+
size_t word(std::u32string_view t, size_t p) {
  const char32_t c = t[p];
  if (!is_newline(c) && !is_letter(c) && !is_number(c) && p + 1 < t.size() && is_letter(t[p + 1]))
    return 1 + letters_from(t, p + 1);
  return letters_from(t, p);
}

// " ?[^\s\p{L}\p{N}]+[\r\n]*"
size_t punctuation(std::u32string_view t, size_t p) {
  size_t q = p;
  if (t[q] == U' ' && q + 1 < t.size() && is_symbol(t[q + 1])) ++q;
  if (!is_symbol(t[q])) return 0;
  while (q < t.size() && is_symbol(t[q])) ++q;
  while (q < t.size() && is_newline(t[q])) ++q;
  return q - p;
}

size_t space_run(std::u32string_view t, size_t p) {
  size_t q = p;
  while (q < t.size() && is_unicode_white_space(t[q])) ++q;
  return q - p;
}

// \s*[\r\n]+ : through the last line break of the white-space run.
size_t line_breaks(std::u32string_view t, size_t p, size_t run) {
  for (size_t n = run; n > 0; --n)
    if (is_newline(t[p + n - 1])) return n;
  return 0;
}

// \s+(?!\S) : the run, or the run less its last character when a non-space follows it.
size_t trailing_spaces(std::u32string_view t, size_t p, size_t run) {
  if (p + run == t.size()) return run;
  return run >= 2 ? run - 1 : 0;
}

size_t match_at(std::u32string_view t, size_t p) {
  if (const size_t n = contraction(t, p)) return n;
  if (const size_t n = word(t, p)) return n;
  if (is_number(t[p])) return 1;
  if (const size_t n = punctuation(t, p)) return n;
  const size_t run = space_run(t, p);
  if (const size_t n = line_breaks(t, p, run)) return n;
  if (const size_t n = trailing_spaces(t, p, run)) return n;
  return run > 0 ? run : 1;  // \s+; the 1 is never reached (every character is a letter, number, space or symbol)
}

}  // namespace

std::vector<std::u32string_view> qwen_pretokenize(std::u32string_view text) {
  std::vector<std::u32string_view> pieces;
  for (size_t p = 0; p < text.size();) {
    const size_t n = match_at(text, p);
    pieces.push_back(text.substr(p, n));
    p += n;
  }
  return pieces;
}

}  // namespace zest::qwen3
